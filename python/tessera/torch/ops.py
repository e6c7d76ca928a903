"""tessera.torch.grouped_mm / scaled_grouped_mm: torch.library custom ops (namespace "tessera")
with the arguments and conventions of torch._grouped_mm / torch._scaled_grouped_mm.

Conventions (as torch): `offs` holds int32 cumulative END offsets (G entries) along the grouped
dim; B of a 2D x 3D product is (G, K, N), typically the transposed view of (G, N, K) weights.
Forms: 2D x 3D (rows of A grouped: forward, dgrad), 2D x 2D (contraction grouped: wgrad, output
(G, M, N); an empty group gives zeros), 3D x 3D (batched, no offs), 3D x 2D (columns of the output
grouped). Rows (2D x 3D) or columns (3D x 2D) past offs[-1] are left unwritten, as torch does.

Each op has a fake (meta) implementation, so torch.compile(fullgraph=True) traces through it,
and grouped_mm has autograd whose backward is itself grouped_mm calls (dgrad M-grouped, wgrad
K-grouped). An operand whose memory layout the kernel cannot read directly is copied once with
.contiguous(); the usual layouts (row-major A, B as a transposed view of contiguous weights) are
never copied.
"""
import functools
from typing import Optional

import torch
from torch import Tensor

from .. import _tessera as _C
from . import _bridge as br
from ._errors import check as _check

_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def _contiguous_or_copy(t: Tensor) -> Tensor:
    return t if t.is_contiguous() else t.contiguous()


def _matrix_stack(t: Tensor) -> tuple[Tensor, bool]:
    """(G, X, Y) as stored: (t, False) when contiguous, (t^T (G, Y, X), True) when t is the
    transposed view of contiguous memory; otherwise a contiguous copy."""
    if t.is_contiguous():
        return t, False
    tt = t.transpose(-2, -1)
    if tt.is_contiguous():
        return tt, True
    return t.contiguous(), False


def _check_offs(offs: Optional[Tensor], needed: bool, groups: Optional[int], name: str) -> None:
    if not needed:
        _check(offs is None, _C.InvalidArgumentError,
               lambda: f"{name}: offs must be None when both operands are 3D")
        return
    _check(offs is not None, _C.InvalidArgumentError,
           lambda: f"{name}: offs is required when an operand is 2D")
    _check(offs.dim() == 1, _C.ShapeError,
           lambda: f"{name}: offs must be a 1D tensor of cumulative end offsets, got "
                   f"{offs.dim()}D")
    _check(offs.dtype == torch.int32, _C.DTypeError,
           lambda: f"{name}: offs must be int32 (cumulative end offsets), got {offs.dtype}")
    if groups is not None:
        _check(offs.shape[0] == groups, _C.ShapeError,
               lambda: f"{name}: offs has {offs.shape[0]} groups but the 3D operand {groups}")


def _out_shape(a: Tensor, b: Tensor, offs: Optional[Tensor]) -> tuple[list[int], bool]:
    """Output shape and whether the result is returned as a transposed view (3D x 2D)."""
    if a.dim() == 2 and b.dim() == 3:
        return [a.shape[0], b.shape[2]], False
    if a.dim() == 2 and b.dim() == 2:
        return [offs.shape[0], a.shape[0], b.shape[1]], False
    if a.dim() == 3 and b.dim() == 3:
        return [a.shape[0], a.shape[1], b.shape[2]], False
    return [a.shape[1], b.shape[1]], True


def _validate(a: Tensor, b: Tensor, offs: Optional[Tensor], name: str) -> None:
    _check(a.dim() in (2, 3) and b.dim() in (2, 3), _C.ShapeError,
           lambda: f"{name}: mat_a and mat_b must be 2D or 3D, got {a.dim()}D and {b.dim()}D")
    if a.dim() == 3 or b.dim() == 3:
        _check(a.shape[-1] == b.shape[-2], _C.ShapeError,
               lambda: f"{name}: contraction dims differ: mat_a {tuple(a.shape)}, "
                       f"mat_b {tuple(b.shape)}")
    else:
        _check(a.shape[1] == b.shape[0], _C.ShapeError,
               lambda: f"{name}: contraction dims differ: mat_a {tuple(a.shape)}, "
                       f"mat_b {tuple(b.shape)}")
    if a.dim() == 3 and b.dim() == 3:
        _check(a.shape[0] == b.shape[0], _C.ShapeError,
               lambda: f"{name}: batch dims differ: mat_a {tuple(a.shape)}, "
                       f"mat_b {tuple(b.shape)}")
    groups = b.shape[0] if (a.dim() == 2 and b.dim() == 3) else (
        a.shape[0] if (a.dim() == 3 and b.dim() == 2) else None)
    _check_offs(offs, a.dim() == 2 or b.dim() == 2, groups, name)
    _check(a.device == b.device, _C.InvalidArgumentError,
           lambda: f"{name}: mat_a and mat_b on different devices ({a.device}, {b.device})")


