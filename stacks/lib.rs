//! drain-on-drop with the stacks users run. This package has no code of its
//! own: it holds the dependencies of its tests (`tests/`) and examples
//! (`examples/`), and compiles and runs the code blocks
//! of the library's `recipes` page (`../src/recipes.md`) as its doctests,
//! with reqwest, axum and prometheus-client at hand.

#[cfg(doctest)]
#[doc = include_str!("../src/recipes.md")]
struct Recipes;
