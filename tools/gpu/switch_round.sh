#!/usr/bin/env bash
# One device round for a switch read from the environment (a path kept beside another for A/B):
# build for sm_90a, run the CUDA tests that cover both of its states, then time the training
# step of the recipes it changes with the switch at 0 and at 1 alternating (off, on, off, on),
# on the same machine, nothing else running. Logs in $OUT.
#   run(command="bash tools/gpu/switch_round.sh", carry=[".gpu-deps"])
#   run(command="SR_PRESET=mxfp8_expanded bash tools/gpu/switch_round.sh", carry=[".gpu-deps"])
# Presets (SR_PRESET): layout_reads (default; TESSERA_LAYOUT_READS: the block, MXFP8 and NVFP4
# quantizers reading x through the step's layout, docs/quantize_cuda.md) and mxfp8_expanded
# (TESSERA_MXFP8_EXPANDED: MXFP8 GEMMs through BF16 with the weights' images,
# docs/gemm_cuda.md; also one test binary run with the switch on from its start). Environment
# overrides: SR_VAR (the variable), SR_TESTS (ctest names; "" skips the tests), SR_RECIPES (one `python -m tessera.bench train` per recipe, state and
# round), SR_SHAPES (default dsv3-fc1,dsv3-fc2,qwen3-fc1,qwen3-fc2), SR_REPS (10), SR_ROUNDS (2),
# SR_RUN_LIMIT (seconds per bench run, 240), SR_STATES (the switch's values in each round,
# default "0 1"; "default" runs with the variable unset).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
export OUT="${OUT:-/tmp/tessera-out}"
mkdir -p "$OUT"
case "${SR_PRESET:-layout_reads}" in
  layout_reads)
    var=TESSERA_LAYOUT_READS recipes="fp8_block" on_tests=""
    tests="test_layout_reads_cuda test_grouped_nn_cuda test_grouped_quantize_cuda \
test_nvfp4_members_cuda test_weight_image test_quantize_cuda test_grouped_recipes_cuda" ;;
  mxfp8_expanded)
    var=TESSERA_MXFP8_EXPANDED recipes="mxfp8"
    tests="test_weight_image test_grouped_gemm_cuda_fp8 test_grouped_nn_cuda test_grouped_gemm"
    # the step against the CPU with the switch on from the start (layers keep weight images)
    on_tests="tests/nn/test_grouped_nn_cuda --gtest_filter=*MatchesCpuWith*" ;;
  *) echo "switch_round: unknown SR_PRESET ${SR_PRESET}" >&2; exit 2 ;;
esac
var="${SR_VAR:-$var}" tests="${SR_TESTS-$tests}" recipes="${SR_RECIPES:-$recipes}"
python_targets="tessera _tessera _torch_ops _torch_autograd tessera_python_files"
if [ -n "$tests" ]; then
  # End-anchored: the ctest names and the binaries' paths (check.sh's per-binary counts). The
  # tests run with the switch as the environment leaves it; each suite sets both states itself.
  CHECK_TARGETS="$python_targets $tests" CHECK_FILTER="($(echo $tests | tr ' ' '|'))\$" \
    CHECK_BENCH=0 CHECK_TRAIN=0 CHECK_PYTEST=0 bash tools/gpu/check.sh || exit 1
else
  CHECK_TARGETS="$python_targets" CHECK_TESTS=0 CHECK_BENCH=0 CHECK_TRAIN=0 CHECK_PYTEST=0 \
    bash tools/gpu/check.sh || exit 1
fi
export PYTHONPATH="$ROOT/build-gpu/python${PYTHONPATH:+:$PYTHONPATH}"
export TESSERA_BUILD_DIR="$ROOT/build-gpu"
for recipe in $recipes; do
  for round in $(seq 1 "${SR_ROUNDS:-2}"); do
    for on in ${SR_STATES:-0 1}; do
      log="$OUT/train-$recipe-$var$on-round$round.log"
      t0=$(date +%s)
      if [ "$on" = default ]; then setting=(-u "$var"); else setting=("$var=$on"); fi
      env "${setting[@]}" timeout "${SR_RUN_LIMIT:-240}" python3 -m tessera.bench train \
        --shapes "${SR_SHAPES:-dsv3-fc1,dsv3-fc2,qwen3-fc1,qwen3-fc2}" --recipes "$recipe" \
        --no-mlp --reps "${SR_REPS:-10}" > "$log" 2>&1
      echo "== $recipe, $var=$on, round $round: rc $?, $(( $(date +%s) - t0 )) s"
      sed -n '/^| suite/,$p' "$log"
      grep -E "Error" "$log" | head -5
    done
  done
done
