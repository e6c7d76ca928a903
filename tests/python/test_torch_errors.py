"""Every error tessera.torch raises for bad input is one of tessera's: a tessera.Error subclass
that also derives from the built-in a caller catches (ValueError for a bad value or shape,
TypeError for a wrong type), whose message names the Python argument the caller passed (`offs`,
not the C++ layer's `group_offsets`) and carries no C++ source location or check text.

Each case is (id, call, the tessera class expected, the built-in it must also be, words the
message must contain). The C++ errors are reached both ways they surface: the nanobind module
(grouped_mm's offsets values) and the compiled step ops (GroupedLinear's)."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tessera  # noqa: E402

tt = pytest.importorskip("tessera.torch")
from tessera.torch import moe  # noqa: E402

# What a message must not show: a source file or line, the C++ check expression, a build path,
# the C++ parameter names of arguments the Python API calls otherwise.
FORBIDDEN = [re.compile(p) for p in (r"\.(cpp|cu|h|cuh):\d*", r"check [`']", r"failed\]",
                                     r"/src/", r"\bgroup_offsets\b", r"pad_tokens",
                                     r"incompatible function", r"std::")]

F32 = torch.float32


def mm_args(k=16):
    a = torch.randn(8, k)                         # (T, K)
    b = torch.randn(2, 16, 4)                     # (G, K, N)
    return a, b, torch.tensor([4, 8], dtype=torch.int32)


def fp8(*shape):
    return torch.randn(*shape).to(torch.float8_e4m3fn)


def offs_of(*ends):
    return torch.tensor(ends, dtype=torch.int32)


def linear(recipe="bf16"):
    return tt.GroupedLinear(2, 32, 16, recipe=recipe, dtype=F32)


def mlp():
    return tt.GroupedMLP(2, 32, 16, recipe="bf16", dtype=F32)


def moe_layer(**kw):
    args = dict(hidden=64, ffn=32, num_experts=4, top_k=2, dtype=F32)
    args.update(kw)
    return tt.MoELayer(**args)


X32 = torch.randn(8, 32)

CASES = [
    # ---- grouped_mm / scaled_grouped_mm (torch._grouped_mm's arguments) ----
    ("mm-rank", lambda: tt.grouped_mm(torch.randn(2, 2, 8, 16), mm_args()[1], mm_args()[2]),
     tessera.ShapeError, ValueError, ["mat_a", "2D or 3D"]),
    ("mm-contraction", lambda: tt.grouped_mm(*mm_args(k=15)),
     tessera.ShapeError, ValueError, ["contraction", "mat_a"]),
    ("mm-offs-missing", lambda: tt.grouped_mm(*mm_args()[:2]),
     tessera.InvalidArgumentError, ValueError, ["offs", "required"]),
    ("mm-offs-dtype", lambda: tt.grouped_mm(*mm_args()[:2], mm_args()[2].long()),
     tessera.DTypeError, ValueError, ["offs", "int32", "int64"]),
    ("mm-offs-count", lambda: tt.grouped_mm(*mm_args()[:2], offs_of(8)),
     tessera.ShapeError, ValueError, ["offs", "1 groups"]),
    ("mm-offs-decreasing", lambda: tt.grouped_mm(*mm_args()[:2], offs_of(6, 4)),
     tessera.Error, ValueError, ["offs", "non-decreasing"]),
    ("mm-offs-past-rows", lambda: tt.grouped_mm(*mm_args()[:2], offs_of(4, 9)),
     tessera.OutOfRangeError, ValueError, ["offs[1] = 9"]),
    ("mm-offs-negative", lambda: tt.grouped_mm(*mm_args()[:2], offs_of(-4, 8)),
     tessera.OutOfRangeError, ValueError, ["offs[0] = -4"]),
    ("mm-dtype", lambda: tt.grouped_mm(torch.ones(8, 16, dtype=torch.int32),
                                       torch.ones(2, 16, 4, dtype=torch.int32), offs_of(4, 8)),
     tessera.DTypeError, ValueError, ["mat_a", "int32"]),
    ("mm-mixed-dtype", lambda: tt.grouped_mm(mm_args()[0].bfloat16(), *mm_args()[1:]),
     tessera.DTypeError, ValueError, ["mat_a", "mat_b", "bfloat16", "float32"]),
    ("mm-bias", lambda: tt.grouped_mm(*mm_args(), bias=torch.zeros(2, 4)),
     tessera.UnsupportedError, ValueError, ["bias"]),
    ("mm-out-dtype", lambda: tt.grouped_mm(*mm_args(), out_dtype=torch.float16),
     tessera.DTypeError, ValueError, ["out_dtype"]),
    ("mm-3d-offs", lambda: tt.grouped_mm(torch.randn(2, 4, 16), mm_args()[1], offs_of(4, 8)),
     tessera.InvalidArgumentError, ValueError, ["offs", "None"]),
    ("scaled-not-fp8", lambda: tt.scaled_grouped_mm(*mm_args()[:2], torch.ones(8),
                                                    torch.ones(8), offs=offs_of(4, 8)),
     tessera.DTypeError, ValueError, ["mat_a", "float8"]),
    ("scaled-scale-dtype", lambda: tt.scaled_grouped_mm(
        fp8(8, 16), fp8(2, 4, 16).transpose(-2, -1), torch.ones(8, dtype=torch.float16),
        torch.ones(8), offs=offs_of(4, 8)),
     tessera.DTypeError, ValueError, ["scale_a", "float32"]),
    ("scaled-scale-count", lambda: tt.scaled_grouped_mm(
        fp8(8, 16), fp8(2, 4, 16).transpose(-2, -1), torch.ones(8), torch.ones(3),
        offs=offs_of(4, 8)),
     tessera.ShapeError, ValueError, ["scale_b", "3 elements"]),
    # ---- the quantize ops ----
    ("quantize-rank", lambda: tt.quantize_fp8_rowwise(torch.randn(2, 3, 4)),
     tessera.ShapeError, ValueError, ["x", "2-D"]),
    ("quantize-element", lambda: tt.quantize_fp8_rowwise(torch.randn(4, 32), element="e3m4"),
     tessera.InvalidArgumentError, ValueError, ["element", "e3m4"]),
    ("mxfp8-mode", lambda: tt.quantize_mxfp8(torch.randn(4, 32), mode="block1x128"),
     tessera.InvalidArgumentError, ValueError, ["mode", "block1x128"]),
    ("nvfp4-rank", lambda: tt.quantize_nvfp4(torch.randn(2, 4, 32)),
     tessera.ShapeError, ValueError, ["x", "2-D"]),
    ("block-mode", lambda: tt.quantize_fp8_block(torch.randn(4, 128), mode="mxfp8"),
     tessera.InvalidArgumentError, ValueError, ["mode", "mxfp8"]),
    # ---- recipes ----
    ("recipe-name", lambda: linear(recipe="fp9"),
     tessera.InvalidArgumentError, ValueError, ["recipe", "fp9"]),
    ("recipe-type", lambda: linear(recipe=3),
     tessera.InvalidArgumentError, ValueError, ["recipe"]),
    ("delayed-format", lambda: tt.DelayedScaling(fp8_format="E5M2"),
     tessera.InvalidArgumentError, ValueError, ["fp8_format", "e5m2"]),
    ("custom-factory", lambda: tt.CustomRecipe(factory=3),
     tessera.ArgumentTypeError, TypeError, ["factory", "callable"]),
    # ---- GroupedLinear / grouped_linear / GroupedMLP ----
    ("linear-sizes", lambda: tt.GroupedLinear(0, 32, 16),
     tessera.InvalidArgumentError, ValueError, ["num_groups"]),
    ("linear-x-width", lambda: linear()(torch.randn(8, 31), offs_of(4, 8)),
     tessera.ShapeError, ValueError, ["x", "32"]),
    ("linear-no-offs", lambda: linear()(X32),
     tessera.InvalidArgumentError, ValueError, ["offs", "splits"]),
    ("linear-splits-count", lambda: linear()(X32, [2, 3, 3]),
     tessera.ShapeError, ValueError, ["splits", "(2,)"]),
    ("linear-params-dtype", lambda: tt.GroupedLinear(2, 32, 16, dtype=F32,
                                                     params_dtype=torch.bfloat16),
     tessera.InvalidArgumentError, ValueError, ["params_dtype", "dtype"]),
    ("linear-offs-past-rows", lambda: linear()(X32, offs_of(4, 9)),
     tessera.Error, ValueError, ["offs"]),
    ("linear-offs-decreasing", lambda: linear("fp8_rowwise")(X32, offs_of(6, 4)),
     tessera.Error, ValueError, ["offs", "decreases"]),
    ("linear-offs-strided", lambda: linear()(X32, offs_of(4, 0, 8, 0)[::2]),
     tessera.ShapeError, ValueError, ["offs", "strided", "contiguous"]),
    ("functional-weight", lambda: tt.grouped_linear(X32, torch.randn(2, 16, 31), offs_of(4, 8)),
     tessera.ShapeError, ValueError, ["weight", "31"]),
    ("functional-offs", lambda: tt.grouped_linear(X32, torch.randn(2, 16, 32), offs_of(8)),
     tessera.ShapeError, ValueError, ["offs"]),
    ("mlp-x-width", lambda: mlp()(torch.randn(8, 31), offs_of(4, 8)),
     tessera.ShapeError, ValueError, ["x", "32"]),
    ("mlp-probs", lambda: mlp()(X32, offs_of(4, 8), probs=torch.ones(5)),
     tessera.ShapeError, ValueError, ["probs"]),
    # ---- MoELayer and tessera.torch.moe ----
    ("moe-hidden", lambda: moe_layer()(torch.randn(7, 72)),
     tessera.ShapeError, ValueError, ["x", "hidden=64", "(7, 72)"]),
    ("moe-recipe", lambda: moe_layer(recipe="fp9"),
     tessera.InvalidArgumentError, ValueError, ["recipe", "fp9"]),
    ("moe-experts", lambda: moe_layer(num_experts=0),
     tessera.InvalidArgumentError, ValueError, ["num_experts"]),
    ("moe-top-k", lambda: moe_layer(top_k=5),
     tessera.InvalidArgumentError, ValueError, ["top_k"]),
    ("dispatch-dtype", lambda: moe.dispatch(torch.ones(4, 8, dtype=torch.int32),
                                            torch.zeros(4, 1, dtype=torch.int64), 2),
     tessera.DTypeError, ValueError, ["x", "int32"]),
    ("dispatch-shape", lambda: moe.dispatch(torch.ones(4, 8), torch.zeros(3, 1,
                                                                          dtype=torch.int64), 2),
     tessera.ShapeError, ValueError, ["x", "indices"]),
    ("dispatch-index", lambda: moe.dispatch(torch.ones(4, 8), torch.full((4, 1), 7), 2),
     tessera.InvalidArgumentError, ValueError, ["indices", "outside"]),
    ("dispatch-recipe", lambda: moe.recipe_dispatch_mode("fp9"),
     tessera.InvalidArgumentError, ValueError, ["recipe", "fp9"]),
    ("dequantize-mode", lambda: moe.dequantize_rows(torch.zeros(2, 32, dtype=torch.uint8),
                                                    torch.zeros(2, 1), "nvfp4", F32),
     tessera.InvalidArgumentError, ValueError, ["mode", "nvfp4"]),
    ("routing-rank", lambda: moe.moe_routing(torch.zeros(4, dtype=torch.int64), 2),
     tessera.ShapeError, ValueError, ["indices", "(T, k)"]),
]


def _with_ids(cases):
    """Plain tuples as pytest.param named by their id (pytest.param cases name themselves)."""
    return [pytest.param(*c, id=c[0]) if type(c) is tuple else c for c in cases]


@pytest.mark.parametrize("case_id,call,cls,builtin,words", _with_ids(CASES))
def test_error_is_a_tessera_error_naming_the_argument(case_id, call, cls, builtin, words):
    with pytest.raises(Exception) as info:
        call()
    e = info.value
    message = str(e)
    assert isinstance(e, tessera.Error), f"{type(e).__module__}.{type(e).__name__}: {message}"
    assert isinstance(e, cls) and isinstance(e, builtin), (type(e).__mro__, message)
    for word in words:  # an argument's name as a whole word ("offs" is not in "offsets")
        assert re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", message), (word, message)
    for pattern in FORBIDDEN:
        assert not pattern.search(message), (pattern.pattern, message)


def test_moe_permute_mode_names_itself():
    x, row_pair = torch.randn(4, 32), torch.zeros(4, dtype=torch.int64)
    with pytest.raises(tessera.InvalidArgumentError, match="mode 'fp7'"):
        moe.moe_permute(x, row_pair, 1, mode="fp7")


def test_step_op_errors_keep_the_status_and_drop_the_location():
    # The compiled step's errors arrive as "[tessera:<status>] message" RuntimeErrors and are
    # raised as the status's class; python_names renames the C++ names in them.
    from tessera.torch import _errors, _ext
    e = _ext.translate(RuntimeError("[tessera:2] group_offsets[1] = 9 exceeds the rows"))
    assert type(e) is tessera.ShapeError and str(e) == "offs[1] = 9 exceeds the rows"
    other = RuntimeError("CUDA error: out of memory")
    assert _ext.translate(other) is other
    assert str(_errors.python_names(tessera.ShapeError("my_group_offsets"))) == "my_group_offsets"


def test_encode_of_a_string_is_a_type_error_naming_x():
    # "dtype mismatch ... incompatible function arguments" before.
    with pytest.raises(tessera.ArgumentTypeError) as info:
        tessera.encode("abc", "e4m3")
    assert isinstance(info.value, TypeError)
    assert "x: must be a numeric array" in str(info.value)
    assert "incompatible function" not in str(info.value)
    np.testing.assert_array_equal(tessera.encode(np.float32(1.0), "e4m3"), np.uint8(0x38))
