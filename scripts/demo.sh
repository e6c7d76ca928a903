#!/usr/bin/env bash
# The main job on a fresh machine: install, build, run `tessera demo` (arguments pass through,
# e.g. --steps 200 --recipes fp32,bf16,mxfp8 --out my_dir). The demo trains a small MoE layer
# under every recipe, prints a table and writes demo_out/demo_loss.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh >/dev/null
# OpenMP workers spinning against OpenBLAS threads slow a small machine down several times.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
exec build/tools/tessera demo "$@"
