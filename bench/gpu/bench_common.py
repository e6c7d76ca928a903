"""What the GPU benchmark scripts share with bench/gpu/torch_peers.py, so that ours and the
PyTorch peers are measured the same way: the CUDA-event median timer and the shapes table, both
tessera.bench's (python/tessera/bench/timing.py, shapes.py), and the group-size rule of these
GEMM benchmarks.

The scripts run from a checkout with plain python3, where the built tessera package may not be
importable; the two tessera.bench modules import only the standard library, so they are loaded
from their source files.
"""
import importlib.util
import os

import torch

_BENCH_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                          "tessera", "bench")


def _tessera_bench(name):
    """tessera.bench.<name>, loaded from python/tessera/bench/<name>.py."""
    spec = importlib.util.spec_from_file_location(f"tessera_bench_{name}",
                                                  os.path.join(_BENCH_SRC, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


timing = _tessera_bench("timing")
shapes = _tessera_bench("shapes")
SHAPES = shapes.LINEAR_SHAPES  # name: (groups, tokens per group, K, N)


def bench(fn, warmup=5, reps=30):
    """Median seconds of `reps` CUDA-event timings of fn() after `warmup` calls."""
    return timing.cuda_median_ms(fn, reps=reps, warmup=warmup) / 1e3


def group_sizes(G, m, imbalanced):
    """Tokens per expert: m each, or skewed (one empty expert, multiples of 16, same total).
    (The GEMM benchmarks' rule since their first results; tessera.bench's training-step
    benchmarks use shapes.group_sizes, a geometric skew.)"""
    if not imbalanced:
        return [m] * G
    g = torch.Generator().manual_seed(1)
    w = torch.rand(G, generator=g) ** 3
    w[0] = 0.0  # one empty expert
    sizes = (w / w.sum() * G * m / 16).floor().int() * 16
    sizes[-1] += G * m - int(sizes.sum())
    return sizes.tolist()
