"""Where one expert-parallel dispatch spends its time, per recipe (torch.profiler), at the
DSv3-like sizes of ep_dist_bench.py. Run under torchrun (any world size, 1 included):

    torchrun --nproc-per-node N tools/gpu/ep_dispatch_profile.py [--tokens 4096 ...]
        [--recipes bf16,fp8_rowwise] [--capacity-factor 1.0] [--loop 5] [--codes]

Rank 0 prints, per recipe:
* the wall time of one dispatch (median of 10 after warm-up, each between a barrier and a
  synchronize);
* then `--loop` dispatches back to back under the profiler, per dispatch: the wall time, the
  time the device was busy (the union of every kernel's interval, NCCL's included), the NCCL
  kernels' time (their waits for the peers included), the GPU time by kernel and the host's
  self time by op (the profiler's own overhead included). Busy well under the wall: the host
  (or a peer) is what the device waits for.
Not a benchmark of record."""
import argparse
import time
from collections import defaultdict

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from tessera.torch import moe

from ep_common import init_nccl, size_args


def _union_us(intervals) -> float:
    """Total length of the union of [start, end) intervals (us)."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def main():
    p = size_args(argparse.ArgumentParser())
    p.add_argument("--recipes", default="bf16,fp8_rowwise,mxfp8,bf16")
    p.add_argument("--capacity-factor", type=float, default=None,
                   help="capacity mode with this factor (default: dropless)")
    p.add_argument("--loop", type=int, default=1, help="dispatches profiled back to back")
    p.add_argument("--codes", action="store_true",
                   help="quantized payloads delivered as codes (deliver_codes=True)")
    a = p.parse_args()
    dev = init_nccl()
    torch.manual_seed(dist.get_rank())
    x = torch.randn(a.tokens, a.hidden, device=dev).bfloat16()
    idx = torch.stack([torch.randperm(a.experts, device=dev)[:a.top_k] for _ in range(a.tokens)])
    say = print if dist.get_rank() == 0 else (lambda *_, **__: None)
    for recipe in a.recipes.split(","):
        align = moe.recipe_dispatch_mode(recipe)[1]
        cap = (None if a.capacity_factor is None else
               moe.capacity_for(a.tokens, a.top_k, a.experts, a.capacity_factor, align))

        def disp():
            return moe.dispatch(x, idx, a.experts, dist.group.WORLD, recipe=recipe,
                                capacity=cap, sync_checks=False, verify_config=False,
                                deliver_codes=a.codes and moe.recipe_dispatch_mode(recipe)[0]
                                != "none")
        for _ in range(3):
            disp()
        torch.cuda.synchronize()
        walls = []
        for _ in range(10):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            disp()
            torch.cuda.synchronize()
            walls.append(time.perf_counter() - t0)
        dist.barrier()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            for _ in range(a.loop):
                disp()
            torch.cuda.synchronize()
            loop_wall = (time.perf_counter() - t0) / a.loop
        by = defaultdict(float)
        host = defaultdict(lambda: [0.0, 0])
        spans, nccl = [], 0.0
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                us = e.time_range.end - e.time_range.start
                if e.name.startswith("nccl:"):  # the collective's record beside its kernel
                    continue
                spans.append((e.time_range.start, e.time_range.end))
                by[e.name[:70]] += us
                nccl += us if e.name.startswith("ncclDevKernel") else 0.0
        for e in prof.key_averages():  # host: self time of each op (its children excluded)
            if e.self_cpu_time_total > 0:
                host[e.key[:70]][0] += e.self_cpu_time_total
                host[e.key[:70]][1] += e.count
        n = a.loop
        say(f"== {recipe} capacity {cap}: dispatch wall {sorted(walls)[5] * 1e6:.1f} us (median "
            f"of 10); {n} back to back, per dispatch: wall {loop_wall * 1e6:.1f} us, device busy "
            f"{_union_us(spans) / n:.1f} us, NCCL kernels {nccl / n:.1f} us, kernels "
            f"{sum(by.values()) / n:.1f} us; host ops (self, profiled) "
            f"{sum(v[0] for v in host.values()) / n:.1f} us in "
            f"{sum(v[1] for v in host.values()) / n:.0f} calls", flush=True)
        for name, us in sorted(by.items(), key=lambda kv: -kv[1])[:8]:
            say(f"   {us / n:9.1f} us  {name}", flush=True)
        for name, (us, c) in sorted(host.items(), key=lambda kv: -kv[1][0])[:10]:
            say(f"   host {us / n:9.1f} us {c / n:5.1f}x  {name}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
