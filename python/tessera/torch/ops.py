"""tessera.torch.grouped_mm / scaled_grouped_mm: torch._grouped_mm / torch._scaled_grouped_mm's
arguments and results on tessera's grouped GEMM, each one call into the compiled ops
(torch.ops.tessera.grouped_mm / scaled_grouped_mm, python/torch_ext/gemm_ops.cpp: the checks,
the operand layouts and the GEMM on torch's current stream), as the training step's ops.

Conventions (as torch): `offs` holds int32 cumulative END offsets (G entries) along the grouped
dim; B of a 2D x 3D product is (G, K, N), typically the transposed view of (G, N, K) weights.
Forms: 2D x 3D (rows of A grouped: forward, dgrad), 2D x 2D (contraction grouped: wgrad, output
(G, M, N); an empty group gives zeros), 3D x 3D (batched, no offs), 3D x 2D (columns of the output
grouped). Rows (2D x 3D) or columns (3D x 2D) past offs[-1] are zeros (torch leaves them
unwritten), so the backward's gradients of rows that took no part in a product are zero too.

Each op has a fake (meta) implementation here, so torch.compile(fullgraph=True) traces through
it, and grouped_mm has autograd whose backward is itself grouped_mm calls (dgrad M-grouped, wgrad
K-grouped). An operand whose memory layout the kernel cannot read directly is copied once; the
usual layouts (row-major A, B as a transposed view of contiguous weights) are never copied.
"""
from typing import Optional

import torch
from torch import Tensor

from . import _ext


def _out_shape(a: Tensor, b: Tensor, offs: Optional[Tensor]) -> tuple[list[int], bool]:
    """Output shape and whether the result is returned as a transposed view (3D x 2D)."""
    if a.dim() == 2 and b.dim() == 3:
        return [a.shape[0], b.shape[2]], False
    if a.dim() == 2 and b.dim() == 2:
        return [offs.shape[0], a.shape[0], b.shape[1]], False
    if a.dim() == 3 and b.dim() == 3:
        return [a.shape[0], a.shape[1], b.shape[2]], False
    return [a.shape[1], b.shape[1]], True


def _empty_out(a: Tensor, b: Tensor, offs: Optional[Tensor], dtype: torch.dtype) -> Tensor:
    shape, transposed = _out_shape(a, b, offs)
    if transposed:
        return a.new_empty((shape[1], shape[0]), dtype=dtype).t()
    return a.new_empty(shape, dtype=dtype)


# ---- grouped_mm ---------------------------------------------------------------------------------

def grouped_mm(mat_a: Tensor, mat_b: Tensor, offs: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """torch._grouped_mm(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype) on tessera's
    grouped GEMM: the same arguments and results.

    mat_a, mat_b: float32 / bfloat16 / float16 of one dtype, 2D or 3D:
      2D x 3D  (T, K) x (G, K, N) -> (T, N), rows of mat_a grouped by offs (forward, dgrad)
      2D x 2D  (M, T) x (T, N) -> (G, M, N), the contraction grouped (wgrad; an empty group
               gives zeros)
      3D x 3D  (G, M, K) x (G, K, N) -> (G, M, N), batched (offs None)
      3D x 2D  (G, M, K) x (K, T) -> (M, T), columns of the output grouped
    offs: int32 (G,) cumulative END offsets along the grouped dim (required when an operand is
      2D); rows (or columns) past offs[-1] are zeros (torch leaves them unwritten).
    bias: must be None (as torch requires). out_dtype: mat_a's dtype (default) or float32.
    Differentiable (the backward is grouped_mm calls) and traceable by
    torch.compile(fullgraph=True). Bad input raises a tessera.Error naming the argument.
    """
    return _ext.call(_ext.grouped_mm, mat_a, mat_b, offs, bias, out_dtype)


@torch.library.register_fake("tessera::grouped_mm")
def _grouped_mm_fake(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    return _empty_out(mat_a, mat_b, offs, mat_a.dtype if out_dtype is None else out_dtype)


def _grouped_mm_setup(ctx, inputs, output):
    mat_a, mat_b, offs, _, _ = inputs
    ctx.save_for_backward(mat_a, mat_b, offs)


def _transposed(t: Tensor) -> Tensor:
    return t.transpose(-2, -1)


def _grouped_mm_backward(ctx, grad):
    a, b, offs = ctx.saved_tensors
    grad = grad.to(a.dtype)
    gm = _ext.grouped_mm
    ga = gb = None
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    b_col_major = (not b.is_contiguous()) and _transposed(b).is_contiguous()
    if a.dim() == 2 and b.dim() == 3:      # y (T, N) = a (T, K) x b (G, K, N)
        if need_a:
            ga = gm(grad, _transposed(b), offs)                      # dgrad, M-grouped
        if need_b:                                                   # wgrad, K-grouped
            gb = (_transposed(gm(grad.t(), a, offs)) if b_col_major  # (G, N, K)^T like b
                  else gm(a.t(), grad, offs))                        # (G, K, N)
    elif a.dim() == 2:                     # y (G, M, N) = a (M, T) x b (T, N)
        if need_a:
            ga = gm(b, _transposed(grad), offs).t()                  # (T, M)^T
        if need_b:
            gb = gm(a.t(), grad, offs)                               # (T, N)
    elif b.dim() == 3:                     # batched
        if need_a:
            ga = gm(grad, _transposed(b))
        if need_b:
            gb = (_transposed(gm(_transposed(grad), a)) if b_col_major
                  else gm(_transposed(a), grad))
    else:                                  # y (M, T) = a (G, M, K) x b (K, T)
        if need_a:
            ga = gm(grad, b.t(), offs)                               # 2D x 2D -> (G, M, K)
        if need_b:
            gb = gm(_transposed(a), grad, offs)                      # 3D x 2D -> (K, T)
    return ga, gb, None, None, None


torch.library.register_autograd("tessera::grouped_mm", _grouped_mm_backward,
                                setup_context=_grouped_mm_setup)


# ---- scaled_grouped_mm --------------------------------------------------------------------------

def scaled_grouped_mm(mat_a: Tensor, mat_b: Tensor, scale_a: Tensor, scale_b: Tensor,
                      offs: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                      scale_result: Optional[Tensor] = None,
                      out_dtype: Optional[torch.dtype] = None,
                      use_fast_accum: bool = False) -> Tensor:
    """torch._scaled_grouped_mm with rowwise FP8 scales (scale_a per row of A, scale_b per column
    of B, per group for 2D x 2D), FP32 accumulation (use_fast_accum is accepted and ignored:
    tessera always accumulates in FP32). The forms and offs as grouped_mm; out_dtype bfloat16
    (default), float16 or float32. The scales multiply the FP32 accumulator before the output
    is rounded to out_dtype."""
    return _ext.call(_ext.scaled_grouped_mm, mat_a, mat_b, scale_a, scale_b, offs, bias,
                     scale_result, out_dtype, use_fast_accum)


@torch.library.register_fake("tessera::scaled_grouped_mm")
def _scaled_grouped_mm_fake(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None,
                            scale_result=None, out_dtype=None, use_fast_accum=False):
    return _empty_out(mat_a, mat_b, offs, torch.bfloat16 if out_dtype is None else out_dtype)
