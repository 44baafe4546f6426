#!/usr/bin/env bash
# changes_by_period over many periods, with finalize_internal.final() as
# shipped against the same function pinned to a search_path (as 0.3.0 had
# it), in the same run: installs what is missing, builds and installs the
# extension, then runs periods_bench.py. Ratios are printed, not asserted.
#   test/bench/periods.sh [--periods 1000,10000,100000] [--trials 3]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
exec "$PY" "$here/bench/periods_bench.py" "$@"
