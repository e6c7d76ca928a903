#!/usr/bin/env bash
# Nsight Compute speed-of-light figures of grouped GEMM cases, ours next to PyTorch's kernel on the
# same operands (grouped_gemm_profile.py; PROFILE_CASES picks the cases). Not a benchmark: ncu
# serializes and replays kernels; what it gives is where each kernel sits against the SM, L2 and
# DRAM ceilings, its tensor-pipe activity and its launch shape (grid, cluster, shared memory).
# Needs BUILD_DIR with libtessera.a (grouped_gemm.sh builds the ctypes library) and ncu.
# Run by tests/gemm_cuda/gpu_round.sh with ROUND_PROFILE=1, or alone:
#   BUILD_DIR=build-gpu bash tools/gpu/gemm_profile.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="$(cd "${BUILD_DIR:-$ROOT/build-gpu}" && pwd)"  # absolute: the script changes directory
OUT="${OUT:-/tmp/tessera-out}"
LIB="$BUILD_DIR/libtessera_bench_gemm.so"
export PATH="/usr/local/cuda/bin:$PATH"
[ -f "$LIB" ] || BUILD_DIR="$BUILD_DIR" GEMM_BENCH_BUILD_ONLY=1 bash "$ROOT/bench/gpu/grouped_gemm.sh"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
REP="$OUT/grouped_gemm_profile"
cd "$ROOT/bench/gpu"
TESSERA_BENCH_LIB="$LIB" "$NCU" --profile-from-start off --clock-control none \
  --section SpeedOfLight --section LaunchStats --section WarpStateStats \
  --metrics sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg.per_second \
  -f -o "$REP" python3 grouped_gemm_profile.py
"$NCU" -i "$REP.ncu-rep" --csv --page details > "$REP.csv"
# PROFILE_SOURCE=1: also where the warps of our first kernel of the list stalled (warp-state
# sampling per SASS instruction, grouped_gemm_ncu_top.py), first case and config only.
if [ "${PROFILE_SOURCE:-0}" = 1 ]; then
  TESSERA_BENCH_LIB="$LIB" PROFILE_CASES="${PROFILE_CASES%%,*}" PROFILE_CONFIGS="${PROFILE_CONFIGS:-heuristic}" \
    "$NCU" --profile-from-start off --clock-control none -k regex:grouped_gemm_sm90 -c 1 \
    --section SourceCounters --section WarpStateStats --import-source no -f -o "$REP-src" \
    python3 grouped_gemm_profile.py > /dev/null
  "$NCU" -i "$REP-src.ncu-rep" --page source --csv --print-source sass \
    | python3 grouped_gemm_ncu_top.py 40 > "$REP-src.txt" || true
fi
python3 - "$REP.csv" <<'PY'
import csv, sys
from collections import OrderedDict
rows = list(csv.DictReader(open(sys.argv[1])))
want = OrderedDict([("Duration", "us"), ("Compute (SM) Throughput", "SM%"),
                    ("DRAM Throughput", "DRAM%"), ("L2 Cache Throughput", "L2%"),
                    ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", "TC%"),
                    ("dram__bytes_read.sum", "DRAM-rd"), ("dram__bytes_write.sum", "DRAM-wr"),
                    ("sm__cycles_elapsed.avg.per_second", "SM-MHz"),
                    ("Grid Size", "grid"), ("Cluster Size", "clus"),
                    ("Registers Per Thread", "regs"), ("Dynamic Shared Memory Per Block", "dsmem"),
                    ("Warp Cycles Per Issued Instruction", "cyc/ins")])
# The columns given in one unit: the factor from each ncu unit (lower case) to it.
BYTES_TO_MB = {"byte": 1e-6, "kbyte": 1e-3, "mbyte": 1.0, "gbyte": 1e3}
TO_UNIT = {"Duration": {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3,
                        "msecond": 1e3},
           "sm__cycles_elapsed.avg.per_second": {"hz": 1e-6, "khz": 1e-3, "mhz": 1.0, "ghz": 1e3,
                                                 "cycle/second": 1e-6, "cycle/usecond": 1.0,
                                                 "cycle/nsecond": 1e3},
           "dram__bytes_read.sum": BYTES_TO_MB, "dram__bytes_write.sum": BYTES_TO_MB}
kern = OrderedDict()
for r in rows:
    key = (r["ID"], r["Kernel Name"][:60])
    kern.setdefault(key, {})
    name = r["Metric Name"]
    if name in want:
        v = r["Metric Value"]
        unit = r.get("Metric Unit", "")
        if name in TO_UNIT:  # us, MHz, MB; an unknown unit is shown as given
            scale = TO_UNIT[name].get(unit.lower())
            v = f"{float(v.replace(',', '')) * scale:.1f}" if scale else v + unit
        kern[key][want[name]] = v
print("PROFILE (ncu, one launch each; order of grouped_gemm_profile.py: ours then torch per case)")
print(f"{'id':>3s} {'kernel':60s} " + " ".join(f"{h:>8s}" for h in want.values()))
for (i, n), m in kern.items():
    print(f"{i:>3s} {n:60s} " + " ".join(f"{m.get(h, '-'):>8s}" for h in want.values()))
PY
[ "${PROFILE_SOURCE:-0}" = 1 ] && { echo; echo "STALLS (first case, ours)"; cat "$REP-src.txt"; }
true
