#!/usr/bin/env bash
# Where the warps of one training-step GEMM wait: Nsight Compute warp-state sampling per SASS
# instruction (SourceCounters + WarpStateStats) of ONE grouped GEMM launch of
# tools/gpu/ncu_step.py's second step (weights cached). Not a benchmark (ncu replays the launch).
#   bash tools/gpu/ncu_stalls.sh RECIPE G T K N [WHICH]
# WHICH: fwd, dgrad or wgrad (default wgrad): the step's 1st, 2nd or 3rd grouped GEMM launch.
# Needs build-gpu with the Python extension (tools/gpu/check.sh builds it). Writes to $OUT:
#   stalls_<recipe>_<which>.csv      the source page (one row per SASS instruction)
#   stalls_<recipe>_<which>_sol.csv  the details page (speed of light, warp-state totals)
#   stalls_<recipe>_<which>_raw.csv  every collected metric (the per-reason sample counts)
# and prints the top instructions, the samples per opcode and the kernel's stall reasons.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-/tmp/tessera-out}"
mkdir -p "$OUT"
recipe=${1:?RECIPE}; g=${2:?G}; t=${3:?T}; k=${4:?K}; n=${5:?N}; which=${6:-wgrad}
case "$which" in fwd) idx=0;; dgrad) idx=1;; wgrad) idx=2;; *) echo "WHICH: fwd, dgrad or wgrad"; exit 2;; esac
export PATH="/usr/local/cuda/bin:$PATH"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
export PYTHONPATH="$ROOT/build-gpu/python${PYTHONPATH:+:$PYTHONPATH}"
rep="$OUT/stalls_${recipe}_${which}"
# Step 0 launches three grouped GEMMs (fwd, dgrad, wgrad); the second step's are launches 3-5.
"$NCU" --clock-control none -k regex:grouped_gemm_sm90 --launch-skip $((3 + idx)) --launch-count 1 \
  --section SpeedOfLight --section SourceCounters --section WarpStateStats --section LaunchStats \
  --import-source no -f -o "$rep" python3 "$ROOT/tools/gpu/ncu_step.py" "$recipe" "$g" "$t" "$k" "$n" \
  > "$rep.log" 2>&1 || { tail -20 "$rep.log"; exit 1; }
"$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv"
"$NCU" -i "$rep.ncu-rep" --page details --csv > "${rep}_sol.csv"
"$NCU" -i "$rep.ncu-rep" --page raw --csv > "${rep}_raw.csv"
rm -f "$rep.ncu-rep"
echo "== $recipe $which (G $g, T $t, K $k, N $n)"
python3 "$ROOT/bench/gpu/grouped_gemm_ncu_top.py" 40 < "$rep.csv"
python3 - "${rep}_sol.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows:
    name = r["Metric Name"]
    if r["Section Name"] in ("GPU Speed Of Light Throughput", "Warp State Statistics") or \
            name in ("Duration", "Registers Per Thread", "Grid Size", "Cluster Size"):
        print(f'{r["Section Name"][:28]:28s} {name[:60]:60s} {r["Metric Value"]:>14s} {r.get("Metric Unit", "")}')
PY
python3 - "${rep}_raw.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, vals = rows[0], rows[-1]  # one launch: the header, the units, one row of values
reasons = []
for h, v in zip(head, vals):
    if "pcsamp_warps_issue_stalled_" in h and not h.endswith("not_issued"):
        try:
            reasons.append((float(v.replace(",", "")), h.split("stalled_")[-1]))
        except ValueError:
            pass
total = sum(r[0] for r in reasons) or 1.0
print("stall reasons (warp samples):", ", ".join(f"{n} {100 * c / total:.1f}%" for c, n in
                                                 sorted(reasons, reverse=True)[:12]))
PY
