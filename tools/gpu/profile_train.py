"""Where the time of one training step goes: torch.profiler over a few steps of each contender
of `python -m tessera.bench train` on one shape, the top CUDA kernels per step (microseconds).

    python3 tools/gpu/profile_train.py qwen3-fc1 [--imbalanced] [--impl "tessera fp8 cached-W"]
"""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from tessera.bench import shapes, train


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shape")
    ap.add_argument("--imbalanced", action="store_true")
    ap.add_argument("--impl", action="append", default=None)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    import tessera.torch as tt
    e, per, k, n = shapes.LINEAR_SHAPES[a.shape]
    case = train.Case(e, per, k, n, a.imbalanced)
    for label, f in train.linear_contenders(tt, train.torchao_rowwise()):
        if a.impl and label not in a.impl:
            continue
        step, _, _ = train.linear_step(lambda x, w, f=f: f(x, w, case.offs), case)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(a.steps):
                step()
            torch.cuda.synchronize()
        events = [ev for ev in prof.key_averages() if ev.device_time_total > 0]
        events.sort(key=lambda ev: -ev.device_time_total)
        total = sum(ev.self_device_time_total for ev in events) / a.steps
        print(f"\n== {a.shape} {'imb' if a.imbalanced else 'bal'} {label}: "
              f"{total:.0f} us of kernels per step")
        for ev in events[:a.top]:
            if ev.self_device_time_total == 0:
                continue
            print(f"  {ev.self_device_time_total / a.steps:9.1f} us  x{ev.count // a.steps:<3} "
                  f"{ev.key[:110]}")
        cpu = sum(ev.self_cpu_time_total for ev in prof.key_averages()) / a.steps
        print(f"  host: {cpu:.0f} us of CPU time per step in profiled ops")


if __name__ == "__main__":
    main()
