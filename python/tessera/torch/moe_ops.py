"""The single-device MoE ops of tessera.torch (docs/moe.md): top-k routing, routing metadata,
permute (+ fused quantization), unpermute and their backwards. Imports nothing of moe_dist
(dispatch / combine over torch.distributed build on this module); tessera.torch.moe is the public
surface of both.

    route(logits (T, E), top_k, normalize=True, *, expert_groups=1, groups_per_token=None,
          score="softmax", selection_bias=None) -> (probs (T, k) float32, indices (T, k) int64)
                                   top-k routing of the router's logits (plain torch): softmax
                                   or sigmoid scores, an optional selection bias, node-limited
                                   when groups_per_token < expert_groups

Ops: compiled torch ops torch.ops.tessera.moe_* (python/torch_ext/moe_ops.cpp: one call into
compiled code each, tensors converted once in C++, on torch's current stream); here their fake
impls for torch.compile, the autograd of moe_unpermute, and wrappers that raise tessera's errors:

    moe_routing(indices (T, k), num_experts, align=1, capacity=-1)
        -> (counts (E,), padded_offsets (E+1,), slot_map (T, k), row_pair (rows,), dropped (1,),
            error_flag (1,) int32)
    moe_permute(x (T, H), row_pair, top_k, mode="none", element="e4m3", e8m0_floor=False,
                weights=None, slot_map=None) -> (data (rows, H), scale_inv)
                                   mode none | rowwise | block1x128 | mxfp8; weights (T, k):
                                   rows of weights[p] * x[t] (unpermute backward's dy rows)
    moe_permute_backward(d_permuted (rows, H), slot_map, num_tokens) -> dx (T, H)
    moe_unpermute(y (rows, H), slot_map, row_pair, probs (T, k) | None) -> out (T, H)
    moe_unpermute_backward(dout, y, slot_map, row_pair, probs, need_dy=True) -> (dy, dprobs)
    moe_dequantize_rows(data (R, H) E4M3 codes, scale_inv, mode, out_dtype) -> (R, H)
                                   the receiver side of a quantized dispatch (dequantize_rows)
    moe_regroup_index(counts (W, L), rows, align=1, padded_rows=-1)
                                -> (source_of (padded_rows,), expert_of (rows,)) int64
                                   a dispatch's received rows between source-major and
                                   expert-major order (each expert's rows padded to align)

Contract (normative, include/tessera/nn/moe_routing.h): the permuted buffer holds E groups back to
back, group e starting at padded_offsets[e], its first counts[e] rows the pairs (t, j) routed to e
in ascending (t, j) order, then zero rows up to the group's end (a multiple of `align`; capacity
mode: exactly `capacity` rows per expert, pairs past it dropped: slot -1, counted in `dropped`,
lower token wins). row_pair[r] = t * k + j or -1; slot_map[t, j] = row or -1. The quantized
permute is bit-identical to tessera's quantizer applied to the permuted tensor.

Autograd: moe_permute (mode "none") and moe_unpermute are differentiable (x; y and probs).
Nothing syncs with the host; CUDA work runs on torch's current stream. On CUDA an expert index
outside [0, E) sets error_flag (read it when convenient) and that pair is dropped; on the CPU it
raises at once.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _tessera as _C
from . import _ext
from .fp8 import FP8_DTYPES, _mode_row, scale_shape

# The payload modes of moe_permute: "none" (_moe_permute_into, no quantization) and the scaling
# modes the C++ permute fuses (_tessera.moe_permute_modes, from moe_permute_modes() in
# tessera/nn/moe_routing.h). A mode's index here is its value in moe_dist.check_config's
# configuration row.
QUANT_MODES = ("none",) + tuple(_C.moe_permute_modes)


def permuted_rows(num_tokens, top_k: int, num_experts: int, align: int = 1,
                  capacity: int = -1):
    """Rows of the permuted buffer: T*k + E*(align-1) (dropless) or E*capacity."""
    if capacity >= 0:
        return num_experts * capacity
    return num_tokens * top_k + num_experts * (align - 1)


# ---- routing -----------------------------------------------------------------------------------
ROUTER_SCORES = ("softmax", "sigmoid")


def _check_routing(num_experts: int, top_k: int, expert_groups: int,
                   groups_per_token: Optional[int], score: str) -> int:
    """route's options checked (for route, and for MoELayer at construction); returns
    groups_per_token as used (expert_groups when None)."""
    def bad(what):
        raise _C.InvalidArgumentError(f"tessera invalid argument: {what}")
    if score not in ROUTER_SCORES:
        bad(f"score: {score!r} is not one of {ROUTER_SCORES}")
    if expert_groups < 1 or num_experts % expert_groups != 0:
        bad(f"expert_groups: {expert_groups} must be >= 1 and divide the {num_experts} experts")
    m = expert_groups if groups_per_token is None else groups_per_token
    if not 1 <= m <= expert_groups:
        bad(f"groups_per_token: {m} must be in [1, expert_groups {expert_groups}]")
    if top_k > m * (num_experts // expert_groups):
        bad(f"top_k: {top_k} experts do not fit in groups_per_token {m} groups of "
            f"{num_experts // expert_groups} experts")
    return m


def route(logits: Tensor, top_k: int, normalize: bool = True, *, expert_groups: int = 1,
          groups_per_token: Optional[int] = None, score: str = "softmax",
          selection_bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Top-k routing of router logits (T, E): each expert's score in FP32 (score "softmax": the
    softmax over the E logits; "sigmoid": each logit's sigmoid, DeepSeek-V3's affinities), then
    the k experts of largest score, their scores renormalized to sum 1 per token unless
    normalize=False.

    selection_bias (E,) (DeepSeek-V3's auxiliary-loss-free balancing): added to the scores for
    choosing the experts (and groups) only; the returned weights are the unbiased scores.

    Node-limited routing (DeepSeek-V3's, to bound the rows a token sends across nodes): the E
    experts form `expert_groups` contiguous groups of E / expert_groups (with experts sharded
    rank-major over an EP group whose nodes are consecutive ranks, one group per node); a
    token's group score is the sum of its max(1, top_k // groups_per_token) largest (biased)
    scores in the group, and its k experts are taken from its `groups_per_token`
    highest-scoring groups only (ties broken as torch.topk breaks them). expert_groups 1
    (default) or groups_per_token None: plain top-k.
    Returns (probs (T, k) float32, indices (T, k) int64)."""
    m = _check_routing(logits.shape[-1], top_k, expert_groups, groups_per_token, score)
    p = torch.softmax(logits.float(), dim=-1) if score == "softmax" else logits.float().sigmoid()
    e = p.shape[-1]
    choice = p
    if selection_bias is not None:
        if tuple(selection_bias.shape) != (e,):
            raise _C.ShapeError(f"tessera shape mismatch: selection_bias: expected ({e},), got "
                                f"{tuple(selection_bias.shape)}")
        choice = p + selection_bias.float()
    if m < expert_groups:
        per = e // expert_groups
        grouped = choice.reshape(choice.shape[0], expert_groups, per)
        n_score = min(per, max(1, top_k // m))
        group_score = grouped.topk(n_score, dim=-1).values.sum(dim=-1)     # (T, G)
        keep = torch.zeros_like(group_score, dtype=torch.bool)
        keep.scatter_(1, group_score.topk(m, dim=-1).indices, True)
        # The other groups' experts at -inf are never taken (top_k fits in the kept groups).
        choice = torch.where(keep.unsqueeze(-1), grouped, float("-inf")).reshape_as(p)
    if choice is p:
        top_p, top_i = torch.topk(p, top_k, dim=-1)
    else:
        top_i = torch.topk(choice, top_k, dim=-1).indices
        top_p = p.gather(-1, top_i)
    if normalize:
        top_p = top_p / top_p.sum(dim=-1, keepdim=True)
    return top_p, top_i


def moe_routing(indices: Tensor, num_experts: int, align: int = 1,
                capacity: int = -1) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Routing metadata of top-k expert indices (T, k) int32/int64; see the module docstring."""
    return _ext.call(_ext.moe_routing, indices, num_experts, align, capacity)


@torch.library.register_fake("tessera::moe_routing")
def _routing_fake(indices, num_experts, align=1, capacity=-1):
    t, k = indices.shape
    rows = permuted_rows(t, k, num_experts, align, capacity)
    i64 = dict(dtype=torch.int64)
    return (indices.new_empty(num_experts, **i64), indices.new_empty(num_experts + 1, **i64),
            indices.new_empty((t, k), **i64), indices.new_empty(rows, **i64),
            indices.new_empty(1, **i64), indices.new_empty(1, dtype=torch.int32))


# ---- permute -----------------------------------------------------------------------------------
def _scale_cols(mode: str) -> int:
    """Columns of a row that share one scale in `mode` (0: the whole row), from the C++
    scaling-mode table."""
    return _mode_row(mode)["scale_block"][1]


def _scale_shape(mode: str, rows, hidden: int):
    """(shape, dtype) of a permuted payload's scale_inv: the compact scale shape of `mode`
    (fp8.scale_shape, from the C++ scaling-mode table), one scale per row as (rows,); FP32, or
    E8M0 bytes as uint8. Mode "none": an empty (0,) FP32."""
    if mode == "none":
        return (0,), torch.float32
    shape = scale_shape(mode, rows, hidden)
    dtype = torch.float32 if _mode_row(mode)["scale_dtype"] == "float32" else torch.uint8
    return (shape[:1] if _scale_cols(mode) == 0 else shape), dtype


def _permute_outputs(x: Tensor, rows, mode: str, element: str):
    if mode not in QUANT_MODES:
        raise _C.InvalidArgumentError(f"moe_permute: mode {mode!r} is not one of {QUANT_MODES}")
    h = x.shape[1]
    data_dtype = x.dtype if mode == "none" else FP8_DTYPES[element]
    shape, sdtype = _scale_shape(mode, rows, h)
    return x.new_empty((rows, h), dtype=data_dtype), x.new_empty(shape, dtype=sdtype)


def moe_permute(x: Tensor, row_pair: Tensor, top_k: int, mode: str = "none",
                element: str = "e4m3", e8m0_floor: bool = False,
                weights: Optional[Tensor] = None,
                slot_map: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Tokens (T, H) into the permuted buffer (rows, H), quantized per `mode` in the same pass.

    Returns (data, scale_inv): mode "none" -> (x.dtype data, empty); "rowwise" -> (FP8, (rows,)
    FP32); "block1x128" -> (FP8, (roundup(rows, 4), ceil(H/128)) FP32); "mxfp8" -> (FP8,
    (rows, ceil(H/32)) E8M0 bytes as uint8).
    weights (T, k) float32, quantized modes only: the row of pair p = (t, j) is quantized from
    weights[t, j] * x[t] rounded to x's dtype — the dy row moe_unpermute_backward(x, ...,
    probs=weights) writes, so a combine's backward quantizes its gradient in one pass.
    slot_map (T, k): the routing's (moe_routing), row_pair's dtype. On CUDA each token's row is
    then read (and quantized) once and written to the rows of its pairs; the same bits as
    without it, whatever slot_map holds (moe_routing.h).
    """
    if mode not in QUANT_MODES:
        raise _C.InvalidArgumentError(f"moe_permute: mode {mode!r} is not one of {QUANT_MODES}")
    return _ext.call(_ext.moe_permute, x, row_pair, top_k, mode, element, e8m0_floor, weights,
                     slot_map)


@torch.library.register_fake("tessera::moe_permute")
def _permute_fake(x, row_pair, top_k, mode="none", element="e4m3", e8m0_floor=False,
                  weights=None, slot_map=None):
    return _permute_outputs(x, row_pair.shape[0], mode, element)


def moe_permute_backward(d_permuted: Tensor, slot_map: Tensor, num_tokens: int) -> Tensor:
    """dx (T, H) = sum over j of d_permuted[slot_map[t, j]] (FP32, j ascending), in its dtype."""
    return _ext.call(_ext.moe_permute_backward, d_permuted, slot_map, num_tokens)


@torch.library.register_fake("tessera::moe_permute_backward")
def _permute_backward_fake(d_permuted, slot_map, num_tokens):
    return d_permuted.new_empty((num_tokens, d_permuted.shape[1]))


class _PermuteFn(torch.autograd.Function):
    """Differentiable unquantized permute: backward is the gather-add moe_permute_backward."""

    @staticmethod
    def forward(ctx, x, row_pair, slot_map, top_k):
        data, _ = moe_permute(x, row_pair, top_k, slot_map=slot_map)
        ctx.save_for_backward(slot_map)
        ctx.num_tokens = x.shape[0]
        return data

    @staticmethod
    def backward(ctx, grad):
        (slot_map,) = ctx.saved_tensors
        return moe_permute_backward(grad.contiguous(), slot_map, ctx.num_tokens), None, None, None


def permute(x: Tensor, row_pair: Tensor, slot_map: Tensor, top_k: int) -> Tensor:
    """Differentiable x (T, H) -> permuted (rows, H) (no quantization)."""
    return _PermuteFn.apply(x, row_pair, slot_map, top_k)


# ---- unpermute ---------------------------------------------------------------------------------
def moe_unpermute(y: Tensor, slot_map: Tensor, row_pair: Tensor,
                  probs: Optional[Tensor] = None) -> Tensor:
    """out (T, H) = sum over j of probs[t, j] * y[slot_map[t, j]] (FP32, j ascending);
    differentiable in y and probs."""
    return _ext.call(_ext.moe_unpermute, y, slot_map, row_pair, probs)


@torch.library.register_fake("tessera::moe_unpermute")
def _unpermute_fake(y, slot_map, row_pair, probs=None):
    return y.new_empty((slot_map.shape[0], y.shape[1]))


def moe_unpermute_backward(dout: Tensor, y: Tensor, slot_map: Tensor, row_pair: Tensor,
                           probs: Optional[Tensor] = None,
                           need_dy: bool = True) -> Tuple[Tensor, Tensor]:
    """(dy (rows, H) in y's dtype, dprobs (T, k) FP32; empty (0,) without probs).
    need_dy=False: dprobs only (dy empty (0,)); needs probs."""
    return _ext.call(_ext.moe_unpermute_backward, dout, y, slot_map, row_pair, probs, need_dy)


@torch.library.register_fake("tessera::moe_unpermute_backward")
def _unpermute_backward_fake(dout, y, slot_map, row_pair, probs=None, need_dy=True):
    shape = slot_map.shape if probs is not None else (0,)
    return (y.new_empty(y.shape if need_dy else (0,)),
            dout.new_empty(shape, dtype=torch.float32))


def _unpermute_setup(ctx, inputs, output):
    y, slot_map, row_pair, probs = inputs
    ctx.save_for_backward(y, slot_map, row_pair, probs)


def _unpermute_backward(ctx, dout):
    y, slot_map, row_pair, probs = ctx.saved_tensors
    dy, dprobs = moe_unpermute_backward(dout.contiguous(), y, slot_map, row_pair, probs)
    need_p = probs is not None and ctx.needs_input_grad[3]
    return dy, None, None, (dprobs.to(probs.dtype) if need_p else None)


torch.library.register_autograd("tessera::moe_unpermute", _unpermute_backward,
                                setup_context=_unpermute_setup)


def unpermute(y: Tensor, slot_map: Tensor, row_pair: Tensor,
              probs: Optional[Tensor] = None) -> Tensor:
    """Differentiable combine: y (rows, H), probs (T, k) float32 -> (T, H) in y's dtype."""
    return moe_unpermute(y, slot_map, row_pair, probs)


# ---- dequantize of a permuted payload (the receiver side of a quantized dispatch) ------------
def _dequantized_shape(data: Tensor, source_rows: Optional[Tensor]):
    torch._check(data.dim() == 2, lambda: f"dequantize_rows: data must be (R, H), got "
                 f"{tuple(data.shape)}")
    if source_rows is None:
        return data.shape
    torch._check(source_rows.dim() == 1, lambda: f"dequantize_rows: source_rows must be (M,) "
                 f"int64 row indices, got {tuple(source_rows.shape)}")
    return (source_rows.shape[0], data.shape[1])


def moe_dequantize_rows(data: Tensor, scale_inv: Tensor, mode: str, out_dtype: torch.dtype,
                        source_rows: Optional[Tensor] = None) -> Tensor:
    """E4M3 codes (R, H) (any 8-bit dtype) and their `mode` scales -> (R, H) out_dtype (or
    (M, H): rows source_rows (M,) of data), in one pass of the C++ op (moe_routing.h,
    moe_dequantize_rows); see dequantize_rows."""
    return _ext.call(_ext.moe_dequantize_rows, data, scale_inv, mode, out_dtype, source_rows)


@torch.library.register_fake("tessera::moe_dequantize_rows")
def _dequantize_rows_fake(data, scale_inv, mode, out_dtype, source_rows=None):
    return data.new_empty(_dequantized_shape(data, source_rows), dtype=out_dtype)


def dequantize_rows(data: Tensor, scale_inv: Tensor, mode: str, out_dtype: torch.dtype,
                    source_rows: Optional[Tensor] = None) -> Tensor:
    """data (R, H) FP8 codes (any 8-bit dtype) and their scales -> (R, H) out_dtype.

    x = decode(q) * scale_inv in FP32 (tessera's dequantize rule), rounded once to out_dtype;
    the codes are E4M3 (the dispatch payload's element). scale_inv as moe_permute returns it
    (_scale_shape): rowwise (R,) or (R, 1) FP32; block1x128 (>= R, ceil(H/128)) FP32; mxfp8
    (R, ceil(H/32)) E8M0 bytes (2^(e-127); 0 -> 2^-127, 255 -> NaN); block widths from the C++
    scaling-mode table. One pass of the C++ op moe_dequantize_rows (a NaN result is the positive
    quiet NaN). Mode "none": data.to(out_dtype).
    source_rows (M,) int64 on data's device: gather as well, out (M, H) row r = row
    source_rows[r] of data (a zero row where the index is outside [0, R)).
    """
    if mode not in QUANT_MODES:
        raise _C.InvalidArgumentError(f"dequantize_rows: mode {mode!r} is not one of {QUANT_MODES}")
    if mode == "none":
        out = data.to(out_dtype)
        if source_rows is None:
            return out
        inside = (source_rows >= 0) & (source_rows < data.shape[0])
        picked = out.index_select(0, torch.where(inside, source_rows, 0))
        return torch.where(inside.unsqueeze(1), picked, picked.new_zeros(()))
    return moe_dequantize_rows(data, scale_inv, mode, out_dtype, source_rows)


# ---- regrouping of a dispatch's received rows ---------------------------------------------------
def moe_regroup_index(counts: Tensor, rows: int, align: int = 1,
                      padded_rows: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """counts (W, L) int32/int64 rows received from source s for local expert e (rows of any
    stride: e.g. a column slice of a header), rows = their sum (host-known) -> (source_of
    (padded_rows,), expert_of (rows,)) int64: expert-major row r is the received (source-major)
    row source_of[r], and source-major row q is expert-major row expert_of[q]. Source-major:
    source s's chunks back to back in local-expert order; expert-major: expert e's chunks in
    source order, then padding rows up to a multiple of `align` (source_of = rows there: gather
    from a source with a zero row at index `rows`); each chunk keeps its rows' order.
    padded_rows: the sum over experts of their padded row counts (host-known; None: rows, which
    align 1 requires). One pass of the C++ op (moe_routing.h, moe_regroup_index): on the CPU
    counts that do not sum to rows (or padded sizes not to padded_rows) raise; on CUDA (no sync)
    every index lies in range (source_of [0, rows], rows only for padding; expert_of [0,
    padded_rows)), a row the counts do not place mapping to itself."""
    return _ext.call(_ext.moe_regroup_index, counts, int(rows), int(align),
                     -1 if padded_rows is None else int(padded_rows))


@torch.library.register_fake("tessera::moe_regroup_index")
def _regroup_index_fake(counts, rows, align=1, padded_rows=-1):
    torch._check(counts.dim() == 2, lambda: f"moe_regroup_index: counts must be (W, L), got "
                 f"{tuple(counts.shape)}")
    padded = rows if padded_rows < 0 else padded_rows
    return (counts.new_empty((padded,), dtype=torch.int64),
            counts.new_empty((rows,), dtype=torch.int64))


__all__ = ["QUANT_MODES", "dequantize_rows", "moe_dequantize_rows", "moe_permute",
           "moe_permute_backward", "moe_regroup_index", "moe_routing", "moe_unpermute",
           "moe_unpermute_backward", "permute", "permuted_rows", "route", "unpermute"]
