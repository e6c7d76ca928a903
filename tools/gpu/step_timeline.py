"""The GPU timeline of one fwd+bwd step of tessera.torch.GroupedLinear (torch.profiler, CUDA
activity): every kernel and memset of the last profiled step in launch order, with its duration
and the idle gap before it, then the step's span, its busy time and its idle time. What it shows
is where the device waits (host launches, syncs) rather than computes. Not a benchmark.

    python3 tools/gpu/step_timeline.py [recipe] [G T K N] [--requant] [--graph]

--graph: the same step captured once in a CUDA graph (tessera.bench.train.graphed) and replayed,
so the gaps left are the device's own (no host launches between the kernels).

Defaults: fp8_rowwise with cached weights (a later micro-batch), the Qwen3-30B-A3B fc1 rows
(128 experts x 256 tokens, K 2048, N 1536)."""
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def main(argv):
    requant = "--requant" in argv
    use_graph = "--graph" in argv
    args = [a for a in argv if a not in ("--requant", "--graph")]
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
    run = lambda: step(requant)  # noqa: E731
    if use_graph:
        from tessera.bench.train import graphed
        run = graphed(run)
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            torch.cuda.synchronize()
            torch.cuda._sleep(1)  # a marker kernel: the step's kernels are the ones after it
            run()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    # the last step: the events after the last marker (the largest gap between the two steps
    # is not reliable: a step's own gap between forward and backward can be larger)
    marks = [i for i, e in enumerate(events) if "spin" in e.name.lower()]
    last = events[marks[-1] + 1:] if marks else events
    if not marks:
        print("(no marker kernel found: both profiled steps are shown)")
    busy, prev_end = 0.0, None
    print(f"{recipe} G={g} T={t} K={k} N={n} {'re-quantized' if requant else 'cached'} weights"
          f"{', graph replay' if use_graph else ''}")
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
