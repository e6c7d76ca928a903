"""The training step of a grouped linear layer on tessera: y = x · W_gᵀ per group of rows, its
dgrad and wgrad, for every recipe the torch front end runs.

    grouped_linear(x (T, K), weight (G, N, K), offs (G,) int32 cumulative end offsets,
                   recipe="bf16" | "fp8_rowwise" | "fp8_current", weight_cache=None) -> y (T, N)

Each GEMM reads its operands in the layout they are in (nothing is transposed or copied between
tessera calls, no PyTorch elementwise op runs in the step):
- bf16: forward M-grouped TN (x, W as stored); dgrad M-grouped NN (dy, W as stored: the kernel
  reads W MN-major); wgrad K-grouped (dy, x as stored, MN-major) straight into the weight's
  dtype.
- fp8_rowwise (torchao's dynamic rowwise recipe, E4M3 everywhere, FP32 accumulation): x and dy
  are quantized once each, both usages in one pass (rowwise: scales per token row; columnwise:
  the transposed codes with one scale per column); W once per weight version, both usages in one
  pass of the (G·N, K) matrix (rowwise: scales per output row along K; columnwise: the transposed
  codes (K, G·N), one scale per input column k, shared by the groups — what the C++ nn layer
  does). forward = xq · Wq, dgrad = dyq · W columnwise, wgrad = dy columnwise · x columnwise, all
  scales applied in the GEMM epilogue.
- fp8_current (TE's per-tensor current scaling, E4M3): the same step with one scale per tensor
  (x, dy, and the whole (G·N, K) weight), scale = 448 / amax; the columnwise copies are the
  transposed codes of the same scale.
Group sizes for FP8 must be multiples of 16 rows (as torch._scaled_grouped_mm asks): the wgrad
reads each group's token columns with 16-byte TMA loads and writes NaN for a group that breaks
this, never silently wrong numbers. Rows past offs[-1] (a capacity buffer): the BF16 GEMMs leave
them unwritten, as torch._grouped_mm; the FP8 outputs have them zero, because every row of x and
dy takes part in the per-column scales of the wgrad operands — a layer's own outputs must not
feed unwritten memory (possibly NaN) into the next layer's scales. Input rows past offs[-1] must
be finite for the same reason.

Quantized weights are cached across calls (micro-batches, eval/train alternation) in a
`WeightCache` and re-quantized only when the weight changes (its version counter, storage or
shape): both usages are always produced together, so no usage can go stale.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import _bridge as br
from .fp8 import (quantize_fp8_rowwise, quantize_fp8_rowwise_impl, quantize_fp8_tensor,
                  quantize_fp8_tensor_impl)
from .ops import grouped_mm

RECIPES = ("bf16", "fp8_rowwise", "fp8_current")
# FP8 recipes: (the custom-op quantizer, its eager implementation)
_FP8_QUANTIZERS = {
    "fp8_rowwise": (quantize_fp8_rowwise, quantize_fp8_rowwise_impl),
    "fp8_current": (quantize_fp8_tensor, quantize_fp8_tensor_impl),
}


def _fp8_operand(data: Tensor, scale: Tensor, rows: int, cols: int, columnwise: bool):
    """An FP8 operand of the logical (rows, cols) matrix: the rowwise copy (rows, cols) or the
    columnwise copy (cols, rows), stored transposed. Its scale_inv says the mode: one value per
    stored row (rowwise mode) or one for the whole tensor (per-tensor mode)."""
    n = cols if columnwise else rows
    if scale.numel() == 1:
        return br.quantized(data, scale.reshape(1, 1), "tensor", rows, cols, columnwise=columnwise)
    return br.quantized(data, scale.reshape(n, 1), "rowwise", rows, cols, columnwise=columnwise)


# ---- the three FP8 GEMMs as custom ops (fake implementations: torch.compile traces them) -------

def _m_grouped_fp8(aq: Tensor, a_s: Tensor, bq: Tensor, b_s: Tensor, offs: Tensor,
                   b_rows: int, b_cols: int, b_columnwise: bool, out_cols: int,
                   out_dtype: torch.dtype, name: str) -> Tensor:
    """out (T, out_cols) = A (T, ·) rowwise × the logical (b_rows, b_cols) weight matrix read
    from its rowwise copy (TN: forward) or its transposed columnwise copy (NN: dgrad); rows past
    offs[-1] zero (see module doc)."""
    t, c = aq.shape
    out = aq.new_zeros((t, out_cols), dtype=out_dtype)
    br.run(br.KIND_M_GROUPED, _fp8_operand(aq, a_s, t, c, False),
           _fp8_operand(bq, b_s, b_rows, b_cols, b_columnwise), out, offs, transpose_a=False,
           transpose_b=not b_columnwise,
           key=(name, t, c, b_rows, b_cols, out_dtype, a_s.numel() == 1))
    return out


def _fprop_impl(xq: Tensor, xs: Tensor, wq: Tensor, ws: Tensor, offs: Tensor, groups: int,
                out_dtype: torch.dtype) -> Tensor:
    n = wq.shape[0] // groups
    return _m_grouped_fp8(xq, xs, wq, ws, offs, groups * n, xq.shape[1], False, n, out_dtype,
                          "fp8_fprop")


@torch.library.custom_op("tessera::fp8_linear_fprop", mutates_args=())
def fp8_linear_fprop(xq: Tensor, xs: Tensor, wq: Tensor, ws: Tensor, offs: Tensor,
                     groups: int, out_dtype: torch.dtype) -> Tensor:
    """y (T, N) = xq (T, K) · Wq_gᵀ, Wq (G·N, K) rowwise codes, scales xs (T), ws (G·N)."""
    return _fprop_impl(xq, xs, wq, ws, offs, groups, out_dtype)


@fp8_linear_fprop.register_fake
def _fprop_fake(xq, xs, wq, ws, offs, groups, out_dtype):
    return xq.new_empty((xq.shape[0], wq.shape[0] // groups), dtype=out_dtype)


def _dgrad_impl(dyq: Tensor, dys: Tensor, wcq: Tensor, wcs: Tensor, offs: Tensor, groups: int,
                out_dtype: torch.dtype) -> Tensor:
    k = wcq.shape[0]
    return _m_grouped_fp8(dyq, dys, wcq, wcs, offs, groups * dyq.shape[1], k, True, k, out_dtype,
                          "fp8_dgrad")


@torch.library.custom_op("tessera::fp8_linear_dgrad", mutates_args=())
def fp8_linear_dgrad(dyq: Tensor, dys: Tensor, wcq: Tensor, wcs: Tensor, offs: Tensor,
                     groups: int, out_dtype: torch.dtype) -> Tensor:
    """dx (T, K) = dyq (T, N) · W_g, W's columnwise codes (K, G·N) with scales wcs (K)."""
    return _dgrad_impl(dyq, dys, wcq, wcs, offs, groups, out_dtype)


