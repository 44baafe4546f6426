#!/usr/bin/env bash
# Scale of one source (a cycle over 1, 1,000 and 10,000 tables, idle CPU,
# finalize.status at 10,000 tables): installs what
# is missing, builds and installs the extension, then runs scale_bench.py.
#   test/bench/scale.sh [--sizes 1,1000,10000] [--trials N]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
exec "$PY" "$here/bench/scale_bench.py" "$@"
