"""What the GPU benchmarks share with bench/gpu/torch_peers.py, so that ours and the PyTorch peers
are measured the same way: the CUDA-event median timer and the MoE group-size rule."""
import torch


def bench(fn, warmup=5, reps=30):
    """Median seconds of `reps` CUDA-event timings of fn() after `warmup` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2] / 1e3


def group_sizes(G, m, imbalanced):
    """Tokens per expert: m each, or skewed (one empty expert, multiples of 16, same total)."""
    if not imbalanced:
        return [m] * G
    g = torch.Generator().manual_seed(1)
    w = torch.rand(G, generator=g) ** 3
    w[0] = 0.0  # one empty expert
    sizes = (w / w.sum() * G * m / 16).floor().int() * 16
    sizes[-1] += G * m - int(sizes.sum())
    return sizes.tolist()
