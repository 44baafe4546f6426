# Shared set-up for test/run-tests and test/demo (sourced, not executed).
#
# Everything here is idempotent: on a machine that already has the packages,
# the node modules and the installed extension, it only checks and moves on.
# As root, the servers run as the postgres user; as another user, as that user,
# and nothing is installed into the system (what is missing is only named).

TOP=${TOP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
# Debian's PostgreSQL major: its packages are installed (install_packages).
PG_MAJOR=${PG_MAJOR:-15}
# The PostgreSQL to build against and run: the one of PG_CONFIG (PGXS's
# variable: PG_CONFIG=/opt/pg18/bin/pg_config test/run-tests), else the
# pg_config in PG_BIN (the older way to name it), else Debian's. PG_BIN is
# its bin directory (pg_config --bindir), which test/lib/pgcluster.py and
# the peers read too.
PG_CONFIG=${PG_CONFIG:-${PG_BIN:-/usr/lib/postgresql/$PG_MAJOR/bin}/pg_config}
PG_BIN=$("$PG_CONFIG" --bindir 2>/dev/null) || PG_BIN=$(dirname "$PG_CONFIG")
export PG_BIN PG_CONFIG
# Debian's interpreter: the test modules (pytest, psycopg2, pymssql) are Debian packages.
PY=/usr/bin/python3

# Debian packages the demo needs: the build, the servers (PostgreSQL, the
# simulator, the certificates openssl makes) and the demo's clients (psql,
# pymssql, psycopg2).
DEMO_PACKAGES="postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR postgresql-client-$PG_MAJOR
  freetds-dev libkrb5-dev libgnutls28-dev libcurl4-openssl-dev libxml2-dev libavro-dev zlib1g-dev liblzma-dev libsnappy-dev make gcc openssl
  python3 python3-psycopg2 python3-pymssql tzdata"
# And what the tests need besides: tsql, pytest, the peers' virtual
# environments and Java (Iceberg's REST catalog, JDBC, Debezium).
APT_PACKAGES="$DEMO_PACKAGES ccache freetds-bin python3-pytest python3-pytest-xdist python3-yaml python3-venv
  openjdk-17-jdk-headless krb5-kdc krb5-admin-server krb5-user libkrb5-dev python3-gssapi faketime python3-pycryptodome"

log() { printf '== %s\n' "$*" >&2; }

# PostgreSQL refuses to run as root: as root, the servers run as the postgres
# user (as test/lib/pgcluster.py runs them); otherwise as the current user.
if [ "$(id -u)" = 0 ]; then PG_OS_USER=postgres; else PG_OS_USER=$(id -un); fi

# Runs a command as PG_OS_USER.
as_pg_user() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Re-runs the calling script as root when it was started by another user
# (test/demo; test/run-tests runs as any user).
require_root() {
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "run this as root (sudo is not installed)" >&2; exit 2; }
    exec sudo -E "$@"
  fi
}

# The Debian packages of the list (default APT_PACKAGES) and Node.js that
# are missing, on one line; empty if none.
missing_packages() {
  local packages=${1:-$APT_PACKAGES} installed p missing=""
  # shellcheck disable=SC2016,SC2086
  installed=$(dpkg-query -W -f='${Package} ${Status}\n' $packages 2>/dev/null |
                sed -n 's/ install ok installed$//p' || true)
  for p in $packages; do
    printf '%s\n' "$installed" | grep -qxF "$p" || missing="$missing $p"
  done
  { command -v node && command -v npm; } >/dev/null || missing="$missing nodejs npm"
  printf '%s\n' "${missing# }"
}

