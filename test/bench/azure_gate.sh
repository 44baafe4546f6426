#!/usr/bin/env bash
# The release gate on Azure Blob Storage (Azurite) against azure-storage-blob's listing and a set
# comparison: installs what is missing (Node packages, the lake environment), builds and installs
# the extension, then runs azure_gate_bench.py with the lake environment's interpreter.
#   test/bench/azure_gate.sh [--files 100000] [--trials 3]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(dirname "$here")
. "$here/lib/common.sh"
require_root "$0" "$@"
install_packages
install_node_modules
build_extension
venv=$("$here/peers/setup-venv" lake | tail -n 1)
exec "$venv/bin/python" "$here/bench/azure_gate_bench.py" "$@"
