#!/usr/bin/env bash
# Instructions per response of the layer's own work, counted by callgrind
# (repeatable, whatever else the machine does): benches/cost.rs at N and 2N
# iterations per mode; per iteration = (I(2N) - I(N)) / N.
#   bash benches/callgrind.sh [N]        (default N = 2000)
#
# Built with one codegen unit, in a target directory of its own: with the
# default 16, where rustc splits the bench's code moves with any change to
# the library, and the inliner decides differently for the code around the
# layer (building the request, collecting the body): 0.9.0 measured 1,410
# per response read to its end, and a change that left the layer's own
# functions at +2 measured +19 (issue 52). With one unit the same two
# builds measure 1,357 and 1,354.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
target=target/callgrind
CARGO_PROFILE_BENCH_CODEGEN_UNITS=1 CARGO_TARGET_DIR=$target cargo bench --bench cost --no-run 2>/dev/null
bin=$(ls -t $target/release/deps/cost-* | grep -v '\.d$' | head -1)
out=$(mktemp -d)
count() { # mode iterations -> total instructions
  valgrind --tool=callgrind --callgrind-out-file="$out/$1.$2" "$bin" "$1" "$2" >/dev/null 2>&1
  callgrind_annotate "$out/$1.$2" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",","",$1); print $1; done=1}'
}
printf '%-12s %14s\n' mode "instr/iteration"
for mode in bare_read layer_read bare_drop layer_drop; do
  a=$(count "$mode" "$n"); b=$(count "$mode" $((2 * n)))
  printf '%-12s %14d\n' "$mode" $(( (b - a) / n ))
done
echo
echo "Inclusive cost of the layer's functions, layer_read at $((2 * n)) iterations (callgrind_annotate --inclusive=yes):"
callgrind_annotate --inclusive=yes "$out/layer_read.$((2 * n))" 2>/dev/null | grep -E "drain_on_drop|tokio::runtime::handle|Extensions|tracing" | head -25 || true
echo
echo "Same, layer_drop at $((2 * n)) iterations:"
callgrind_annotate --inclusive=yes "$out/layer_drop.$((2 * n))" 2>/dev/null | grep -E "drain_on_drop|tokio::runtime::handle|spawn|Extensions|tracing" | head -25 || true
echo "(raw outputs in $out)"
