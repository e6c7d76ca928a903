"""FP8 quantization for tessera.torch: rowwise (the torchao dynamic rowwise recipe), per tensor
(TE's current scaling), per block (DeepSeek-V3's 1x128 activations / 128x128 weights) and MXFP8
(OCP MX: E8M0 scales per 32 elements or 32x32 tiles).

Each quantizer makes both usages of a 2-D tensor in one pass (the differentiable layer built on
them is tessera.torch.linear). Every step is a device op on torch's current stream: no host
sync, CUDA-graph capturable.

Quantization: `quantize_fp8_rowwise` (a custom op) runs tessera's rowwise quantizer when the
extension has it for the tensor's device; otherwise the torch implementation of the same rule
(docs/numerics.md, current scaling: scale = fp8_max / amax (448 E4M3, 57344 E5M2), amax 0 or
non-finite -> 1, saturating RNE cast). The rowwise and per-tensor quantizers take an `element`
("e4m3", the default, or "e5m2": custom recipes quantize gradients to E5M2).
`quantize_backend(device)` says which one runs. The per-tensor, block and MXFP8 quantizers always
run tessera's (its CPU and CUDA backends; no torch fallback). `scale_shape` gives the scale_inv
shape of any mode's copy, from the C++ scaling-mode table.
"""
from typing import Tuple

import torch
from torch import Tensor

from .. import _tessera as _C
from . import _bridge as br
from ._errors import check

_E4M3_MAX = 448.0
_FP8_MAX = {"e4m3": _E4M3_MAX, "e5m2": 57344.0}
_FLT_MAX = torch.finfo(torch.float32).max
_HAS_TESSERA_QUANTIZE = hasattr(_C, "_quantize_into")
FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
# The torch dtype of E8M0 scales (quantize_mxfp8_impl says why); uint8 before torch 2.7.
E8M0_DTYPE = getattr(torch, "float8_e8m0fnu", torch.uint8)
_MODE_TABLE = {row["name"]: row for row in _C.scaling_mode_table}  # formats/scaling_modes.h


def _modes_of_family(family: str) -> tuple:
    """The scaling modes of one family of the C++ table ("block", "mxfp8", "nvfp4", ...), in its order."""
    return tuple(name for name, row in _MODE_TABLE.items() if row["family"] == family)


BLOCK_MODES = _modes_of_family("block")
MX_MODES = _modes_of_family("mxfp8")


def _blocks(n, block: int):
    return 1 if block == 0 else (n + block - 1) // block  # block 0: the whole dimension


def _round_up(n, multiple: int):
    return (n + multiple - 1) // multiple * multiple


def _mode_row(mode: str) -> dict:
    """The scaling-mode table's row of `mode`; a tessera.InvalidArgumentError (a ValueError) naming the accepted names."""
    row = _MODE_TABLE.get(mode)
    if row is None:
        raise _C.InvalidArgumentError(f"tessera invalid argument: mode: {mode!r} is not a scaling mode; expected one of "
                         f"{tuple(_MODE_TABLE)}")
    return row


def is_fp4(mode: str) -> bool:
    """Whether `mode` stores FP4 codes, two per byte (NVFP4): the C++ table's `fp4`."""
    return _mode_row(mode)["fp4"]


def columnwise_transposed(mode: str) -> bool:
    """Whether `mode` stores the columnwise copy of (R, C) transposed, (C, R) (the FP8 modes),
    or as (R, C) (MXFP8): the C++ table's `columnwise_transposed`."""
    return _mode_row(mode)["columnwise_transposed"]


def scale_shape(mode: str, rows, cols, columnwise: bool = False) -> Tuple[int, int]:
    """(rows, cols) of the compact scale_inv of one copy of a (rows, cols) tensor quantized with
    `mode`: tessera's scale_shape (docs/numerics.md), read from the C++ scaling-mode table in
    Python so that symbolic sizes pass through under torch.compile. The copy (r, c) is x, or xᵀ
    for the columnwise usage; one scale per stored block, its rows and columns padded to the
    mode's multiples: tensor (1, 1); rowwise (r, 1); block1x128 (roundup(r, 4), ceil(c/128));
    block128x128 (ceil(r/128), roundup(ceil(c/128), 4)). MXFP8 ("mxfp8", "mxfp8_32x32": the
    table's `columnwise_transposed` is False) keeps the columnwise copy (rows, cols): scales
    (rows, ceil(cols/32)) rowwise, (ceil(rows/32), cols) columnwise."""
    row = _mode_row(mode)
    r, c = (cols, rows) if columnwise else (rows, cols)
    (block_r, block_c), (pad_r, pad_c) = row["scale_block"], row["pad"]
    nr, nc = _round_up(_blocks(r, block_r), pad_r), _round_up(_blocks(c, block_c), pad_c)
    return (nc, nr) if columnwise and not row["columnwise_transposed"] else (nr, nc)