@fp8_linear_dgrad.register_fake
def _dgrad_fake(dyq, dys, wcq, wcs, offs, groups, out_dtype):
    return dyq.new_empty((dyq.shape[0], wcq.shape[0]), dtype=out_dtype)


def _wgrad_impl(dycq: Tensor, dycs: Tensor, xcq: Tensor, xcs: Tensor, offs: Tensor,
                out_dtype: torch.dtype) -> Tensor:
    n, t = dycq.shape
    k = xcq.shape[0]
    g = offs.shape[0]
    dw = dycq.new_empty((g, n, k), dtype=out_dtype)
    br.run(br.KIND_K_GROUPED, _fp8_operand(dycq, dycs, t, n, True),
           _fp8_operand(xcq, xcs, t, k, True), dw, offs, transpose_a=True, transpose_b=False,
           key=("fp8_wgrad", t, k, n, g, out_dtype, dycs.numel() == 1))
    return dw


@torch.library.custom_op("tessera::fp8_linear_wgrad", mutates_args=())
def fp8_linear_wgrad(dycq: Tensor, dycs: Tensor, xcq: Tensor, xcs: Tensor, offs: Tensor,
                     out_dtype: torch.dtype) -> Tensor:
    """dW (G, N, K) = dy_gᵀ · x_g from the columnwise copies dycq (N, T), xcq (K, T) and their
    per-column scales (N), (K); an empty group gives zeros."""
    return _wgrad_impl(dycq, dycs, xcq, xcs, offs, out_dtype)


