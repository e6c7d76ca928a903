#!/usr/bin/env bash
# Configures and builds tessera into build/ (CUDA backend when nvcc is found, sm_90a by default).
# Extra arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
PY_CMAKE_BIN="$(python3 -c 'import cmake, os; print(os.path.join(os.path.dirname(cmake.__file__), "data", "bin"))' 2>/dev/null || true)"
[ -x "$PY_CMAKE_BIN/cmake" ] && export PATH="$PY_CMAKE_BIN:$PATH"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B "${BUILD_DIR:-build}" -G Ninja -DTESSERA_BUILD_PYTHON=ON "$@"
cmake --build "${BUILD_DIR:-build}" -j "$(nproc)"
