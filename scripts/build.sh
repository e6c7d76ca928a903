#!/usr/bin/env bash
# Configures and builds everything into build/ (library, tests, benchmarks, the `tessera` program,
# the Python extension) with .venv's tools (scripts/install_deps.sh test makes it): CMake from
# .venv, and .venv's python as CMake's Python (the extension, and PyTorch found by importing torch
# with that interpreter). CUDA backend when nvcc is found, sm_90a by default. Extra arguments go
# to the CMake configure step. The build options are passed every time: a build/ that
# scripts/demo.sh configured for the `tessera` program alone builds everything again.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
py="$VIRTUAL_ENV/bin/python"
cmake -S . -B "${BUILD_DIR:-build}" -G Ninja -DPython_EXECUTABLE="$py" -DPython3_EXECUTABLE="$py" \
  -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_BENCH=ON -DTESSERA_BUILD_TOOLS=ON \
  -DTESSERA_BUILD_PYTHON=ON "$@"
cmake --build "${BUILD_DIR:-build}" -j "$(nproc)"
