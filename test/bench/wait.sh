#!/usr/bin/env bash
# wait_final benchmark (test/bench/wait_bench.py): installs what is missing,
# builds and installs the extension, then runs 1,000 waiters on 100 tables in
# a throwaway cluster: wake-up latency from an advance's commit to each
# waiter's answer, and pgbench of is_final vs SELECT 1 with the waiters
# asleep vs without them. Ratios and latencies are printed, not asserted.
#   test/bench/wait.sh [--waiters N] [--tables N] [--rounds N] [--secs N] [--clients N]
# With FINALIZE_WAKE_SHARDS=1 the run uses a build with one condition
# variable for every waiter (what sharding is measured against), made in a
# temporary copy of the sources; the regular build is installed again after.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
if [ -n "${FINALIZE_WAKE_SHARDS:-}" ]; then
  stage=$(mktemp -d /tmp/finalize-wait-build.XXXXXX)
  trap 'rm -rf "$stage"; log "installing the regular build again"; build_extension' EXIT
  tar -C "$TOP" --exclude='*.o' --exclude='*.bc' --exclude='*.d' --exclude='*.so' \
      -cf - Makefile finalize.control src | tar -C "$stage" -xf -
  log "building with FINALIZE_WAKE_SHARDS=$FINALIZE_WAKE_SHARDS"
  make -s -C "$stage" PG_CONFIG="$PG_BIN/pg_config" FINALIZE_WERROR=-Werror \
       COPT="-DFINALIZE_WAKE_SHARDS=$FINALIZE_WAKE_SHARDS" >/dev/null
  make -s -C "$stage" PG_CONFIG="$PG_BIN/pg_config" install >/dev/null
  export FINALIZE_WAKE_SHARDS
fi
"$PY" "$here/bench/wait_bench.py" "$@"
