#!/usr/bin/env bash
# Installs what `cargo bench --bench keepalive` runs and is not there yet:
# uvicorn from PyPI into a venv under target/ (target/keepalive-venv,
# reused when present), and, as root on Debian, nginx and Apache 2.4 with
# apt-get (otherwise it says the command). Node 20 comes from the system
# (apt-get install nodejs); Go's server and client from `bash benches/go.sh`,
# which this script runs.
#
#   bash benches/common/keepalive.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV="$PWD/target/keepalive-venv"
fail() {
    echo "benches/common/keepalive.sh: $*" >&2
    exit 1
}

command -v python3 >/dev/null || fail "python3 not found (needed for uvicorn's venv)"
if [ ! -x "$VENV/bin/pip" ]; then
    python3 -m venv "$VENV" || fail "python3 -m venv $VENV failed (is the venv module installed?)"
fi
if ! "$VENV/bin/python" -c "import uvicorn" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet uvicorn || fail "pip install uvicorn failed"
fi
"$VENV/bin/python" -c "import uvicorn, h11; print('uvicorn', uvicorn.__version__, 'h11', h11.__version__)"

missing=()
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || missing+=(nginx)
[ -x /usr/sbin/apache2 ] || missing+=(apache2)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
    else
        echo "not installed: ${missing[*]} (as root: apt-get install -y ${missing[*]})"
    fi
fi
command -v node >/dev/null || echo "node not found: apt-get install -y nodejs (Node 20), or set DRAIN_BENCH_NODE"

bash benches/go.sh
