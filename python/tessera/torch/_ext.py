"""tessera's compiled PyTorch ops (python/torch_ext, PyTorch's stable C++ ABI): loading them,
their fake (meta) implementations for torch.compile, and the translation of their errors into
tessera.Error subclasses.

    torch.ops.tessera.linear_fwd / linear_bwd   the grouped linear training step
    torch.ops.tessera.mlp_fwd / mlp_bwd         the grouped MLP training step
    torch.ops.tessera.linear / mlp              the same steps as C++ autograd nodes (the eager
                                                path; PyTorch's C++ API, loaded only into the
                                                torch they were built for)
    torch.ops.tessera.get_rng_offset / set_rng_offset   the step's stochastic-rounding counter
    torch.ops.tessera.moe_*                     the MoE routing ops (fakes and autograd in moe_ops.py)
    torch.ops.tessera.grouped_mm / scaled_grouped_mm   the functional grouped GEMMs (fakes and
                                                autograd in ops.py)

Each is one call into compiled code: tensors are converted once in C++, the step runs on torch's
current stream with torch's allocator. The uint8 tensors they return (saved contexts, weight
copies) have a layout the C++ step defines; their sizes come from the same C++
(`_tessera._linear_step_sizes`, `_mlp_step_sizes`), so the fakes match the real ops exactly.
"""
from __future__ import annotations

import functools
import os
import re

import torch

from .. import _tessera as _C
from ._errors import double_backward_error, python_names

_LIB = os.path.join(os.path.dirname(os.path.dirname(__file__)), "_torch_ops.so")
if not os.path.exists(_LIB):
    raise ImportError(
        "tessera.torch: this tessera was built without its PyTorch ops (_torch_ops.so): the "
        "build found no PyTorch >= 2.10. Install torch, then rebuild / reinstall tessera.")
torch.ops.load_library(_LIB)
ops = torch.ops.tessera
# The steps' ops by their one overload: calling an overload skips the packet's per-call search
# for the overload that matches the arguments.
linear_fwd, linear_bwd = ops.linear_fwd.default, ops.linear_bwd.default
mlp_fwd, mlp_bwd = ops.mlp_fwd.default, ops.mlp_bwd.default
moe_routing, moe_permute = ops.moe_routing.default, ops.moe_permute.default
moe_permute_backward = ops.moe_permute_backward.default
moe_unpermute, moe_unpermute_backward = ops.moe_unpermute.default, ops.moe_unpermute_backward.default
moe_dequantize_rows = ops.moe_dequantize_rows.default
moe_regroup_index = ops.moe_regroup_index.default
grouped_mm, scaled_grouped_mm = ops.grouped_mm.default, ops.scaled_grouped_mm.default

_ERROR = re.compile(r"\[tessera:(\d+)\] (.*)", re.S)


def _load_autograd_nodes():
    """torch.ops.tessera.linear / mlp, the steps as C++ autograd nodes (python/torch_ext/
    autograd_ops.cpp), when the module was built against this very torch (PyTorch's C++ API has
    no stable ABI; the version file beside the module names the torch it was built with); else
    (None, None, None): the Python autograd functions run the same ops."""
    lib = os.path.join(os.path.dirname(_LIB), "_torch_autograd.so")
    try:
        with open(lib[:-3] + ".version") as f:
            built_for = f.read().strip()
    except OSError:
        return None, None, None
    if built_for != torch.__version__:
        return None, None, None
    try:
        torch.ops.load_library(lib)
    except OSError:  # a partial install: the version file without a loadable module
        return None, None, None
    impl = torch.library.Library("tessera", "IMPL")
    impl.impl("step_error", _step_error, "CompositeExplicitAutograd")
    return ops.linear.default, ops.mlp.default, impl


def _step_error(layer: str, message: str) -> None:
    """torch.ops.tessera.step_error: how the C++ nodes' backward raises (in the caller of
    backward()) the tessera.Error of a step op's error text, or for an empty text the refusal of
    create_graph=True — the errors the Python functions raise."""
    if not message:
        raise double_backward_error(layer)
    raise translate(RuntimeError(message))


def translate(e: RuntimeError) -> BaseException:
    """The tessera.Error subclass of an op's RuntimeError ("[tessera:<status>] message", the
    message with tessera.torch's argument names), or the error itself when it did not come from
    tessera."""
    m = _ERROR.search(str(e))
    if m is None:
        return e
    return python_names(_C._error_class(int(m.group(1)))(m.group(2)))


# The steps as C++ autograd nodes (None: not built for this torch); _impl keeps step_error's
# Python implementation registered.
linear, mlp, _impl = _load_autograd_nodes()


def call(op, *args):
    """op(*args), its tessera errors raised as tessera.Error subclasses."""
    try:
        return op(*args)
    except RuntimeError as e:
        raise translate(e) from None


