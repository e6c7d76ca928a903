"""Plain-torch references for the MoE layer (tests, and the fallback expert module).

* ReferenceGroupedMLP(num_groups, hidden, ffn): the experts' interface of tessera.torch.GroupedMLP,
  forward(x (T, hidden), offs (G,) int32 cumulative end offsets, probs=None) -> (T, hidden),
  as a per-expert loop of a SwiGLU MLP. Every GEMM reads bfloat16-valued operands and
  accumulates in float64, rounded once to the output dtype: the products are exact and, for data
  of moderate dynamic range, so is the sum, so each output row depends only on its input row and
  weight gradients do not depend on how rows are split or ordered (what lets an expert-parallel
  run match one process bit for bit). Deterministic; reads offs on the host (a sync).
* ReferenceRouter(hidden, num_experts): a bias-free linear router with the same float64 rule.
* reference_moe(...): the whole layer in one process without tessera's routing kernels —
  stable sort by expert, torch indexing, tessera's standalone quantizer per token row, a loop over
  experts, and the FP32 combine in the order tessera states.
"""
from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import _tessera as _C
from . import moe_ops as ops
from .moe_dist import grad_payload_mode, recipe_dispatch_mode
from .moe_ops import route


def _gemm(a: Tensor, w: Tensor, out_dtype: torch.dtype) -> Tensor:
    """a (M, K) @ w (N, K)^T with float64 accumulation, rounded once to out_dtype."""
    return (a.double() @ w.double().t()).to(out_dtype)


class ReferenceGroupedMLP(nn.Module):
    """Per-expert SwiGLU MLP: y = (silu(g) * u [* p]) W2^T with [g | u] = x W1^T."""

    def __init__(self, num_groups: int, hidden: int, ffn: int, recipe: str = "bf16",
                 bias: bool = False, device=None, dtype=torch.bfloat16):
        super().__init__()
        if bias:
            raise _C.UnsupportedError("ReferenceGroupedMLP: bias is not supported")
        self.num_groups, self.hidden, self.ffn, self.recipe = num_groups, hidden, ffn, recipe
        self.fc1_weight = nn.Parameter(torch.empty(num_groups, 2 * ffn, hidden, device=device,
                                                   dtype=dtype))
        self.fc2_weight = nn.Parameter(torch.empty(num_groups, hidden, ffn, device=device,
                                                   dtype=dtype))
        with torch.no_grad():
            nn.init.normal_(self.fc1_weight, std=hidden ** -0.5)
            nn.init.normal_(self.fc2_weight, std=ffn ** -0.5)

    def forward(self, x: Tensor, offs: Tensor, probs: Optional[Tensor] = None) -> Tensor:
        if offs.shape != (self.num_groups,):
            raise _C.ShapeError(f"ReferenceGroupedMLP: offs must be ({self.num_groups},), got "
                             f"{tuple(offs.shape)}")
        ends = offs.tolist()
        pieces, start = [], 0
        for g, end in enumerate(ends):
            xg = x[start:end]
            h = _gemm(xg, self.fc1_weight[g], x.dtype).float()      # (M, 2F)
            a = F.silu(h[:, :self.ffn]) * h[:, self.ffn:]
            if probs is not None:
                a = a * probs[start:end].float().reshape(-1, 1)
            pieces.append(_gemm(a.to(x.dtype), self.fc2_weight[g], x.dtype))
            start = end
        tail = x[start:]
        if tail.shape[0]:  # rows past offs[-1]: not computed (zeros)
            pieces.append(torch.zeros_like(tail))
        return torch.cat(pieces) if pieces else x.new_zeros(x.shape)


class ReferenceRouter(nn.Module):
    """logits (T, E) float32 = x W^T with float64 accumulation (batch invariant)."""

    def __init__(self, hidden: int, num_experts: int, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden, device=device))
        with torch.no_grad():
            nn.init.normal_(self.weight, std=hidden ** -0.5)
            self.weight.copy_(self.weight.bfloat16().float())  # bf16 values: exact products

    def forward(self, x: Tensor) -> Tensor:
        return _gemm(x, self.weight, torch.float32)


def _qdq_rows(x: Tensor, mode: str) -> Tensor:
    """Each row of x quantized by tessera's standalone quantizer, then dequantized (x's dtype,
    x's device); no autograd."""
    r, h = x.shape
    data = torch.empty((r, h), dtype=torch.uint8)
    shape, sdtype = ops._scale_shape(mode, r, h)
    sinv = torch.empty(shape, dtype=sdtype)
    xd = x.detach().contiguous().cpu()
    empty = torch.empty(0, dtype=torch.uint8)
    _C._quantize_into(xd, mode, "e4m3", True, False, data, sinv, empty,
                      torch.empty(0, dtype=sdtype), 0)
    return ops.dequantize_rows(data, sinv, mode, x.dtype).to(x.device)


def quantize_dequantize_rows(x: Tensor, mode: str) -> Tensor:
    """Each row of x quantized by tessera's standalone quantizer, then dequantized (x's dtype);
    straight-through in autograd."""
    if mode == "none" or x.shape[0] == 0:
        return x
    return x + (_qdq_rows(x, mode) - x).detach()


