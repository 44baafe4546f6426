#!/usr/bin/env bash
# Iceberg release benchmark (release_iceberg on 10,000 and 100,000 files against pyiceberg's own planning
# of the same manifests): installs what is missing, builds and installs the extension, then runs
# release_bench.py.
#   test/bench/release.sh [--sizes 10000,100000] [--trials 3]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
exec "$PY" "$here/bench/release_bench.py" "$@"
