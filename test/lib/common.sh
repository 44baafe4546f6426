# Shared set-up for test/run-tests and test/demo (sourced, not executed).
#
# Everything here is idempotent: on a machine that already has the packages,
# the node modules and the installed extension, it only checks and moves on.

TOP=${TOP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
PG_MAJOR=${PG_MAJOR:-15}
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
# Debian's interpreter: the test modules (pytest, psycopg2, pymssql) are Debian packages.
PY=/usr/bin/python3

# Debian packages the build, the servers and the test clients need.
APT_PACKAGES="postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR postgresql-client-$PG_MAJOR
  freetds-dev freetds-bin libcurl4-openssl-dev libxml2-dev make gcc
  python3 python3-pytest python3-psycopg2 python3-pymssql tzdata"

log() { printf '== %s\n' "$*" >&2; }

# Re-runs the calling script as root when it was started by another user:
# packages and the extension's files go into system directories.
require_root() {
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "run this as root (sudo is not installed)" >&2; exit 2; }
    exec sudo -E "$@"
  fi
}

# Installs the Debian packages that are missing (and Node.js when there is none).
install_packages() {
  local missing="" p
  for p in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
  done
  command -v node >/dev/null && command -v npm >/dev/null || missing="$missing nodejs npm"
  if [ -n "$missing" ]; then
    log "installing Debian packages:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
}

# Installs the Node packages of test/package.json (tedious, s3rver, ...).
install_node_modules() {
  if [ ! -d "$TOP/test/node_modules" ] || [ "$TOP/test/package-lock.json" -nt "$TOP/test/node_modules/.package-lock.json" ]; then
    log "installing Node packages (test/package.json)"
    (cd "$TOP/test" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
}

# Builds the extension with warnings as errors and installs it.
build_extension() {
  log "building and installing the extension"
  make -s -C "$TOP" PG_CONFIG="$PG_BIN/pg_config" FINALIZE_WERROR=-Werror >/dev/null
  make -s -C "$TOP" PG_CONFIG="$PG_BIN/pg_config" install >/dev/null
}

# Starts a throwaway PostgreSQL cluster owned by the postgres user.
#   start_cluster DIR PORT [extra postgresql.conf lines...]
# Clients reach it through the Unix socket in DIR as user postgres.
start_cluster() {
  local dir=$1 port=$2; shift 2
  install -d -o postgres -g postgres -m 0755 "$dir"
  runuser -u postgres -- "$PG_BIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 \
    --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
  {
    echo "port = $port"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$dir'"
    echo "shared_preload_libraries = 'finalize'"
    echo "max_worker_processes = 32"
    echo "fsync = off"
    echo "log_line_prefix = '%m [%p] %b %d '"
    local line
    for line in "$@"; do echo "$line"; done
  } >>"$dir/data/postgresql.conf"
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
    || { cat "$dir/server.log" >&2; return 1; }
}

# Stops a cluster started by start_cluster (fast shutdown).
stop_cluster() {
  local dir=$1
  [ -f "$dir/data/postmaster.pid" ] || return 0
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
}

# Picks a free TCP port on 127.0.0.1.
free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
