"""Reads `ncu -i REPORT --page source --csv --print-source sass` output (stdin) and prints where
the kernel's warps were sampled: the top SASS instructions by warp-stall samples (addresses as
offsets from the kernel's first instruction), the samples summed per opcode, and the barrier
waits: each mbarrier try-wait (SYNCS.PHASECHK) or named-barrier sync with the samples of the
branch that retries it (a warp parked on a wait is sampled on that branch) and how often it ran.
A profiling aid for the grouped GEMM kernel (see grouped_gemm_one.py, tools/gpu/ncu_stalls.sh)."""
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
    execd = next((i for i, c in enumerate(cols) if c.strip() == "Instructions Executed"), None)
    data = []
    for r in rows[head + 1:]:
        if len(r) <= max(src, allc):
            continue
        try:
            n = float(r[allc].replace(",", "") or 0)
        except ValueError:
            continue
        a = r[addr] if addr is not None else ""
        runs = r[execd].replace(",", "") if execd is not None and len(r) > execd else ""
        data.append((n, a, r[src].strip(), runs))
    total = sum(d[0] for d in data) or 1.0
    try:
        base = int(data[0][1], 16)
        data = [(n, f"{int(a, 16) - base:05x}", s, e) for n, a, s, e in data]
    except (IndexError, ValueError):
        pass
    print(f"samples {total:.0f}; top instructions:")
    for n, a, s, _ in sorted(data, reverse=True)[:int(sys.argv[1]) if len(sys.argv) > 1 else 30]:
        print(f"{100 * n / total:5.1f}% {a:>8s} {s[:90]}")
    ops = Counter()
    for n, _, s, _ in data:
        op = s.split()
        op = op[1] if op and op[0].startswith("@") and len(op) > 1 else (op[0] if op else "?")
        ops[op.split(".")[0]] += n
    print("by opcode:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in ops.most_common(14)))
    print("barrier waits (the wait and its retry branch, >= 0.3 % of samples):")
    for i, (n, a, s, e) in enumerate(data):
        if "PHASECHK" in s or "BAR.SYNC" in s:
            parked = n + sum(d[0] for d in data[i + 1:i + 6] if "BRA" in d[2])
            if parked / total >= 0.003:
                print(f"{100 * parked / total:5.1f}% {a:>8s} executed {e:>9s}  {s[:70]}")


if __name__ == "__main__":
    main()
