#!/usr/bin/env bash
# Builds README.md's quick start as a reader would: a package of its own, in a
# scratch directory, with exactly the README's [dependencies] block (the first
# ```toml block under "## Quick start"), drain-on-drop replaced by a path
# dependency to this checkout, and the first ```rust block of that section as
# src/main.rs, then runs it (no URL: its own local server, no network). A
# dependency or feature the code needs and the block lacks fails here; so do
# warnings, and a run that does not show ten early drops drained.
#
# Features that drain-on-drop's own dependencies enable are unified into the
# build whatever the block says, so their absence cannot be caught here:
# hyper-util "client-legacy" (which in hyper-util 0.1.21 implies its "tokio")
# and tokio "rt" and "time". The block lists them anyway, because the
# quick-start code uses them directly and should not lean on that.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
readme="$repo/README.md"

# The first ```$1 block (```rust also matches ```rust,no_run) under the
# "## Quick start" heading, up to the next "## " heading.
block() {
  awk -v fence='```'"$1" '
    /^## / { section = ($0 == "## Quick start"); next }
    section && !found && !inside && index($0, fence) == 1 { inside = 1; next }
    inside && /^```/ { inside = 0; found = 1; next }
    inside { print }
  ' "$readme"
}
deps=$(block toml)
code=$(block rust)
fail() { echo "quickstart: $*" >&2; exit 1; }
[ -n "$code" ] || fail "no \`\`\`rust block under '## Quick start' in README.md"
grep -qx '\[dependencies\]' <<<"$deps" || fail "no [dependencies] in the first \`\`\`toml block under '## Quick start'"
grep -q '^drain-on-drop = ' <<<"$deps" || fail "the README's [dependencies] block does not list drain-on-drop"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/src"
{
  cat <<TOML
[package]
name = "readme-quickstart"
version = "0.0.0"
edition = "2024"
publish = false

# Not a member of any workspace around the scratch directory.
[workspace]

[lints.rust]
warnings = "deny"

TOML
  sed "s|^drain-on-drop = .*|drain-on-drop = { path = \"$repo\" }|" <<<"$deps"
} >"$scratch/Cargo.toml"
printf '%s\n' "$code" >"$scratch/src/main.rs"
# The repository's lock: the same versions as every other CI step, all of
# them already downloaded, so the build needs no network.
cp "$repo/Cargo.lock" "$scratch/Cargo.lock"
cargo fetch --locked --manifest-path "$repo/Cargo.toml" --target "$(rustc -vV | sed -n "s/^host: //p")" --quiet

echo "quickstart: README dependencies:"
sed 's/^/    /' "$scratch/Cargo.toml" | sed -n '/^    \[dependencies\]/,$p'
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
cargo build --offline --manifest-path "$scratch/Cargo.toml"
echo "quickstart: README quick start builds with exactly its [dependencies]"
# Run as written, with no URL: its own local server, no network needed. It
# must show the layer at work: ten early drops, drained.
out=$(timeout 60 cargo run --offline --quiet --manifest-path "$scratch/Cargo.toml")
printf '%s\n' "$out" | sed 's/^/    /'
grep -q "early drops: 10 drained" <<<"$out" || fail "the quick start did not print 10 drained early drops"
echo "quickstart: README quick start runs and drains"
