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


# ---- read-only inputs, codes of the wrong dtype, outputs over inputs, bounded echoes ------------

def read_only(x):
    x = np.array(x)
    x.setflags(write=False)
    return x


def test_read_only_inputs_are_read():
    # Read-only arrays were refused ("dtype mismatch ... incompatible function arguments") by
    # every binding, though the binding only reads them.
    x = np.random.default_rng(3).standard_normal((4, 32)).astype(np.float32)
    for fmt in ("e4m3", "bfloat16", "e2m1"):
        codes = tessera.encode(x, fmt)
        assert np.array_equal(tessera.encode(read_only(x), fmt), codes), fmt
        assert np.array_equal(tessera.decode(read_only(codes), fmt), tessera.decode(codes, fmt))
    assert np.array_equal(tessera.encode(read_only(x.astype(ml_dtypes.bfloat16)), "e4m3"),
                          tessera.encode(x.astype(ml_dtypes.bfloat16), "e4m3"))
    q, q_ro = tessera.quantize(x, "mxfp8"), tessera.quantize(read_only(x), "mxfp8")
    assert np.array_equal(q.data, q_ro.data) and np.array_equal(q.scale_inv, q_ro.scale_inv)
    a, b = np.arange(32, dtype=np.float32).reshape(8, 4), np.ones((2, 3, 4), np.float32)
    offs, bias, ga = np.array([0, 4, 8]), np.ones((2, 3), np.float32), np.array([1, 2], np.float32)
    want = tessera.grouped_gemm(a, b, offs, bias=bias, group_alpha=ga)
    got = tessera.grouped_gemm(read_only(a), read_only(b), read_only(offs), bias=read_only(bias),
                               group_alpha=read_only(ga))
    assert np.array_equal(got, want)
    qa, qb = tessera.quantize(read_only(a), "mxfp8"), tessera.quantize(b.reshape(6, 4), "mxfp8")
    assert tessera.grouped_gemm(qa, qb, read_only(offs), num_groups=2).shape == (8, 3)
    g = tessera.GroupedTensor([(4, 32)], recipe="mxfp8")
    g.quantize([read_only(x)])
    assert np.array_equal(g.member(0)["data"].reshape(q.data.shape), q.data)
    assert [o.tolist() for o in tessera.splits_to_offsets_multi(read_only([3, 5]), [1], [True],
                                                                ["int64"])] == [[0, 3, 8]]
    # tessera.nn layers read x, splits and probs (float32 arrays are used without a copy)
    import tessera.nn as tn
    lin = tn.GroupedLinear(2, 32, 16, "fp8_rowwise")
    y, _ = lin.forward(x, np.array([1, 3]))
    y_ro, _ = lin.forward(read_only(x), read_only(np.array([1, 3])))
    assert np.array_equal(y_ro, y)
    mlp = tn.GroupedMLP(2, 32, 16, "bf16")
    p = np.array([0.5, 1.0, 0.25, 2.0], np.float32)
    assert np.array_equal(mlp.forward(read_only(x), read_only(np.array([1, 3])),
                                      probs=read_only(p))[0],
                          mlp.forward(x, np.array([1, 3]), probs=p)[0])


def test_read_only_output_is_refused():
    a, b = gemm_args()
    out = read_only(np.zeros((8, 3), np.float32))
    with pytest.raises(tessera.InvalidArgumentError, match="out: .*writable"):
        tessera.grouped_gemm(a, b, np.array([0, 4, 8]), out=out)


@pytest.mark.parametrize("codes,fmt", [
    (np.ones(4, np.float16), "bfloat16"),               # float16 bits are not bfloat16 codes
    (np.ones(4, ml_dtypes.bfloat16), "float16"),
    (np.ones(4, ml_dtypes.float8_e5m2), "e4m3"),        # another 8-bit format
    (np.ones(4, ml_dtypes.float8_e4m3fn), "e8m0"),
    (np.ones(4, bool), "e4m3"),
    (np.ones(4, np.int8), "e4m3"),
    (np.ones(4, np.int16), "float16"),
    (np.ones(4, np.float32), "e4m3"),
])
def test_decode_takes_raw_codes_or_the_format_itself(codes, fmt):
    # A float16 (or float8, or bool) array decoded as another format used to be read as raw bits.
    with pytest.raises(tessera.DTypeError, match=f"codes: .*{codes.dtype.name}"):
        tessera.decode(codes, fmt)


