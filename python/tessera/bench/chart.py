"""A bar chart of a benchmark run's speed-ups over its peer, drawn from the JSON rows that
`python -m tessera.bench cpu --json` or `python -m tessera.bench train --json` wrote:

    python -m tessera.bench chart ROWS.json OUT.svg [--title TEXT]

cpu rows: tessera's × torch._grouped_mm (the median over rounds) per shape, op and balance.
train rows: each tessera contender's × torch BF16 autograd per shape and balance (torch's own
rows and rows without a time are left out). A dashed line marks 1.0 (as fast as the peer).
Needs matplotlib (scripts/requirements-test.txt installs it); imports it only when drawing.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import List, Tuple


def speedups(rows: List[dict]) -> Tuple[str, List[Tuple[str, float]]]:
    """(the peer's name, [(bar label, tessera's × peer)]) of a cpu or train run's rows."""
    bars: List[Tuple[str, float]] = []
    if rows and "op" in rows[0]:  # python -m tessera.bench cpu
        for r in rows:
            bal = "imb" if r["imbalanced"] else "bal"
            bars.append((f"{r['shape']} {r['op']} {bal}", float(r["x_torch"])))
        return "torch._grouped_mm (CPU)", bars
    for r in rows:  # python -m tessera.bench train
        ratio = r.get("x_torch_bf16")
        if ratio is None or not r["impl"].startswith("tessera"):
            continue
        bal = "imb" if r["imbalanced"] else "bal"
        bars.append((f"{r['shape']} {bal} {r['impl'][len('tessera '):]}", float(ratio)))
    return "torch BF16 autograd", bars


def draw(rows: List[dict], out: str, title: str = "") -> int:
    """Writes the chart to `out` (format from its suffix: .svg, .png); returns the bar count."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"      # labels stay text in the SVG
    matplotlib.rcParams["svg.hashsalt"] = "tessera"   # the same rows give the same file
    import matplotlib.pyplot as plt
    peer, bars = speedups(rows)
    if not bars:
        raise ValueError("chart: the rows hold no speed-up to draw (a cpu or train --json run?)")
    labels, values = zip(*bars)
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(bars) + 1.2))
    ax.barh(range(len(bars)), values, color=["#3a7d44" if v >= 1 else "#b5523b" for v in values])
    ax.set_yticks(range(len(bars)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlabel(f"× {peer} (higher is faster)")
    ax.set_title(title or f"tessera × {peer}", fontsize=10)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.2f}", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(out, metadata={"Date": None} if out.endswith(".svg") else None)
    plt.close(fig)
    return len(bars)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tessera.bench chart")
    ap.add_argument("rows", help="the JSON a cpu or train run wrote (--json)")
    ap.add_argument("out", help="the chart file (.svg or .png)")
    ap.add_argument("--title", default="")
    a = ap.parse_args(argv)
    with open(a.rows) as f:
        rows = json.load(f)
    n = draw(rows, a.out, a.title)
    print(f"{a.out}: {n} bars")
    return 0


if __name__ == "__main__":
    sys.exit(main())
