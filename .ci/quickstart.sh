#!/usr/bin/env bash
# Builds README.md's quick start as a reader would: a package of its own, in a
# scratch directory, with exactly the README's [dependencies] block (the first
# ```toml block under "## Quick start"), drain-on-drop replaced by a path
# dependency to this checkout, and the first ```rust block of that section as
# src/main.rs, then runs it (no URL: its own local server, no network). A
# dependency or feature the code needs and the block lacks fails here; so do
# warnings, and a run that does not show ten early drops drained.
#
# The crate root's rustdoc (src/lib.rs) shows the same [dependencies] block
# with a shorter example: the block must be the README's, line for line
# (one quick-start block, not two that drift apart), and its first rust
# block is built too, as a second program (not run: it is `no_run`).
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
# The https:// change the README gives: a second ```toml block (one
# dependency) and the ```rust,ignore connector line.
tls_dep=$(awk -v fence='```toml' '
    /^## / { section = ($0 == "## Quick start"); next }
    section && !inside && index($0, fence) == 1 { inside = 1; n++; next }
    inside && /^```/ { inside = 0; next }
    inside && n == 2 { print }
  ' "$readme")
tls_line=$(block rust,ignore)
# The first ```$1 block of the crate root's rustdoc (`//! ` lines).
root_block() {
  sed -n 's|^//! \{0,1\}||p' "$repo/src/lib.rs" | awk -v fence='```'"$1" '
    !found && !inside && index($0, fence) == 1 { inside = 1; next }
    inside && /^```/ { inside = 0; found = 1; next }
    inside { print }
  '
}
root_deps=$(root_block toml)
# A doctest's hidden lines (`# `) are compiled too.
root_code=$(root_block no_run | sed 's/^# //; s/^#$//')
fail() { echo "quickstart: $*" >&2; exit 1; }
[ "$root_deps" = "$deps" ] || fail "src/lib.rs's \`\`\`toml block differs from README.md's quick start block:
$(diff <(printf '%s\n' "$deps") <(printf '%s\n' "$root_deps"))"
[ -n "$root_code" ] || fail "no \`\`\`no_run block in src/lib.rs's crate docs"
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
# The crate root's example as a doctest body: rustdoc allows unused items
# and wraps it in `fn main`.
mkdir "$scratch/src/bin"
printf '#![allow(unused)]\nfn main() {\n%s\n}\n' "$root_code" >"$scratch/src/bin/crate_root.rs"
# The repository's lock: the same versions as every other CI step, all of
# them already downloaded, so the build needs no network.
cp "$repo/Cargo.lock" "$scratch/Cargo.lock"
cargo fetch --locked --manifest-path "$repo/Cargo.toml" --target "$(rustc -vV | sed -n "s/^host: //p")" --quiet

echo "quickstart: README dependencies:"
sed 's/^/    /' "$scratch/Cargo.toml" | sed -n '/^    \[dependencies\]/,$p'
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
cargo build --offline --manifest-path "$scratch/Cargo.toml" --bins
echo "quickstart: README quick start and the crate root's example build with exactly the README's [dependencies]"
# Run as written, with no URL: its own local server, no network needed. It
# must show the layer at work: ten early drops, drained.
out=$(timeout 60 cargo run --offline --quiet --manifest-path "$scratch/Cargo.toml" --bin readme-quickstart)
printf '%s\n' "$out" | sed 's/^/    /'
grep -q "early drops: 10 drained" <<<"$out" || fail "the quick start did not print 10 drained early drops"
echo "quickstart: README quick start runs and drains"

# The https:// variant, as the README tells a reader to make it: its
# hyper-rustls line added to the dependencies, its connector line in place of
# the program's, run against a local HTTPS keep-alive server whose
# self-signed certificate is the only root the client trusts (SSL_CERT_FILE,
# which rustls-native-certs reads).
[ -n "$tls_dep" ] && [ -n "$tls_line" ] || fail "no https:// change (a second \`\`\`toml block and a \`\`\`rust,ignore line) under '## Quick start'"
command -v openssl >/dev/null || fail "openssl is needed for the https:// run (apt-get install openssl)"
grep -q '^    let connector = layer.observe(HttpConnector::new());' <<<"$code" || fail "the quick start's connector line moved"
mkdir "$scratch/https"
printf '%s\n' "$tls_dep" >>"$scratch/Cargo.toml"
# The program's `HttpConnector` import is unused then: a warning a reader
# sees, not an error.
sed -i 's/^warnings = "deny"$/warnings = "deny"\nunused_imports = "allow"/' "$scratch/Cargo.toml"
line=$(sed 's/[&|\\]/\\&/g' <<<"$tls_line")
sed "s|^    let connector = layer.observe(HttpConnector::new());.*|    $line|" <<<"$code" >"$scratch/src/main.rs"
rm -r "$scratch/src/bin"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost -addext basicConstraints=critical,CA:FALSE \
    -keyout "$scratch/https/key.pem" -out "$scratch/https/cert.pem" 2>/dev/null
python3 "$repo/.ci/keepalive_server.py" "$scratch/https/port" --tls "$scratch/https/cert.pem" "$scratch/https/key.pem" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$scratch"' EXIT
for _ in $(seq 100); do [ -s "$scratch/https/port" ] && break; sleep 0.1; done
[ -s "$scratch/https/port" ] || fail "the local HTTPS server did not start"
url="https://localhost:$(cat "$scratch/https/port")/"
cargo build --offline --manifest-path "$scratch/Cargo.toml"
out=$(SSL_CERT_FILE="$scratch/https/cert.pem" timeout 60 cargo run --offline --quiet --manifest-path "$scratch/Cargo.toml" -- "$url")
printf '%s\n' "$out" | sed 's/^/    /'
grep -q "early drops: 10 drained" <<<"$out" || fail "the quick start did not drain 10 early drops over https://"
echo "quickstart: README quick start, with its https:// line, runs against $url and drains"

# The same against a server that speaks TLS 1.2 and nothing newer: the
# README's hyper-rustls line has `tls12`.
kill $server 2>/dev/null
rm -f "$scratch/https/port"
python3 "$repo/.ci/keepalive_server.py" "$scratch/https/port" --tls "$scratch/https/cert.pem" "$scratch/https/key.pem" --tls12 &
server=$!
for _ in $(seq 100); do [ -s "$scratch/https/port" ] && break; sleep 0.1; done
[ -s "$scratch/https/port" ] || fail "the local TLS 1.2 server did not start"
url="https://localhost:$(cat "$scratch/https/port")/"
out=$(SSL_CERT_FILE="$scratch/https/cert.pem" timeout 60 cargo run --offline --quiet --manifest-path "$scratch/Cargo.toml" -- "$url")
printf '%s\n' "$out" | sed 's/^/    /'
grep -q "early drops: 10 drained" <<<"$out" || fail "the quick start did not drain 10 early drops from a TLS 1.2 server"
echo "quickstart: README quick start, with its https:// line, works against a TLS 1.2-only server"

# The HTTP/2 road, as the README's "## HTTP/2" section tells a reader to
# make it: its ```toml lines in place of the quick start's lines for the
# same crates (added when new), its ```rust,ignore lines in place of the
# quick start's `use drain_on_drop`, connector, client and stack lines (the
# `let https` line before the connector), run against Node's HTTP/2 server
# over TLS (ALPN), `/len/65536`: ten early drops, each reset at once, on one
# connection.
h2_block() {
  awk -v fence='```'"$1" '
    /^## / { section = ($0 == "## HTTP/2"); next }
    section && !found && !inside && index($0, fence) == 1 { inside = 1; next }
    inside && /^```/ { inside = 0; found = 1; next }
    inside { print }
  ' "$readme"
}
h2_deps=$(h2_block toml)
h2_code=$(h2_block rust,ignore | grep -v '^ *//')
[ -n "$h2_deps" ] && [ -n "$h2_code" ] || fail "no \`\`\`toml and \`\`\`rust,ignore blocks under '## HTTP/2'"
command -v node >/dev/null || fail "node is needed for the HTTP/2 run (apt-get install nodejs)"
kill $server 2>/dev/null
cargo_toml=$(cat "$scratch/Cargo.toml")
while read -r dep; do
  name=${dep%% =*}
  [ -n "$name" ] || continue
  if grep -q "^$name = " <<<"$cargo_toml"; then
    cargo_toml=$(awk -v name="$name" -v line="$dep" 'index($0, name " = ") == 1 { print line; next } { print }' <<<"$cargo_toml")
  else
    cargo_toml="$cargo_toml
$dep"
  fi
done <<<"$h2_deps"
printf '%s\n' "$cargo_toml" | sed "s|^drain-on-drop = { version = \"[^\"]*\", |drain-on-drop = { path = \"$repo\", |" >"$scratch/Cargo.toml"
grep -q "^drain-on-drop = { path = " "$scratch/Cargo.toml" || fail "the HTTP/2 section's drain-on-drop line is not \`{ version = ..., features = [...] }\`"
program=$code
for prefix in "use drain_on_drop::" "let connector = " "let client = " "let mut svc = "; do
  new=$(grep -F -m1 "$prefix" <<<"$h2_code") || fail "the HTTP/2 section has no \`$prefix\` line"
  grep -qF "$prefix" <<<"$program" || fail "the quick start has no \`$prefix\` line"
  if [ "$prefix" = "let connector = " ]; then
    https_line=$(grep -F -m1 "let https = " <<<"$h2_code") || fail "the HTTP/2 section has no \`let https = \` line"
    new="$https_line\\n$new"
  fi
  program=$(awk -v prefix="$prefix" -v line="$new" 'index($0, prefix) && !done { match($0, /^ */); pad = substr($0, 1, RLENGTH); n = split(line, ls, "\n"); for (i = 1; i <= n; i++) { l = ls[i]; sub(/^ */, "", l); print pad l } done = 1; next } { print }' <<<"$program")
done
printf '%s\n' "$program" >"$scratch/src/main.rs"
echo "quickstart: the HTTP/2 road's dependencies:"
sed -n '/^\[dependencies\]/,$p' "$scratch/Cargo.toml" | sed 's/^/    /'
cargo build --offline --manifest-path "$scratch/Cargo.toml"
mkfifo "$scratch/https/node_stdin"
node "$repo/tests/node/h2server.js" --tls "$scratch/https/cert.pem" "$scratch/https/key.pem" <"$scratch/https/node_stdin" >"$scratch/https/node_out" &
node_pid=$!
exec 3>"$scratch/https/node_stdin"
trap 'exec 3>&- 2>/dev/null; kill $node_pid 2>/dev/null; rm -rf "$scratch"' EXIT
for _ in $(seq 100); do grep -q '^READY ' "$scratch/https/node_out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^READY //p' "$scratch/https/node_out")
[ -n "$port" ] || fail "Node's HTTP/2 server did not start"
url="https://localhost:$port/len/65536"
out=$(SSL_CERT_FILE="$scratch/https/cert.pem" timeout 60 cargo run --offline --quiet --manifest-path "$scratch/Cargo.toml" -- "$url")
printf '%s\n' "$out" | sed 's/^/    /'
grep -q "^10 requests on 1 connection " <<<"$out" || fail "the HTTP/2 road did not send its 10 requests on one connection"
grep -q "10 skipped (reset)" <<<"$out" || fail "the HTTP/2 road did not reset its 10 early drops"
echo "quickstart: the README's HTTP/2 road runs against Node over TLS: one connection, every drop reset"