def test_decode_of_unpacked_e2m1_values():
    # ml_dtypes' float4_e2m1fn holds one value per byte; tessera's e2m1 codes pack two per byte.
    # Such an array is the format's own dtype: its values are decoded, not its bytes as pairs.
    x = np.array([[1.0, -0.5, 3.0, 6.0], [0.0, -6.0, 1.5, 2.0]], np.float32)
    fp4 = x.astype(ml_dtypes.float4_e2m1fn)
    assert np.array_equal(tessera.decode(fp4, "e2m1"), x)
    assert np.array_equal(tessera.decode(fp4[0, :3], "e2m1"), x[0, :3])  # odd length, 1-D


@pytest.mark.parametrize("x", ["abc", None, np.array(["a", "b"]), np.array([{}], object),
                               [[1.0], "x"]], ids=["str", "None", "str-array", "object-array",
                                                    "ragged"])
def test_encode_needs_a_numeric_array(x):
    with pytest.raises(tessera.ArgumentTypeError, match="x: must be a numeric array"):
        tessera.encode(x, "e4m3")


def aliased_gemm(where):
    """grouped_gemm whose out shares memory with `where` (a, b, bias or offsets)."""
    storage = np.zeros(64, np.int64)  # 512 bytes; out (8, 3) float32 = 96 bytes
    a, b = gemm_args()
    offs, bias = np.array([0, 4, 8]), np.ones((2, 3), np.float32)
    out = storage.view(np.float32)[:24].reshape(8, 3)
    if where == "A":
        a = storage.view(np.float32)[:32].reshape(8, 4)
        a[:] = 1
    elif where == "B":
        b = storage.view(np.float32)[8:32].reshape(2, 3, 4)
        b[:] = 1
    elif where == "bias":
        bias = storage.view(np.float32)[20:26].reshape(2, 3)
        bias[:] = 1
    else:
        offs = storage[:3]
        offs[:] = [0, 4, 8]
    return a, b, offs, bias, out


@pytest.mark.parametrize("where,name", [("A", "A"), ("B", "B"), ("bias", "bias"),
                                        ("offsets", "group_offsets")])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_output_over_an_input_is_refused(where, name, beta):
    # out aliasing an input returned wrong values (each group's rows were written while later
    # rows still read them); the C API's run returned zeros.
    a, b, offs, bias, out = aliased_gemm(where)
    before = [np.array(v) for v in (a, b, offs, bias)]
    with pytest.raises(tessera.InvalidArgumentError, match=f"D overlaps {name}"):
        tessera.grouped_gemm(a, b, offs, bias=bias, out=out, beta=beta)
    for v, w in zip((a, b, offs, bias), before):
        assert np.array_equal(v, w)


def test_output_beside_an_input_in_one_buffer_is_accepted():
    storage = np.zeros(32 + 24, np.float32)
    a, out = storage[:32].reshape(8, 4), storage[32:].reshape(8, 3)
    a[:] = np.arange(32).reshape(8, 4)
    b = np.ones((2, 3, 4), np.float32)
    want = tessera.grouped_gemm(np.array(a), b, np.array([0, 4, 8]))
    assert tessera.grouped_gemm(a, b, np.array([0, 4, 8]), out=out) is out
    assert np.array_equal(out, want)


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


@pytest.mark.parametrize("value", [2, -1, "yes", None])
def test_flags_are_true_or_false(value):
    # transpose_b=2 was read as True (bool(2)); rowwise=2 gave nanobind's "incompatible function
    # arguments". The C API refuses a flag outside {0, 1} the same way. (transpose_a/b=None is
    # grouped_gemm's "the kind's default".)
    a, b = gemm_args()
    if value is not None:
        with pytest.raises(tessera.InvalidArgumentError,
                           match="transpose_b: expected True or False"):
            tessera.grouped_gemm(a, b, np.array([0, 4, 8]), transpose_b=value)
    with pytest.raises(tessera.InvalidArgumentError, match="rowwise: expected True or False"):
        tessera.quantize(X, "mxfp8", rowwise=value)
    assert tessera.quantize(X, "mxfp8", rowwise=np.bool_(True)).data is not None
