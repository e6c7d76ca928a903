#!/usr/bin/env bash
# Builds and runs bench/gpu/bench_scan.cu against an existing build's libtessera.a
# (BUILD_DIR, default build-gpu). Called by tools/gpu/check.sh on the device machine.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
OUT_BIN="$BUILD_DIR/bench/bench_scan_gpu"
mkdir -p "$(dirname "$OUT_BIN")"
nvcc -std=c++20 -O2 -arch=sm_90a -I"$ROOT/include" -I"$BUILD_DIR/include" \
  "$ROOT/bench/gpu/bench_scan.cu" "$BUILD_DIR/libtessera.a" -Xcompiler -fopenmp -lgomp \
  -o "$OUT_BIN"
"$OUT_BIN"
