#!/usr/bin/env bash
# GPU quantization benchmark (run by tools/gpu/check.sh with BUILD_DIR set): our kernels
# (bench_quantize binary, CUDA events, validated against the CPU backend first) and the
# torch.compile rowwise FP8 baseline measured in the SAME run; prints a table with TB/s and the
# ratio to torch.compile.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
OUT="${OUT:-/tmp/tessera-out}"
mkdir -p "$OUT"
BIN="$BUILD_DIR/bench/quantize_bench"
mkdir -p "$(dirname "$BIN")"
nvcc -std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a -I"$ROOT/include" -I"$BUILD_DIR/include" \
  "$ROOT/bench/gpu/quantize_bench.cu" "$BUILD_DIR/libtessera.a" -Xcompiler -fopenmp -lgomp \
  -o "$BIN" || { echo "bench build failed"; exit 1; }
"$BIN" > "$OUT/quantize_ours.jsonl" 2> "$OUT/quantize_ours.err" || { cat "$OUT/quantize_ours.err"; }
python3 "$ROOT/bench/gpu/quantize_torch_peer.py" > "$OUT/quantize_torch.jsonl" 2> "$OUT/quantize_torch.err" \
  || tail -5 "$OUT/quantize_torch.err"
python3 - "$OUT/quantize_ours.jsonl" "$OUT/quantize_torch.jsonl" <<'PY'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
peer = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
base = next((p["tbps"] for p in peer if p["name"].startswith("torch.compile")), None)
print("quantize, 16384x7168 bf16 input, H200; median of 50 CUDA-event timings; TB/s = bytes read+written / time")
for r in peer + ours:
    ratio = f"{r['tbps'] / base:5.2f}x" if base and r["tbps"] else "   - "
    print(f"{r['name'][:56]:56s} {r['us']:9.1f} us {r['tbps']:6.3f} TB/s  {ratio} torch.compile  {r.get('valid', '')}")
PY
