//! The layout of `src/` stays what the crate docs describe: modules form no
//! import circle, and `layer.rs`, the public entry point, is used by no
//! other module (the shared state and settings live in `shared.rs`, below
//! the policy, the body and the drain).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name → the modules of this crate it names as `crate::module`,
/// outside its unit tests.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|m| m != "lib")
        .collect();
    modules
        .iter()
        .map(|m| {
            let text = std::fs::read_to_string(src.join(format!("{m}.rs"))).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            let named = code
                .split("crate::")
                .skip(1)
                .map(|rest| rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>())
                .filter(|n| n != m && modules.contains(n))
                .collect();
            (m.clone(), named)
        })
        .collect()
}

#[test]
fn modules_form_no_import_circle() {
    let graph = imports();
    assert!(graph.len() > 10, "read the modules of src/: {graph:?}");
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
fn nothing_below_the_layer_uses_it() {
    let users: Vec<_> =
        imports().into_iter().filter(|(_, deps)| deps.contains("layer")).map(|(m, _)| m).collect();
    assert!(users.is_empty(), "only lib.rs may use layer.rs; used by {users:?}");
}
