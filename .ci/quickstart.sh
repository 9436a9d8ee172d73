#!/usr/bin/env bash
# Builds README.md's quick start as a reader would: a package of its own, in a
# scratch directory, with exactly the README's [dependencies] block (the first
# ```toml block under "## Quick start"), drain-on-drop replaced by a path
# dependency to this checkout, and the first ```rust block of that section as
# src/main.rs, then runs it (no URL: its own local server, no network). A
# dependency or feature the code needs and the block lacks fails here; so do
# warnings (an import the README's lines leave unused included), and a run
# that does not show ten early drops drained, or that compares itself with
# hyper-util alone in words untrue of the protocol it ran (issue 49).
#
# The crate root's rustdoc (src/lib.rs) shows the same [dependencies] block
# with a shorter example: the block must be the README's, line for line
# (one quick-start block, not two that drift apart), and its first rust
# block is built too, as a second program (not run: it is `no_run`). Its
# HTTP/2 section's lines (a second ```toml block, an ```ignore block, not
# compiled by rustdoc: the crate's tests lack hyper-rustls' `native-tokio`)
# must be the README's HTTP/2 lines, which are built and run below.
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
# dependency) and the ```rust,ignore lines (the `legacy` import and the
# connector).
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
# The n-th ```$2 block of the crate root's rustdoc.
root_nth() {
  sed -n 's|^//! \{0,1\}||p' "$repo/src/lib.rs" | awk -v fence='```'"$2" -v want="$1" '
    !inside && $0 == fence { inside = 1; n++; next }
    inside && /^```/ { inside = 0; next }
    inside && n == want { print }
  '
}
# A doctest's hidden lines (`# `) are compiled too.
root_code=$(root_block no_run | sed 's/^# //; s/^#$//')
fail() { echo "quickstart: $*" >&2; exit 1; }

# swap PROGRAM LINES PREFIX...: PROGRAM with, for each PREFIX, its first line
# that contains PREFIX replaced by the line of LINES that contains it,
# indented as the line it replaces.
swap() {
  local program=$1 lines=$2 prefix new
  shift 2
  for prefix in "$@"; do
    new=$(grep -F -m1 -- "$prefix" <<<"$lines") || fail "the README's lines have no \`$prefix\` line"
    grep -qF -- "$prefix" <<<"$program" || fail "the quick start has no \`$prefix\` line"
    program=$(awk -v prefix="$prefix" -v line="$new" '
      index($0, prefix) && !done { match($0, /^ */); sub(/^ */, "", line); print substr($0, 1, RLENGTH) line; done = 1; next }
      { print }' <<<"$program")
  done
  printf '%s\n' "$program"
}
# Every line of a README excerpt (comment lines aside) must be one the
# program takes: $1 the lines, $2 how many were used, $3 where they are.
all_used() {
  local n
  n=$(grep -cv '^ *//' <<<"$1")
  [ "$n" -eq "$2" ] || fail "$3 has $n lines of code, of which the build takes $2: a reader would type lines CI never built"
}
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
# On HTTP/1 it compares itself with what hyper-util alone does there.
grep -q '^200 OK HTTP/1.1 on a ' <<<"$out" || fail "the quick start did not say it ran HTTP/1.1"
grep -q '^10 requests on [0-9]* connections\{0,1\} (hyper-util alone: one per body dropped before it all arrived)$' <<<"$out" ||
    fail "the quick start's HTTP/1 totals do not say what hyper-util alone does on HTTP/1"
echo "quickstart: README quick start runs and drains"

# The https:// variant, as the README tells a reader to make it: its
# hyper-rustls line added to the dependencies, its connector line in place of
# the program's, run against a local HTTPS keep-alive server whose
# self-signed certificate is the only root the client trusts (SSL_CERT_FILE,
# which rustls-native-certs reads).
[ -n "$tls_dep" ] && [ -n "$tls_line" ] || fail "no https:// change (a second \`\`\`toml block and \`\`\`rust,ignore lines) under '## Quick start'"
command -v openssl >/dev/null || fail "openssl is needed for the https:// run (apt-get install openssl)"
grep -q '^    let connector = layer.observe(HttpConnector::new());' <<<"$code" || fail "the quick start's connector line moved"
mkdir "$scratch/https"
printf '%s\n' "$tls_dep" >>"$scratch/Cargo.toml"
# The README's lines replace the program's `legacy` import (no
# `HttpConnector` once hyper-rustls brings its own: an unused import is a
# warning, denied here) and its connector line.
tls_prefixes=("use hyper_util::client::legacy::" "let connector = ")
all_used "$tls_line" "${#tls_prefixes[@]}" "the quick start's https:// excerpt"
swap "$code" "$tls_line" "${tls_prefixes[@]}" >"$scratch/src/main.rs"
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
# The crate root's HTTP/2 lines are these: its second ```toml block, and
# every line of its ```ignore block but the `use drain_on_drop` one (the
# README's names `ConnectionReuse` for the quick start), in order.
root_h2_deps=$(root_nth 2 toml)
[ "$root_h2_deps" = "$h2_deps" ] || fail "src/lib.rs's HTTP/2 \`\`\`toml block differs from README.md's:
$(diff <(printf '%s\n' "$h2_deps") <(printf '%s\n' "$root_h2_deps"))"
root_h2_code=$(root_nth 1 ignore)
missing=$(awk 'NR == FNR { if ($0 !~ /^use drain_on_drop::/) want[++n] = $0; next }
    i < n && $0 == want[i + 1] { i++ }
    END { if (i < n) { print want[i + 1]; exit 1 } }' <(printf '%s\n' "$h2_code") <(printf '%s\n' "$root_h2_code")) ||
    fail "src/lib.rs's HTTP/2 \`\`\`ignore block lacks the README's line, in order: $missing"
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
h2_prefixes=("use drain_on_drop::" "use hyper_util::client::legacy::" "let connector = " "let client = " "let mut svc = ")
# `let https = ` goes in before the connector line.
all_used "$h2_code" "$((${#h2_prefixes[@]} + 1))" "the HTTP/2 section's excerpt"
https_line=$(grep -F -m1 "let https = " <<<"$h2_code") || fail "the HTTP/2 section has no \`let https = \` line"
program=$(swap "$code" "$h2_code" "${h2_prefixes[@]}" | awk -v line="$https_line" '
  index($0, "let connector = ") && !done { match($0, /^ */); print substr($0, 1, RLENGTH) line; done = 1 }
  { print }')
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
# On HTTP/2 hyper-util alone keeps its connection too: the program must not
# claim otherwise (issue 49).
grep -q '^200 OK HTTP/2.0 on a ' <<<"$out" || fail "the HTTP/2 road did not say it ran HTTP/2"
grep -q '^10 requests on 1 connection (hyper-util alone too)$' <<<"$out" ||
    fail "on HTTP/2 the quick start should say hyper-util alone keeps its connection too"
grep -q "10 skipped (reset)" <<<"$out" || fail "the HTTP/2 road did not reset its 10 early drops"
echo "quickstart: the README's HTTP/2 road runs against Node over TLS: one connection, every drop reset"
