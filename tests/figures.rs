//! Each figure is stated once, in the README's "Measured" section (from
//! docs/BENCHMARKS.md, where it is measured), and the guide and the crate's
//! documentation repeat it only with the same value: the instructions a
//! response read to its end costs, the paired overhead on loopback, the far
//! run's times (alone, with the layer, reading every body), the loopback
//! run's connections with the layer, and the connections a trickling body
//! costs sequential callers. Figures stated in several places outside
//! "Measured" have one value too (issue 49): the resets after which a Node
//! session refuses `stream.end` bodies, and one origin's share of
//! `max_concurrent_drains`.

use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The crate's documentation: `//!` and `///` lines of `src/`.
fn rustdoc() -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                for line in std::fs::read_to_string(&path).unwrap().lines() {
                    let line = line.trim_start();
                    if let Some(doc) = line.strip_prefix("//!").or_else(|| line.strip_prefix("///")) {
                        out.push_str(doc.trim());
                        out.push(' ');
                    }
                }
            }
        }
    }
    let mut out = String::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
    out
}

/// Text with line breaks as spaces, so that a figure split over two lines
/// reads as one.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The word right before each occurrence of `suffix` (a figure: `1,417`,
/// `1.009×`).
fn before(text: &str, suffix: &str) -> Vec<String> {
    text.match_indices(suffix)
        .map(|(at, _)| text[..at].rsplit(' ').next().unwrap_or("").trim_matches(['(', '*']).to_string())
        .collect()
}

/// The README's "Measured" section.
fn measured(readme: &str) -> String {
    let start = readme.find("## Measured").expect("README has a Measured section");
    let rest = &readme[start + 3..];
    flat(&rest[..rest.find("\n## ").unwrap_or(rest.len())])
}

/// `figure` follows `marker` in `text`.
fn follows(text: &str, marker: &str) -> String {
    let at = text.find(marker).unwrap_or_else(|| panic!("{marker:?} not found"));
    text[at + marker.len()..].split(' ').next().unwrap().to_string()
}

#[test]
fn the_guide_and_the_rustdoc_repeat_the_readme_s_figures() {
    let readme = read("README.md");
    let m = measured(&readme);
    let instructions = follows(&m, "costs the layer ");
    let overhead = follows(&m, "instructions (`bash benches/callgrind.sh`) and ");
    assert!(instructions.contains(','), "the README's instructions per response: {instructions:?}");
    assert!(overhead.ends_with('×'), "the README's paired overhead: {overhead:?}");
    let alone = follows(&m, "alone ");
    let layer = follows(&m, "layer ");
    let read_all = follows(&m, "reading every body ");
    let docs = [("docs/GUIDE.md", flat(&read("docs/GUIDE.md"))), ("src/ (rustdoc)", flat(&rustdoc()))];
    for (name, text) in &docs {
        for stated in before(text, " instructions") {
            if stated.chars().any(|c| c.is_ascii_digit()) {
                assert_eq!(
                    stated, instructions,
                    "{name} gives the layer's instructions per response as {stated}"
                );
            }
        }
        for stated in before(text, " hyper-util alone's time") {
            assert_eq!(stated, overhead, "{name} gives the paired overhead as {stated}");
        }
    }
    // The far run: the crate docs' sentence, the guide's table row.
    let lib = flat(&read("src/lib.rs"));
    let far = &lib[lib.find("100 ms away with 64 KiB bodies").expect("lib.rs states the far run")..];
    let far = &far[..far.find(").").unwrap()];
    for (what, figure) in [("alone", &alone), ("with the layer", &layer), ("reading every body", &read_all)] {
        assert!(
            far.contains(&format!("{figure} s")),
            "lib.rs's far run lacks the README's {what} {figure} s: {far}"
        );
    }
    let guide = read("docs/GUIDE.md");
    let row = guide.lines().find(|l| l.starts_with("| 100 ms, 64 KiB |")).expect("the guide's far table row");
    for figure in [&alone, &layer, &read_all] {
        assert!(row.contains(&format!("{figure} s")), "the guide's far row lacks {figure} s: {row}");
    }
}

/// The sentence of `text` (flattened) around the first occurrence of
/// `marker`: from the previous full stop (or the start) to the next one, or
/// to a code block.
fn sentence<'a>(text: &'a str, marker: &str) -> &'a str {
    let at = text.find(marker).unwrap_or_else(|| panic!("{marker:?} not found"));
    let start = text[..at].rfind(". ").map_or(0, |i| i + 2);
    let end = [". ", "```"]
        .iter()
        .filter_map(|stop| text[at..].find(stop))
        .min()
        .map_or(text.len(), |i| at + i + 1);
    &text[start..end]
}

/// Every `from N to M` span (`2 to 3`, `6 to 8`) in `text`, in order.
fn ranges(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split(' ').collect();
    words
        .windows(3)
        .filter(|w| {
            let number = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == ',');
            number(w[0].trim_start_matches('('))
                && w[1] == "to"
                && number(w[2].trim_end_matches([',', ')', ';']))
        })
        .map(|w| format!("{} to {}", w[0].trim_start_matches('('), w[2].trim_end_matches([',', ')', ';'])))
        .collect()
}

