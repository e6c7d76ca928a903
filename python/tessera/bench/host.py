"""Host cost of one eager training step: shapes so small that the GPU work is a few
microseconds, so the wall time of a step is what the host spends issuing it. torch's BF16
autograd step (torch._grouped_mm) next to tessera.torch.GroupedLinear's steps, same run:

    python -m tessera.bench host [--steps 200] [--rounds 5] [--device cuda|cpu]
                                 [--shape G,rows,K,N] [--loop SECONDS --only LABEL] [--moe]

--moe adds a second table: the MoE layer's row path on one device (dispatch -> combine, forward
and backward, the experts left out) at MOE_HOST_SIZE, tessera.torch.moe dropless and capacity
against the torch code a user would write (stable argsort, index_select, a weighted sum; no
host sync in it either).

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


MOE_HOST_SIZE = (64, 64, 8, 2)  # tokens, hidden, experts, top-k


def moe_contenders(device="cuda"):
    """The MoE row path fwd+bwd on one device: label -> step."""
    from tessera.torch import moe
    t, h, e, k = MOE_HOST_SIZE
    g = torch.Generator().manual_seed(0)
    idx = torch.rand(t, e, generator=g).argsort(dim=1)[:, :k].to(device)
    x = torch.randn(t, h, generator=g).to(torch.bfloat16).to(device).requires_grad_()
    probs = torch.rand(t, k, generator=g).to(device).requires_grad_()
    dout = torch.randn(t, h, generator=g).to(torch.bfloat16).to(device)
    align = moe.recipe_dispatch_mode("bf16")[1]

    def tessera(capacity):
        def run():
            x.grad = probs.grad = None
            recv, state = moe.dispatch(x, idx, e, recipe="bf16", capacity=capacity,
                                       sync_checks=False)
            moe.combine(recv, probs, state).backward(dout)
        return run

    def torch_step():
        x.grad = probs.grad = None
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)  # pairs in expert order
        counts = torch.zeros(e, dtype=torch.int64, device=device).scatter_add_(
            0, flat, torch.ones_like(flat))
        offs = counts.cumsum(0).to(torch.int32)  # what the experts' grouped GEMM would take
        rows = x.index_select(0, order // k)     # the experts' input (the experts left out)
        inv = torch.empty_like(order).scatter_(0, order, torch.arange(t * k, device=device))
        back = rows.index_select(0, inv).float().reshape(t, k, h)
        out = (back * probs.unsqueeze(-1)).sum(1).to(x.dtype)
        out.backward(dout)
        return offs

    return {"torch permute + weighted sum": torch_step,
            "tessera dispatch + combine, dropless": tessera(None),
            "tessera dispatch + combine, capacity": tessera(
                moe.capacity_for(t, k, e, 1.0, align))}


def timed_table(rows, steps, rounds, device) -> dict:
    """Median wall time per step of each contender over interleaved rounds, after warm-up."""
    for fn in rows.values():  # warm-up: caches filled, kernels loaded
        for _ in range(20):
            fn()
    times = {label: [] for label in rows}
    for _ in range(rounds):  # interleaved rounds: drift falls on every contender alike
        for label, fn in rows.items():
            times[label].append(per_step_us(fn, steps, device))
    return {label: statistics.median(t) for label, t in times.items()}


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
    ap.add_argument("--moe", action="store_true",
                    help="also the MoE row path's table (dispatch -> combine on one device)")
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
        med = timed_table(contenders(tt, g, per, k, n, a.device), a.steps, a.rounds, a.device)
        for label, us in med.items():
            print(f"| {name} | {label} | {us:.1f} | {us / med['torch bf16']:.2f} |", flush=True)
    if a.moe:
        size = "x".join(str(v) for v in MOE_HOST_SIZE)
        print("\n| MoE row path (T x H x E x k) | contender | us / step (median) | x torch |")
        print("|---|---|---:|---:|")
        med = timed_table(moe_contenders(a.device), a.steps, a.rounds, a.device)
        base = med["torch permute + weighted sum"]
        for label, us in med.items():
            print(f"| {size} | {label} | {us:.1f} | {us / base:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
