#!/usr/bin/env bash
# CUDA compiler launcher of the tessera target (set in src/gemm/CMakeLists.txt). Sources compiled
# with -Xptxas=-v (the sm90 grouped GEMM kernels) run through a check: the build FAILS when ptxas
# reports serialized wgmma ("Potential Performance Loss: wgmma.mma_async instructions are
# serialized", an info line that -Werror does not catch and that once made every GEMM kernel
# 30-50 % slower) or a spill; ptxas's per-kernel info lines are kept out of the build log.
# Other sources are compiled unchanged. Usage: ptxas_guard.sh <compiler command...>
set -uo pipefail
verbose=0
out=""
prev=""
for arg in "$@"; do
  [[ "$arg" == "-Xptxas=-v" ]] && verbose=1
  [[ "$prev" == "-o" ]] && out="$arg"
  prev="$arg"
done
if [[ $verbose == 0 ]]; then exec "$@"; fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
"$@" 2>"$log"
rc=$?
grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' "$log" >&2
# Two allowances, up to 16 bytes each: the MXFP8 kinds' kernels (ElemMxScaled) and the NVFP4
# in-kernel kind (ElemNvfp4). Their two register regions are both at the edge of the launch's
# pool (producer warpgroup: TMA thread and scale loaders, or the converters with a stage's
# scales in flight; consumers: accumulators, and MXFP8's two partial-sum halves), and ptxas
# spills a word or two of the producer warpgroup at any split of the pool; the consumers' main
# loops stay spill-free.
bad="$(awk '/Function properties for/ { fn = $NF }
            /Potential Performance Loss/ { print; next }
            match($0, /[0-9]+ bytes spill (stores|loads)/) {
              n = substr($0, RSTART, RLENGTH) + 0
              if (n > 0 && !(fn ~ /ElemMxScaled|ElemNvfp4/ && n <= 16)) print fn ": " $0
            }' "$log")"
if [[ $rc == 0 && -n "$bad" ]]; then
  echo "ptxas_guard: ptxas reports serialized wgmma or spills in ${out:-the object}:" >&2
  echo "$bad" >&2
  [[ -n "$out" ]] && rm -f "$out"
  exit 1
fi
exit $rc
