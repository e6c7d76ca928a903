"""Host cost of one training step: tiny shapes (the GPU work is a few microseconds), so the wall
time of a step is what the host spends launching it. Torch's BF16 step is timed beside ours, and
a cProfile of our FP8 step shows where the Python side of it goes.

    python3 tools/gpu/host_overhead.py
"""
import cProfile
import io
import pstats
import time

import torch

import tessera.torch as tt
from tessera import _tessera as _C
from tessera.torch import _bridge as br


def wall_us(fn, n=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    g, per, k, n = 8, 16, 128, 128
    offs = torch.full((g,), per, device="cuda").cumsum(0).to(torch.int32)
    x = torch.randn(g * per, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(g * per, n, device="cuda", dtype=torch.bfloat16)
    cache = tt.WeightCache()

    def step(fn):
        def run():
            x.grad = None
            w.grad = None
            fn().backward(dy)
        return run

    rows = {
        "torch bf16 step": step(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)),
        "tessera bf16 step": step(lambda: tt.grouped_linear(x, w, offs, "bf16")),
        "tessera fp8 step (cached W)": step(lambda: tt.grouped_linear(x, w, offs, "fp8_rowwise",
                                                                      cache)),
        "tessera fp8 forward only": lambda: tt.grouped_linear(x.detach(), w.detach(), offs,
                                                              "fp8_rowwise", cache),
        "quantize_fp8_rowwise_impl": lambda: tt.fp8.quantize_fp8_rowwise_impl(x.detach(), True,
                                                                              True),
        "torch._grouped_mm fwd only": lambda: torch._grouped_mm(x.detach(),
                                                                w.detach().transpose(-2, -1),
                                                                offs=offs),
    }
    a, b = br.dense(x.detach()), br.dense(w.detach())
    y = torch.empty(g * per, n, device="cuda", dtype=torch.bfloat16)
    stream = br.stream_handle(y.device)
    rows["_grouped_gemm_into (operands prebuilt)"] = lambda: _C._grouped_gemm_into(
        0, a, b, y, offs, True, False, True, 1.0, 0.0, None, stream)
    rows["br.dense x2 (DLPack operands)"] = lambda: (br.dense(x.detach()), br.dense(w.detach()))
    # The FP8 step's device ops one by one, on prebuilt quantized operands (forward, dgrad, wgrad).
    from tessera.torch import linear_ops as lo
    xq, xs, xcq, xcs = tt.fp8.quantize_fp8_rowwise_impl(x.detach(), True, True)
    dyq, dys, dycq, dycs = tt.fp8.quantize_fp8_rowwise_impl(dy, True, True)
    wq, ws, wcq, wcs = tt.fp8.quantize_fp8_rowwise_impl(w.detach().reshape(g * n, k), True, True)
    rows["fp8 fprop op"] = lambda: lo._fprop_impl(xq, xs, wq, ws, offs, g, torch.bfloat16,
                                                  "rowwise", "rowwise")
    rows["fp8 dgrad op"] = lambda: lo._dgrad_impl(dyq, dys, wcq, wcs, offs, g, torch.bfloat16,
                                                  "rowwise", "rowwise")
    rows["fp8 wgrad op"] = lambda: lo._wgrad_impl(dycq, dycs, xcq, xcs, offs, torch.bfloat16,
                                                  "rowwise", "rowwise")
    rows["quantize rowwise only"] = lambda: tt.fp8.quantize_fp8_rowwise_impl(dy, True, False)
    for name, fn in rows.items():
        print(f"{wall_us(fn):9.1f} us  {name}", flush=True)
    pr = cProfile.Profile()
    run = rows["tessera fp8 step (cached W)"]
    pr.enable()
    for _ in range(200):
        run()
    torch.cuda.synchronize()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(25)
    print(out.getvalue())
    # The CUDA runtime calls under the step (torch.profiler's CPU view: launches, memsets,
    # stream-ordered allocations), per step.
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            run()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda ev: -ev.self_cpu_time_total)
    for ev in events[:25]:
        print(f"  {ev.self_cpu_time_total / 50:8.1f} us self CPU  x{ev.count / 50:<5.1f} {ev.key[:90]}")


if __name__ == "__main__":
    main()
