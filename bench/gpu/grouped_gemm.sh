#!/usr/bin/env bash
# GPU benchmark (run by tools/gpu/check.sh with BUILD_DIR set): tessera's sm90 grouped GEMM next
# to torch._grouped_mm / torch._scaled_grouped_mm on the DESIGN §10 shapes, same run, same inputs.
# Builds the bench-only ctypes library from bench/gpu/grouped_gemm_entry.cpp and the build's
# libtessera.a, then runs bench/gpu/grouped_gemm_bench.py (validates, then times; prints a table).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
LIB="$BUILD_DIR/libtessera_bench_gemm.so"
export PATH="/usr/local/cuda/bin:$PATH"
g++ -std=c++20 -O2 -fPIC -shared -o "$LIB" "$ROOT/bench/gpu/grouped_gemm_entry.cpp" \
  -I"$ROOT/src" -I"$ROOT/include" -I"$BUILD_DIR/include" -I/usr/local/cuda/include \
  "$BUILD_DIR/libtessera.a" \
  -L/usr/local/cuda/lib64 -lcudart -Wl,--no-undefined
TESSERA_BENCH_LIB="$LIB" python3 "$ROOT/bench/gpu/grouped_gemm_bench.py"
