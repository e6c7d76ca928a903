"""The benchmark shapes: the one table every benchmark reads (python -m tessera.bench,
bench/gpu/*.py, tools/gpu/*.py; `tessera bench train`'s C++ copy in tools/cli/bench.cpp is checked
against it by tests/python/test_bench_harness.py), and the rule that makes imbalanced group sizes.

Imports nothing but the standard library: a script that only needs a shape, and
`python -m tessera.bench --help`, run without torch.
"""
from __future__ import annotations

# MoE expert GEMMs of DeepSeek-V3, Qwen3-30B-A3B and Mixtral 8x7B (docs/architecture.md):
# name: (experts, tokens per expert, K = in features, N = out features).
LINEAR_SHAPES = {
    "dsv3-fc1": (32, 512, 7168, 4096),
    "dsv3-fc2": (32, 512, 2048, 7168),
    "qwen3-fc1": (128, 256, 2048, 1536),
    "qwen3-fc2": (128, 256, 768, 2048),
    "mixtral-fc1": (8, 4096, 4096, 28672),
    "mixtral-fc2": (8, 4096, 14336, 4096),
}
# Whole expert MLPs (fc1 -> SwiGLU -> fc2): name: (experts, tokens per expert, hidden, ffn).
MLP_SHAPES = {
    "dsv3-mlp": (32, 512, 7168, 2048),
    "qwen3-mlp": (128, 256, 2048, 768),
}
# Shapes so small that a step's GPU work is microseconds: what the host spends issuing it
# (python -m tessera.bench host). name: (experts, tokens per expert, K, N).
HOST_SHAPES = {"8x16x256": (8, 16, 256, 256), "32x16x512": (32, 16, 512, 512)}
# The CPU backend's BF16 grouped GEMM (python -m tessera.bench cpu):
# "experts x tokens per expert x K x N".
CPU_SHAPES = ["8x512x1024x1024", "32x128x1024x1024", "8x512x2048x512"]


def describe(name: str) -> str:
    """A linear shape with its sizes: "dsv3-fc1 (32e,512t,7168->4096)"."""
    e, per, k, n = LINEAR_SHAPES[name]
    return f"{name} ({e}e,{per}t,{k}->{n})"


def group_sizes(experts: int, per_expert: int, imbalanced: bool) -> list[int]:
    """Tokens per expert. Balanced: per_expert each. Imbalanced: the same total, skewed
    (geometric weights 0.85^i), one empty expert first, every size a multiple of 16."""
    total = experts * per_expert
    if not imbalanced:
        return [per_expert] * experts
    w = [0.0] + [0.85 ** i for i in range(experts - 1)]
    sizes = [int(total * wi / sum(w)) // 16 * 16 for wi in w]
    sizes[1] += total - sum(sizes)
    return sizes


__all__ = ["CPU_SHAPES", "HOST_SHAPES", "LINEAR_SHAPES", "MLP_SHAPES", "describe", "group_sizes"]
