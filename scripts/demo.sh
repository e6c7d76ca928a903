#!/usr/bin/env bash
# The main job on a fresh machine: install what the demo needs (system packages, and CMake into
# .venv: no other Python package), build the `tessera` program and what it links into build/
# (not the tests, benchmarks or Python extension), run `tessera demo` (arguments pass through,
# e.g. --steps 200 --recipes fp32,bf16,mxfp8 --out my_dir). The demo trains a small MoE layer
# under every recipe, prints a table and writes demo_out/demo_loss.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh demo
. scripts/venv.sh
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
echo "demo: building the tessera program into build/ (minutes on a small machine, the first time)"
cmake -S . -B build -G Ninja -DTESSERA_BUILD_TOOLS=ON -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_BENCH=OFF -DTESSERA_BUILD_PYTHON=OFF >/dev/null
cmake --build build -j "$(nproc)" --target tessera_cli >/dev/null
# OpenMP workers spinning against OpenBLAS threads slow a small machine down several times.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
exec build/tools/tessera demo "$@"
