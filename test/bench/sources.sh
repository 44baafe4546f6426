#!/usr/bin/env bash
# Many sources: the pool of source workers against one process per source
# (memory, CPU per cycle, lag with hung sources, the sensor with 1,000
# sources present): installs what is missing, builds and installs the
# extension, then runs sources_bench.py with its arguments.
#   test/bench/sources.sh [--dedicated 1,50,100,125] [--pool 100,500,1000] [--poll 5s] ...
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
exec "$PY" "$here/bench/sources_bench.py" "$@"