#[test]
fn the_crate_docs_give_the_readme_s_loopback_connections() {
    // README: "On loopback, 100 requests with 64 KiB unread: 100 connections
    // alone, 2 to 3 with the layer"; the crate docs state the same run.
    let m = measured(&read("README.md"));
    let readme = sentence(&m, "On loopback, 100 requests with 64 KiB unread");
    let with = readme[..readme.find(" with the layer").expect("the README's loopback figure with the layer")]
        .rsplit(", ")
        .next()
        .unwrap()
        .to_string();
    assert!(
        with.chars().next().is_some_and(|c| c.is_ascii_digit()),
        "the README's loopback figure: {with:?}"
    );
    // The crate docs' text, without the `//!` of each line.
    let lib: String = read("src/lib.rs")
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("//!"))
        .map(|l| format!("{} ", l.trim()))
        .collect();
    let lib = flat(&lib);
    let docs = sentence(&lib, "100 sequential requests to a local server with 64 KiB bodies");
    assert!(
        docs.contains(&format!("100 connections with hyper-util alone, {with} with this layer")),
        "lib.rs should give the README's {with} connections with the layer for 100 loopback requests: {docs}"
    );
}

#[test]
fn a_trickling_body_s_connections_are_the_same_in_the_readme_and_the_guide() {
    // Node sending 64 KiB chunked, its last 4 KiB 5 ms later: the README
    // gives the guide's measured ranges (10 requests, then 100).
    let marker = "its last 4 KiB 5 ms later";
    let readme = ranges(sentence(&measured(&read("README.md")), marker));
    let guide_text = flat(&read("docs/GUIDE.md"));
    let guide = ranges(sentence(&guide_text, marker));
    assert_eq!(readme.len(), 2, "the README's trickle figures (10 and 100 requests): {readme:?}");
    assert_eq!(readme, guide, "the README and the guide give different connections for the trickling body");
}

#[test]
fn node_s_refusal_after_resets_is_one_figure_everywhere() {
    // "some N" resets (or drops) of a 1 MiB body sent with one `stream.end`
    // before a Node 20 session refuses new streams: the README, the guide and
    // the rustdoc (the connector's example) give one N.
    fn stated(name: &str, text: &str) -> Vec<String> {
        let found: Vec<String> = text
            .match_indices("some ")
            .filter(|&(at, _)| {
                let around = &text[at.saturating_sub(200)..(at + 200).min(text.len())];
                around.contains("stream.end")
            })
            .map(|(at, m)| text[at + m.len()..].split(' ').next().unwrap().to_string())
            .filter(|n| n.chars().all(|c| c.is_ascii_digit()))
            .collect();
        assert!(!found.is_empty(), "{name} gives no figure for Node's refusal after `stream.end` bodies");
        found
    }
    let readme = stated("README.md", &flat(&read("README.md")));
    let figure = readme[0].clone();
    for (name, text) in [
        ("README.md", flat(&read("README.md"))),
        ("docs/GUIDE.md", flat(&read("docs/GUIDE.md"))),
        ("src/ (rustdoc)", flat(&rustdoc())),
    ] {
        for n in stated(name, &text) {
            assert_eq!(
                n, figure,
                "{name} says Node refuses after some {n} resets of a `stream.end` body, the README {figure}"
            );
        }
    }
}

#[test]
fn one_origin_s_share_of_the_drain_slots_is_stated_wherever_the_cap_is() {
    // The cap's default from the README's table (the unit tests hold it to
    // the code's), and the share every place gives: the cap less a quarter
    // of it, rounded down.
    let readme = read("README.md");
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `max_concurrent_drains"))
        .expect("the README's max_concurrent_drains row");
    let cap: usize = row.split('|').nth(2).unwrap().trim().parse().expect("the README's default cap");
    let share = (cap - cap / 4).to_string();
    let guide = read("docs/GUIDE.md");
    let guide_row = guide
        .lines()
        .find(|l| l.starts_with("| `max_concurrent_drains"))
        .expect("the guide's max_concurrent_drains row");
    let src = |path: &str, marker: &str| {
        let text = flat(&read(path));
        let at = text.find(marker).unwrap_or_else(|| panic!("{path}: {marker:?} not found"));
        text[at..(at + 900).min(text.len())].to_string()
    };
    for (name, text) in [
        ("README.md's row", row.to_string()),
        ("docs/GUIDE.md's row", guide_row.to_string()),
        ("max_concurrent_drains' rustdoc", src("src/layer.rs", "/// The most drains running at once")),
        ("Reason::Saturated's rustdoc", src("src/outcome.rs", "drains were already running in the")),
    ] {
        let text = flat(&text);
        assert!(
            text.contains("three quarters") && text.contains(&share),
            "{name} should give one origin's share of the cap: three quarters ({share} of {cap}): {text}"
        );
    }
}
