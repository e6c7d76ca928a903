#!/usr/bin/env bash
# One device round for the layout reads (docs/quantize_cuda.md, "Reading x through a group
# layout"): build for sm_90a, run their CUDA tests and those of the quantize and step paths they
# touch, then time the training step of the recipes they change with TESSERA_LAYOUT_READS=0 and
# =1 alternating (off, on, off, on), on the same machine, nothing else running. Logs in $OUT.
#   run(command="bash tools/gpu/layout_reads_round.sh", carry=[".gpu-deps"])
# Environment: LR_TESTS=0 skips the tests; LR_RECIPES (default "fp8_block"; one
# `python -m tessera.bench train` per recipe, switch state and round), LR_SHAPES (default
# dsv3-fc1,dsv3-fc2,qwen3-fc1,qwen3-fc2), LR_REPS (default 10), LR_ROUNDS (default 2),
# LR_RUN_LIMIT (seconds per bench run, default 240).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
export OUT="${OUT:-/tmp/tessera-out}"
mkdir -p "$OUT"
python_targets="tessera _tessera _torch_ops _torch_autograd tessera_python_files"
tests="test_layout_reads_cuda test_grouped_nn_cuda test_grouped_quantize_cuda \
test_nvfp4_members_cuda test_weight_image test_quantize_cuda test_grouped_recipes_cuda"
if [ "${LR_TESTS:-1}" = 1 ]; then
  # End-anchored: the ctest names and the binaries' paths (check.sh's per-binary counts).
  CHECK_TARGETS="$python_targets $tests" CHECK_FILTER="($(echo $tests | tr ' ' '|'))\$" \
    CHECK_BENCH=0 CHECK_TRAIN=0 CHECK_PYTEST=0 bash tools/gpu/check.sh || exit 1
else
  CHECK_TARGETS="$python_targets" CHECK_TESTS=0 CHECK_BENCH=0 CHECK_TRAIN=0 CHECK_PYTEST=0 \
    bash tools/gpu/check.sh || exit 1
fi
export PYTHONPATH="$ROOT/build-gpu/python${PYTHONPATH:+:$PYTHONPATH}"
export TESSERA_BUILD_DIR="$ROOT/build-gpu"
for recipe in ${LR_RECIPES:-fp8_block}; do
  for round in $(seq 1 "${LR_ROUNDS:-2}"); do
    for on in 0 1; do
      log="$OUT/train-$recipe-reads$on-round$round.log"
      t0=$(date +%s)
      TESSERA_LAYOUT_READS=$on timeout "${LR_RUN_LIMIT:-240}" python3 -m tessera.bench train \
        --shapes "${LR_SHAPES:-dsv3-fc1,dsv3-fc2,qwen3-fc1,qwen3-fc2}" --recipes "$recipe" \
        --no-mlp --reps "${LR_REPS:-10}" > "$log" 2>&1
      echo "== $recipe, TESSERA_LAYOUT_READS=$on, round $round: rc $?, $(( $(date +%s) - t0 )) s"
      sed -n '/^| suite/,$p' "$log"
      grep -E "Error" "$log" | head -5
    done
  done
done
