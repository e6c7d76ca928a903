"""Summarizes py-spy raw stacks (`py-spy record --native -f raw`) of an eager step loop: keeps
the samples taken inside a step (stacks through the frame that matches --frame, or an autograd
engine thread running a node; the main thread's wait for the engine and the engine's idle
wait dropped) and prints the leaf functions (self) and every function on those stacks
(inclusive) by share of the kept samples.

    python3 tools/gpu/spy_summary.py RAW [--frame REGEX] [--top N]
"""
from __future__ import annotations

import argparse
import collections
import re
import sys


def summarize(lines, frame: str, top: int) -> str:
    want = re.compile(frame)
    self_c, incl = collections.Counter(), collections.Counter()
    total = kept = 0
    for line in lines:
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        total += int(n)
        in_node = "CppNode" in stack or "AccumulateGrad" in stack
        if not (want.search(stack) or in_node) or "ReadyQueue::pop" in stack:
            continue
        if "Engine::execute" in stack and not in_node:  # the main thread waiting in backward()
            continue
        kept += int(n)
        frames = [re.sub(r"\s*\([^()]*\)$", "", f)[:120] for f in stack.split(";")]
        self_c[frames[-1]] += int(n)
        for f in set(frames):
            incl[f] += int(n)
    out = [f"samples: {total}, inside a step: {kept}"]
    if kept == 0:
        return "\n".join(out + ["(no sample matched: check --frame against the raw stacks)"])
    out.append(f"== self, top {top}")
    out += [f"{100 * k / kept:6.2f}% {f}" for f, k in self_c.most_common(top)]
    out.append(f"== inclusive, top {2 * top}")
    out += [f"{100 * k / kept:6.2f}% {f}" for f, k in incl.most_common(2 * top)]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="spy_summary.py")
    ap.add_argument("raw")
    ap.add_argument("--frame", default=r"\.run \([^;]*host\.py:",
                    help="regex of the step loop's frame (default: tessera.bench host --loop)")
    ap.add_argument("--top", type=int, default=50)
    a = ap.parse_args(argv)
    with open(a.raw) as f:
        print(summarize(f, a.frame, a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
