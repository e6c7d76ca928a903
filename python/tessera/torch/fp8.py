"""Differentiable FP8-rowwise grouped GEMM (the torchao dynamic rowwise recipe) on tessera.

    y (T, N) = x (T, K) @ w_t (G, K, N)   grouped over the rows of x by `offs`

Forward quantizes x per row and the weights per output column (scales along K) and runs
scaled_grouped_mm. Backward: dgrad quantizes dy per row and the weights per input column (scales
along N); wgrad quantizes dy and x per column (scales along the token dim, one scale per column
for all groups — constant along each group's contraction, so exact to apply in the epilogue).
Every step is a device op on torch's current stream: no host sync, CUDA-graph capturable.

Quantization: `quantize_fp8_rowwise` (a custom op) runs tessera's rowwise quantizer when the
extension has it for the tensor's device; otherwise the torch implementation of the same rule
(DESIGN §4 current scaling: scale = 448 / amax, amax 0 or non-finite -> 1, saturating RNE cast).
`quantize_backend(device)` says which one runs.
"""
from typing import Tuple

import torch
from torch import Tensor

from .. import _tessera as _C
from . import _bridge as br
from .ops import scaled_grouped_mm

_E4M3_MAX = 448.0
_FLT_MAX = torch.finfo(torch.float32).max
_HAS_TESSERA_QUANTIZE = hasattr(_C, "_quantize_into")


def quantize_backend(device) -> str:
    """"tessera" when the extension's quantizer handles `device`, else "torch"."""
    device = torch.device(device)
    if not _HAS_TESSERA_QUANTIZE:
        return "torch"
    if device.type == "cuda" and not _C.cuda_compiled():
        return "torch"
    return "tessera"