def quantize_backend(device) -> str:
    """"tessera" when the extension's quantizer handles `device`, else "torch"."""
    device = torch.device(device)
    if not _HAS_TESSERA_QUANTIZE:
        return "torch"
    if device.type == "cuda" and not _C.cuda_compiled():
        return "torch"
    return "tessera"


def _check_element(element: str, op: str) -> None:
    check(element in FP8_DTYPES, _C.InvalidArgumentError,
          lambda: f"{op}: element {element!r} is not one of {tuple(FP8_DTYPES)}")


def _quantize_torch(x: Tensor, dim: int, element: str = "e4m3") -> tuple[Tensor, Tensor]:
    """FP8 codes of x and the FP32 scale_inv per slice along `dim` (current scaling)."""
    fp8_max = _FP8_MAX[element]
    amax = x.abs().amax(dim=dim, keepdim=True).float()
    finite = torch.isfinite(amax)
    ok = (amax > 0) & finite
    # A tensor / tensor division: `448.0 / t` is reciprocal(t) * 448 in torch (two roundings),
    # which gave scales 1 ulp off tessera's on the H200 run.
    scale = torch.where(ok, torch.full_like(amax, fp8_max) / torch.where(ok, amax, 1.0), 1.0)
    scale = scale.clamp(max=_FLT_MAX)
    # A NaN or +-inf in the slice: its scale is NaN, so its codes and scale_inv are NaN
    # (docs/numerics.md, "Non-finite input").
    scale = torch.where(finite, scale, float("nan"))
    q = (x.float() * scale).clamp(-fp8_max, fp8_max).to(FP8_DTYPES[element])
    return q, (1.0 / scale).reshape(-1)


def quantize_fp8_rowwise_impl(x: Tensor, rowwise: bool = True, columnwise: bool = False,
                              element: str = "e4m3") -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """FP8 rowwise quantization (E4M3 by default, or `element` "e5m2") of a 2-D (R, C) tensor in
    one pass.

    Returns (data (R, C), scale_inv (R,), columnwise_data (C, R), columnwise_scale_inv (C,));
    the columnwise copy is stored transposed (tessera's contract), i.e. it is the rowwise
    quantization of x^T. A usage not asked for comes back as empty tensors.
    """
    check(x.dim() == 2, _C.ShapeError,
          lambda: f"quantize_fp8_rowwise: x must be 2-D, got {x.dim()}-D")
    _check_element(element, "quantize_fp8_rowwise")
    r, c = x.shape
    dev, dt = x.device, FP8_DTYPES[element]
    data = torch.empty((r, c) if rowwise else (0, 0), dtype=dt, device=dev)
    sinv = torch.empty((r if rowwise else 0,), dtype=torch.float32, device=dev)
    cdata = torch.empty((c, r) if columnwise else (0, 0), dtype=dt, device=dev)
    csinv = torch.empty((c if columnwise else 0,), dtype=torch.float32, device=dev)
    if quantize_backend(dev) == "tessera":
        x_c = x if x.is_contiguous() else x.contiguous()
        dl = br.dl
        with br.device_scope(dev):
            _C._quantize_into(dl(x_c), "rowwise", element, rowwise, columnwise,
                              dl(data.view(torch.uint8)), dl(sinv), dl(cdata.view(torch.uint8)),
                              dl(csinv), br.stream_handle(dev))
        return data, sinv, cdata, csinv
    if rowwise:
        q, s = _quantize_torch(x, 1, element)
        data.copy_(q)
        sinv.copy_(s)
    if columnwise:
        q, s = _quantize_torch(x.t(), 1, element)
        cdata.copy_(q)
        csinv.copy_(s)
    return data, sinv, cdata, csinv


