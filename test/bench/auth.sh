#!/usr/bin/env bash
# Windows logins (issue 46): what Kerberos and NTLM sources cost against a
# SQL-login source in the same run (CPU per idle cycle, with the ticket check
# every cycle; PSS and memory-context growth of a Kerberos worker over many
# cycles with its tickets renewed; time to log in again): installs what is
# missing, builds and installs the extension, then runs auth_bench.py.
#   test/bench/auth.sh [--seconds 30] [--poll 100ms] [--logins 20]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
build_extension
exec "$PY" "$here/bench/auth_bench.py" "$@"
