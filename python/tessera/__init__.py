"""tessera: low-precision grouped tensors and grouped GEMM for mixture-of-experts.

Every CPU operation takes and returns NumPy arrays so it can be checked against ml_dtypes/NumPy.
"""
from __future__ import annotations

import functools

import numpy as np

from . import _tessera
from ._tessera import __version__, cuda_compiled, cuda_device_count, format_table

# Every error tessera raises is a tessera.Error; the subclass says which status (and derives
# from the built-in exception callers already catch: ValueError for bad input, MemoryError,
# RuntimeError for devices, TypeError for an argument of the wrong type).
from ._tessera import (  # noqa: E402
    ArgumentTypeError, BufferTooSmallError, DeviceError, DTypeError, Error, InternalError,
    InvalidArgumentError, MisalignedError, NoDeviceError, OutOfMemoryError, OutOfRangeError,
    ShapeError, UnsupportedError)

__all__ = ["Error", "ArgumentTypeError", "BufferTooSmallError", "DeviceError", "DTypeError",
           "InternalError", "InvalidArgumentError", "MisalignedError", "NoDeviceError",
           "OutOfMemoryError", "OutOfRangeError", "ShapeError", "UnsupportedError",
           "__version__", "cuda_compiled", "cuda_device_count", "decode", "encode",
           "format_table"]


def _tessera_errors(fn):
    """Re-raises the TypeError nanobind gives for an argument of the wrong type as a
    tessera.ArgumentTypeError (still a TypeError), so every error of the package is a
    tessera.Error."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Error:
            raise
        except TypeError as e:
            raise ArgumentTypeError(f"tessera dtype mismatch: {fn.__name__}: {e}") from None
    return wrapper


@_tessera_errors
def splits_to_offsets_multi(splits, strides, leading_zero, dtypes, aligns=()):
    return _tessera.splits_to_offsets_multi(splits, list(strides), list(leading_zero),
                                            list(dtypes), list(aligns))


splits_to_offsets_multi.__doc__ = _tessera.splits_to_offsets_multi.__doc__
__all__ += ["splits_to_offsets_multi"]


def _echo(text):
    """A caller's text in a message: at most 64 characters of it, then "..." (the C++ messages
    echo user text the same way)."""
    text = str(text)
    return text if len(text) <= 64 else text[:64] + "..."


def _flag(value, name):
    """A boolean argument: True or False (NumPy's bool_ too); 2, -1, "yes", None, ... are an
    InvalidArgumentError naming `name`, not read as true or false."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise InvalidArgumentError(f"tessera invalid argument: {name}: expected True or False, got "
                               f"{_echo(repr(value))} ({type(value).__name__})")


def _c_contiguous(x):
    """x as a C-contiguous array; a 0-d array stays 0-d (np.ascontiguousarray would make it 1-d)."""
    arr = np.asarray(x)
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def _numeric_array(x, name):
    """x as a C-contiguous NumPy array of numbers (bool, integer, float, complex or an ml_dtypes
    format; which of them an operation takes is its own check). Anything else — a str, None, a
    ragged list, a string or object array — is a tessera.ArgumentTypeError naming `name`."""
    try:
        arr = _c_contiguous(x)
    except (TypeError, ValueError):
        arr = None
    if arr is None or not (arr.dtype.kind in "biufc" or arr.dtype.type.__module__ == "ml_dtypes"):
        if arr is None or (arr.ndim == 0 and not isinstance(x, np.ndarray)):
            got = type(x).__name__
        else:
            got = f"{type(x).__name__} of {arr.dtype}"
        raise ArgumentTypeError(f"tessera dtype mismatch: {name}: must be a numeric array (or "
                                f"a number, or a list of them), got {_echo(got)}")
    return arr


def _as_input(x, name="x"):
    """Returns (array, src_dtype) with ml_dtypes bfloat16 carried as uint16 bits. A DLPack
    producer that is not a NumPy array (a torch tensor, ...) passes as it is."""
    if hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray):
        return x, ""
    arr = _numeric_array(x, name)
    if arr.dtype.name == "bfloat16":
        return arr.view(np.uint16), "bfloat16"
    return arr, ""