@fp8_linear_wgrad.register_fake
def _wgrad_fake(dycq, dycs, xcq, xcs, offs, out_dtype):
    return dycq.new_empty((offs.shape[0], dycq.shape[0], xcq.shape[0]), dtype=out_dtype)


# ---- weight cache ----------------------------------------------------------------------------

class WeightCache:
    """The quantized copies of one weight, kept until the weight changes.

    Key: the weight's storage pointer, shape and in-place version counter (an optimizer step,
    `load_state_dict` or any in-place write bumps it). `invalidate()` forces the next call to
    re-quantize (a benchmark of whole training steps calls it every step). Both usages are made
    together, so a cached weight never lacks one."""

    def __init__(self):
        self.key = None
        self.value = None

    def invalidate(self) -> None:
        self.key = None
        self.value = None

    def get(self, weight: Tensor, recipe: str = "fp8_rowwise"):
        g, n, k = weight.shape
        key = (weight.data_ptr(), tuple(weight.shape), weight._version, weight.dtype, recipe)
        compiling = torch.compiler.is_compiling()
        if compiling or self.key != key:
            w = weight.detach().reshape(g * n, k)
            quantize = _FP8_QUANTIZERS[recipe][0 if compiling else 1]
            value = quantize(w.contiguous(), True, True)  # (G·N,K) scales (K,G·N) scales
            if compiling:
                return value
            self.key, self.value = key, value
        return self.value


# ---- autograd ------------------------------------------------------------------------------

class _Ops:
    """The step's device ops: the custom ops under torch.compile (traceable, with fake
    implementations), their plain implementations in eager mode (no dispatcher round trip per op:
    host time is what bounds the smaller shapes' steps)."""
    compiled = (fp8_linear_fprop, fp8_linear_dgrad, fp8_linear_wgrad)
    eager = (_fprop_impl, _dgrad_impl, _wgrad_impl)

    @staticmethod
    def get(recipe: str):
        compiling = torch.compiler.is_compiling()
        quantize = _FP8_QUANTIZERS[recipe][0 if compiling else 1]
        return (quantize,) + (_Ops.compiled if compiling else _Ops.eager)


class _Fp8Linear(torch.autograd.Function):
    """The FP8 step of one recipe (fp8_rowwise, fp8_current): quantize once per tensor (both
    usages), three GEMMs with the scales in the epilogue."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, offs: Tensor, recipe: str, wq: Tensor,
                ws: Tensor, wcq: Tensor, wcs: Tensor) -> Tensor:
        quantize, fprop, _, _ = _Ops.get(recipe)
        g = weight.shape[0]
        need_wgrad = weight.requires_grad
        xq, xs, xcq, xcs = quantize(x, True, need_wgrad)   # one pass, both usages
        y = fprop(xq, xs, wq, ws, offs, g, x.dtype)
        ctx.save_for_backward(xcq, xcs, wcq, wcs, offs)
        ctx.shapes = (g, x.dtype, weight.dtype, recipe)
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        xcq, xcs, wcq, wcs, offs = ctx.saved_tensors
        g, x_dtype, w_dtype, recipe = ctx.shapes
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        quantize, _, dgrad, wgrad = _Ops.get(recipe)
        dy = dy if dy.is_contiguous() else dy.contiguous()
        dyq, dys, dycq, dycs = quantize(dy, need_x, need_w)  # one pass
        dx = dgrad(dyq, dys, wcq, wcs, offs, g, x_dtype) if need_x else None
        dw = wgrad(dycq, dycs, xcq, xcs, offs, w_dtype) if need_w else None
        return dx, dw, None, None, None, None, None, None


class _Bf16Linear(torch.autograd.Function):
    """The eager 16-bit step: forward TN on W as stored, dgrad NN (W read MN-major), wgrad
    K-grouped on the token matrices (read MN-major) into the weight's dtype."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, offs: Tensor) -> Tensor:
        g, n, k = weight.shape
        t = x.shape[0]
        y = x.new_empty((t, n))
        br.run(br.KIND_M_GROUPED, br.dense(x), br.dense(weight), y, offs, transpose_a=False,
               transpose_b=True, key=("fprop", t, k, n, g, x.dtype))
        ctx.save_for_backward(x, weight, offs)
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        x, weight, offs = ctx.saved_tensors
        g, n, k = weight.shape
        t = x.shape[0]
        dy = dy if dy.is_contiguous() else dy.contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:  # dx (T, K) = dy (T, N) · W_g (N, K)
            dx = x.new_empty((t, k))
            br.run(br.KIND_M_GROUPED, br.dense(dy), br.dense(weight), dx, offs,
                   transpose_a=False, transpose_b=False, key=("dgrad", t, k, n, g, x.dtype))
        if ctx.needs_input_grad[1]:  # dW_g (N, K) = dy_gᵀ x_g
            dw = weight.new_empty((g, n, k))
            br.run(br.KIND_K_GROUPED, br.dense(dy), br.dense(x), dw, offs, transpose_a=True,
                   transpose_b=False, key=("wgrad", t, k, n, g, x.dtype))
        return dx, dw, None


