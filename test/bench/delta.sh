#!/usr/bin/env bash
# Delta Lake consumers benchmark (commit -> verdict lag, 1,000 idle consumers on one S3 store), with the
# Iceberg consumers' figures measured in the same run: installs what is missing, builds and installs
# the extension, then runs delta_bench.py in the lake virtual environment (delta-rs).
#   test/bench/delta.sh [lag] [scale] [iceberg] [--trials 20] [--consumers 1000] [--poll 10s]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
venv=$("$here/peers/setup-venv" lake | tail -n 1)
exec "$venv/bin/python" "$here/bench/delta_bench.py" "$@"
