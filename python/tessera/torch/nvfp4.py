"""NVFP4 quantization for tessera.torch (the C++ recipe "nvfp4", docs/numerics.md "NVFP4"): E2M1
codes two per byte (element 2j in the low nibble, each row starting on a byte), one E4M3 scale
per 1x16 block ("nvfp4": activations and gradients) or per 16x16 tile ("nvfp4_16x16": weights),
and one FP32 global amax per copy (the decode factor 1/S_enc = g / 2688 comes from it). Options
of the C++ quantizer: the 16-point random Hadamard transform of the columnwise copy
(random_hadamard; rows % 16 == 0) and stochastic rounding with Philox (seed, offset).

`quantize_nvfp4` is a torch custom op (fake implementation: torch.compile traces it) over
tessera's quantizer on the CPU or CUDA (one `_quantize_into` call, both usages in one pass, on
torch's current stream, no host sync); `quantize_nvfp4_impl` is the same without the dispatcher.
"""
from typing import Tuple

import torch
from torch import Tensor

from .. import _tessera as _C
from . import _bridge as br
from ._errors import check
from .fp8 import _modes_of_family, scale_shape

NVFP4_MODES = _modes_of_family("nvfp4")
SCALE_DTYPE = torch.float8_e4m3fn  # the E4M3 block scales: exactly the stored byte


def _nvfp4_outputs(x: Tensor, mode: str, rowwise: bool, columnwise: bool):
    """Empty (data (R, ceil(C/2)), scale_inv, columnwise_data (C, ceil(R/2)),
    columnwise_scale_inv, amax (1,), columnwise_amax (1,)) of an NVFP4 quantization of x (R, C);
    a usage not asked for gets (0, 0) codes and scales and a (0,) amax."""
    check(mode in NVFP4_MODES, _C.InvalidArgumentError,
          lambda: f"quantize_nvfp4: mode {mode!r} is not one of {NVFP4_MODES}")
    check(x.dim() == 2, _C.ShapeError, lambda: f"quantize_nvfp4: x must be 2-D, got {x.dim()}-D")
    r, c = x.shape
    u8, f32 = torch.uint8, torch.float32
    return (x.new_empty((r, (c + 1) // 2) if rowwise else (0, 0), dtype=u8),
            x.new_empty(scale_shape(mode, r, c, False) if rowwise else (0, 0), dtype=SCALE_DTYPE),
            x.new_empty((c, (r + 1) // 2) if columnwise else (0, 0), dtype=u8),
            x.new_empty(scale_shape(mode, r, c, True) if columnwise else (0, 0),
                        dtype=SCALE_DTYPE),
            x.new_empty((1 if rowwise else 0,), dtype=f32),
            x.new_empty((1 if columnwise else 0,), dtype=f32))


def quantize_nvfp4_impl(x: Tensor, mode: str = "nvfp4", rowwise: bool = True,
                        columnwise: bool = False, random_hadamard: bool = False,
                        stochastic_rounding: bool = False, seed: int = 0,
                        offset: int = 0) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """NVFP4 quantization of a 2-D (R, C) float32/bfloat16/float16 tensor, both usages in one
    pass, by tessera's quantizer (CPU or CUDA; the same bytes on both).

    Returns (data (R, ceil(C/2)) uint8, scale_inv (R, ceil(C/16)) float8_e4m3fn,
    columnwise_data (C, ceil(R/2)) uint8, columnwise_scale_inv (C, ceil(R/16)), amax (1,),
    columnwise_amax (1,)) float32: the columnwise copy is the quantization of xᵀ, stored
    transposed (16x1 blocks along R), with the Hadamard transform of each 16 rows of x when
    random_hadamard (R % 16 == 0; its amax is taken after the transform). Scales are compact
    (shapes of `scale_shape`; an nvfp4_16x16 tile's scale is repeated in each of its 16 rows).
    Stochastic rounding draws Philox words keyed by `seed` at counter `offset` (tessera never
    advances the offset: a caller that wants fresh bits passes a new one). A usage not asked for
    comes back as (0, 0) codes and scales and a (0,) amax."""
    out = _nvfp4_outputs(x, mode, rowwise, columnwise)
    if x.numel() == 0:  # no block; the amax of an empty copy is 0
        return out[:4] + tuple(a.zero_() for a in out[4:])
    data, sinv, cdata, csinv, amax, camax = out
    dev = x.device
    x_c = x if x.is_contiguous() else x.contiguous()
    dl, u8 = br.dl, torch.uint8
    with br.device_scope(dev):
        _C._quantize_into(dl(x_c), mode, "e2m1", rowwise, columnwise, dl(data), dl(sinv.view(u8)),
                          dl(cdata), dl(csinv.view(u8)), br.stream_handle(dev),
                          dl(amax) if rowwise else None, dl(camax) if columnwise else None,
                          random_hadamard=random_hadamard,
                          stochastic_rounding=stochastic_rounding, rng_seed=seed,
                          rng_offset=offset)
    return out


@torch.library.custom_op("tessera::quantize_nvfp4", mutates_args=())
def quantize_nvfp4(x: Tensor, mode: str = "nvfp4", rowwise: bool = True,
                   columnwise: bool = False, random_hadamard: bool = False,
                   stochastic_rounding: bool = False, seed: int = 0,
                   offset: int = 0) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The custom op of quantize_nvfp4_impl (traceable by torch.compile)."""
    return quantize_nvfp4_impl(x, mode, rowwise, columnwise, random_hadamard,
                               stochastic_rounding, seed, offset)


@quantize_nvfp4.register_fake
def _quantize_nvfp4_fake(x, mode="nvfp4", rowwise=True, columnwise=False, random_hadamard=False,
                         stochastic_rounding=False, seed=0, offset=0):
    return _nvfp4_outputs(x, mode, rowwise, columnwise)


__all__ = ["NVFP4_MODES", "quantize_nvfp4", "quantize_nvfp4_impl"]