def _check(x: Tensor, weight: Tensor, offs: Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D (T, in) tensor, got {tuple(x.shape)}")
    if weight.dim() != 3 or weight.shape[2] != x.shape[1]:
        raise ValueError(f"weight: expected (G, out, {x.shape[1]}), got {tuple(weight.shape)}")
    if offs.dim() != 1 or offs.dtype != torch.int32 or offs.shape[0] != weight.shape[0]:
        raise ValueError(f"offs: expected ({weight.shape[0]},) int32 cumulative end offsets, "
                         f"got {tuple(offs.shape)} {offs.dtype}")


def grouped_linear(x: Tensor, weight: Tensor, offs: Tensor, recipe: str = "bf16",
                   weight_cache: Optional[WeightCache] = None) -> Tensor:
    """y (T, N) = x (T, K) · W_gᵀ for the rows of each group (offs: int32 cumulative ends),
    weight (G, N, K) as torch.nn.Linear stores it per group. Differentiable in x and weight.
    Rows past offs[-1] are left unwritten (as torch._grouped_mm)."""
    _check(x, weight, offs)
    if recipe == "bf16":
        xw = x.to(weight.dtype)
        if torch.compiler.is_compiling() or not (xw.is_contiguous() and weight.is_contiguous()):
            return grouped_mm(xw, weight.transpose(-2, -1), offs)
        return _Bf16Linear.apply(xw, weight, offs)
    if recipe in _FP8_QUANTIZERS:
        cache = weight_cache if weight_cache is not None else WeightCache()
        wq, ws, wcq, wcs = cache.get(weight, recipe)
        xc = x if x.is_contiguous() else x.contiguous()
        return _Fp8Linear.apply(xc, weight, offs, recipe, wq, ws, wcq, wcs)
    raise ValueError(f"recipe: {recipe!r} is not supported by tessera.torch; expected one of "
                     f"{RECIPES}")


def fp8_rowwise_grouped_mm(x: Tensor, w_t: Tensor, offs: Tensor) -> Tensor:
    """Differentiable FP8-rowwise grouped GEMM: x (T, K) @ w_t (G, K, N) -> (T, N), the
    functional form of grouped_linear(recipe="fp8_rowwise") with w_t the transposed view of
    (G, N, K) weights (any other layout is copied once). No weight cache: every call quantizes."""
    return grouped_linear(x, w_t.transpose(-2, -1), offs, "fp8_rowwise")


__all__ = ["RECIPES", "WeightCache", "fp8_linear_dgrad", "fp8_linear_fprop", "fp8_linear_wgrad",
           "fp8_rowwise_grouped_mm", "grouped_linear"]