def _quantize_torch(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """E4M3 codes of x and the FP32 scale_inv per slice along `dim` (current scaling)."""
    amax = x.abs().amax(dim=dim, keepdim=True).float()
    ok = (amax > 0) & torch.isfinite(amax)
    # A tensor / tensor division: `448.0 / t` is reciprocal(t) * 448 in torch (two roundings),
    # which gave scales 1 ulp off tessera's on the H200 run.
    scale = torch.where(ok, torch.full_like(amax, _E4M3_MAX) / torch.where(ok, amax, 1.0), 1.0)
    scale = scale.clamp(max=_FLT_MAX)
    q = (x.float() * scale).clamp(-_E4M3_MAX, _E4M3_MAX).to(torch.float8_e4m3fn)
    return q, (1.0 / scale).reshape(-1)


@torch.library.custom_op("tessera::quantize_fp8_rowwise", mutates_args=())
def quantize_fp8_rowwise(x: Tensor, rowwise: bool = True,
                         columnwise: bool = False) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """FP8 E4M3 rowwise quantization of a 2-D (R, C) tensor in one pass.

    Returns (data (R, C), scale_inv (R,), columnwise_data (C, R), columnwise_scale_inv (C,));
    the columnwise copy is stored transposed (tessera's contract), i.e. it is the rowwise
    quantization of x^T. A usage not asked for comes back as empty tensors.
    """
    torch._check(x.dim() == 2, lambda: f"quantize_fp8_rowwise: x must be 2-D, got {x.dim()}-D")
    r, c = x.shape
    dev = x.device
    data = torch.empty((r, c) if rowwise else (0, 0), dtype=torch.float8_e4m3fn, device=dev)
    sinv = torch.empty((r if rowwise else 0,), dtype=torch.float32, device=dev)
    cdata = torch.empty((c, r) if columnwise else (0, 0), dtype=torch.float8_e4m3fn, device=dev)
    csinv = torch.empty((c if columnwise else 0,), dtype=torch.float32, device=dev)
    if quantize_backend(dev) == "tessera":
        x_c = x.detach().contiguous()
        with torch.cuda.device(dev) if dev.type == "cuda" else br._nullcontext():
            _C._quantize_into(x_c, "rowwise", "e4m3", rowwise, columnwise,
                              data.view(torch.uint8), sinv, cdata.view(torch.uint8), csinv,
                              br.stream_handle(dev))
        return data, sinv, cdata, csinv
    if rowwise:
        q, s = _quantize_torch(x, 1)
        data.copy_(q)
        sinv.copy_(s)
    if columnwise:
        q, s = _quantize_torch(x.t(), 1)
        cdata.copy_(q)
        csinv.copy_(s)
    return data, sinv, cdata, csinv


@quantize_fp8_rowwise.register_fake
def _quantize_fake(x, rowwise=True, columnwise=False):
    r, c = x.shape
    e4m3 = torch.float8_e4m3fn
    return (x.new_empty((r, c) if rowwise else (0, 0), dtype=e4m3),
            x.new_empty((r if rowwise else 0,), dtype=torch.float32),
            x.new_empty((c, r) if columnwise else (0, 0), dtype=e4m3),
            x.new_empty((c if columnwise else 0,), dtype=torch.float32))


class FP8RowwiseGroupedMM(torch.autograd.Function):
    """y = x @ w_t grouped by offs with dynamic FP8 rowwise quantization (forward and backward).

    x: (T, K) bf16/fp16/fp32. w_t: (G, K, N), the transposed view of (G, N, K) weights (any
    layout works; that one avoids copies). offs: (G,) int32 cumulative end offsets. y: (T, N) in
    x's dtype (rows past offs[-1] unwritten; their gradient contribution is ignored).
    """

    @staticmethod
    def forward(ctx, x: Tensor, w_t: Tensor, offs: Tensor) -> Tensor:
        g, k, n = w_t.shape
        xq, xs, xcq, xcs = quantize_fp8_rowwise(x, True, True)        # (T,K) (T) (K,T) (K)
        w_nk = w_t.transpose(-2, -1).reshape(g * n, k)                 # (G*N, K) rows = out cols
        wq, ws, _, _ = quantize_fp8_rowwise(w_nk, True, False)         # scales along K
        y = scaled_grouped_mm(xq, wq.reshape(g, n, k).transpose(-2, -1), xs, ws, offs,
                              out_dtype=x.dtype)
        ctx.save_for_backward(xcq, xcs, w_t, offs)
        ctx.x_dtype = x.dtype
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        xcq, xcs, w_t, offs = ctx.saved_tensors
        g, k, n = w_t.shape
        dy = dy.contiguous()
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dq, ds, dcq, dcs = quantize_fp8_rowwise(dy, need_x, need_w)    # (T,N) (T) (N,T) (N)
        dx = dw_t = None
        if need_x:                       # dx (T, K) = dy (T, N) @ W_g (N, K)
            w_kn = w_t.reshape(g * k, n) if w_t.is_contiguous() else w_t.contiguous().reshape(
                g * k, n)                                              # (G*K, N)
            wq, ws, _, _ = quantize_fp8_rowwise(w_kn, True, False)     # scales along N
            dx = scaled_grouped_mm(dq, wq.reshape(g, k, n).transpose(-2, -1), ds, ws, offs,
                                   out_dtype=ctx.x_dtype)
        if need_w:                       # dW_g (N, K) = dy_g^T (N, T_g) @ x_g (T_g, K)
            dw = scaled_grouped_mm(dcq, xcq.t(), dcs.repeat(g), xcs.repeat(g), offs,
                                   out_dtype=torch.float32)            # (G, N, K)
            dw_t = dw.transpose(-2, -1).to(w_t.dtype)
        return dx, dw_t, None


def fp8_rowwise_grouped_mm(x: Tensor, w_t: Tensor, offs: Tensor) -> Tensor:
    """Differentiable FP8-rowwise grouped GEMM: x (T, K) @ w_t (G, K, N) -> (T, N)."""
    return FP8RowwiseGroupedMM.apply(x, w_t, offs)


def scaled_operands_rowwise(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """FP8 operands for a 2D x 3D scaled_grouped_mm from high-precision a (T, K) and b (G, K, N):
    (a_fp8, b_fp8 (G, K, N) column-major, scale_a (T), scale_b (G, N))."""
    g, k, n = b.shape
    aq, as_, _, _ = quantize_fp8_rowwise(a, True, False)
    bq, bs, _, _ = quantize_fp8_rowwise(b.transpose(-2, -1).reshape(g * n, k), True, False)
    return aq, bq.reshape(g, n, k).transpose(-2, -1), as_, bs.reshape(g, n)


__all__ = ["FP8RowwiseGroupedMM", "fp8_rowwise_grouped_mm", "quantize_backend",
           "quantize_fp8_rowwise", "scaled_operands_rowwise"]


