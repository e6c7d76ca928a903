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
# One allowance: the MXFP8 kinds' kernels (ElemMxScaled) may spill up to 16 bytes. Their two
# register regions are both at the edge of the launch's pool (producer warpgroup: TMA thread and
# scale loaders; consumers: accumulators and two partial-sum halves), and ptxas spills one or two
# words of the producer's per-tile walk at any split of the pool; the main loops stay spill-free.
bad="$(awk '/Function properties for/ { fn = $NF }
            /Potential Performance Loss/ { print; next }
            match($0, /[0-9]+ bytes spill (stores|loads)/) {
              n = substr($0, RSTART, RLENGTH) + 0
              if (n > 0 && !(fn ~ /ElemMxScaled/ && n <= 16)) print fn ": " $0
            }' "$log")"
if [[ $rc == 0 && -n "$bad" ]]; then
  echo "ptxas_guard: ptxas reports serialized wgmma or spills in ${out:-the object}:" >&2
  echo "$bad" >&2
  [[ -n "$out" ]] && rm -f "$out"
  exit 1
fi
exit $rc
