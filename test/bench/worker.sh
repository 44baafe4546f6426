#!/usr/bin/env bash
# Worker benchmarks (lag, 1,000 tables, 1,000,000-row range): installs what
# is missing, builds and installs the extension, then runs worker_bench.py.
#   test/bench/worker.sh [lag] [tables] [range] [--rows N] [--tables N] [--trials N]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
exec "$PY" "$here/bench/worker_bench.py" "$@"