# Installs the Debian packages of the list (default APT_PACKAGES: every
# test's) that are missing, and Node.js when there is none. Another user
# than root is only told what is missing, and it fails.
install_packages() {
  local missing
  missing=$(missing_packages "${1:-}")
  [ -n "$missing" ] || return 0
  if [ "$(id -u)" != 0 ]; then
    echo "missing Debian packages: $missing" >&2
    echo "install them as root (apt-get install $missing), or run this as root" >&2
    return 1
  fi
  log "installing Debian packages: $missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# Whether test/node_modules holds what test/package-lock.json locks, by npm's
# own record of what it installed (node_modules/.package-lock.json).
node_modules_current() {
  "$PY" - "$TOP/test/package-lock.json" "$TOP/test/node_modules/.package-lock.json" <<'PY'
import json, sys
try:
    want = json.load(open(sys.argv[1]))["packages"]
    have = json.load(open(sys.argv[2]))["packages"]
except (OSError, ValueError, KeyError):
    sys.exit(1)
sys.exit(0 if all(have.get(k) == v or (k not in have and v.get("optional"))
                  for k, v in want.items() if k) else 1)
PY
}

# Where the test dependencies are cached (as test/peers/setup-venv and
# test/peers/mavenlib.py choose it): FINALIZE_CACHE, else
# /var/cache/finalize-tests for root, else ~/.cache/finalize-tests.
test_cache_dir() {
  if [ -n "${FINALIZE_CACHE:-}" ]; then echo "$FINALIZE_CACHE"
  elif [ "$(id -u)" = 0 ]; then echo /var/cache/finalize-tests
  else echo "${XDG_CACHE_HOME:-$HOME/.cache}/finalize-tests"; fi
}

# Installs the Node packages of test/package.json (tedious, s3rver, ...)
# unless exactly those are installed already: npm ci once per lock into the
# cache (node-HASH, HASH of package-lock.json), and test/node_modules a link
# to it, so that a fresh clone installs nothing (npm ci took 12 s each time).
install_node_modules() {
  local cache dir
  node_modules_current && return 0
  cache=$(test_cache_dir)
  dir=$cache/node-$(sha256sum "$TOP/test/package-lock.json" | cut -c1-16)
  if [ ! -f "$dir/node_modules/.package-lock.json" ]; then
    log "installing Node packages (test/package.json) into $dir"
    rm -rf "$dir.part" && mkdir -p "$dir.part" &&
      cp "$TOP/test/package.json" "$TOP/test/package-lock.json" "$dir.part/" &&
      (cd "$dir.part" && npm ci --no-audit --no-fund --no-update-notifier --loglevel=error >/dev/null) &&
      rm -rf "$dir" && mv "$dir.part" "$dir" || return 1
  fi
  if [ -e "$TOP/test/node_modules" ] && [ ! -L "$TOP/test/node_modules" ]; then
    rm -rf "$TOP/test/node_modules"       # not what the lock says (checked above)
  fi
  ln -sfn "$dir/node_modules" "$TOP/test/node_modules"
  node_modules_current
}

# Sets ccache_make to the CC= argument of make that compiles through ccache
# (in the tests' cache, beside the virtual environments) when ccache is
# installed and FINALIZE_CCACHE is not 0: the four majors' builds were a
# fifth of the suite's time, and a build mostly repeats the last run's (same
# sources, same headers). Paths below the checkout's parent are hashed
# relative to it (the matrix builds in a new work directory each run, the
# PostgreSQL copies beside the checkouts) and the directory itself is not
# hashed (only the debug information's paths differ). ccache hashes the
# sources, every header and the compiler: a stale object is never used.
# A PostgreSQL built with LLVM (Debian's) also compiles each file to
# bitcode with its CLANG: through ccache too (without, Debian's 15 took a
# minute of CPU more than any other major's build).
ccache_cc() {
  ccache_make=()
  [ "${FINALIZE_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null || return 0
  export CCACHE_DIR=${CCACHE_DIR:-${FINALIZE_CACHE:-/var/cache/finalize-tests}/ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$TOP")} CCACHE_NOHASHDIR=1
  mkdir -p "$CCACHE_DIR" 2>/dev/null && [ -w "$CCACHE_DIR" ] || return 0
  ccache_make=("CC=ccache $("$1" --cc)")
  local global clang
  global=$(dirname "$("$1" --pgxs)")/../Makefile.global
  if grep -Eq '^with_llvm[[:space:]]*=[[:space:]]*yes' "$global" 2>/dev/null; then
    clang=$(sed -n 's/^CLANG[[:space:]]*=[[:space:]]*//p' "$global")
    [ -z "$clang" ] || ccache_make+=("CLANG=ccache $clang")
  fi
}

# Builds the extension with warnings as errors (make -j, one job per core)
# and installs it into the PostgreSQL of PG_CONFIG. Objects built against
# another PostgreSQL (.build-pg_config names it) are cleaned first: make
# would link them as they are. A user who may not write there can still
# test when what is installed there is this very build (root installed it
# beforehand).
build_extension() {
  local ccache_make pg_config=$PG_CONFIG pkglibdir extdir stage f stale=() built want t0=$SECONDS
  want="$pg_config $("$pg_config" --version)" || return 1
  built=$(cat "$TOP/.build-pg_config" 2>/dev/null || true)    # none in a fresh clone (callers may run under set -e)
  if [ "$built" != "$want" ]; then
    [ -z "$built" ] || log "cleaning the objects built for ${built#* }"
    make -s -C "$TOP" PG_CONFIG="$pg_config" clean >/dev/null || return 1
    printf '%s\n' "$want" >"$TOP/.build-pg_config"
  fi
  log "building the extension against $("$pg_config" --version) ($pg_config)"
  ccache_cc "$pg_config"
  make -s -j"$(nproc)" -C "$TOP" PG_CONFIG="$pg_config" "${ccache_make[@]}" \
    FINALIZE_WERROR=-Werror >/dev/null || return 1
  log "build: $((SECONDS - t0))s"
  pkglibdir=$("$pg_config" --pkglibdir)
  extdir=$("$pg_config" --sharedir)/extension
  if [ -w "$pkglibdir" ] && [ -w "$extdir" ]; then
    log "installing the extension into $pkglibdir"
    make -s -C "$TOP" PG_CONFIG="$pg_config" install >/dev/null
    return
  fi
  stage=$(mktemp -d)
  make -s -C "$TOP" PG_CONFIG="$pg_config" DESTDIR="$stage" install >/dev/null || { rm -rf "$stage"; return 1; }
  while IFS= read -r f; do
    cmp -s "$f" "${f#"$stage"}" || stale+=("${f#"$stage"}")
  done < <(find "$stage" -type f)
  rm -rf "$stage"
  if [ ${#stale[@]} -gt 0 ]; then
    echo "$(id -un) may not install the extension into $pkglibdir and $extdir," >&2
    echo "and what is installed there is not this build (${#stale[@]} files differ: ${stale[0]}, ...)" >&2
    echo "install it once as root from this checkout (sudo make install PG_CONFIG=$pg_config)," >&2
    echo "or set PG_BIN to the bin directory of a PostgreSQL you own" >&2
    return 1
  fi
  log "the extension installed in $pkglibdir is this build"
}

# Starts a throwaway PostgreSQL cluster run by PG_OS_USER.
#   start_cluster DIR PORT [extra postgresql.conf lines...]
# Clients reach it through the Unix socket in DIR as user postgres.
start_cluster() {
  local dir=$1 port=$2; shift 2
  if [ "$(id -u)" = 0 ]; then
    install -d -o postgres -g postgres -m 0755 "$dir"
  else
    install -d -m 0755 "$dir"
  fi
  as_pg_user "$PG_BIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 \
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
  as_pg_user "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
    || { cat "$dir/server.log" >&2; return 1; }
}

# Stops a cluster whose data directory is DIR/data (fast shutdown): one of
# start_cluster, or make installcheck's temporary instance left behind.
stop_cluster() {
  local dir=$1
  [ -f "$dir/data/postmaster.pid" ] || return 0
  as_pg_user "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
}

# Picks a free TCP port on 127.0.0.1.
free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
