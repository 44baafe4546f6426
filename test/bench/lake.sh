#!/usr/bin/env bash
# Iceberg consumers benchmark (commit -> verdict lag, 1,000 consumers on one catalog): installs what is
# missing, builds and installs the extension, then runs lake_bench.py.
#   test/bench/lake.sh [lag] [scale] [--trials 20] [--consumers 1000] [--poll 10s]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
exec "$PY" "$here/bench/lake_bench.py" "$@"