@_tessera_errors
def encode(x, format: str) -> np.ndarray:
    """Encodes float32/float16/bfloat16 values into `format` codes (RNE, saturating).

    8-bit formats give uint8 codes of x's shape (a 0-d x gives 0-d codes); "e2m1" packs two codes
    per byte (element 2j in the low nibble) along the last dimension, each row on its own bytes
    (so an array of more than one dimension needs an even last dimension); "bfloat16"/"float16"
    give uint16 bit patterns.
    """
    arr, src = _as_input(x)
    return _tessera.encode(arr, format, src)


@_tessera_errors
def decode(codes, format: str, last_dim: int = -1) -> np.ndarray:
    """Decodes `format` codes into float32. For "e2m1", `last_dim` gives an odd logical length.

    `codes` as encode returns them (uint16 for bfloat16/float16, uint8 otherwise), or an
    ml_dtypes/NumPy array of the format itself (bfloat16, float16, float8_e4m3fn,
    float4_e2m1fn: one value per element), whose values are decoded. Any other dtype (float16
    codes of bfloat16, float8_e5m2 of e4m3, int8, bool, ...) is a tessera.DTypeError: its bits
    are not read as another format.
    """
    arr = _numeric_array(codes, "codes")
    name = arr.dtype.name
    if arr.dtype.kind not in "ui" and arr.dtype.itemsize in (1, 2):
        arr = arr.view(np.uint8 if arr.dtype.itemsize == 1 else np.uint16)
    return _tessera.decode(arr, format, last_dim, name)


# ---- grouped GEMM (docs/gemm.md) -----------------------------------------------------------------
_GEMM_DTYPES = ("float32", "float16", "bfloat16")


def _gemm_operand(x, name):
    """(C-contiguous array, dtype hint) with bfloat16 carried as uint16 bits."""
    if x is None:
        return None, ""
    arr, hint = _as_input(x, name)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return arr, hint


def _quantized_spec(q, usage, layout):
    """The dict the binding reads for one copy of a tessera.quantize(...) result."""
    if usage not in ("rowwise", "columnwise"):
        raise InvalidArgumentError(
            f"tessera invalid argument: usage: '{_echo(usage)}' is not rowwise or columnwise")
    cw = usage == "columnwise"
    data = q.columnwise_data if cw else q.data
    if data is None:
        raise InvalidArgumentError(f"tessera invalid argument: the GEMM reads the {usage} copy, "
                                   "which this quantized tensor does not have")
    rows, cols = q.shape
    nvfp4 = q.mode.startswith("nvfp4")
    return {"data": data, "scale_inv": q.columnwise_scale_inv if cw else q.scale_inv,
            "amax": (q.columnwise_amax if cw else q.amax) if nvfp4 else None, "mode": q.mode,
            "element": q.element, "rows": rows, "cols": cols, "columnwise": cw,
            "layout": layout or ""}


def _is_quantized(x):
    return isinstance(x, _tessera.QuantizedTensor)


