"""The device ops of the grouped linear step (tessera.torch.linear): the FP8 GEMMs of forward,
dgrad and wgrad, the 16-bit GEMMs, and the wgrads that accumulate into an FP32 main_grad — each
as a plain implementation (eager steps call it directly: no dispatcher round trip per op, host
time bounds the smaller shapes) and as a torch.library custom op with a fake implementation
(torch.compile traces those). `_Ops.get()` picks the set.

FP8 operands are codes + scale_inv of one scaling mode, named by the caller (each op takes
a_mode and b_mode: "tensor", "rowwise", "block1x128", "block128x128" with FP32 scales, or
"mxfp8", "mxfp8_32x32" with E8M0 scales (torch.float8_e8m0fnu) — the modes the recipe gives its
roles, tessera.torch.linear; nothing is inferred from a scale's shape), E4M3 or E5M2 (the
element follows the codes' torch dtype; the GEMM takes E4M3 × E4M3 and E5M2 × E4M3, gradients as
A). The mode also says how a columnwise copy is stored: transposed (C, R) for the FP8 modes,
as x (R, C) for MXFP8 (the scaling-mode table's `columnwise_transposed`); the GEMMs get each
copy as it is stored, never transposed or copied. Accumulating wgrads run the K-grouped GEMM with
beta = 1 into the FP32 main_grad: an empty group leaves its slice unchanged.

NVFP4 operands ("nvfp4", "nvfp4_16x16") go through the same ops: codes are uint8 bytes holding
two E2M1 codes each (a stored copy (r, c) is (r, ceil(c/2)) bytes, so the logical size along
the packed dimension is read as 2·bytes: the step keeps it even), scales float8_e4m3fn, and each
operand adds its copy's FP32 global amax (a_amax, b_amax: None for the other modes). The wgrad
ops take a_rht / b_rht: the columnwise copy was quantized after the 16-point Hadamard transform
(the CPU GEMM undoes it; the CUDA GEMM multiplies two such copies over the transformed tokens,
group sizes multiples of 16).
"""
from __future__ import annotations

from collections import namedtuple
from typing import Optional

import torch
from torch import Tensor

from . import _bridge as br
from .fp8 import columnwise_transposed, is_fp4, scale_shape
from .ops import grouped_mm

# The element of a copy's codes, from their torch dtype (uint8: NVFP4's packed E2M1 codes).
_ELEMENTS = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2", torch.uint8: "e2m1"}


def _stored_shape(copy: Tensor, mode: str):
    """(rows, cols) of the codes a stored copy holds: its shape, the last dimension doubled for
    the packed E2M1 codes of the NVFP4 modes (two per byte; the step keeps that size even)."""
    r, c = copy.shape
    return (r, 2 * c) if is_fp4(mode) else (r, c)


def _logical_of_columnwise(copy: Tensor, mode: str):
    """(rows, cols) of the logical matrix whose columnwise copy is `copy`: the copy's shape
    reversed when `mode` stores it transposed (FP8, NVFP4), as is for MXFP8."""
    r, c = _stored_shape(copy, mode)
    return (c, r) if columnwise_transposed(mode) else (r, c)


