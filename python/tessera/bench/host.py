"""Host cost of one eager training step: shapes so small that the GPU work is a few
microseconds, so the wall time of a step is what the host spends issuing it. torch's BF16
autograd step (torch._grouped_mm) next to tessera.torch.GroupedLinear's steps, same run:

    python -m tessera.bench host [--steps 200] [--rounds 5] [--device cuda|cpu]
                                 [--shape G,rows,K,N] [--loop SECONDS --only LABEL]

--device cpu times the same steps on CPU tensors (no GPU needed): there the GEMMs are computed
on the host, so pick a --shape small enough that they cost little (e.g. 8,2,16,16) to see the
issuing cost; torch's CPU _grouped_mm is a plain loop, a reference rather than a peer.

--loop runs the contenders whose label contains --only (e.g. "fp8_rowwise") back to back for
SECONDS each and prints the step rate, for a sampling profiler attached from outside
(tools/gpu/host_spy.sh): the steps run inside `run` (this file), which is how a profile keeps
the step's samples apart from the import's.

Each contender runs `steps` fwd+bwd steps between two synchronizations (after warm-up); the
table gives the median over `rounds` of the per-step wall time and its ratio to torch's. The
FP8 rows reuse their weight copies (weights_unchanged: a later micro-batch), as the goal they
measure asks.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from .shapes import HOST_SHAPES as SHAPES


def synchronize(device: str) -> None:
    """Waits for the device's queued work (nothing to wait for on the CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def per_step_us(step, steps: int, device: str = "cuda") -> float:
    """Wall time per call of step() over `steps` calls between two synchronizations."""
    synchronize(device)
    t = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - t) / steps * 1e6


def contenders(tt, g, per, k, n, device="cuda"):
    offs = torch.full((g,), per, device=device).cumsum(0).to(torch.int32)
    x = torch.randn(g * per, k, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(g, n, k, device=device, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(g * per, n, device=device, dtype=torch.bfloat16)
    layers = {r: tt.GroupedLinear(g, k, n, recipe=r, device=device)
              for r in ("bf16", "fp8_rowwise", "fp8_current")}

    def step(fn, params):
        def run():
            x.grad = None
            for p in params:
                p.grad = None
            fn().backward(dy)
        return run

    rows = {"torch bf16": step(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs), [w])}
    rows["tessera bf16"] = step(lambda: layers["bf16"](x, offs), [layers["bf16"].weight])
    for r in ("fp8_rowwise", "fp8_current"):
        m = layers[r]
        rows[f"tessera {r} cached-W"] = step(
            lambda m=m: m(x, offs, is_first_microbatch=False), [m.weight])
    return rows


def loop(tt, shapes, a) -> int:
    """--loop: each selected contender's steps for a.loop seconds (100 steps between
    synchronizations), its rate printed; nothing else runs meanwhile."""
    ran = 0
    for name, (g, per, k, n) in shapes.items():
        for label, run in contenders(tt, g, per, k, n, a.device).items():
            if a.only not in label:
                continue
            per_step_us(run, 20, a.device)  # warm-up
            times = []
            while sum(times) * 100 < a.loop * 1e6:
                times.append(per_step_us(run, 100, a.device))
            print(f"{name} {label}: {100 * len(times)} steps, {statistics.mean(times):.1f} us / "
                  "step (under the profiler)", flush=True)
            ran += 1
    if ran == 0:
        print(f"tessera.bench host: --only {a.only!r} matches no contender", file=sys.stderr)
        return 2
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tessera.bench host")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--shape", help="G,rows,K,N instead of the HOST_SHAPES table")
    ap.add_argument("--loop", type=float, default=0.0,
                    help="seconds of steps per selected contender, no table (for a profiler)")
    ap.add_argument("--only", default="", help="with --loop: contenders whose label contains this")
    a = ap.parse_args(argv)
    if a.loop < 0:
        ap.error(f"--loop: expected seconds >= 0, got {a.loop}")
    if a.device == "cuda" and not torch.cuda.is_available():
        print("tessera.bench host: needs a CUDA device (or --device cpu)", file=sys.stderr)
        return 2
    import tessera.torch as tt
    shapes = SHAPES
    if a.shape:
        g, per, k, n = (int(v) for v in a.shape.split(","))
        shapes = {f"{g}x{per}x{k}x{n}": (g, per, k, n)}
    where = torch.cuda.get_device_name() if a.device == "cuda" else "CPU tensors"
    print(torch.__version__, where, flush=True)
    if a.loop > 0:
        return loop(tt, shapes, a)
    print("\n| shape (G x rows x K x N) | contender | us / step (median) | x torch BF16 |")
    print("|---|---|---:|---:|")
    for name, (g, per, k, n) in shapes.items():
        rows = contenders(tt, g, per, k, n, a.device)
        for fn in rows.values():  # warm-up: caches filled, kernels loaded
            for _ in range(20):
                fn()
        times = {label: [] for label in rows}
        for _ in range(a.rounds):  # interleaved rounds: drift falls on every contender alike
            for label, fn in rows.items():
                times[label].append(per_step_us(fn, a.steps, a.device))
        med = {label: statistics.median(t) for label, t in times.items()}
        for label, us in med.items():
            print(f"| {name} | {label} | {us:.1f} | {us / med['torch bf16']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
