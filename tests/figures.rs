//! Each figure is stated once, in the README's "Measured" section (from
//! docs/BENCHMARKS.md, where it is measured), and the guide and the crate's
//! documentation repeat it only with the same value: the instructions a
//! response read to its end costs, the paired overhead on loopback, the far
//! run's times (alone, with the layer, reading every body), and the loopback
//! run's connections with the layer. Figures stated in several places
//! outside "Measured" have one value too (issue 49): the connections a
//! trickling body costs sequential callers, the resets after which a Node
//! session refuses `stream.end` bodies, and one origin's part of
//! `max_concurrent_drains`. The README's HTTP/2 table (the fault cells and
//! Node's `stream.end` among them) is BENCHMARKS.md's, figure for figure,
//! and a fault figure stated elsewhere names its setup, the bench's figures
//! with the bench's values (issue 55).

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
fn a_trickling_body_s_connections_are_the_guide_s_wherever_they_are_stated() {
    // Node sending 64 KiB chunked, its last 4 KiB 5 ms later: the guide
    // measured the ranges (10 requests, then 100); the README and the
    // CHANGELOG give the same wherever they state them.
    let marker = "its last 4 KiB 5 ms later";
    let guide_text = flat(&read("docs/GUIDE.md"));
    let guide = ranges(sentence(&guide_text, marker));
    assert_eq!(guide.len(), 2, "the guide's trickle figures (10 and 100 requests): {guide:?}");
    for name in ["README.md", "CHANGELOG.md"] {
        let text = flat(&read(name));
        if text.contains(marker) {
            assert_eq!(
                ranges(sentence(&text, marker)),
                guide,
                "{name} and the guide give different connections for the trickling body"
            );
        }
    }
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

/// The rows of the first table of `text` whose header line starts with
/// `header`: each row's cells, trimmed, bold marks removed.
fn table(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(header));
    assert!(lines.next().is_some(), "no table whose header starts with {header:?}");
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().replace("**", "")).collect())
        .collect()
}

/// The number at the start of `cell` (`4,123`, `0 / 16, 8,263` gives 0).
fn number(cell: &str) -> String {
    cell.trim_start_matches(['+', ' '])
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
        .collect::<String>()
        .trim_end_matches(['.', ','])
        .to_string()
}

