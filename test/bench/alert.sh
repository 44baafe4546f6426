#!/usr/bin/env bash
# Alert delivery benchmark (condition -> webhook receipt): installs what is
# missing, builds and installs the extension, then runs alert_bench.py.
#   test/bench/alert.sh [condition] [delivery] [--trials N] [--poll 1s]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
exec "$PY" "$here/bench/alert_bench.py" "$@"
