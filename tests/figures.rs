//! Each figure is stated once, in the README's "Measured" section (from
//! docs/BENCHMARKS.md, where it is measured), and the guide and the crate's
//! documentation repeat it only with the same value: the instructions a
//! response read to its end costs, the paired overhead on loopback, the far
//! run's times (alone, with the layer, reading every body).

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