/// The HTTP/2 section of docs/BENCHMARKS.md.
fn bench_http2() -> String {
    let text = read("docs/BENCHMARKS.md");
    let start = text.find("## 9. HTTP/2").expect("BENCHMARKS.md has its HTTP/2 section");
    let rest = &text[start + 3..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
}

/// What one figure of the README's HTTP/2 table is in BENCHMARKS.md: the
/// README row's label (before its measure) contains `readme`; the bench's
/// row is the traffic table's whose cell starts with `bench`, or the fault
/// table's whose fault cell does.
struct Cell {
    readme: &'static str,
    bench: &'static str,
    fault: bool,
}

const CELLS: [Cell; 6] = [
    Cell { readme: "Go's server, 1 MiB", bench: "Go's server, 1 MiB, 16 callers", fault: false },
    Cell { readme: "Node, one `stream.end`", bench: "Node `stream.end`, 1 MiB, 16 callers", fault: false },
    Cell { readme: "nginx `keepalive_requests 16`", bench: "nginx `keepalive_requests 16`", fault: true },
    Cell { readme: "every 4th handshake stalled", bench: "every 4th handshake stalled", fault: true },
    Cell { readme: "every dial closed after 400 ms", bench: "every dial closed after 400 ms", fault: true },
    Cell { readme: "one refusal then none, 1 caller", bench: "one refusal then none, 1 caller", fault: true },
];

/// The README's HTTP/2 table: (label, measure, [alone, stack, Go]).
fn readme_http2() -> Vec<(String, String, [String; 3])> {
    let readme = read("README.md");
    table(&readme, "| bodies dropped after their heads")
        .into_iter()
        .map(|row| {
            let (label, measure) = row[0].rsplit_once(": ").expect("a README HTTP/2 row names its measure");
            (label.to_string(), measure.to_string(), [row[1].clone(), row[2].clone(), row[3].clone()])
        })
        .collect()
}

/// The bench's figure for `measure` (`failed`, `connections`) of `cell`,
/// for the clients in the README's order: hyper-util alone, the README
/// stack, Go 1.27.3.
fn bench_figures(cell: &Cell, measure: &str) -> [String; 3] {
    let http2 = bench_http2();
    if cell.fault {
        let rows = table(&http2, "| fault cell |");
        let client = |who: &str| {
            let row = rows
                .iter()
                .find(|r| r[0].starts_with(cell.bench) && r[1].starts_with(who))
                .unwrap_or_else(|| panic!("BENCHMARKS.md has no fault row {:?} for {who}", cell.bench));
            match measure {
                "failed" => number(&row[2]),
                "connections" => number(&row[4]),
                other => panic!("no fault column for {other:?}"),
            }
        };
        [client("hyper-util alone"), client("README stack"), client("Go 1.27.3")]
    } else {
        let rows = table(&http2, "| cell (TLS ALPN unless said) |");
        let row = rows
            .iter()
            .find(|r| r[0] == cell.bench)
            .unwrap_or_else(|| panic!("BENCHMARKS.md has no traffic row {:?}", cell.bench));
        // "failed / connections, requests a second"; columns: alone, stack,
        // read to the end, Go.
        let pick = |c: &str| {
            let (failed, rest) = c.split_once(" / ").expect("a traffic cell: failed / connections, rate");
            match measure {
                "failed" => number(failed),
                "connections" => number(rest),
                other => panic!("no traffic figure for {other:?}"),
            }
        };
        [pick(&row[1]), pick(&row[2]), pick(&row[4])]
    }
}

#[test]
fn the_readme_s_http2_table_is_the_bench_s() {
    let rows = readme_http2();
    assert!(rows.len() >= CELLS.len(), "the README's HTTP/2 table: {rows:?}");
    for (label, measure, figures) in &rows {
        let cell = CELLS.iter().find(|c| label.contains(c.readme)).unwrap_or_else(|| {
            panic!("the README's HTTP/2 row {label:?} has no BENCHMARKS.md row here (add it to CELLS)")
        });
        assert_eq!(
            figures,
            &bench_figures(cell, measure),
            "the README's {label}: {measure} (hyper-util alone, the stack, Go) differ from BENCHMARKS.md's"
        );
    }
    for cell in &CELLS {
        assert!(
            rows.iter().any(|(label, ..)| label.contains(cell.readme)),
            "the README's HTTP/2 table lacks {:?}",
            cell.readme
        );
    }
}

/// Sentences of `text` (flattened), split at full stops.
fn sentences(text: &str) -> Vec<String> {
    flat(text).split(". ").map(str::to_string).collect()
}

/// What users read besides the README: the guide, the crate docs, and the
/// CHANGELOG's sections from the current release on (older ones are the
/// record of their time).
fn other_docs() -> Vec<(&'static str, String)> {
    let changelog = read("CHANGELOG.md");
    let current = sed_version(&read("Cargo.toml"));
    let end = changelog
        .match_indices("\n## [")
        .map(|(at, _)| at)
        .find(|&at| {
            !changelog[at..].starts_with(&format!("\n## [{current}]"))
                && !changelog[at..].starts_with("\n## [Unreleased]")
        })
        .unwrap_or(changelog.len());
    vec![
        ("docs/GUIDE.md", read("docs/GUIDE.md")),
        ("src/ (rustdoc)", rustdoc()),
        ("CHANGELOG.md (Unreleased and the current release)", changelog[..end].to_string()),
    ]
}

/// The crate's version, from its manifest.
fn sed_version(manifest: &str) -> String {
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("Cargo.toml's version")
        .to_string()
}

#[test]
fn a_fault_figure_stated_elsewhere_names_its_setup_and_the_bench_s_is_the_readme_s() {
    // Each fault cell of the README's table, by the words that name it in
    // prose, and the measure the README gives for it.
    let readme = readme_http2();
    let faults: [(&str, &[&str]); 4] = [
        ("every 4th handshake stalled", &["every 4th handshake stalled"]),
        ("every dial closed after 400 ms", &["closed after 400 ms", "closed unanswered after 400 ms"]),
        ("nginx `keepalive_requests 16`", &["keepalive_requests 16"]),
        ("one refusal then none, 1 caller", &["one refusal"]),
    ];
    for (readme_label, words) in faults {
        let (_, measure, [alone, stack, _]) = readme
            .iter()
            .find(|(label, ..)| label.contains(readme_label))
            .unwrap_or_else(|| panic!("the README's HTTP/2 table lacks {readme_label:?}"));
        let stated = |s: &str| match measure.as_str() {
            "connections" => s.contains(&format!("{stack} connections")),
            "failed" => s.contains(&format!("{stack} failed")) && s.contains(alone.as_str()),
            other => panic!("no prose form for {other:?}"),
        };
        for (name, text) in other_docs() {
            for s in sentences(&text) {
                let lower = s.to_lowercase();
                if !words.iter().any(|w| lower.contains(&w.to_lowercase()))
                    || !s.chars().any(|c| c.is_ascii_digit())
                {
                    continue;
                }
                let bench = lower.contains("bench");
                assert!(
                    bench || lower.contains("test"),
                    "{name} states a figure of the fault {words:?} without naming its setup (a fault test, or the bench): {s}"
                );
                if bench {
                    assert!(
                        stated(&s),
                        "{name} gives the bench's {words:?} otherwise than the README ({measure}: the stack {stack}, hyper-util alone {alone}): {s}"
                    );
                }
            }
        }
    }
}

#[test]
fn node_s_stream_end_cell_is_one_set_of_figures_everywhere() {
    // The bench's `stream.end` cell (1 MiB, 16 callers, TLS ALPN): a
    // connection count stated beside `stream.end` is one of that cell's
    // (hyper-util alone, the stack, read to the end, Go) or names the run
    // it comes from; a range of failures is BENCHMARKS.md's.
    let http2 = bench_http2();
    let rows = table(&http2, "| cell (TLS ALPN unless said) |");
    let row =
        rows.iter().find(|r| r[0].starts_with("Node `stream.end`")).expect("BENCHMARKS.md's stream.end row");
    let connections: Vec<String> =
        row[1..].iter().map(|c| number(c.split_once(" / ").expect("failed / connections").1)).collect();
    let bench_sentences = sentences(&http2);
    let bench_range = bench_sentences
        .iter()
        .filter(|s| s.contains("stream.end") && s.contains("fails few"))
        .flat_map(|s| ranges(s))
        .next()
        .expect("BENCHMARKS.md says how many the stack fails on stream.end, with the runs' range");
    let mut docs = other_docs();
    docs.push(("README.md", read("README.md")));
    for (name, text) in docs {
        for s in sentences(&text) {
            if !s.contains("stream.end") {
                continue;
            }
            let words: Vec<&str> = s.split(' ').collect();
            for w in words.windows(2).filter(|w| w[1].trim_end_matches([',', ')', ';', ':']) == "connections")
            {
                let n = w[0].trim_start_matches('(');
                if n.chars().all(|c| c.is_ascii_digit() || c == ',') && !n.is_empty() {
                    assert!(
                        connections.contains(&n.to_string()) || s.contains("0.8.0") || s.contains("run of"),
                        "{name} gives {n} connections for Node's stream.end cell, the bench {connections:?}: {s}"
                    );
                }
            }
            if s.contains("fail") {
                for r in ranges(&s) {
                    assert_eq!(
                        r, bench_range,
                        "{name}'s range of stream.end failures is not BENCHMARKS.md's: {s}"
                    );
                }
            }
        }
    }
}