@functools.lru_cache(maxsize=None)
def linear_sizes(recipe: str, name: str, groups: int, k: int, n: int, bias: bool,
                 weight_dtype: torch.dtype):
    """(saved bytes per row, saved fixed bytes, weight copies bytes, wgrad alignment) of a
    linear step."""
    return _C._linear_step_sizes(recipe, name, groups, k, n, bias, _dtype_name(weight_dtype))


@functools.lru_cache(maxsize=None)
def mlp_sizes(recipe1: str, recipe2: str, prefix: str, groups: int, hidden: int, ffn: int,
              bias: bool, weight_dtype: torch.dtype, activation: torch.dtype, need_wgrad: bool):
    """((per_row, fixed) of the saved fc1, h, saved fc2, a tensors, fc1 and fc2 weight bytes)."""
    return _C._mlp_step_sizes(recipe1, recipe2, prefix, groups, hidden, ffn, bias,
                              _dtype_name(weight_dtype), _dtype_name(activation), need_wgrad)


_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _dtype_name(dt: torch.dtype) -> str:
    if dt not in _DTYPE_NAMES:
        raise _C.DTypeError(f"tessera dtype mismatch: weight dtype {dt} is not float32, "
                            f"bfloat16 or float16")
    return _DTYPE_NAMES[dt]


def _bytes(like: torch.Tensor, n) -> torch.Tensor:
    return like.new_empty((n,), dtype=torch.uint8)


def _none(like: torch.Tensor) -> torch.Tensor:
    return like.new_empty((0,), dtype=torch.uint8)


@torch.library.register_fake("tessera::linear_fwd")
def _linear_fwd_fake(x, weight, offs, bias, wcache, requantize, recipe, name, delayed_scale,
                     amax_history, save):
    g, n, k = weight.shape
    per_row, fixed, wbytes, _ = linear_sizes(recipe, name, g, k, n, bias is not None,
                                             weight.dtype)
    t = x.shape[0]
    saved = _bytes(x, per_row * t + fixed) if save else _none(x)
    made = _bytes(x, wbytes) if requantize and wbytes else _none(x)
    return x.new_empty((t, n)), saved, made


@torch.library.register_fake("tessera::linear_bwd")
def _linear_bwd_fake(dy, offs, x, weight, wcache, saved, recipe, name, has_bias, delayed_scale,
                     amax_history, main_grad, need_dx, need_dw, need_db, dx_dtype, dw_dtype,
                     db_dtype):
    g, n, k = weight.shape
    t = dy.shape[0]
    dx = dy.new_empty((t, k), dtype=dx_dtype) if need_dx else _none(dy)
    dw = (dy.new_empty((g, n, k), dtype=dw_dtype) if need_dw and main_grad is None
          else _none(dy))
    db = dy.new_empty((g, n), dtype=db_dtype) if need_db else _none(dy)
    return dx, dw, db


@torch.library.register_fake("tessera::mlp_fwd")
def _mlp_fwd_fake(x, w1, w2, offs, probs, b1, b2, wc1, wc2, requantize, recipe1, recipe2, prefix,
                  ds1, ah1, ds2, ah2, need_wgrad, x_codes=None, x_scale_inv=None):
    g, hidden, ffn = w1.shape[0], w1.shape[2], w2.shape[2]
    (s1, h, s2, a, wb1, wb2) = mlp_sizes(recipe1, recipe2, prefix, g, hidden, ffn,
                                         b1 is not None, w1.dtype, x.dtype, need_wgrad)
    t = x.shape[0]
    at = lambda size: _bytes(x, size[0] * t + size[1])  # noqa: E731
    made = lambda b: _bytes(x, b) if requantize and b else _none(x)  # noqa: E731
    return x.new_empty((t, hidden)), at(s1), at(h), at(s2), at(a), made(wb1), made(wb2)


@torch.library.register_fake("tessera::mlp_bwd")
def _mlp_bwd_fake(dy, offs, x, probs, w1, w2, wc1, wc2, saved1, h, saved2, a, recipe1, recipe2,
                  prefix, has_bias, ds1, ah1, ds2, ah2, mg1, mg2, need_dx, need_dprobs, need_dw, need_db,
                  w_dtype, b_dtype, p_dtype, dy_codes=None, dy_scale_inv=None):
    g, hidden, ffn = w1.shape[0], w1.shape[2], w2.shape[2]
    t = dy.shape[0]
    accumulate = mg1 is not None and mg2 is not None
    make = lambda need, shape, dt: dy.new_empty(shape, dtype=dt) if need else _none(dy)  # noqa
    return (make(need_dx, (t, hidden), dy.dtype), make(need_dprobs, (t,), p_dtype),
            make(need_dw and not accumulate, (g, 2 * ffn, hidden), w_dtype),
            make(need_db, (g, 2 * ffn), b_dtype),
            make(need_dw and not accumulate, (g, hidden, ffn), w_dtype),
            make(need_db, (g, hidden), b_dtype))
