"""Reads `ncu -i REPORT --page source --csv --print-source sass` output (stdin) and prints where
the kernel's warps were sampled: the top SASS instructions by warp-stall samples, and the samples
summed per opcode. A profiling aid for the grouped GEMM kernel (see grouped_gemm_one.py)."""
import csv
import sys
from collections import Counter


def main():
    rows = list(csv.reader(sys.stdin))
    head = next((i for i, r in enumerate(rows) if any("Warp Stall Sampling" in c for c in r)), None)
    if head is None:
        print("no sampling columns; first lines:")
        for r in rows[:10]:
            print(",".join(r)[:200])
        return
    cols = rows[head]
    src = next(i for i, c in enumerate(cols) if c.strip() == "Source")
    addr = next((i for i, c in enumerate(cols) if c.strip() == "Address"), None)
    allc = next(i for i, c in enumerate(cols) if "Warp Stall Sampling (All" in c)
    data = []
    for r in rows[head + 1:]:
        if len(r) <= max(src, allc):
            continue
        try:
            n = float(r[allc].replace(",", "") or 0)
        except ValueError:
            continue
        data.append((n, r[addr] if addr is not None else "", r[src].strip()))
    total = sum(d[0] for d in data) or 1.0
    print(f"samples {total:.0f}; top instructions:")
    for n, a, s in sorted(data, reverse=True)[:int(sys.argv[1]) if len(sys.argv) > 1 else 30]:
        print(f"{100 * n / total:5.1f}% {a:>8s} {s[:90]}")
    ops = Counter()
    for n, _, s in data:
        op = s.split()
        op = op[1] if op and op[0].startswith("@") and len(op) > 1 else (op[0] if op else "?")
        ops[op.split(".")[0]] += n
    print("by opcode:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in ops.most_common(14)))


if __name__ == "__main__":
    main()
