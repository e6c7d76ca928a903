"""Non-finite input (docs/numerics.md, "Non-finite input"): for every recipe a NaN, +inf or -inf
makes exactly its scaling unit decode as NaN (never finite values in its place), and leaves every
other unit as it would be without it. The oracle is the unit geometry of the docs written in
NumPy, plus quantizing the same tensor with the bad element replaced by 0 (other units must not
change, bit for bit)."""
import ml_dtypes
import numpy as np
import pytest

import tessera

R, C = 64, 256
POS = (37, 150)
BAD = [np.nan, np.inf, -np.inf]


def unit_mask(unit, shape=(R, C), pos=POS):
    """Boolean (R, C) mask of the scaling unit containing pos: ('tensor',), ('rows', h, w)
    = an h x w block (w = 0: the whole row), ('cols', h) = h consecutive rows of one column."""
    r, c = pos
    m = np.zeros(shape, bool)
    if unit[0] == "tensor":
        m[:] = True
    elif unit[0] == "block":
        h, w = unit[1], unit[2]
        w = w or shape[1]
        h = h or shape[0]
        m[r // h * h:(r // h + 1) * h, c // w * w:(c // w + 1) * w] = True
    return m


# (recipe or mode, options, unit of the rowwise copy, unit of the columnwise copy)
CASES = [
    ("fp8_current", {}, ("tensor",), ("tensor",)),
    ("tensor", {"element": "e5m2"}, ("tensor",), ("tensor",)),
    ("fp8_rowwise", {}, ("block", 1, 0), ("block", 0, 1)),
    ("fp8_block", {}, ("block", 1, 128), ("block", 128, 1)),
    ("block128x128", {}, ("block", 128, 128), ("block", 128, 128)),
    ("mxfp8", {}, ("block", 1, 32), ("block", 32, 1)),
    ("mxfp8_32x32", {}, ("block", 32, 32), ("block", 32, 32)),
    ("mxfp8", {"e8m0_rounding": "floor"}, ("block", 1, 32), ("block", 32, 1)),
    ("nvfp4", {}, ("tensor",), ("tensor",)),
    ("nvfp4_16x16", {}, ("tensor",), ("tensor",)),
    ("nvfp4", {"role": "grad_output"}, ("tensor",), ("tensor",)),  # RHT + stochastic rounding
]


def data():
    rng = np.random.default_rng(7)
    mag = np.float32(2.0) ** rng.integers(-6, 6, size=(R, C)).astype(np.float32)
    return (rng.standard_normal((R, C)).astype(np.float32) * mag).astype(np.float32)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("name,opts,row_unit,col_unit", CASES,
                         ids=[f"{c[0]}{'-' + '-'.join(map(str, c[1].values())) if c[1] else ''}"
                              for c in CASES])
def test_unit_turns_nan_others_unchanged(name, opts, row_unit, col_unit, bad, backend):
    x = data()
    x[POS] = bad
    clean = x.copy()
    clean[POS] = 0.0
    q = tessera.quantize(x, name, columnwise=True, backend=backend, **opts)
    ref = tessera.quantize(clean, name, columnwise=True, backend=backend, **opts)
    for columnwise, unit in ((False, row_unit), (True, col_unit)):
        got = q.dequantize(columnwise=columnwise)
        want_nan = unit_mask(unit)
        assert np.array_equal(np.isnan(got), want_nan), (
            f"{'columnwise' if columnwise else 'rowwise'}: NaN at {np.argwhere(np.isnan(got))[:3]}"
            f"... ({np.isnan(got).sum()}), expected the unit {unit} ({want_nan.sum()})")
        assert not np.isinf(got).any()
        other = ref.dequantize(columnwise=columnwise)
        assert np.array_equal(got[~want_nan], other[~want_nan]), "another unit changed"
    amax = q.amax if q.amax is not None else None
    if amax is not None:
        a = np.asarray(amax, np.float32).reshape(-1)[0]
        assert (np.isnan(a) if np.isnan(bad) else (np.isinf(a) or np.isnan(a))), a


@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf"])
def test_fp8_delayed_is_element_local(bad):
    x = data()
    x[POS] = bad
    q = tessera.quantize(x, "fp8_delayed")  # scale from the (initial) history: 1
    got = q.dequantize()
    mask = np.zeros((R, C), bool)
    mask[POS] = True
    if np.isnan(bad):
        assert np.isnan(got[POS])
    else:  # ±inf saturates like any overflow; amax records +inf
        assert got[POS] == np.copysign(448.0, bad)
        assert np.isinf(q.amax.reshape(-1)[0])
    codes_oracle = x[~mask].astype(ml_dtypes.float8_e4m3fn).astype(np.float32)  # scale 1
    assert np.array_equal(got[~mask], codes_oracle)


@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf"])
def test_bf16_and_fp32_pass_non_finite_through(bad):
    x = np.array([[1.0, bad, -2.0]], np.float32)
    # bf16 recipe: the BF16 conversion keeps NaN and ±inf (oracle: ml_dtypes).
    codes = tessera.encode(x, "bfloat16")
    assert np.array_equal(codes, x.astype(ml_dtypes.bfloat16).view(np.uint16)) or np.isnan(bad)
    back = tessera.decode(codes, "bfloat16")
    assert np.array_equal(np.isnan(back), np.isnan(x)) and np.array_equal(back[~np.isnan(x)],
                                                                           x[~np.isnan(x)])
    # The grouped GEMM (fp32 and bf16 operands): the bad row of A gives a non-finite output row.
    a = np.ones((4, 3), np.float32)
    a[1, 1] = bad
    b = np.ones((2, 5, 3), np.float32)
    for dtype in (np.float32, ml_dtypes.bfloat16):
        out = np.asarray(tessera.grouped_gemm(a.astype(dtype), b.astype(dtype),
                                              np.array([0, 2, 4])), np.float32)
        assert not np.isfinite(out[1]).any() and np.isfinite(np.delete(out, 1, 0)).all()


@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("recipe", ["fp8_current", "fp8_rowwise", "fp8_block", "mxfp8", "nvfp4"])
def test_quantized_gemm_propagates(recipe, bad):
    """A non-finite input reaches the GEMM output as NaN, never as finite garbage."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    w = rng.standard_normal((1, 32, 64)).astype(np.float32)
    a[5, 7] = bad
    qa = tessera.quantize(a, recipe)
    qw = tessera.quantize(w.reshape(32, 64), recipe, role="weight")
    out = tessera.grouped_gemm(qa, qw, np.array([0, 128]), num_groups=1, layout="compact")
    assert np.isnan(out[5]).all()


# NaN bit patterns of both signs and other payloads: every NaN the quantizer stores (FP32
# scale_inv, amax) is the canonical 0x7fc00000 whatever NaN came in, so that the backends agree
# bit for bit (GPU arithmetic makes 0x7fffffff, x86 keeps the operand's payload).
NAN_BITS = [0x7FC00000, 0xFFC00000, 0x7FA00001, 0xFFFFFFFF]


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("nan_bits", NAN_BITS, ids=[hex(b) for b in NAN_BITS])
@pytest.mark.parametrize("name", ["fp8_current", "fp8_rowwise", "fp8_block", "block128x128",
                                  "nvfp4"])
def test_stored_nans_are_canonical(name, nan_bits, backend):
    x = data()
    x[POS] = np.array([nan_bits], np.uint32).view(np.float32)[0]
    x[3, 3] = np.inf  # another unit with +inf only: also a NaN scale
    q = tessera.quantize(x, name, columnwise=True, backend=backend)
    stored = [q.amax, getattr(q, "columnwise_amax", None)]
    if name != "nvfp4":  # FP32 scales (NVFP4 stores E4M3 bytes: 0x7f)
        stored += [q.scale_inv, q.columnwise_scale_inv]
    for a in stored:
        if a is None:
            continue
        bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
        nan = np.isnan(np.asarray(a, np.float32))
        assert nan.any()
        assert (bits[nan] == 0x7FC00000).all(), [hex(b) for b in np.unique(bits[nan])]


@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf"])
def test_torch_fallback_quantizer_follows_the_rule(bad):
    """tessera.torch's pure-torch FP8 rowwise quantizer (used without the binding) turns a row
    with a non-finite input NaN exactly where tessera's quantizer does."""
    torch = pytest.importorskip("torch")
    from tessera.torch.fp8 import _quantize_torch
    x = data()
    x[POS] = bad
    q, s = _quantize_torch(torch.from_numpy(x), 1)
    ref = tessera.quantize(x, "fp8_rowwise")
    want = np.asarray(ref.scale_inv, np.float32).reshape(-1)
    assert np.array_equal(np.isnan(s.numpy()), np.isnan(want)) and np.isnan(want[POS[0]])
    assert torch.isnan(q.float()[POS[0]]).all()
    assert not torch.isnan(q.float()[np.arange(R) != POS[0]]).any()