def _fp8_operand(data: Tensor, scale: Tensor, mode: str, rows: int, cols: int,
                 columnwise: bool, name: str, amax: Optional[Tensor] = None, rht: bool = False):
    """A quantized operand (`name`: "A" or "B" in messages) of the logical (rows, cols) matrix
    quantized with `mode`: the rowwise copy (rows, cols) or the columnwise copy ((cols, rows),
    stored transposed, for the FP8 and NVFP4 modes; (rows, cols) for MXFP8). scale_inv is viewed
    with the 2-D shape the GEMM checks (scale_shape; torch keeps per-tensor and rowwise scales
    1-D). NVFP4: amax is the copy's global amax, rht whether it has the Hadamard transform."""
    shape = scale_shape(mode, rows, cols, columnwise)
    if scale.numel() != shape[0] * shape[1]:
        usage = "columnwise" if columnwise else "rowwise"
        raise ValueError(f"{name}.scale_inv: the {usage} copy of a ({rows}, {cols}) {mode} "
                         f"operand has {shape} scales, got {tuple(scale.shape)}")
    if is_fp4(mode) != (amax is not None):
        raise ValueError(f"{name}: a {mode} operand " + ("needs its copy's global amax" if
                         is_fp4(mode) else "has no global amax (NVFP4 operands have one)"))
    return br.quantized(data, scale.reshape(shape), mode, rows, cols, columnwise=columnwise,
                        element=_ELEMENTS[data.dtype], amax=amax, random_hadamard=rht)


# ---- FP8 --------------------------------------------------------------------------------------

def _m_grouped_fp8(aq: Tensor, a_s: Tensor, a_mode: str, bq: Tensor, b_s: Tensor, b_mode: str,
                   offs: Tensor, b_rows: int, b_cols: int, b_columnwise: bool, out_cols: int,
                   out_dtype: torch.dtype, name: str, a_amax: Optional[Tensor],
                   b_amax: Optional[Tensor]) -> Tensor:
    """out (T, out_cols) = A (T, ·) rowwise × the logical (b_rows, b_cols) weight matrix read
    from its rowwise copy (TN: forward) or its transposed columnwise copy (NN: dgrad); rows past
    offs[-1] zero (tessera.torch.linear's module doc says why), written by the GEMM call on the
    device (no fill of the whole output)."""
    t, c = _stored_shape(aq, a_mode)
    out = aq.new_empty((t, out_cols), dtype=out_dtype)
    br.run(br.KIND_M_GROUPED, _fp8_operand(aq, a_s, a_mode, t, c, False, "A", a_amax),
           _fp8_operand(bq, b_s, b_mode, b_rows, b_cols, b_columnwise, "B", b_amax), out, offs,
           transpose_a=False, transpose_b=not b_columnwise, zero_unused_rows=True,
           key=(name, t, c, b_rows, b_cols, out_dtype, a_mode, b_mode, aq.dtype))
    return out


def _fprop_impl(xq: Tensor, xs: Tensor, wq: Tensor, ws: Tensor, offs: Tensor, groups: int,
                out_dtype: torch.dtype, a_mode: str, b_mode: str, a_amax: Optional[Tensor] = None,
                b_amax: Optional[Tensor] = None) -> Tensor:
    n = wq.shape[0] // groups
    return _m_grouped_fp8(xq, xs, a_mode, wq, ws, b_mode, offs, groups * n,
                          _stored_shape(xq, a_mode)[1], False, n, out_dtype, "fp8_fprop", a_amax,
                          b_amax)


@torch.library.custom_op("tessera::fp8_linear_fprop", mutates_args=())
def fp8_linear_fprop(xq: Tensor, xs: Tensor, wq: Tensor, ws: Tensor, offs: Tensor,
                     groups: int, out_dtype: torch.dtype, a_mode: str, b_mode: str,
                     a_amax: Optional[Tensor] = None,
                     b_amax: Optional[Tensor] = None) -> Tensor:
    """y (T, N) = xq (T, K) · Wq_gᵀ: x's rowwise copy (mode a_mode, scales xs) and W's
    rowwise copy Wq (G·N, K) (mode b_mode, scales ws); NVFP4 copies with their global amax."""
    return _fprop_impl(xq, xs, wq, ws, offs, groups, out_dtype, a_mode, b_mode, a_amax, b_amax)


