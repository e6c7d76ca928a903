"""How tessera.torch reports bad input: every error is a tessera.Error subclass (which also
derives from the built-in callers catch: ValueError, TypeError, MemoryError, RuntimeError) whose
message names the Python argument and carries no C++ source location.

    check(cond, tessera.ShapeError, lambda: "x: ...")   a Python-side check (torch._check's
                                                        semantics: symbolic conditions work)
    python_names(e)                                     an error of the C++ layers, its C++
                                                        argument names replaced by the Python
                                                        ones (group_offsets -> offs)

The C++ errors reach Python two ways, and each way is translated once, where it crosses: the
nanobind module (python/src/module.cpp: the status picks the class, the " [file:line, check ...]"
tail is dropped) under the quantize ops; the compiled ops — the training step, the MoE ops,
grouped_mm and scaled_grouped_mm (python/torch_ext/torch_bridge.cpp: "[tessera:<status>]
message") — under _ext.call.
"""
from __future__ import annotations

import re

import torch

from .. import _tessera as _C

_STATUS_TEXT = {_C.ShapeError: "shape mismatch", _C.DTypeError: "dtype mismatch",
                _C.InvalidArgumentError: "invalid argument", _C.UnsupportedError: "unsupported",
                _C.OutOfRangeError: "out of range"}

# C++ parameter names (include/tessera/gemm/*.h; the step's token padding, which checks the
# offsets it pads by) -> the name a tessera.torch caller passed. Only whole words are replaced
# ("group_offsets[2]" -> "offs[2]").
_CPP_TO_PYTHON = {"group_offsets": "offs", "pad_tokens: offsets": "offs",
                  "unpad_tokens: offsets": "offs"}
_CPP_NAME = re.compile(r"\b(" + "|".join(map(re.escape, _CPP_TO_PYTHON)) + r")\b")


def check(cond, error: type, message) -> None:
    """torch._check raising `error` (a tessera.Error subclass) with "tessera <status>: " before
    message(); like torch._check it takes symbolic conditions (torch.compile's fake tensors)."""
    torch._check_with(error, cond, lambda: f"tessera {_STATUS_TEXT[error]}: {message()}")


def python_names(e: BaseException) -> BaseException:
    """`e` itself, or the same tessera.Error class with the C++ argument names in its message
    replaced by tessera.torch's (a tessera.Error of another origin passes unchanged)."""
    if not isinstance(e, _C.Error):
        return e
    text = str(e)
    renamed = _CPP_NAME.sub(lambda m: _CPP_TO_PYTHON[m.group(1)], text)
    return e if renamed == text else type(e)(renamed)


def double_backward_error(name: str) -> BaseException:
    """The error of a backward run with create_graph=True (grad mode on inside backward)."""
    return _C.UnsupportedError(
            f"tessera unsupported: {name}: a backward with create_graph=True would need the "
            f"gradient of tessera's backward, which it does not have (a gradient penalty "
            f"through this layer would silently lose its second-order term); differentiate "
            f"without create_graph, or use the bf16 torch._grouped_mm path for that term")