def _logical_shape(x, arr, groups):
    """Shape of an operand: the array's, or a quantized (rows, cols) seen as (G, rows/G, cols)."""
    if not _is_quantized(x):
        return arr.shape
    rows, cols = x.shape
    return (groups, rows // groups, cols) if groups else (rows, cols)


def _bfloat16():
    """ml_dtypes.bfloat16 (a declared dependency); a clear error when it is missing."""
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - ml_dtypes is a dependency of the package
        raise UnsupportedError("tessera unsupported: bfloat16 arrays are ml_dtypes.bfloat16, and "
                               "ml_dtypes is not installed (pip install ml_dtypes)") from None
    return ml_dtypes.bfloat16


def _check_group_count(offsets, offsets_format, num_groups, b_shape, b_quantized):
    """Blames a wrong number of offsets on `offsets` (not on b, whose groups it contradicts)."""
    count = len(offsets) - (1 if offsets_format == "start" else 0)
    want = num_groups if (num_groups is not None or b_quantized) else (
        b_shape[0] if len(b_shape) == 3 else None)
    if want is not None and count != want:
        entries = "G+1 entries with a leading 0" if offsets_format == "start" else "G entries"
        raise ShapeError(f"tessera shape mismatch: offsets: {len(offsets)} entries give {count} "
                         f"groups, but b has {want} (offsets_format '{offsets_format}' takes "
                         f"{entries})")


@_tessera_errors
def grouped_gemm(a, b, offsets=None, *, kind: str = "m_grouped", transpose_a=None,
                 transpose_b=None, offsets_format: str = "start", out=None, out_dtype=None,
                 alpha: float = 1.0, group_alpha=None, beta: float = 0.0, bias=None,
                 max_total_rows: int = -1, num_groups=None, a_usage=None, b_usage=None,
                 layout=None):
    """Grouped GEMM D_g = alpha_g · op(A_g) op(B_g) + bias_g + beta · D_g on NumPy arrays.

    kind "m_grouped": a (T, K) rows grouped by `offsets`; b (G, N, K) (transpose_b=True, the
      default, forward y = x Wᵀ) or (G, K, N) (transpose_b=False, dgrad); out (T, N). Rows of
      `out` past the last offset are left as they were (zeros in a new array).
    kind "k_grouped": a (T, M), b (T, N), rows grouped; out_g (M, N) = a_gᵀ b_g (wgrad); an empty
      group gives zeros (or leaves `out` unchanged with beta=1).
    kind "batched": a (G, M, K) or (G, K, M) (transpose_a), b as for m_grouped; out (G, M, N).
    offsets: int32/int64, "start" = G+1 entries with a leading 0, "end" = G cumulative end
      offsets (torch._grouped_mm's `offs`). Inputs float32/float16/bfloat16 (ml_dtypes);
      FP32 accumulation; out_dtype defaults to a's dtype. beta=1 needs a float32 `out`.
    a and b may instead be results of tessera.quantize(...) (both, compatible recipes): a 3-D
      operand is quantized as its (G·X, Y) reshape; a_usage/b_usage pick the copy read
      (defaults: the copy whose blocks run along the contraction dim — rowwise for x and for W
      in the forward, columnwise for W in dgrad and for both wgrad operands); `layout`
      ("compact"/"swizzled") is needed only when the scale shape does not tell.
    Returns `out`; without one, a zero-filled array allocated once the problem is accepted (a
    refused problem raises its tessera.Error before any allocation).
    """
    transpose_a = kind == "k_grouped" if transpose_a is None else _flag(transpose_a, "transpose_a")
    transpose_b = kind != "k_grouped" if transpose_b is None else _flag(transpose_b, "transpose_b")
    if out_dtype is not None and out_dtype not in _GEMM_DTYPES:
        raise InvalidArgumentError(f"tessera invalid argument: out_dtype: {_echo(repr(out_dtype))} "
                                   f"is not accepted; expected one of {', '.join(_GEMM_DTYPES)}")
    if offsets is not None and kind == "m_grouped" and offsets_format in ("start", "end"):
        _check_group_count(offsets, offsets_format, num_groups,
                           getattr(b, "shape", ()) if not _is_quantized(b) else (), _is_quantized(b))
    if num_groups is None and offsets is not None:
        num_groups = len(offsets) - (1 if offsets_format == "start" else 0)
    operands = []
    for x, name, usage, three_d in ((a, "a", a_usage, kind == "batched"),
                                    (b, "b", b_usage, kind != "k_grouped")):
        if _is_quantized(x):
            if usage is None:
                usage = "columnwise" if (kind == "k_grouped" or (name == "b" and not transpose_b)
                                         or (name == "a" and transpose_a)) else "rowwise"
            if three_d and not num_groups:
                raise InvalidArgumentError(
                    f"tessera invalid argument: num_groups: required with a quantized {name}")
            operands.append((_quantized_spec(x, usage, layout), "",
                             _logical_shape(x, None, num_groups if three_d else 0)))
        else:
            arr, hint = _gemm_operand(x, name)
            operands.append((arr, hint, arr.shape))
    (a_arr, a_hint, a_shape), (b_arr, b_hint, b_shape) = operands
    if kind == "k_grouped":
        if offsets is None:
            raise InvalidArgumentError(
                "tessera invalid argument: offsets: required for kind 'k_grouped'")
        shape = (num_groups, a_shape[-1], b_shape[-1])
    else:
        if num_groups is None:
            num_groups = b_shape[0] if len(b_shape) == 3 else 0
        n = (b_shape[1] if transpose_b else b_shape[2]) if len(b_shape) == 3 else 0
        if kind == "batched":
            m = a_shape[2] if transpose_a else a_shape[1]
            shape = (num_groups, m, n)
        else:
            shape = (a_shape[0], n)
    if out is None:  # allocated by the binding once the problem is accepted
        dt = out_dtype or (a_hint or (a_arr.dtype.name if not _is_quantized(a) else "float32"))
        out_hint = dt if dt in _GEMM_DTYPES else "float32"
        result = None
    else:
        if not isinstance(out, np.ndarray) or not out.flags.c_contiguous:
            raise InvalidArgumentError(
                "tessera invalid argument: out: must be a C-contiguous NumPy array")
        if not out.flags.writeable:
            raise InvalidArgumentError(
                "tessera invalid argument: out: must be a writable array (it is read-only); the "
                "result is written into it")
        result = out
        out, out_hint = _as_input(out, "out")
    offs = None if offsets is None else np.ascontiguousarray(offsets)
    ga = None if group_alpha is None else np.ascontiguousarray(group_alpha, dtype=np.float32)
    bias_arr, bias_hint = _gemm_operand(bias, "bias")
    new = _tessera.grouped_gemm(a_arr, a_hint, b_arr, b_hint, out, list(shape), out_hint, offs,
                                kind, int(num_groups or 0), bool(transpose_a),
                                bool(transpose_b), offsets_format, int(max_total_rows),
                                float(alpha), ga, float(beta), bias_arr, bias_hint)
    if result is None:
        result = new.view(_bfloat16()) if out_hint == "bfloat16" else new
    return result


__all__ += ["grouped_gemm"]

from ._tessera import cpu_bf16_gemm_path  # noqa: E402  (docs/gemm.md, the CPU backend)

__all__ += ["cpu_bf16_gemm_path"]


# docs/numerics.md
from ._tessera import QuantizedTensor, recipe_table, scaling_mode_table  # noqa: E402

__all__ += ["QuantizedTensor", "quantize", "recipe_table", "scaling_mode_table"]


@_tessera_errors
def quantize(x, recipe_or_mode: str, rowwise: bool = True, columnwise: bool = False, **options):
    """Quantizes a 2-D float32/float16/bfloat16 host array (docs/numerics.md).

    `recipe_or_mode`: a recipe ("fp8_delayed", "fp8_current[:e4m3|:e5m2|:hybrid]", "fp8_rowwise",
    "fp8_block", "mxfp8", "nvfp4"; the config of `role`, default "input") or a scaling mode
    ("tensor", "rowwise", "block1x128", "block128x128", "mxfp8", "mxfp8_32x32", "nvfp4",
    "nvfp4_16x16"); "mxfp8"/"nvfp4" mean the mode unless role= is given.
    Options: element ("e4m3"/"e5m2"), layout ("compact"/"swizzled"),
    power_of_two_scales, e8m0_rounding ("round_up"/"floor"), random_hadamard,
    stochastic_rounding, seed, offset, amax_epsilon, role, backend ("cpu"/"reference").
    Returns a QuantizedTensor with data, scale_inv, columnwise_data, columnwise_scale_inv, amax,
    columnwise_amax (NumPy copies; None when absent) and dequantize(columnwise=False).
    """
    arr, src = _as_input(x)
    return _tessera.quantize(arr, recipe_or_mode, src, _flag(rowwise, "rowwise"),
                             _flag(columnwise, "columnwise"), dict(options))


class GroupedTensor(_tessera.GroupedTensor):
    __doc__ = _tessera.GroupedTensor.__doc__

    @_tessera_errors
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

    __init__.__doc__ = _tessera.GroupedTensor.__init__.__doc__


__all__ += ["GroupedTensor"]

from . import nn  # noqa: E402  (tessera.nn: the C++ nn layers on NumPy arrays)

__all__ += ["nn"]