def quantize_fp8_tensor_impl(x: Tensor, rowwise: bool = True, columnwise: bool = False,
                             element: str = "e4m3") -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """FP8 per-tensor current scaling (TE's Float8CurrentScaling; E4M3 by default, or `element`
    "e5m2") of a 2-D (R, C) tensor:
    scale = fp8_max / amax(x) (amax 0 or non-finite -> 1), both copies with that one scale, the
    columnwise copy stored transposed. Returns (data (R, C), scale_inv (1,), columnwise_data
    (C, R), columnwise_scale_inv (1,)); a usage not asked for comes back empty."""
    check(x.dim() == 2, _C.ShapeError,
          lambda: f"quantize_fp8_tensor: x must be 2-D, got {x.dim()}-D")
    _check_element(element, "quantize_fp8_tensor")
    r, c = x.shape
    dev, dt = x.device, FP8_DTYPES[element]
    data = torch.empty((r, c) if rowwise else (0, 0), dtype=dt, device=dev)
    cdata = torch.empty((c, r) if columnwise else (0, 0), dtype=dt, device=dev)
    scales = torch.empty(4, dtype=torch.float32, device=dev)  # scale_inv, cw scale_inv, amaxes
    x_c = x if x.is_contiguous() else x.contiguous()
    dl = br.dl
    with br.device_scope(dev):
        _C._quantize_into(dl(x_c), "tensor", element, rowwise, columnwise,
                          dl(data.view(torch.uint8)), dl(scales[0:1]),
                          dl(cdata.view(torch.uint8)), dl(scales[1:2]), br.stream_handle(dev),
                          dl(scales[2:3]), dl(scales[3:4]))
    return (data, scales[0:1] if rowwise else scales[:0], cdata,
            scales[1:2] if columnwise else scales[:0])


