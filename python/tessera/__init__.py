"""tessera: low-precision grouped tensors and grouped GEMM for mixture-of-experts.

Every CPU operation takes and returns NumPy arrays so it can be checked against ml_dtypes/NumPy.
"""
from __future__ import annotations

import numpy as np

from . import _tessera
from ._tessera import Error, __version__, cuda_compiled, cuda_device_count, format_table

__all__ = ["Error", "__version__", "cuda_compiled", "cuda_device_count", "decode", "encode",
           "format_table"]

from ._tessera import splits_to_offsets_multi  # noqa: E402  (DESIGN §6, NumPy in and out)

__all__ += ["splits_to_offsets_multi"]


def _as_input(x):
    """Returns (array, src_dtype) with ml_dtypes bfloat16 carried as uint16 bits."""
    arr = np.ascontiguousarray(x) if isinstance(x, (np.ndarray, list, tuple, float, int)) else x
    if isinstance(arr, np.ndarray) and arr.dtype.name == "bfloat16":
        return arr.view(np.uint16), "bfloat16"
    return arr, ""


def encode(x, format: str) -> np.ndarray:
    """Encodes float32/float16/bfloat16 values into `format` codes (RNE, saturating).

    8-bit formats give uint8 codes of x's shape; "e2m1" packs two codes per byte (element 2j in
    the low nibble) along the last dimension; "bfloat16"/"float16" give uint16 bit patterns.
    """
    arr, src = _as_input(x)
    return _tessera.encode(arr, format, src)


def decode(codes, format: str, last_dim: int = -1) -> np.ndarray:
    """Decodes `format` codes into float32. For "e2m1", `last_dim` gives an odd logical length."""
    return _tessera.decode(np.ascontiguousarray(codes), format, last_dim)
