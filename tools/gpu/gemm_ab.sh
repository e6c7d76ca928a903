#!/usr/bin/env bash
# Same-run A/B of the sm90 grouped GEMM kernels: a reference tree (AB_REF, e.g. main unpacked
# beside the checkout: `git archive main | tar -x -C ab-ref`; an untracked directory travels
# with the device tool's working-tree copy) against the checkout, both built for sm_90a, then
# bench/gpu/grouped_gemm.sh on each shape (AB_SHAPES) for each tree, in AB_ROUNDS interleaved
# rounds (the reference first, so drift shows as a change between its rounds), and optionally
# the ncu speed-of-light figures of AB_CASES (AB_NCU=1). Prints the FP8 rowwise rows; full
# tables in $OUT/ab_<tree>_<shape>_<round>.log.
#   AB_REF=ab-ref bash tools/gpu/gemm_ab.sh        (on the device, carry .gpu-deps)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/tessera-out}"
REF="${AB_REF:?AB_REF: the reference source tree (a directory inside the checkout)}"
source "$ROOT/tools/gpu/device_env.sh"
t0=$(date +%s)
build() {  # build <source> <dir>: libtessera.a (a directory configured before is only rebuilt)
  [ -f "$2/CMakeCache.txt" ] ||
    cmake -S "$1" -B "$2" "${GPU_CMAKE_FLAGS[@]}" -DTESSERA_BUILD_TESTS=OFF \
      -DTESSERA_BUILD_BENCH=OFF -DTESSERA_BUILD_TOOLS=OFF > "$OUT/configure_$2.log" 2>&1 &&
    cmake --build "$2" -j 8 --target tessera > "$OUT/build_$2.log" 2>&1
}
# The checkout's build is check.sh's build-gpu when that ran first in the call.
build "$REF" build-ref & ref_pid=$!
build . build-gpu || { echo "gemm_ab: the checkout did not build ($OUT/build_build-gpu.log)"; exit 1; }
wait $ref_pid || { echo "gemm_ab: $REF did not build ($OUT/build_build-ref.log)"; exit 1; }
echo "builds: $(( $(date +%s) - t0 )) s"
for d in build-ref build-gpu; do
  BUILD_DIR=$d GEMM_BENCH_BUILD_ONLY=1 bash bench/gpu/grouped_gemm.sh > /dev/null 2>&1 ||
    { echo "gemm_ab: bench library of $d did not link"; exit 1; }
done
for round in $(seq "${AB_ROUNDS:-2}"); do
  for d in build-ref build-gpu; do
    for s in ${AB_SHAPES:-qwen3-fc2 dsv3-fc1}; do
      log="$OUT/ab_${d}_${s}_$round.log"
      GEMM_BENCH_ONLY=$s GEMM_BENCH_DECODE= BUILD_DIR=$d bash bench/gpu/grouped_gemm.sh > "$log" 2>&1
      echo "== $d $s round $round"
      grep -A40 SUMMARY "$log" | grep -E "^fp8 rowwise (wgrad|fwd) "
    done
  done
done
if [ "${AB_NCU:-0}" = 1 ]; then
  for d in build-ref build-gpu; do
    mkdir -p "$OUT/ncu_$d"
    OUT="$OUT/ncu_$d" PROFILE_CONFIGS=heuristic BUILD_DIR=$d \
      PROFILE_CASES="${AB_CASES:-qwen3-fc2:fp8-wgrad,dsv3-fc1:fp8-wgrad,qwen3-fc2:fp8-fwd}" \
      bash tools/gpu/gemm_profile.sh 2>&1 | tail -8
    rm -f "$OUT/ncu_$d"/*.ncu-rep
  done
fi