@torch.library.custom_op("tessera::quantize_fp8_tensor", mutates_args=())
def quantize_fp8_tensor(x: Tensor, rowwise: bool = True, columnwise: bool = False,
                        element: str = "e4m3") -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The custom op of quantize_fp8_tensor_impl (traceable by torch.compile)."""
    out = quantize_fp8_tensor_impl(x, rowwise, columnwise, element)
    return tuple(t.clone() if t.dim() == 1 else t for t in out)  # outputs must not alias


@quantize_fp8_tensor.register_fake
def _quantize_tensor_fake(x, rowwise=True, columnwise=False, element="e4m3"):
    r, c = x.shape
    dt = FP8_DTYPES[element]
    return (x.new_empty((r, c) if rowwise else (0, 0), dtype=dt),
            x.new_empty((1 if rowwise else 0,), dtype=torch.float32),
            x.new_empty((c, r) if columnwise else (0, 0), dtype=dt),
            x.new_empty((1 if columnwise else 0,), dtype=torch.float32))


@torch.library.custom_op("tessera::quantize_fp8_rowwise", mutates_args=())
def quantize_fp8_rowwise(x: Tensor, rowwise: bool = True, columnwise: bool = False,
                         element: str = "e4m3") -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """FP8 rowwise quantization of a 2-D (R, C) tensor in one pass (the custom op of
    quantize_fp8_rowwise_impl, traceable by torch.compile)."""
    return quantize_fp8_rowwise_impl(x, rowwise, columnwise, element)


@quantize_fp8_rowwise.register_fake
def _quantize_fake(x, rowwise=True, columnwise=False, element="e4m3"):
    r, c = x.shape
    dt = FP8_DTYPES[element]
    return (x.new_empty((r, c) if rowwise else (0, 0), dtype=dt),
            x.new_empty((r if rowwise else 0,), dtype=torch.float32),
            x.new_empty((c, r) if columnwise else (0, 0), dtype=dt),
            x.new_empty((c if columnwise else 0,), dtype=torch.float32))


def _block_outputs(x: Tensor, mode: str, element: str, rowwise: bool, columnwise: bool):
    """Empty (data (R, C), scale_inv, columnwise_data (C, R), columnwise_scale_inv) of a block
    quantization of x (R, C); a usage not asked for gets (0, 0) tensors."""
    check(mode in BLOCK_MODES, _C.InvalidArgumentError,
          lambda: f"quantize_fp8_block: mode {mode!r} is not one of {BLOCK_MODES}")
    check(element in FP8_DTYPES, _C.InvalidArgumentError,
          lambda: f"quantize_fp8_block: element {element!r} is not one of {tuple(FP8_DTYPES)}")
    check(x.dim() == 2, _C.ShapeError,
          lambda: f"quantize_fp8_block: x must be 2-D, got {x.dim()}-D")
    r, c = x.shape
    dt, f32 = FP8_DTYPES[element], torch.float32
    return (x.new_empty((r, c) if rowwise else (0, 0), dtype=dt),
            x.new_empty(scale_shape(mode, r, c, False) if rowwise else (0, 0), dtype=f32),
            x.new_empty((c, r) if columnwise else (0, 0), dtype=dt),
            x.new_empty(scale_shape(mode, r, c, True) if columnwise else (0, 0), dtype=f32))


def quantize_fp8_block_impl(x: Tensor, mode: str = "block1x128", element: str = "e4m3",
                            rowwise: bool = True,
                            columnwise: bool = False) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """FP8 block scaling of a 2-D (R, C) tensor, both usages in one pass: one FP32 scale per
    1x128 block ("block1x128", activations and gradients) or per 128x128 tile ("block128x128",
    weights), power-of-two scales (the recipe's default: fp8_max / amax rounded down to a power
    of two, docs/numerics.md).

    Returns (data (R, C), scale_inv, columnwise_data (C, R), columnwise_scale_inv), codes in
    torch.float8_e4m3fn / float8_e5m2, scale_inv 2-D compact with the shapes of `scale_shape`
    (padding entries 0); the columnwise copy is the block quantization of xᵀ, stored transposed.
    A usage not asked for comes back as (0, 0) tensors. tessera's quantizer (CPU or CUDA)."""
    data, sinv, cdata, csinv = _block_outputs(x, mode, element, rowwise, columnwise)
    if x.numel() == 0:  # every output is empty too (no block, no scale)
        return data, sinv, cdata, csinv
    dev = x.device
    x_c = x if x.is_contiguous() else x.contiguous()
    dl = br.dl
    with br.device_scope(dev):
        _C._quantize_into(dl(x_c), mode, element, rowwise, columnwise,
                          dl(data.view(torch.uint8)), dl(sinv), dl(cdata.view(torch.uint8)),
                          dl(csinv), br.stream_handle(dev))
    return data, sinv, cdata, csinv


