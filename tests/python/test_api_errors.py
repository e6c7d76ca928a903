"""The Python package's contract for bad input: one exception hierarchy (tessera.Error and its
per-status subclasses, still ValueError/TypeError where callers catch those), every message
naming the argument; and the round trips and dtypes a user expects."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import tessera

X = np.linspace(-3, 3, 4 * 32, dtype=np.float32).reshape(4, 32)


def test_hierarchy():
    assert issubclass(tessera.Error, Exception) and not issubclass(tessera.Error, ValueError)
    for name in ("InvalidArgumentError", "ShapeError", "DTypeError", "MisalignedError",
                 "UnsupportedError", "OutOfRangeError", "BufferTooSmallError"):
        cls = getattr(tessera, name)
        assert issubclass(cls, tessera.Error) and issubclass(cls, ValueError), name
    assert issubclass(tessera.OutOfMemoryError, MemoryError)
    for name in ("DeviceError", "NoDeviceError", "InternalError"):
        assert issubclass(getattr(tessera, name), RuntimeError)
    assert issubclass(tessera.ArgumentTypeError, tessera.Error)
    assert issubclass(tessera.ArgumentTypeError, TypeError)


def test_status_picks_the_subclass():
    with pytest.raises(tessera.ShapeError, match="x: must be 2-D"):
        tessera.quantize(np.zeros(8, np.float32), "mxfp8")
    with pytest.raises(tessera.InvalidArgumentError, match="recipe_or_mode: 'mxfp9'"):
        tessera.quantize(X, "mxfp9")
    with pytest.raises(tessera.DTypeError, match="codes: format e4m3 expects uint8"):
        tessera.decode(np.zeros(4, np.float32), "e4m3")


def test_wrong_argument_types_are_tessera_errors():
    with pytest.raises(tessera.ArgumentTypeError):
        tessera.encode(X, 3)
    with pytest.raises(tessera.ArgumentTypeError):
        tessera.GroupedTensor([(2, 32)], recipe=5)
    with pytest.raises(tessera.ArgumentTypeError):
        tessera.splits_to_offsets_multi(np.array([1, 2]), "x", [True], ["int64"])


@pytest.mark.parametrize("fmt,ml", [("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16),
                                    ("e4m3", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2)])
def test_decode_of_encode_round_trips(fmt, ml):
    x = np.array([[1.0, 2.5, -3.0, 0.375]], np.float32)
    codes = tessera.encode(x, fmt)
    assert np.array_equal(tessera.decode(codes, fmt), x)
    # The codes are the format's bit patterns (an independent oracle: ml_dtypes / NumPy).
    assert np.array_equal(codes.view(ml).astype(np.float32), x)
    # An array of the format itself is read as its bits.
    assert np.array_equal(tessera.decode(x.astype(ml), fmt), x)


def test_decode_names_codes_dtype():
    with pytest.raises(tessera.DTypeError, match="codes: format bfloat16 expects uint16"):
        tessera.decode(np.zeros(3, np.uint8), "bfloat16")
    with pytest.raises(tessera.DTypeError, match="codes: format e4m3 expects uint8"):
        tessera.decode(np.zeros(3, np.int8).view(np.int8), "e4m3")
    with pytest.raises(tessera.Error, match="format: 'float32' is not a decodable format"):
        tessera.decode(np.zeros(3, np.uint8), "float32")


@pytest.mark.parametrize("key,value,expect", [
    ("seed", -1, r"seed: expected an integer in \[0, 2\*\*64\), got -1"),
    ("seed", 2**64, "seed: expected an integer"),
    ("seed", "7", "seed: expected an integer"),
    ("offset", -3, "offset: expected an integer"),
    ("stochastic_rounding", 1, "stochastic_rounding: expected True or False"),
    ("layout", 3, "layout: expected a str"),
    ("amax_epsilon", "x", "amax_epsilon: expected a number"),
])
def test_quantize_options_name_themselves(key, value, expect):
    with pytest.raises(tessera.InvalidArgumentError, match=expect):
        tessera.quantize(X, "nvfp4", **{key: value})


def test_quantize_seed_accepts_the_uint64_range():
    a = tessera.quantize(X, "nvfp4", stochastic_rounding=True, seed=2**64 - 1)
    b = tessera.quantize(X, "nvfp4", stochastic_rounding=True, seed=2**64 - 1)
    assert np.array_equal(a.data, b.data)


def gemm_args(groups=2):
    a = np.ones((8, 4), np.float32)
    b = np.ones((groups, 3, 4), np.float32)
    return a, b


def test_wrong_offsets_count_blames_offsets():
    a, b = gemm_args()
    with pytest.raises(tessera.ShapeError, match="offsets: 5 entries give 4 groups, but b has 2"):
        tessera.grouped_gemm(a, b, np.array([0, 4, 6, 7, 8]))
    with pytest.raises(tessera.ShapeError, match="offsets: 3 entries give 3 groups, but b has 2"):
        tessera.grouped_gemm(a, b, np.array([4, 6, 8]), offsets_format="end")
    with pytest.raises(tessera.ShapeError, match="offsets: 3 entries give 2 groups, but b has 4"):
        tessera.grouped_gemm(a, b, np.array([0, 4, 8]), num_groups=4)
    out = tessera.grouped_gemm(a, b, np.array([0, 4, 8]))
    assert np.array_equal(out, np.full((8, 3), 4, np.float32))


def test_max_total_rows_and_out_dtype_are_checked():
    a, b = gemm_args()
    with pytest.raises(tessera.InvalidArgumentError, match="max_total_rows: -7"):
        tessera.grouped_gemm(a, b, np.array([0, 4, 8]), max_total_rows=-7)
    with pytest.raises(tessera.InvalidArgumentError, match="out_dtype: 'int8'"):
        tessera.grouped_gemm(a, b, np.array([0, 4, 8]), out_dtype="int8")


def test_bfloat16_output_is_ml_dtypes():
    a, b = gemm_args()
    out = tessera.grouped_gemm(a, b, np.array([0, 4, 8]), out_dtype="bfloat16")
    assert out.dtype == ml_dtypes.bfloat16
    assert np.array_equal(out.astype(np.float32), np.full((8, 3), 4, np.float32))
    g = tessera.GroupedTensor([(2, 4)], dtype="bfloat16")
    assert g.member(0).dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("aligns,expect", [([3], r"aligns\[0\]: 3 is not accepted"),
                                           ([0], r"aligns\[0\]: 0 is not accepted"),
                                           ([1, -16], r"aligns\[1\]: -16 is not accepted")])
def test_aligns_are_powers_of_two(aligns, expect):
    n = len(aligns)
    with pytest.raises(tessera.InvalidArgumentError, match=expect):
        tessera.splits_to_offsets_multi(np.array([3, 5]), [1] * n, [True] * n, ["int64"] * n,
                                        aligns)


@pytest.mark.parametrize("recipe", ["fp8_current", "fp8_current:e5m2", "fp8_delayed",
                                    "fp8_rowwise", "fp8_block", "mxfp8", "nvfp4", "tensor",
                                    "block1x128", "nvfp4_16x16"])
def test_grouped_tensor_takes_the_names_quantize_takes(recipe):
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    g = tessera.GroupedTensor([(64, 64)], recipe=recipe)
    g.quantize([x])
    q = tessera.quantize(x, recipe)
    member = g.member(0)
    # Same config as tessera.quantize gives the same codes and scales.
    assert np.array_equal(member["data"].reshape(q.data.shape), q.data), recipe
    assert np.array_equal(member["scale_inv"].reshape(-1), q.scale_inv.reshape(-1)), recipe


def test_grouped_tensor_rng_seed_names_itself():
    with pytest.raises(tessera.InvalidArgumentError, match="rng_seed: expected an integer"):
        tessera.GroupedTensor([(2, 32)], recipe="nvfp4", rng_seed=-1)


def test_console_entry_point_runs_the_program():
    from tessera import cli
    try:
        exe = cli.program()
    except FileNotFoundError:
        pytest.skip("the tessera program is not built next to this package")
    r = subprocess.run([sys.executable, "-m", "tessera.cli", "demo", "--bogus"],
                       capture_output=True, text=True, env={**os.environ,
                       "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 1
    assert r.stderr.strip() == "tessera demo: unknown option '--bogus' (see tessera demo --help)"
    assert os.access(exe, os.X_OK)


# ---- bounded echoes of user text -----------------------------------------------------------

LONG = "z" * 100000


@pytest.mark.parametrize("call", [
    lambda: tessera.quantize(X, LONG),
    lambda: tessera.quantize(X, "fp8_current:" + LONG),
    lambda: tessera.quantize(X, "mxfp8", role=LONG),
    lambda: tessera.quantize(X, "mxfp8", layout=LONG),
    lambda: tessera.quantize(X, "mxfp8", **{LONG: 1}),
    lambda: tessera.quantize(X, "mxfp8", seed=LONG),
    lambda: tessera.encode(X, LONG),
    lambda: tessera.decode(np.zeros(3, np.uint8), LONG),
    lambda: tessera.grouped_gemm(*gemm_args(), np.array([0, 4, 8]), kind=LONG),
    lambda: tessera.grouped_gemm(*gemm_args(), np.array([0, 4, 8]), offsets_format=LONG),
    lambda: tessera.grouped_gemm(*gemm_args(), np.array([0, 4, 8]), out_dtype=LONG),
    lambda: tessera.GroupedTensor([(2, 32)], recipe=LONG),
    lambda: tessera.GroupedTensor([(2, 32)], dtype=LONG),
    lambda: tessera.splits_to_offsets_multi(np.array([1]), [1], [True], [LONG]),
], ids=["recipe", "recipe-suffix", "role", "layout", "option-key", "seed", "encode-format",
        "decode-format", "kind", "offsets-format", "out-dtype", "grouped-recipe",
        "grouped-dtype", "offsets-dtype"])
def test_messages_echo_a_bounded_prefix_of_user_text(call):
    with pytest.raises(tessera.Error) as e:
        call()
    message = str(e.value)
    # At most 64 characters of the text (a repr counts its quote), then "...".
    assert "z" * 63 in message and "z" * 65 not in message and "..." in message, message[:300]
    assert len(message) < 1000, message[:300]
