#!/usr/bin/env bash
# One device round for the training step: build the library, the nn tests and both Python
# modules for sm_90a, run the CUDA nn tests, the torch-step tests on the GPU, then the host-cost
# and Qwen3 step benchmarks. Logs in $OUT.
#   run(command="bash tools/gpu/step_round.sh", carry=[".gpu-deps"])
# Environment: ROUND_PYTEST (pytest files), ROUND_TRAIN (python -m tessera.bench train args;
# empty skips), ROUND_HOST=0 skips the host benchmark.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
export OUT="${OUT:-/tmp/tessera-out}"
CHECK_TARGETS="tessera _tessera _torch_ops _torch_autograd tessera_python_files test_grouped_nn test_grouped_nn_cuda" \
CHECK_FILTER="grouped_nn" CHECK_BENCH=0 CHECK_TRAIN=0 CHECK_SUMS=0 \
PYTEST_ARGS="${ROUND_PYTEST:-tests/python/test_torch_layers.py}" bash tools/gpu/check.sh
export PYTHONPATH="$ROOT/build-gpu/python${PYTHONPATH:+:$PYTHONPATH}"
if [ "${ROUND_HOST:-1}" = 1 ]; then
  python3 -m tessera.bench host 2>&1 | tee "$OUT/host.log" | tail -12
fi
if [ -n "${ROUND_TRAIN-}" ]; then
  python3 -m tessera.bench train $ROUND_TRAIN --json "$OUT/train.json" > "$OUT/train.log" 2>&1
  echo "bench train rc=$?"; sed -n '/^| suite/,$p' "$OUT/train.log"; grep -E "Error" "$OUT/train.log" | head -5
fi
