#!/usr/bin/env bash
# Sensor throughput: pgbench runs `SELECT finalize.is_final(...)` and
# `SELECT finalize.finalized_until(...)` against `SELECT 1` in the same run,
# same cluster, same settings (prepared statements, several clients), and
# prints each as a ratio of SELECT 1. Rounds alternate to spread noise.
#   test/bench/sensor.sh [seconds-per-run] [clients] [rounds]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"

secs=${1:-10}
clients=${2:-4}
rounds=${3:-3}
work=$(mktemp -d /tmp/finalize-bench.XXXXXX)
chmod 0755 "$work"
trap 'stop_cluster "$work/pg"; [ -n "${KEEP_WORKDIR:-}" ] || rm -rf "$work"' EXIT

install_packages
build_extension
port=$(free_port)
start_cluster "$work/pg" "$port" "max_connections = 50"
psql_() { "$PG_BIN/psql" -X -q -h "$work/pg" -p "$port" -U postgres -v ON_ERROR_STOP=1 "$@"; }
psql_ >/dev/null <<'SQL'
CREATE EXTENSION finalize;
CREATE SERVER bench FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
-- A realistic catalog: 1,000 tracked tables, the sensor asks about one of them.
SELECT finalize.track_table('bench.t' || i, 'bench', 'dbo.t' || i) FROM generate_series(1, 1000) i;
SELECT finalize.record_range('bench.t' || i, NULL, '0x00000000000000000100', '2026-11-29 14:00+00')
  FROM generate_series(1, 1000) i;
SQL

echo 'SELECT 1;' > "$work/select1.sql"
echo "SELECT finalize.is_final('bench.t500', '2026-11-29 13:00+00');" > "$work/is_final.sql"
echo "SELECT finalize.finalized_until('bench.t500');" > "$work/finalized_until.sql"

# Runs one pgbench script and prints its tps (excluding connection time).
tps() {
  local out t
  out=$("$PG_BIN/pgbench" -n -M prepared -c "$clients" -j "$clients" -T "$secs" -f "$work/$1.sql" \
          -h "$work/pg" -p "$port" -U postgres postgres 2>&1) || true
  t=$(printf '%s\n' "$out" | sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p')
  if [ -z "$t" ]; then
    printf 'pgbench failed:\n%s\n' "$out" >&2
    exit 1
  fi
  echo "$t"
}

echo "pgbench -M prepared -c $clients -T $secs, $rounds rounds, PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}')"
declare -A sum=([select1]=0 [is_final]=0 [finalized_until]=0)
for r in $(seq "$rounds"); do
  for s in select1 is_final finalized_until; do
    t=$(tps "$s")
    printf '  round %d  %-16s %10.0f tps\n' "$r" "$s" "$t"
    sum[$s]=$(awk -v a="${sum[$s]}" -v b="$t" 'BEGIN{print a+b}')
  done
done
for s in is_final finalized_until; do
  awk -v n="$s" -v a="${sum[$s]}" -v b="${sum[select1]}" -v r="$rounds" \
    'BEGIN{printf "%-16s %10.0f tps  vs SELECT 1 %10.0f tps  ratio %.2f\n", n, a/r, b/r, a/b}'
done
