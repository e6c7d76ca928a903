"""The MoE dispatch's permute (+ quantize) at DeepSeek-V3-like sizes, a few calls per payload, for
Nsight Compute (per-kernel counters; not a benchmark: ncu serializes and replays every launch).
The same problem as `python -m tessera.bench moe` (its Problem class), each mode called with the
routing's slot map as the dispatch calls it, in the order none, rowwise, block1x128, mxfp8:

    ncu --clock-control none --kernel-name-base demangled -k regex:permute_tokens \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \\
        python3 tools/gpu/ncu_moe_permute.py [--calls 2] [--experts 256] [--modes rowwise,...]
"""
import argparse

import torch

from tessera.bench.moe import Problem


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--modes", default="none,rowwise,block1x128,mxfp8")
    a = ap.parse_args()
    from tessera.torch import moe
    p = Problem(moe, a.tokens, a.hidden, a.experts, a.top_k, torch.bfloat16, "cuda")
    for mode in a.modes.split(","):
        _, r = p.routing[mode]
        for _ in range(a.calls):
            moe.moe_permute(p.x, r[3], a.top_k, mode, slot_map=r[2])
        torch.cuda.synchronize()
        print(f"{mode}: {a.calls} calls", flush=True)


if __name__ == "__main__":
    main()
