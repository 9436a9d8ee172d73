#!/usr/bin/env bash
# Runs every example program the README, docs/GUIDE.md and the examples'
# own headers present as a program to run, as a reader types it (`cargo run
# --example NAME` at the root), and checks what each prints. The README's
# first command (`reuse`) has .ci/first_command.sh; the README quick start
# .ci/quickstart.sh. Every one of these needs only loopback servers they
# start themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "examples: $*" >&2; exit 1; }

# run NAME PATTERN...: runs the example and checks that its output has a
# line matching each (extended) regular expression. FEATURES, when set, is
# passed to cargo as `--features` (with `-p drain-on-drop-stacks`).
run() {
    local name=$1
    shift
    local features=()
    [ -z "${FEATURES:-}" ] || features=(-p drain-on-drop-stacks --features "$FEATURES")
    echo "examples: cargo run ${features[*]} --example $name"
    local out
    out=$(timeout 300 cargo run --quiet "${features[@]}" --example "$name") || fail "$name: exit status $?"
    printf '%s\n' "$out" | sed 's/^/    /'
    local pattern
    for pattern in "$@"; do
        grep -Eq "$pattern" <<<"$out" || fail "$name: no line matches /$pattern/"
    done
}

# Prometheus text: the drained counter counts every drop, in_flight is 0.
run metrics \
    '^drain_on_drop_early_drops_total\{outcome="drained",reason="end_of_body"\} [1-9][0-9]*$' \
    '^drain_on_drop_drains_in_flight 0$'
# A reverse proxy: each downstream hang-up drained, none without the layer.
run proxy \
    '^  5 hang-ups: 5 drained, 0 abandoned, 0 skipped, 0 failed; .* ([12]) upstream connections$' \
    '^  5 hang-ups: 0 drained, 0 abandoned, 5 skipped, 0 failed; 0 KiB drained; 5 upstream connections$'
# reqwest through wrap_response: 19 of 20 bodies dropped unread, drained.
run reqwest '^20 requests on [1-4] connections; 19 bodies drained, 0 skipped$'
# The recommended tower stack: redirects, retries, decompression above the drain.
run stack '^21 HTTP requests on [1-4] connections; early drops: 16 drained, 0 abandoned, 0 skipped, 0 failed'
# The roads users take to a far origin (issue 29): each keeps its
# connections with the default budgets (at most 4 for 30 requests; 30
# without the layer), and shows the origin's round trip.
roads=()
for road in "reqwest-middleware" "reqwest \+ sending\(\)" "hyper conn::http1 pool, origin-form" "hyper-util pool::cache, origin-form"; do
    roads+=("^  $road +30 / [1-4] +connections; origin [^,]+, round trip [0-9]+ ms, time budget [0-9]+ ms; 30 drained")
done
FEATURES=reqwest-middleware run roads "${roads[@]}"
echo "examples: every example runs and prints what it should"
