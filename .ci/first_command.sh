#!/usr/bin/env bash
# The README's first command, exactly as a reader types it on a fresh clone,
# and what it prints: `cargo run --example reuse` (its built-in local
# server), then `cargo run --example reuse -- -url http://127.0.0.1:PORT/`
# against a local keep-alive server started here (.ci/keepalive_server.py)
# and stopped by PID. Each run must show hyper-util alone losing
# connections and the layer draining every early drop on fewer of them.
#
# Run first by .ci/run, on a clean clone with an empty target directory, so
# that the first command's build is what a newcomer's is: it must compile
# no crate the example does not use (aws-lc-sys was one: a C build that two
# rustls providers in the workspace brought in). Prints the compile count.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "first command: $*" >&2; exit 1; }

# Checks the output of one run of the example: $1 the output, $2 the
# number of requests.
check() {
    local out=$1 n=$2
    local without with
    without=$(awk '/^without draining/ { on = 1; next } /^with / { on = 0 } on' <<<"$out")
    with=$(awk '/^with DrainOnDropLayer/ { on = 1; next } on' <<<"$out")
    [ -n "$without" ] || fail "no 'without draining' section"
    [ -n "$with" ] || fail "no 'with DrainOnDropLayer' section"
    grep -q "early drops: 0 drained, 0 abandoned, $n skipped, 0 failed" <<<"$without" \
        || fail "without the layer, every early drop should be counted skipped"
    grep -q "early drops: $n drained, 0 abandoned, 0 skipped, 0 failed" <<<"$with" \
        || fail "with the layer, every early drop should be drained"
    grep -q "origin http://127.0.0.1:[0-9]*: round trip .*, drain budget 256 KiB in 50 ms" <<<"$with" \
        || fail "the layer should show the origin's round trip and its default budget (50 ms near)"
    local c_without c_with
    c_without=$(sed -n 's/.*(\([0-9]*\) connections opened).*/\1/p' <<<"$without")
    c_with=$(sed -n 's/.*(\([0-9]*\) connections opened).*/\1/p' <<<"$with")
    [ -n "$c_without" ] && [ -n "$c_with" ] || fail "no connection counts"
    # hyper-util alone opens one connection per request whose 64 KiB body
    # is dropped unread (its single read at the drop cannot finish it); the
    # layer 2 or 3 (hyper-util dials when a request goes out while the last
    # drain runs). Bounds with room for a slow machine.
    [ "$c_without" -ge $((n / 2)) ] || fail "hyper-util alone opened only $c_without connections for $n requests"
    [ "$c_with" -le 10 ] || fail "with the layer $c_with connections for $n requests (2 to 3 expected)"
    echo "first command: $n requests: hyper-util alone $c_without connections, with the layer $c_with"
}

echo "first command: cargo run --example reuse"
log=$(mktemp)
server_pid=
cleanup() {
    rm -f "$log"
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT
start=$SECONDS
# stdout is the program's; cargo's progress goes to stderr.
out=$(timeout 900 cargo run --example reuse 2>"$log") || { cat "$log" >&2; fail "exit status $?"; }
took=$((SECONDS - start))
printf '%s\n' "$out" | sed 's/^/    /'
compiled=$(grep -c '^ *Compiling ' "$log" || true)
echo "first command: $compiled crates compiled, $took s (a fresh clone compiles every one)"
if grep -E '^ *Compiling (aws-lc|openssl|native-tls)' "$log"; then
    fail "the first command compiled a TLS back end the example does not use"
fi
grep -q '^local server at http://127.0.0.1:[0-9]*/, bodies of 65536 bytes, dropped unread$' <<<"$out" \
    || fail "no 'local server at' line"
check "$out" 100

echo "first command: cargo run --example reuse -- -url http://127.0.0.1:PORT/ -n 50 (a local keep-alive server)"
port_file=$(mktemp -u)
python3 .ci/keepalive_server.py "$port_file" &
server_pid=$!
for _ in $(seq 100); do
    [ -s "$port_file" ] && break
    kill -0 "$server_pid" 2>/dev/null || fail "the keep-alive server did not start"
    sleep 0.1
done
[ -s "$port_file" ] || fail "the keep-alive server did not say its port"
port=$(cat "$port_file")
rm -f "$port_file"
out=$(timeout 300 cargo run --example reuse -- -url "http://127.0.0.1:$port/" -n 50 2>"$log") \
    || { cat "$log" >&2; fail "exit status $?"; }
printf '%s\n' "$out" | sed 's/^/    /'
check "$out" 50
echo "first command: both forms print what the README says"