@fp8_linear_fprop.register_fake
def _fprop_fake(xq, xs, wq, ws, offs, groups, out_dtype, a_mode, b_mode, a_amax=None,
                b_amax=None):
    return xq.new_empty((xq.shape[0], wq.shape[0] // groups), dtype=out_dtype)


def _dgrad_impl(dyq: Tensor, dys: Tensor, wcq: Tensor, wcs: Tensor, offs: Tensor, groups: int,
                out_dtype: torch.dtype, a_mode: str, b_mode: str, a_amax: Optional[Tensor] = None,
                b_amax: Optional[Tensor] = None) -> Tensor:
    k = _logical_of_columnwise(wcq, b_mode)[1]
    return _m_grouped_fp8(dyq, dys, a_mode, wcq, wcs, b_mode, offs,
                          groups * _stored_shape(dyq, a_mode)[1], k, True, k, out_dtype,
                          "fp8_dgrad", a_amax, b_amax)


@torch.library.custom_op("tessera::fp8_linear_dgrad", mutates_args=())
def fp8_linear_dgrad(dyq: Tensor, dys: Tensor, wcq: Tensor, wcs: Tensor, offs: Tensor,
                     groups: int, out_dtype: torch.dtype, a_mode: str, b_mode: str,
                     a_amax: Optional[Tensor] = None,
                     b_amax: Optional[Tensor] = None) -> Tensor:
    """dx (T, K) = dyq (T, N) · W_g: dy's rowwise copy (mode a_mode) and W's columnwise codes
    (K, G·N) — (G·N, K) for MXFP8, (K, G·N/2) bytes for NVFP4 — (mode b_mode, scales wcs)."""
    return _dgrad_impl(dyq, dys, wcq, wcs, offs, groups, out_dtype, a_mode, b_mode, a_amax,
                       b_amax)


@fp8_linear_dgrad.register_fake
def _dgrad_fake(dyq, dys, wcq, wcs, offs, groups, out_dtype, a_mode, b_mode, a_amax=None,
                b_amax=None):
    return dyq.new_empty((dyq.shape[0], _logical_of_columnwise(wcq, b_mode)[1]), dtype=out_dtype)


def _run_fp8_wgrad(dycq: Tensor, dycs: Tensor, xcq: Tensor, xcs: Tensor, offs: Tensor,
                   dw: Tensor, beta: float, a_mode: str, b_mode: str, a_amax: Optional[Tensor],
                   b_amax: Optional[Tensor], a_rht: bool, b_rht: bool) -> None:
    t, n = _logical_of_columnwise(dycq, a_mode)
    k = _logical_of_columnwise(xcq, b_mode)[1]
    br.run(br.KIND_K_GROUPED, _fp8_operand(dycq, dycs, a_mode, t, n, True, "A", a_amax, a_rht),
           _fp8_operand(xcq, xcs, b_mode, t, k, True, "B", b_amax, b_rht), dw, offs,
           transpose_a=True, transpose_b=False, beta=beta,
           key=("fp8_wgrad", t, k, n, offs.shape[0], dw.dtype, a_mode, b_mode, dycq.dtype, beta,
                a_rht, b_rht))


def _wgrad_shape(dycq: Tensor, xcq: Tensor, offs: Tensor, a_mode: str, b_mode: str):
    """(G, N, K) of the wgrad of the columnwise copies of dy (T, N) and x (T, K)."""
    return (offs.shape[0], _logical_of_columnwise(dycq, a_mode)[1],
            _logical_of_columnwise(xcq, b_mode)[1])


def _wgrad_impl(dycq: Tensor, dycs: Tensor, xcq: Tensor, xcs: Tensor, offs: Tensor,
                out_dtype: torch.dtype, a_mode: str, b_mode: str, a_amax: Optional[Tensor] = None,
                b_amax: Optional[Tensor] = None, a_rht: bool = False,
                b_rht: bool = False) -> Tensor:
    dw = dycq.new_empty(_wgrad_shape(dycq, xcq, offs, a_mode, b_mode), dtype=out_dtype)
    _run_fp8_wgrad(dycq, dycs, xcq, xcs, offs, dw, 0.0, a_mode, b_mode, a_amax, b_amax, a_rht,
                   b_rht)
    return dw


@torch.library.custom_op("tessera::fp8_linear_wgrad", mutates_args=())
def fp8_linear_wgrad(dycq: Tensor, dycs: Tensor, xcq: Tensor, xcs: Tensor, offs: Tensor,
                     out_dtype: torch.dtype, a_mode: str, b_mode: str,
                     a_amax: Optional[Tensor] = None, b_amax: Optional[Tensor] = None,
                     a_rht: bool = False, b_rht: bool = False) -> Tensor:
    """dW (G, N, K) = dy_gᵀ · x_g from the columnwise copies dycq (N, T) (mode a_mode) and
    xcq (K, T) (mode b_mode) — (T, N) and (T, K) for MXFP8, (N, T/2) and (K, T/2) bytes for
    NVFP4, with their global amax and Hadamard flags — and their scales; an empty group gives
    zeros."""
    return _wgrad_impl(dycq, dycs, xcq, xcs, offs, out_dtype, a_mode, b_mode, a_amax, b_amax,
                       a_rht, b_rht)


@fp8_linear_wgrad.register_fake
def _wgrad_fake(dycq, dycs, xcq, xcs, offs, out_dtype, a_mode, b_mode, a_amax=None, b_amax=None,
                a_rht=False, b_rht=False):
    return dycq.new_empty(_wgrad_shape(dycq, xcq, offs, a_mode, b_mode), dtype=out_dtype)


def _wgrad_acc_impl(dycq: Tensor, dycs: Tensor, xcq: Tensor, xcs: Tensor, offs: Tensor,
                    main_grad: Tensor, a_mode: str, b_mode: str, a_amax: Optional[Tensor] = None,
                    b_amax: Optional[Tensor] = None, a_rht: bool = False,
                    b_rht: bool = False) -> None:
    _run_fp8_wgrad(dycq, dycs, xcq, xcs, offs, main_grad, 1.0, a_mode, b_mode, a_amax, b_amax,
                   a_rht, b_rht)


@torch.library.custom_op("tessera::fp8_linear_wgrad_accumulate", mutates_args=("main_grad",))
def fp8_linear_wgrad_accumulate(dycq: Tensor, dycs: Tensor, xcq: Tensor, xcs: Tensor,
                                offs: Tensor, main_grad: Tensor, a_mode: str,
                                b_mode: str, a_amax: Optional[Tensor] = None,
                                b_amax: Optional[Tensor] = None, a_rht: bool = False,
                                b_rht: bool = False) -> None:
    """main_grad (G, N, K) FP32 += dy_gᵀ · x_g (the K-grouped quantized GEMM with beta = 1)."""
    _wgrad_acc_impl(dycq, dycs, xcq, xcs, offs, main_grad, a_mode, b_mode, a_amax, b_amax,
                    a_rht, b_rht)


@fp8_linear_wgrad_accumulate.register_fake
def _wgrad_acc_fake(dycq, dycs, xcq, xcs, offs, main_grad, a_mode, b_mode, a_amax=None,
                    b_amax=None, a_rht=False, b_rht=False):
    return None


# ---- 16-bit (bf16 recipe) ------------------------------------------------------------------

def _dense_fprop_impl(x: Tensor, w: Tensor, offs: Tensor) -> Tensor:
    """y (T, N) = x (T, K) · W_gᵀ, W (G, N, K) as stored (M-grouped TN)."""
    g, n, k = w.shape
    t = x.shape[0]
    y = x.new_empty((t, n))
    br.run(br.KIND_M_GROUPED, br.dense(x), br.dense(w), y, offs, transpose_a=False,
           transpose_b=True, key=("fprop", t, k, n, g, x.dtype))
    return y


def _dense_dgrad_impl(dy: Tensor, w: Tensor, offs: Tensor) -> Tensor:
    """dx (T, K) = dy (T, N) · W_g, W read MN-major in place (M-grouped NN)."""
    g, n, k = w.shape
    t = dy.shape[0]
    dx = dy.new_empty((t, k))
    br.run(br.KIND_M_GROUPED, br.dense(dy), br.dense(w), dx, offs, transpose_a=False,
           transpose_b=False, key=("dgrad", t, k, n, g, dy.dtype))
    return dx


def _run_dense_wgrad(dy: Tensor, x: Tensor, offs: Tensor, dw: Tensor, beta: float) -> None:
    t, n = dy.shape
    k = x.shape[1]
    br.run(br.KIND_K_GROUPED, br.dense(dy), br.dense(x), dw, offs, transpose_a=True,
           transpose_b=False, beta=beta,
           key=("wgrad", t, k, n, offs.shape[0], x.dtype, dw.dtype, beta))


def _dense_wgrad_impl(dy: Tensor, x: Tensor, offs: Tensor, out_dtype: torch.dtype) -> Tensor:
    """dW (G, N, K) = dy_gᵀ x_g, K-grouped on the token matrices as stored, in out_dtype."""
    dw = dy.new_empty((offs.shape[0], dy.shape[1], x.shape[1]), dtype=out_dtype)
    _run_dense_wgrad(dy, x, offs, dw, 0.0)
    return dw


def _dense_wgrad_acc_impl(dy: Tensor, x: Tensor, offs: Tensor, main_grad: Tensor) -> None:
    _run_dense_wgrad(dy, x, offs, main_grad, 1.0)


@torch.library.custom_op("tessera::linear_wgrad_accumulate", mutates_args=("main_grad",))
def linear_wgrad_accumulate(dy: Tensor, x: Tensor, offs: Tensor, main_grad: Tensor) -> None:
    """main_grad (G, N, K) FP32 += dy_gᵀ x_g for 16-bit dy (T, N), x (T, K) (beta = 1)."""
    _dense_wgrad_acc_impl(dy, x, offs, main_grad)


@linear_wgrad_accumulate.register_fake
def _dense_wgrad_acc_fake(dy, x, offs, main_grad):
    return None


def _dense_fprop_op(x: Tensor, w: Tensor, offs: Tensor) -> Tensor:
    return grouped_mm(x, w.transpose(-2, -1), offs)


def _dense_dgrad_op(dy: Tensor, w: Tensor, offs: Tensor) -> Tensor:
    return grouped_mm(dy, w, offs)


def _dense_wgrad_op(dy: Tensor, x: Tensor, offs: Tensor, out_dtype: torch.dtype) -> Tensor:
    return grouped_mm(dy.t(), x, offs, out_dtype=out_dtype)


# fp8 / dense: (fprop, dgrad, wgrad, wgrad_accumulate) of one path.
OpSet = namedtuple("OpSet", "fp8 dense")


class _Ops:
    """The step's device ops: the custom ops under torch.compile (traceable, with fake
    implementations), their plain implementations in eager mode."""
    compiled = OpSet((fp8_linear_fprop, fp8_linear_dgrad, fp8_linear_wgrad,
                     fp8_linear_wgrad_accumulate),
                    (_dense_fprop_op, _dense_dgrad_op, _dense_wgrad_op, linear_wgrad_accumulate))
    eager = OpSet((_fprop_impl, _dgrad_impl, _wgrad_impl, _wgrad_acc_impl),
                 (_dense_fprop_impl, _dense_dgrad_impl, _dense_wgrad_impl, _dense_wgrad_acc_impl))

    @staticmethod
    def get() -> OpSet:
        return _Ops.compiled if torch.compiler.is_compiling() else _Ops.eager


__all__ = ["fp8_linear_dgrad", "fp8_linear_fprop", "fp8_linear_wgrad",
           "fp8_linear_wgrad_accumulate", "linear_wgrad_accumulate"]
