#!/usr/bin/env bash
# GPU benchmark (run by tools/gpu/check.sh with BUILD_DIR set): tessera's sm90 grouped GEMM next
# to torch._grouped_mm / torch._scaled_grouped_mm on the docs/architecture.md shapes, same run, same inputs.
# Builds the bench-only ctypes libraries from bench/gpu/grouped_gemm_entry.cpp (internal launch
# API) and grouped_gemm_api_entry.cpp (the public API; optional: it also needs the build's BLAS
# and OpenMP) against the build's libtessera.a, then runs bench/gpu/grouped_gemm_bench.py
# (validates, then times; prints a table).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
LIB="$BUILD_DIR/libtessera_bench_gemm.so"
API_LIB="$BUILD_DIR/libtessera_bench_gemm_api.so"
export PATH="/usr/local/cuda/bin:$PATH"
BLAS=$(grep -E '^BLAS_(LIBRARIES|openblas_LIBRARY)[:=]' "$BUILD_DIR/CMakeCache.txt" | head -1 | cut -d= -f2- || true)
# libtessera.a's CPU GEMMs (pulled in through the shared dispatch) need the build's BLAS and oneDNN.
DNNL=$(grep -E '^TESSERA_DNNL_LIBRARY:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2- || true)
[ -f "$DNNL" ] || DNNL=""
g++ -std=c++20 -O2 -fPIC -shared -fopenmp -o "$LIB" "$ROOT/bench/gpu/grouped_gemm_entry.cpp" \
  -I"$ROOT/src" -I"$ROOT/include" -I"$BUILD_DIR/include" -I/usr/local/cuda/include \
  "$BUILD_DIR/libtessera.a" ${BLAS:+"$BLAS"} ${DNNL:+"$DNNL"} \
  -L/usr/local/cuda/lib64 -lcudart -Wl,--no-undefined
if g++ -std=c++20 -O2 -fPIC -shared -fopenmp -o "$API_LIB" "$ROOT/bench/gpu/grouped_gemm_api_entry.cpp" \
  -I"$ROOT/include" -I"$BUILD_DIR/include" "$BUILD_DIR/libtessera.a" ${BLAS:+"$BLAS"} ${DNNL:+"$DNNL"} \
  -L/usr/local/cuda/lib64 -lcudart -Wl,--no-undefined; then
  export TESSERA_BENCH_API_LIB="$API_LIB"
else
  echo "public-API bench library did not link; its rows are skipped"
fi
# GEMM_BENCH_BUILD_ONLY=1: build the libraries and stop (tools/gpu/gemm_profile.sh).
[ "${GEMM_BENCH_BUILD_ONLY:-0}" = 1 ] && exit 0
TESSERA_BENCH_LIB="$LIB" python3 "$ROOT/bench/gpu/grouped_gemm_bench.py"