def _empty_out(a: Tensor, b: Tensor, offs: Optional[Tensor], dtype: torch.dtype) -> Tensor:
    shape, transposed = _out_shape(a, b, offs)
    if transposed:
        return a.new_empty((shape[1], shape[0]), dtype=dtype).t()
    return a.new_empty(shape, dtype=dtype)


# ---- grouped_mm ---------------------------------------------------------------------------------

def _resolve_out_dtype(a: Tensor, out_dtype: Optional[torch.dtype]) -> torch.dtype:
    dt = a.dtype if out_dtype is None else out_dtype
    _check(dt == a.dtype or dt == torch.float32, _C.DTypeError,
           lambda: f"grouped_mm: out_dtype {dt} must be mat_a's dtype {a.dtype} or float32")
    return dt


def _check_no_bias(bias: Optional[Tensor], name: str) -> None:
    if bias is not None:
        raise _C.UnsupportedError(f"tessera unsupported: {name}: bias is not supported (as in torch.{'_' + name}); add it to "
                         f"the output, or use tessera.torch.GroupedLinear(bias=True)")


@torch.library.custom_op("tessera::grouped_mm", mutates_args=())
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
      2D); rows (or columns) past offs[-1] are left unwritten, as torch does.
    bias: must be None (as torch requires). out_dtype: mat_a's dtype (default) or float32.
    Differentiable (the backward is grouped_mm calls) and traceable by
    torch.compile(fullgraph=True). Bad input raises a tessera.Error naming the argument.
    """
    _check_no_bias(bias, "grouped_mm")
    _validate(mat_a, mat_b, offs, "grouped_mm")
    _check(mat_a.dtype in _FLOAT_DTYPES and mat_b.dtype == mat_a.dtype, _C.DTypeError,
           lambda: f"grouped_mm: mat_a/mat_b must share a float32/bfloat16/float16 dtype, "
                   f"got {mat_a.dtype} and {mat_b.dtype}")
    out = _empty_out(mat_a, mat_b, offs, _resolve_out_dtype(mat_a, out_dtype))
    if mat_a.dim() == 2 and mat_b.dim() == 3:          # (T, K) x (G, K, N) -> (T, N)
        b_mem, b_is_t = _matrix_stack(mat_b)           # (G, N, K) when b_is_t else (G, K, N)
        br.run(br.KIND_M_GROUPED, br.dense(_contiguous_or_copy(mat_a)), br.dense(b_mem), out,
               offs, transpose_a=False, transpose_b=b_is_t)
    elif mat_a.dim() == 2:                             # (M, T) x (T, N) -> (G, M, N)
        a_t = _contiguous_or_copy(mat_a.t())           # (T, M)
        br.run(br.KIND_K_GROUPED, br.dense(a_t), br.dense(_contiguous_or_copy(mat_b)), out, offs,
               transpose_a=True, transpose_b=False)
    elif mat_b.dim() == 3:                             # (G, M, K) x (G, K, N) -> (G, M, N)
        a_mem, a_is_t = _matrix_stack(mat_a)           # (G, K, M) when a_is_t
        b_mem, b_is_t = _matrix_stack(mat_b)
        br.run(br.KIND_BATCHED, br.dense(a_mem), br.dense(b_mem), out, None,
               transpose_a=a_is_t, transpose_b=b_is_t)
    else:                                              # (G, M, K) x (K, T) -> (M, T) as (T, M)^T
        b_t = _contiguous_or_copy(mat_b.t())           # (T, K), rows grouped
        a_mem, a_is_t = _matrix_stack(mat_a)           # (G, M, K) -> TN; (G, K, M) -> NN
        br.run(br.KIND_M_GROUPED, br.dense(b_t), br.dense(a_mem), out.t(), offs,
               transpose_a=False, transpose_b=not a_is_t)
    return out


@grouped_mm.register_fake
def _grouped_mm_fake(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    _check_no_bias(bias, "grouped_mm")
    _validate(mat_a, mat_b, offs, "grouped_mm")
    return _empty_out(mat_a, mat_b, offs, _resolve_out_dtype(mat_a, out_dtype))


def _grouped_mm_setup(ctx, inputs, output):
    mat_a, mat_b, offs, _, _ = inputs
    ctx.save_for_backward(mat_a, mat_b, offs)


def _transposed(t: Tensor) -> Tensor:
    return t.transpose(-2, -1)


def _grouped_mm_backward(ctx, grad):
    a, b, offs = ctx.saved_tensors
    grad = grad.to(a.dtype)
    gm = torch.ops.tessera.grouped_mm
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


grouped_mm.register_autograd(_grouped_mm_backward, setup_context=_grouped_mm_setup)


# ---- scaled_grouped_mm --------------------------------------------------------------------------

_unit_scales: dict = {}


def _unit_scale(device: torch.device) -> Tensor:
    """A cached FP32 [[1.0]] on `device` (the shared scale_inv of an unscaled FP8 operand)."""
    key = str(device)
    if key not in _unit_scales:
        _unit_scales[key] = torch.ones(1, 1, dtype=torch.float32, device=device)
    return _unit_scales[key]


def _check_scale(scale: Tensor, numel: int, name: str, arg: str) -> None:
    _check(scale.dtype == torch.float32, _C.DTypeError,
           lambda: f"{name}: {arg} must be float32 (rowwise FP8), got {scale.dtype}")
    _check(scale.numel() == numel, _C.ShapeError,
           lambda: f"{name}: {arg} has {scale.numel()} elements, expected {numel}")


def _validate_scaled(a, b, scale_a, scale_b, offs, out_dtype):
    name = "scaled_grouped_mm"
    _validate(a, b, offs, name)
    _check(a.dtype in _FP8_DTYPES and b.dtype in _FP8_DTYPES, _C.DTypeError,
           lambda: f"{name}: mat_a/mat_b must be float8, got {a.dtype} and {b.dtype}")
    dt = torch.bfloat16 if out_dtype is None else out_dtype
    _check(dt in _FLOAT_DTYPES, _C.DTypeError,
           lambda: f"{name}: out_dtype must be bf16/fp16/fp32, got {dt}")
    g = offs.shape[0] if offs is not None else 1
    if a.dim() == 2 and b.dim() == 2:
        _check_scale(scale_a, g * a.shape[0], name, "scale_a")
        _check_scale(scale_b, g * b.shape[1], name, "scale_b")
    else:
        _check_scale(scale_a, a.shape[0] * (a.shape[1] if a.dim() == 3 else 1), name, "scale_a")
        _check_scale(scale_b, b.shape[-1] * (b.shape[0] if b.dim() == 3 else 1), name, "scale_b")
    return dt


def _element(t: Tensor) -> str:
    return "e4m3" if t.dtype == torch.float8_e4m3fn else "e5m2"


def _rowwise(data: Tensor, scale: Tensor):
    """A rowwise FP8 operand: data (R, C) C-contiguous codes, scale (R) = its scale_inv."""
    rows, cols = data.shape
    return br.quantized(data, _contiguous_or_copy(scale.reshape(rows, 1)), "rowwise", rows, cols,
                        element=_element(data))


def _fp8_stack(t: Tensor) -> Tensor:
    """An FP8 (G, X, Y) operand as contiguous (G, Y, X) memory (torch's column-major B)."""
    return _contiguous_or_copy(_transposed(t))


@torch.library.custom_op("tessera::scaled_grouped_mm", mutates_args=())
def scaled_grouped_mm(mat_a: Tensor, mat_b: Tensor, scale_a: Tensor, scale_b: Tensor,
                      offs: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                      scale_result: Optional[Tensor] = None,
                      out_dtype: Optional[torch.dtype] = None,
                      use_fast_accum: bool = False) -> Tensor:
    """torch._scaled_grouped_mm with rowwise FP8 scales (scale_a per row of A, scale_b per column
    of B, per group for 2D x 2D), FP32 accumulation (use_fast_accum is accepted and ignored:
    tessera always accumulates in FP32)."""
    _check_no_bias(bias, "scaled_grouped_mm")
    _check(scale_result is None, _C.UnsupportedError,
           lambda: "scaled_grouped_mm: scale_result is not supported (as torch)")
    dt = _validate_scaled(mat_a, mat_b, scale_a, scale_b, offs, out_dtype)
    out = _empty_out(mat_a, mat_b, offs, dt)
    if mat_a.dim() == 2 and mat_b.dim() == 3:           # (T, K) x (G, K, N) -> (T, N)
        g, k, n = mat_b.shape
        b_nk = _fp8_stack(mat_b).reshape(g * n, k)      # (G*N, K)
        br.run(br.KIND_M_GROUPED, _rowwise(_contiguous_or_copy(mat_a), scale_a),
               _rowwise(b_nk, scale_b), out, offs, transpose_a=False, transpose_b=True)
    elif mat_a.dim() == 3 and mat_b.dim() == 3:         # batched
        g, m, k = mat_a.shape
        n = mat_b.shape[2]
        br.run(br.KIND_BATCHED,
               _rowwise(_contiguous_or_copy(mat_a).reshape(g * m, k), scale_a),
               _rowwise(_fp8_stack(mat_b).reshape(g * n, k), scale_b), out, None,
               transpose_a=False, transpose_b=True)
    elif mat_a.dim() == 3:                              # (G, M, K) x (K, T) -> (M, T) as (T, M)^T
        g, m, k = mat_a.shape
        b_t = _contiguous_or_copy(mat_b.t())            # (T, K)
        br.run(br.KIND_M_GROUPED, _rowwise(b_t, scale_b),
               _rowwise(_contiguous_or_copy(mat_a).reshape(g * m, k), scale_a), out.t(), offs,
               transpose_a=False, transpose_b=True)
    else:                                               # (M, T) x (T, N) -> (G, M, N)
        out = _scaled_wgrad(mat_a, mat_b, scale_a, scale_b, offs, dt)
    return out


def _scaled_wgrad(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, offs: Tensor,
                  dt: torch.dtype) -> Tensor:
    """2D x 2D: the per-(group, row) and per-(group, column) scales are applied to the FP32
    accumulator after a unit-scale FP8 K-grouped GEMM (mathematically the epilogue scaling)."""
    m, t = a.shape
    n = b.shape[1]
    g = offs.shape[0]
    acc = a.new_empty((g, m, n), dtype=torch.float32)
    unit = _unit_scale(a.device)
    a_mt = _contiguous_or_copy(a)                        # (M, T): columnwise copy of (T, M)
    b_nt = _contiguous_or_copy(b.t())                    # (N, T): columnwise copy of (T, N)
    br.run(br.KIND_K_GROUPED,
           br.quantized(a_mt, unit, "tensor", t, m, columnwise=True, element=_element(a)),
           br.quantized(b_nt, unit, "tensor", t, n, columnwise=True, element=_element(b)),
           acc, offs, transpose_a=True, transpose_b=False)
    acc.mul_(scale_a.reshape(g, m, 1)).mul_(scale_b.reshape(g, 1, n))
    return acc if dt == torch.float32 else acc.to(dt)


@scaled_grouped_mm.register_fake
def _scaled_grouped_mm_fake(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None,
                            scale_result=None, out_dtype=None, use_fast_accum=False):
    dt = _validate_scaled(mat_a, mat_b, scale_a, scale_b, offs, out_dtype)
    return _empty_out(mat_a, mat_b, offs, dt)


def _documented(op):
    """The public face of a custom op: a function with the op's own name, signature and
    docstring (help() on the torch.library object shows CustomOpDef's class documentation) that
    calls the op; `.op` is the torch.library object (register_fake, ...)."""
    @functools.wraps(op._init_fn)
    def call(*args, **kwargs):
        return op(*args, **kwargs)
    call.op = op
    return call


grouped_mm = _documented(grouped_mm)
scaled_grouped_mm = _documented(scaled_grouped_mm)
