"""Where the host time of one eager tessera.torch step goes (tiny shapes, GPU work negligible):
the same fwd+bwd timed through each layer of the path, and torch.profiler's CPU table of the
module step.

    python tools/gpu/profile_host.py [--shape 8,16,256,256] [--recipes bf16,fp8_rowwise]
                                     [--device cuda|cpu] [--steps 300]

Rows per recipe: the module (GroupedLinear, cached copies), linear_step (no module code), the
C++ autograd node and the Python autograd function (no checks; the eager path is the node where
it was built for this torch), the two compiled ops without autograd, the forward op alone;
torch's BF16 autograd step and bare torch ops (empty, _grouped_mm) for scale.
"""
from __future__ import annotations

import argparse
import statistics

import torch

from tessera.bench.host import per_step_us


def per_call_us(fn, device, steps=300, rounds=5) -> float:
    for _ in range(20):
        fn()
    return statistics.median(per_step_us(fn, steps, device) for _ in range(rounds))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8,16,256,256")
    ap.add_argument("--recipes", default="bf16,fp8_rowwise")
    ap.add_argument("--profile", action="store_true", help="print torch.profiler CPU tables")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--steps", type=int, default=300)
    a = ap.parse_args()
    import tessera.torch as tt
    from tessera.torch import _ext
    from tessera.torch.linear import _LinearFn, linear_step
    g, per, k, n = (int(v) for v in a.shape.split(","))
    dev = a.device
    time_us = lambda fn: per_call_us(fn, dev, a.steps)  # noqa: E731
    offs = torch.full((g,), per, device=dev).cumsum(0).to(torch.int32)
    x = torch.randn(g * per, k, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(g, n, k, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(g * per, n, device=dev, dtype=torch.bfloat16)
    rows = {}

    def torch_step():
        x.grad = w.grad = None
        torch._grouped_mm(x, w.transpose(-2, -1), offs=offs).backward(dy)

    rows["torch bf16 autograd step"] = time_us(torch_step)
    xd, wd = x.detach(), w.detach()
    rows["torch _grouped_mm fwd op"] = time_us(
        lambda: torch._grouped_mm(xd, wd.transpose(-2, -1), offs=offs))
    rows["torch.empty"] = time_us(lambda: torch.empty(256, device=dev))
    for r in a.recipes.split(","):
        m = tt.GroupedLinear(g, k, n, recipe=r, device=dev)
        m(x, offs)  # fills the cache
        wgt = m.weight

        def module_step():
            x.grad = wgt.grad = None
            m(x, offs, is_first_microbatch=False).backward(dy)

        def step_fn():
            x.grad = wgt.grad = None
            with tt.weights_unchanged():
                linear_step(x, wgt, offs, m.spec, m.name, m.weight_cache).backward(dy)

        copies = m.weight_cache.copies

        def apply_fn():
            x.grad = wgt.grad = None
            y, _ = _LinearFn.apply(x, wgt, offs, None, m.spec, m.name, copies, None, None, None)
            y.backward(dy)

        def node_fn():  # the eager path's C++ autograd node, without the module's checks
            x.grad = wgt.grad = None
            y, _ = _ext.linear(x, wgt, offs, None, copies, m.spec, m.name, None, None, None)
            y.backward(dy)

        wdet = wgt.detach()
        wc = copies if copies is not None and copies.numel() else None

        def ops_only():
            _, saved, _ = _ext.ops.linear_fwd(xd, wdet, offs, None, wc, False, m.spec, m.name,
                                              None, None, True)
            _ext.ops.linear_bwd(dy, offs, xd, wdet, wc, saved, m.spec, m.name, False, None,
                                None, None, True, True, False, torch.bfloat16, torch.bfloat16,
                                torch.bfloat16)

        rows[f"{r}: module step (cached W)"] = time_us(module_step)
        rows[f"{r}: linear_step"] = time_us(step_fn)
        if _ext.linear is not None:
            rows[f"{r}: C++ node (torch.ops.tessera.linear)"] = time_us(node_fn)
        rows[f"{r}: Python function (_LinearFn.apply)"] = time_us(apply_fn)
        rows[f"{r}: linear_fwd + linear_bwd ops"] = time_us(ops_only)
        rows[f"{r}: linear_fwd op"] = time_us(
            lambda: _ext.ops.linear_fwd(xd, wdet, offs, None, wc, False, m.spec, m.name, None,
                                        None, True))
        if a.profile:
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
            with profile(activities=acts) as p:
                for _ in range(50):
                    module_step()
                if dev == "cuda":
                    torch.cuda.synchronize()
            print(f"\n== {r}: module step x50 ==")
            print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    rows["torch bf16 autograd step (again)"] = time_us(torch_step)
    print(torch.__version__, torch.cuda.get_device_name() if dev == "cuda" else "CPU tensors",
          "shape", a.shape)
    print("| path | us / call (median) |\n|---|---:|")
    for label, us in rows.items():
        print(f"| {label} | {us:.1f} |")


if __name__ == "__main__":
    main()
