#!/usr/bin/env bash
# GPU grouped quantization benchmark (run by tools/gpu/check.sh with BUILD_DIR set): the grouped
# kernels on device split sizes vs one Quantizer::quantize per member vs one quantize of the
# whole input (bench/gpu/grouped_quantize_bench.cu, validated first); prints a table.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
OUT="${OUT:-/tmp/tessera-out}"
mkdir -p "$OUT"
BIN="$BUILD_DIR/bench/grouped_quantize_bench"
mkdir -p "$(dirname "$BIN")"
nvcc -std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a -I"$ROOT/include" -I"$BUILD_DIR/include" \
  "$ROOT/bench/gpu/grouped_quantize_bench.cu" "$BUILD_DIR/libtessera.a" -Xcompiler -fopenmp -lgomp \
  -o "$BIN" || { echo "bench build failed"; exit 1; }
"$BIN" > "$OUT/grouped_quantize.jsonl" 2> "$OUT/grouped_quantize.err" || cat "$OUT/grouped_quantize.err"
python3 - "$OUT/grouped_quantize.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("grouped quantize, DSv3 fc1 activations (32 experts x 512 tokens, K 7168, bf16), H200;")
print("median of 50 CUDA-event timings; TB/s = bytes read+written / time; x = grouped over the other")
print(f"{'recipe':24s} {'split':10s} {'grouped us':>10s} {'TB/s':>6s} {'per-member us':>13s} {'x':>6s} "
      f"{'one-tensor us':>13s} {'x':>6s}  valid")
for r in rows:
    g, m, t = r["grouped_us"], r["per_member_us"], r["one_tensor_us"]
    print(f"{r['name']:24s} {r['split']:10s} {g:10.1f} {r['grouped_tbps']:6.2f} {m:13.1f} {m / g:6.2f} "
          f"{t:13.1f} {t / g:6.2f}  {r['valid']}")
PY