@torch.library.custom_op("tessera::quantize_fp8_block", mutates_args=())
def quantize_fp8_block(x: Tensor, mode: str = "block1x128", element: str = "e4m3",
                       rowwise: bool = True,
                       columnwise: bool = False) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The custom op of quantize_fp8_block_impl (traceable by torch.compile)."""
    return quantize_fp8_block_impl(x, mode, element, rowwise, columnwise)


@quantize_fp8_block.register_fake
def _quantize_block_fake(x, mode="block1x128", element="e4m3", rowwise=True, columnwise=False):
    return _block_outputs(x, mode, element, rowwise, columnwise)


def _mxfp8_outputs(x: Tensor, mode: str, element: str, rowwise: bool, columnwise: bool):
    """Empty (data (R, C), scale_inv, columnwise_data (R, C), columnwise_scale_inv) of an MXFP8
    quantization of x (R, C); a usage not asked for gets (0, 0) tensors."""
    check(mode in MX_MODES, _C.InvalidArgumentError,
          lambda: f"quantize_mxfp8: mode {mode!r} is not one of {MX_MODES}")
    _check_element(element, "quantize_mxfp8")
    check(x.dim() == 2, _C.ShapeError, lambda: f"quantize_mxfp8: x must be 2-D, got {x.dim()}-D")
    r, c = x.shape
    dt = FP8_DTYPES[element]
    return (x.new_empty((r, c) if rowwise else (0, 0), dtype=dt),
            x.new_empty(scale_shape(mode, r, c, False) if rowwise else (0, 0), dtype=E8M0_DTYPE),
            x.new_empty((r, c) if columnwise else (0, 0), dtype=dt),
            x.new_empty(scale_shape(mode, r, c, True) if columnwise else (0, 0),
                        dtype=E8M0_DTYPE))


def quantize_mxfp8_impl(x: Tensor, mode: str = "mxfp8", element: str = "e4m3",
                        rowwise: bool = True,
                        columnwise: bool = False) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """MXFP8 quantization of a 2-D (R, C) tensor, both usages in one pass (docs/numerics.md,
    "MXFP8"): one E8M0 scale per 1x32 block along C ("mxfp8"; the columnwise copy: per 32x1
    block along R) or per 32x32 tile ("mxfp8_32x32", weights), exponent rounded up (the C++
    recipe's rule), codes E4M3 (or `element` "e5m2").

    Returns (data (R, C), scale_inv (R, ceil(C/32)), columnwise_data (R, C),
    columnwise_scale_inv (ceil(R/32), C)): the columnwise copy is NOT transposed (MXFP8's
    storage contract: the same (R, C) layout, blocks along R), scales compact (no padding; a
    32x32 tile's scale is repeated in each of its stored rows/columns), shapes those of
    `scale_shape`. A usage not asked for comes back as (0, 0) tensors. tessera's quantizer (CPU
    or CUDA).

    Scales are torch.float8_e8m0fnu (torch >= 2.7; uint8 before): that dtype is exactly the
    stored byte (bits E, value 2^(E-127), 0xFF NaN), so `.view(torch.uint8)` gives the codes and
    `.float()` the scale without a conversion of ours, and torch's own MX consumers (e.g.
    torch._scaled_mm's 1x32 block scales, torchao's MX tensors) use the same dtype. Unlike a
    uint8 tensor, it cannot be mistaken for codes or integer data, and its dtype says what it is
    in saved tensors and compiled graphs. The step does no arithmetic on scales (the GEMM reads
    the bytes; the bridge passes them as uint8), so torch's thin op coverage of e8m0 does not
    matter."""
    data, sinv, cdata, csinv = _mxfp8_outputs(x, mode, element, rowwise, columnwise)
    if x.numel() == 0:  # every output is empty too (no block, no scale)
        return data, sinv, cdata, csinv
    dev = x.device
    x_c = x if x.is_contiguous() else x.contiguous()
    dl, u8 = br.dl, torch.uint8
    with br.device_scope(dev):
        _C._quantize_into(dl(x_c), mode, element, rowwise, columnwise, dl(data.view(u8)),
                          dl(sinv.view(u8)), dl(cdata.view(u8)), dl(csinv.view(u8)),
                          br.stream_handle(dev))
    return data, sinv, cdata, csinv


@torch.library.custom_op("tessera::quantize_mxfp8", mutates_args=())
def quantize_mxfp8(x: Tensor, mode: str = "mxfp8", element: str = "e4m3", rowwise: bool = True,
                   columnwise: bool = False) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The custom op of quantize_mxfp8_impl (traceable by torch.compile)."""
    return quantize_mxfp8_impl(x, mode, element, rowwise, columnwise)


@quantize_mxfp8.register_fake
def _quantize_mxfp8_fake(x, mode="mxfp8", element="e4m3", rowwise=True, columnwise=False):
    return _mxfp8_outputs(x, mode, element, rowwise, columnwise)


def scaled_operands_rowwise(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """FP8 operands for a 2D x 3D scaled_grouped_mm from high-precision a (T, K) and b (G, K, N):
    (a_fp8, b_fp8 (G, K, N) column-major, scale_a (T), scale_b (G, N))."""
    g, k, n = b.shape
    aq, as_, _, _ = quantize_fp8_rowwise(a, True, False)
    bq, bs, _, _ = quantize_fp8_rowwise(b.transpose(-2, -1).reshape(g * n, k), True, False)
    return aq, bq.reshape(g, n, k).transpose(-2, -1), as_, bs.reshape(g, n)


__all__ = ["BLOCK_MODES", "E8M0_DTYPE", "FP8_DTYPES", "MX_MODES", "columnwise_transposed", "is_fp4",
           "quantize_backend", "quantize_fp8_block", "quantize_fp8_block_impl",
           "quantize_fp8_rowwise", "quantize_fp8_rowwise_impl", "quantize_fp8_tensor",
           "quantize_fp8_tensor_impl", "quantize_mxfp8", "quantize_mxfp8_impl", "scale_shape",
           "scaled_operands_rowwise"]
