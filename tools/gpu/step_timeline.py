"""The GPU timeline of one fwd+bwd step of tessera.torch.GroupedLinear (torch.profiler, CUDA
activity): every kernel and memset of the last profiled step in launch order, with its duration
and the idle gap before it, then the step's span, its busy time and its idle time. What it shows
is where the device waits (host launches, syncs) rather than computes. Not a benchmark.

    python3 tools/gpu/step_timeline.py [recipe] [G T K N] [--requant]

Defaults: fp8_rowwise with cached weights (a later micro-batch), the Qwen3-30B-A3B fc1 rows
(128 experts x 256 tokens, K 2048, N 1536)."""
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def main(argv):
    requant = "--requant" in argv
    args = [a for a in argv if a != "--requant"]
    recipe = args[0] if args else "fp8_rowwise"
    g, t, k, n = (int(v) for v in args[1:5]) if len(args) >= 5 else (128, 256, 2048, 1536)
    import tessera.torch as tt
    m = tt.GroupedLinear(g, k, n, recipe=recipe, bias=False, device="cuda",
                         params_dtype=torch.bfloat16)
    x = torch.randn(g * t, k, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(g * t, n, device="cuda", dtype=torch.bfloat16)
    offs = torch.arange(1, g + 1, device="cuda", dtype=torch.int32) * t

    def step(first):
        m.zero_grad(set_to_none=True)
        m(x.detach().requires_grad_(), offs, is_first_microbatch=first).backward(dy)

    for i in range(3):
        step(i == 0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            torch.cuda.synchronize()
            step(requant)
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    # the last step: the events after the largest gap (the synchronize between the two steps)
    gaps = [events[i].time_range.start - events[i - 1].time_range.end for i in range(1, len(events))]
    cut = max(range(len(gaps)), key=lambda i: gaps[i]) + 1 if gaps else 0
    last = events[cut:]
    busy, prev_end = 0.0, None
    print(f"{recipe} G={g} T={t} K={k} N={n} {'re-quantized' if requant else 'cached'} weights")
    print(f"{'gap us':>8s} {'dur us':>8s}  kernel")
    for e in last:
        gap = 0.0 if prev_end is None else e.time_range.start - prev_end
        dur = e.time_range.end - e.time_range.start
        busy += dur
        print(f"{gap:8.1f} {dur:8.1f}  {e.name[:90]}")
        prev_end = max(prev_end or 0.0, e.time_range.end)
    span = last[-1].time_range.end - last[0].time_range.start if last else 0.0
    print(f"span {span:.1f} us, kernels {len(last)}, busy {busy:.1f} us, idle {span - busy:.1f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
