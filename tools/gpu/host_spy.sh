#!/usr/bin/env bash
# Where an eager step's host time goes on the GPU machine: py-spy (carried as a wheel in
# .gpu-deps/wheels by tools/gpu/fetch_deps.sh) samples `python -m tessera.bench host --loop`
# with native frames, and tools/gpu/spy_summary.py keeps the samples inside the steps and prints
# self and inclusive shares ($OUT/host_spy_<contender>.txt). Needs BUILD_DIR's Python
# package. Sampling pauses the process: the step rate printed is not the unprofiled one.
# HOST_SPY_ONLY: comma-separated --only substrings (default fp8_rowwise);
# HOST_SPY_DEVICE=cpu tries it on CPU tensors (--shape 8,2,16,16 there).
#   HOST_SPY_ONLY="fp8_rowwise,tessera bf16" BUILD_DIR=build-gpu bash tools/gpu/host_spy.sh
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-/tmp/tessera-out}"
BUILD_DIR="$(cd "${BUILD_DIR:-$ROOT/build-gpu}" && pwd)"
mkdir -p "$OUT"
[ "${HOST_SPY_DEVICE:-cuda}" = cpu ] || source "$ROOT/tools/gpu/device_env.sh"  # oneDNN, OpenBLAS
wheel=$(ls "$ROOT"/.gpu-deps/wheels/py_spy-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "host_spy: no py-spy wheel in .gpu-deps/wheels (run tools/gpu/fetch_deps.sh here, carry .gpu-deps)"; exit 1; }
spy=/tmp/py-spy-bin/py-spy
if [ ! -x "$spy" ]; then
  python3 - "$wheel" <<'PY' || exit 1
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith("/scripts/py-spy"))
    os.makedirs("/tmp/py-spy-bin", exist_ok=True)
    with open("/tmp/py-spy-bin/py-spy", "wb") as f:
        f.write(z.read(name))
os.chmod("/tmp/py-spy-bin/py-spy", 0o755)
PY
fi
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" TESSERA_BUILD_DIR="$BUILD_DIR"
IFS=, read -ra selected <<< "${HOST_SPY_ONLY:-fp8_rowwise}"
device="${HOST_SPY_DEVICE:-cuda}"
shape="${HOST_SPY_SHAPE:-}"
[ "$device" = cpu ] && shape="${shape:-8,2,16,16}"
for only in "${selected[@]}"; do
  tag=$(echo "$only" | tr -c 'a-zA-Z0-9_\n' '_')
  raw="/tmp/host_spy_$tag.raw"
  "$spy" record --native -r "${HOST_SPY_RATE:-200}" -f raw -o "$raw" -- \
    python3 -m tessera.bench host --loop "${HOST_SPY_SECONDS:-20}" --only "$only" \
    --device "$device" ${shape:+--shape "$shape"} 2>&1 | grep -v "^py-spy> You can" | tail -3
  python3 "$ROOT/tools/gpu/spy_summary.py" "$raw" > "$OUT/host_spy_$tag.txt"
  head -1 "$OUT/host_spy_$tag.txt"
  rm -f "$raw"
done
