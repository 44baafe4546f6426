#!/usr/bin/env bash
# Publication benchmark (verdict commit -> receiver, CPU per event, sensors): installs what is
# missing, builds and installs the extension, then runs publish_bench.py.
#   test/bench/publish.sh [--tables 1000] [--rounds 3] [--poll 1s]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
exec "$PY" "$here/bench/publish_bench.py" "$@"
