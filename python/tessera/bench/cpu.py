"""BF16 grouped GEMM on the CPU: tessera.torch.grouped_mm next to torch._grouped_mm (on the CPU,
torch runs one oneDNN matmul per group) in the same run, on the same inputs:

    fwd    y  = grouped_mm(x, Wᵀ, offs)              x (T, K), W (G, N, K): M-grouped TN
    dgrad  dx = grouped_mm(dy, W, offs)              dy (T, N): M-grouped NN
    wgrad  dW = grouped_mm(dyᵀ, x, offs)             K-grouped -> (G, N, K)
    step   y = grouped_mm(x, Wᵀ, offs); y.backward(dy)   (autograd: the three above)

Validate, then time: the relative (Frobenius) error of each result against an FP32 reference of
the same inputs, then wall-clock times over interleaved rounds (every contender once per round,
the order rotated): median ms, and tessera's speed-up as the median over rounds of torch ms /
tessera ms of the same round, so load that other processes put on a shared machine, coming and
going, falls on both alike. torch is timed twice per round: the median of torch / torch again
is the run's own noise (1.00 on a quiet machine). Prints the CPU BF16 path in use
(tessera.cpu_bf16_gemm_path(); TESSERA_CPU_BF16_GEMM=fp32 times the FP32 path instead) and
torch's thread count, which tessera shares (both read OpenMP's setting of the calling thread).

    python -m tessera.bench cpu [--shapes 8x512x1024x1024,...] [--ops fwd,dgrad,wgrad,step]
                                [--reps 11] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from .shapes import CPU_SHAPES as SHAPES, group_sizes  # every shape balanced and imbalanced
OPS = ["fwd", "dgrad", "wgrad", "step"]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def rel_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item()


class Case:
    """x (T, K), W (G, N, K), dy (T, N) in BF16, offs (G) int32 end offsets, and the FP32
    reference y, dx, dW of the same values."""

    def __init__(self, experts, per_expert, k, n, imbalanced, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.sizes = group_sizes(experts, per_expert, imbalanced)
        t = sum(self.sizes)
        self.offs = torch.tensor(self.sizes).cumsum(0).to(torch.int32)
        self.x = torch.randn(t, k, generator=g).to(torch.bfloat16)
        self.w = (torch.randn(experts, n, k, generator=g) / k ** 0.5).to(torch.bfloat16)
        self.dy = torch.randn(t, n, generator=g).to(torch.bfloat16)
        self.gemm_flops = 2 * t * k * n

    def reference(self) -> dict:
        ys, dxs, dws, start = [], [], [], 0
        for gi, m in enumerate(self.sizes):
            x, dy = self.x[start:start + m].float(), self.dy[start:start + m].float()
            w = self.w[gi].float()
            ys.append(x @ w.t())
            dxs.append(dy @ w)
            dws.append(dy.t() @ x)
            start += m
        y, dx, dw = torch.cat(ys), torch.cat(dxs), torch.stack(dws)
        return {"fwd": y, "dgrad": dx, "wgrad": dw, "step": (y, dx, dw)}


def op_callable(op: str, mm, case: Case):
    """A no-argument callable running `op` with `mm` (torch._grouped_mm or tessera's), returning
    what is validated."""
    x, w, dy, offs = case.x, case.w, case.dy, case.offs
    if op == "fwd":
        return lambda: mm(x, w.transpose(-2, -1), offs=offs)
    if op == "dgrad":
        return lambda: mm(dy, w, offs=offs)
    if op == "wgrad":
        return lambda: mm(dy.t(), x, offs=offs)
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()

    def step():
        xg.grad = None
        wg.grad = None
        y = mm(xg, wg.transpose(-2, -1), offs=offs)
        y.backward(dy)
        return y, xg.grad, wg.grad
    return step


def timed_interleaved(fns: dict, reps: int, warmup: int = 2) -> dict:
    """Milliseconds of each callable in every round (name -> list, one entry per round). Every
    round runs each callable once, the order rotated from round to round, so that a contender's
    times sit next to the others' in time and none always runs first."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    names = list(fns)
    times: dict = {name: [] for name in names}
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return times


def median_ratio(num: list, den: list) -> float:
    """The median over rounds of num[i] / den[i]: each ratio compares two calls made moments
    apart, so load that comes and goes over the run (a shared machine) cancels."""
    return statistics.median(a / b for a, b in zip(num, den))


def bench(shapes, ops, reps, rows):
    import tessera.torch as tt
    contenders = {"torch": torch._grouped_mm, "tessera": tt.grouped_mm,
                  "torch again": torch._grouped_mm}
    for shape in shapes:
        e, per, k, n = (int(v) for v in shape.split("x"))
        for imb in (False, True):
            case = Case(e, per, k, n, imb)
            ref = case.reference()
            for op in ops:
                fns, errs = {}, {}
                for name, mm in contenders.items():  # validate first
                    fn = op_callable(op, mm, case)
                    got = fn()
                    if op == "step":
                        errs[name] = max(rel_error(a, b) for a, b in zip(got, ref[op]))
                    else:
                        errs[name] = rel_error(got, ref[op])
                    fns[name] = fn
                times = timed_interleaved(fns, reps)
                ms = {name: statistics.median(t) for name, t in times.items()}
                flops = case.gemm_flops * (3 if op == "step" else 1)
                row = {"shape": shape, "imbalanced": imb, "op": op,
                       "torch_ms": ms["torch"], "tessera_ms": ms["tessera"],
                       "torch_gflops": flops / ms["torch"] / 1e6,
                       "tessera_gflops": flops / ms["tessera"] / 1e6,
                       "x_torch": median_ratio(times["torch"], times["tessera"]),
                       "torch_again": median_ratio(times["torch"], times["torch again"]),
                       "torch_rel_err": errs["torch"], "tessera_rel_err": errs["tessera"]}
                rows.append(row)
                print(json.dumps(row), flush=True)


def format_table(rows) -> str:
    """The run's markdown table (printed, and written into the results page by
    `python -m tessera.bench results`)."""
    lines = ["| shape (G x rows x K x N) | balance | op | torch ms | tessera ms | torch GFLOP/s | "
             "tessera GFLOP/s | x torch | torch / torch again | rel. err torch / tessera |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {'imb' if r['imbalanced'] else 'bal'} | {r['op']} | "
                     f"{r['torch_ms']:.1f} | {r['tessera_ms']:.1f} | {r['torch_gflops']:.0f} | "
                     f"{r['tessera_gflops']:.0f} | {r['x_torch']:.2f} | {r['torch_again']:.2f} | "
                     f"{r['torch_rel_err']:.1e} / {r['tessera_rel_err']:.1e} |")
    return "\n".join(lines)


def print_table(rows):
    print("\n" + format_table(rows))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tessera.bench cpu")
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help="comma-separated GxROWSxKxN (experts x tokens per expert x K x N)")
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {OPS}")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--json", default=None, help="write the rows as JSON to this file")
    a = ap.parse_args(argv)
    import tessera
    ops = [o for o in a.ops.split(",") if o]
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        ap.error(f"--ops: {unknown} not in {OPS}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {cpu_model()}")
    print(f"tessera CPU BF16 GEMM: {tessera.cpu_bf16_gemm_path()}", flush=True)
    rows: list = []
    bench([s for s in a.shapes.split(",") if s], ops, a.reps, rows)
    print_table(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0
