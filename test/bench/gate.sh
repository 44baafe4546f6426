#!/usr/bin/env bash
# Release gate benchmarks (comparison in memory and on a file:// store): installs what
# is missing, builds and installs the extension, then runs gate_bench.py.
#   test/bench/gate.sh [memory] [files] [--memory-sizes N,N] [--file-sizes N,N] [--trials N]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
exec "$PY" "$here/bench/gate_bench.py" "$@"
