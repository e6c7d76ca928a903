#!/usr/bin/env bash
# The main job on a fresh machine: install, build, run `tessera demo` (arguments pass through).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh >/dev/null
# Until `tessera demo` lands (issue 6) the main job prints the format table and devices.
exec build/tools/tessera info "$@"
