"""Where one expert-parallel dispatch spends its GPU time, per recipe (torch.profiler, CUDA
activity): the kernels and collectives of one dispatch, summed by name, at the DSv3-like sizes of
ep_dist_bench.py. Run under torchrun (any world size, 1 included):

    torchrun --nproc-per-node N tools/gpu/ep_dispatch_profile.py [--tokens 4096 ...]

Rank 0 prints, per recipe: the wall time of one dispatch (median of 10 after warm-up, each
between a barrier and a synchronize), the GPU time by kernel, and the host's self time by op
(the profiler's own overhead included). Not a benchmark of record."""
import argparse
import time
from collections import defaultdict

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from tessera.torch import moe

from ep_common import init_nccl, size_args


def main():
    p = size_args(argparse.ArgumentParser())
    p.add_argument("--recipes", default="bf16,fp8_rowwise,mxfp8,bf16")
    a = p.parse_args()
    dev = init_nccl()
    torch.manual_seed(dist.get_rank())
    x = torch.randn(a.tokens, a.hidden, device=dev).bfloat16()
    idx = torch.stack([torch.randperm(a.experts, device=dev)[:a.top_k] for _ in range(a.tokens)])
    for recipe in a.recipes.split(","):
        def disp():
            return moe.dispatch(x, idx, a.experts, dist.group.WORLD, recipe=recipe,
                                sync_checks=False, verify_config=False)
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
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            disp()
            torch.cuda.synchronize()
        by = defaultdict(float)
        host = defaultdict(lambda: [0.0, 0])
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                by[e.name[:70]] += e.time_range.end - e.time_range.start
        for e in prof.key_averages():  # host: self time of each op (its children excluded)
            if e.self_cpu_time_total > 0:
                host[e.key[:70]][0] += e.self_cpu_time_total
                host[e.key[:70]][1] += e.count
        if dist.get_rank() == 0:
            print(f"== {recipe}: dispatch wall {sorted(walls)[5] * 1e6:.1f} us (median of 10); "
                  f"GPU {sum(by.values()):.1f} us; host ops (self, profiled) "
                  f"{sum(v[0] for v in host.values()):.1f} us in "
                  f"{sum(v[1] for v in host.values())} calls", flush=True)
            for name, us in sorted(by.items(), key=lambda kv: -kv[1])[:8]:
                print(f"   {us:9.1f} us  {name}", flush=True)
            for name, (us, n) in sorted(host.items(), key=lambda kv: -kv[1][0])[:10]:
                print(f"   host {us:9.1f} us {n:3d}x  {name}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