def reference_moe(x: Tensor, router: nn.Module, experts: nn.Module, num_experts: int,
                  top_k: int, recipe: str = "bf16", capacity: Optional[int] = None,
                  token_blocks: Optional[List[int]] = None,
                  quantize_grads: Optional[bool] = None, expert_groups: int = 1,
                  groups_per_token: Optional[int] = None, score: str = "softmax",
                  selection_bias: Optional[Tensor] = None) -> tuple[Tensor, int]:
    """The MoE layer in one process holding every expert: (out (T, H), pairs dropped).

    token_blocks: token counts of the ranks whose tokens x concatenates (capacity applies per
    (rank, expert), lower token first within a rank); default one block. quantize_grads: as
    MoELayer's (the experts' output gradient rows quantized and dequantized per row).
    expert_groups, groups_per_token, score, selection_bias: MoELayer's routing (route).
    """
    grad_mode = grad_payload_mode(recipe, quantize_grads)
    mode, align = recipe_dispatch_mode(recipe)
    t, h = x.shape
    top_p, top_i = route(router(x), top_k, expert_groups=expert_groups,
                         groups_per_token=groups_per_token, score=score,
                         selection_bias=selection_bias)
    blocks = token_blocks or [t]
    xq = quantize_dequantize_rows(x, mode)
    flat_e = top_i.reshape(-1)
    rows_of = [[] for _ in range(num_experts)]   # pair ids per expert, rank block then pair order
    dropped, start = 0, 0
    for n in blocks:
        pairs = torch.arange(start * top_k, (start + n) * top_k)
        e_block = flat_e[start * top_k:(start + n) * top_k]
        order = torch.sort(e_block, stable=True).indices
        for e in range(num_experts):
            mine = pairs[order][e_block[order] == e].tolist()
            keep = mine if capacity is None else mine[:capacity]
            dropped += len(mine) - len(keep)
            rows_of[e] += keep
        start += n
    flat = [p for e in range(num_experts) for p in rows_of[e]]
    offs = torch.tensor([len(r) for r in rows_of]).cumsum(0).to(torch.int32)
    index = torch.tensor(flat, dtype=torch.int64)
    slot = torch.full((t * top_k,), -1, dtype=torch.int64)
    slot[index] = torch.arange(index.numel())
    slot = slot.reshape(t, top_k)
    y = experts(_GatherPairs.apply(xq, index // top_k, slot), offs)  # (pairs kept, H)
    return _ReferenceCombine.apply(y, top_p, slot, grad_mode), dropped


def _pair_sum(rows: Tensor, slot: Tensor, weights: Optional[Tensor] = None) -> Tensor:
    """out[t] = 0 + sum_j weights[t, j] * rows[slot[t, j]] (FP32, j ascending, dropped pairs
    skipped; weights None: 1) — moe_routing.h's gather-add order."""
    acc = torch.zeros(slot.shape[0], rows.shape[1], dtype=torch.float32)
    pad = torch.cat([rows.float(), rows.new_zeros((1, rows.shape[1])).float()])  # row -1: zeros
    for j in range(slot.shape[1]):
        s = slot[:, j]
        term = pad[s] if weights is None else weights[:, j:j + 1] * pad[s]
        acc = torch.where((s >= 0).reshape(-1, 1), acc + term, acc)
    return acc


class _GatherPairs(torch.autograd.Function):
    """x's rows `tokens` (one per kept pair, in slot's row order); the backward adds each
    token's pair gradients by _pair_sum (moe_permute_backward's order), not in x's dtype in
    autograd's order."""

    @staticmethod
    def forward(ctx, x, tokens, slot):
        ctx.save_for_backward(slot)
        return x[tokens]

    @staticmethod
    def backward(ctx, grad):
        (slot,) = ctx.saved_tensors
        return _pair_sum(grad, slot).to(grad.dtype), None, None


def _chunked_order_dot(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise dot products (FP32) in tessera's order (moe_routing.h): 256 partial sums, partial
    l adding the products of the chunks of 8 elements l, l + 256, ... (elements ascending), then
    the halving tree s_l += s_{l+w}, w = 128, ..., 1. Elements past H add nothing."""
    n, h = a.shape
    prod = a.float() * b.float()
    s = torch.zeros((n, 256), dtype=torch.float32)
    lanes = torch.arange(256) * 8
    for base in range(0, h, 2048):
        for e in range(8):
            cols = base + lanes + e
            live = cols < h
            term = prod[:, cols.clamp(max=max(h - 1, 0))] if h else s
            s = torch.where(live, s + term, s)
    w = 128
    while w >= 1:
        s = torch.cat([s[:, :w] + s[:, w:2 * w], s[:, w:]], dim=1)
        w //= 2
    return s[:, 0]


class _ReferenceCombine(torch.autograd.Function):
    """out[t] = 0 + sum_j p[t, j] * y[slot[t, j]] (FP32, j ascending, dropped pairs skipped)."""

    @staticmethod
    def forward(ctx, y: Tensor, probs: Tensor, slot: Tensor, grad_mode: str) -> Tensor:
        ctx.save_for_backward(y, probs, slot)
        ctx.grad_mode = grad_mode
        return _pair_sum(y, slot, probs).to(y.dtype)

    @staticmethod
    def backward(ctx, g: Tensor):
        y, probs, slot = ctx.saved_tensors
        k = slot.shape[1]
        flat = slot.reshape(-1)
        kept = (flat >= 0).nonzero().reshape(-1)
        tok = kept // k
        dy = torch.zeros(y.shape, dtype=y.dtype)
        dy[flat[kept]] = (probs.reshape(-1)[kept].reshape(-1, 1) * g[tok].float()).to(y.dtype)
        if ctx.grad_mode != "none" and dy.shape[0]:
            dy = _qdq_rows(dy, ctx.grad_mode)  # the gradient's payload quantization, per row
        dprobs = torch.zeros(flat.shape[0], dtype=torch.float32)
        dprobs[kept] = _chunked_order_dot(g[tok], y[flat[kept]])
        return dy, dprobs.reshape(probs.shape), None, None


__all__ = ["ReferenceGroupedMLP", "ReferenceRouter", "quantize_dequantize_rows", "reference_moe"]
