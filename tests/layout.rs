//! The layout of `src/` stays what the crate docs describe: modules form no
//! import circle, `layer.rs`, the public entry point, is used by no other
//! module, each room stays small enough to read (450 lines before its
//! tests), and the budget rules are reached only through `sizing.rs`.
//!
//! `cargo test --test layout -- --nocapture` prints the module graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/`, as (module path, file).
fn files() -> Vec<(String, PathBuf)> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                walk(&path, &format!("{prefix}{stem}::"), out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let module = match stem.as_str() {
                    "lib" => "lib".to_string(),
                    "mod" => prefix.trim_end_matches("::").to_string(),
                    _ => format!("{prefix}{stem}"),
                };
                out.push((module, path));
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), "", &mut out);
    out.sort();
    out
}

/// The file without its `#[cfg(test)]` items (a `mod tests { … }` block,
/// found by matching braces, or a single item).
fn without_tests(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        // The item ends at the brace that closes its first block, or at its
        // first `;` if that comes first.
        let (mut depth, mut end) = (0usize, after.len());
        for (i, c) in after.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The top-level modules a piece of code names: `crate::a`, `crate::a::b`,
/// and every name of a grouped `use crate::{a, b::c, d::{e, f}}`.
fn named_modules(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for rest in code.split("crate::").skip(1) {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let inner: String = group
                .chars()
                .take_while(|&c| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth > 0
                })
                .collect();
            // Top-level names of the group: at nesting depth 0, after `{` or `,`.
            let mut depth = 0;
            let mut at_start = true;
            let mut name = String::new();
            for c in inner.chars() {
                let in_name = depth == 0 && at_start && (c.is_alphanumeric() || c == '_');
                if in_name {
                    name.push(c);
                    continue;
                }
                if !name.is_empty() {
                    named.insert(std::mem::take(&mut name));
                    at_start = false;
                }
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => at_start = true,
                    _ => {}
                }
            }
            if !name.is_empty() {
                named.insert(name);
            }
        } else {
            named.insert(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    named.retain(|n| modules.contains(n));
    named
}

/// Top-level module → the top-level modules of this crate it names, outside
/// its tests (a submodule's imports count for its parent).
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let files = files();
    let top = |m: &str| m.split("::").next().unwrap().to_string();
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| top(m)).filter(|m| m != "lib").collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in &files {
        if module == "lib" {
            continue;
        }
        let code = without_tests(&std::fs::read_to_string(path).unwrap());
        let mut named = named_modules(&code, &modules);
        named.remove(&top(module));
        graph.entry(top(module)).or_default().extend(named);
    }
    graph
}

#[test]
fn modules_form_no_import_circle() {
    let graph = imports();
    assert!(graph.len() > 10, "read the modules of src/: {graph:?}");
    for (module, deps) in &graph {
        println!("{module:>9} -> {}", deps.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    // Kahn: peel off modules that import nothing left; a circle remains.
    let mut left = graph.clone();
    while let Some(leaf) = left.iter().find(|(_, deps)| deps.is_empty()).map(|(m, _)| m.clone()) {
        left.remove(&leaf);
        for deps in left.values_mut() {
            deps.remove(&leaf);
        }
    }
    assert!(left.is_empty(), "these modules import each other in a circle: {left:?}");
}

#[test]
fn the_reader_finds_grouped_imports_and_skips_tests() {
    let modules: BTreeSet<String> = ["a", "b", "c", "d"].map(String::from).into();
    let code = "use crate::{a::X, b, c::{Y, Z}};\nfn f() { crate::d::g() }";
    assert_eq!(named_modules(code, &modules), modules, "every group member and path");
    let text = "use crate::a;\n#[cfg(test)]\nmod tests { use crate::b; fn f() { {} } }\nuse crate::c;";
    assert_eq!(named_modules(&without_tests(text), &modules), ["a", "c"].map(String::from).into());
}

#[test]
fn nothing_below_the_layer_uses_it() {
    // `middleware` and `roads` are entry points beside the layer: the layer
    // as another stack's trait, and its drain on responses from elsewhere.
    let users: Vec<_> = imports()
        .into_iter()
        .filter(|(m, deps)| deps.contains("layer") && m != "middleware" && m != "roads")
        .map(|(m, _)| m)
        .collect();
    assert!(
        users.is_empty(),
        "only lib.rs (and the entry points beside it) may use layer.rs; used by {users:?}"
    );
}

#[test]
fn every_module_is_a_room_of_at_most_450_lines_before_its_tests() {
    for (module, path) in files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let before_tests = text.split("\n#[cfg(test)]\nmod tests").next().unwrap();
        let lines = before_tests.lines().count();
        // lib.rs is the crate's documentation: the design, in one place.
        if module != "lib" {
            assert!(lines <= 450, "{module} ({}) has {lines} lines before its tests", path.display());
        }
    }
}

#[test]
fn the_budget_rules_live_in_sizing_alone() {
    for (module, path) in files() {
        let code = without_tests(&std::fs::read_to_string(&path).unwrap());
        if module != "sizing" {
            for rule in
                ["fn slow_start_rounds", "fn following_round_trip", "fn ceiling(", "UNMEASURED_THROUGHPUT ="]
            {
                assert!(
                    !code.contains(rule),
                    "{module} states a budget rule ({rule}) that belongs in sizing.rs"
                );
            }
        }
    }
}
