"""Element codecs against ml_dtypes: every code decoded, >= 10 million values encoded."""
import ml_dtypes
import numpy as np
import pytest

import tessera

FORMATS = {
    "e4m3": (ml_dtypes.float8_e4m3fn, 448.0),
    "e5m2": (ml_dtypes.float8_e5m2, 57344.0),
    "e8m0": (ml_dtypes.float8_e8m0fnu, 2.0**127),
    "e2m1": (ml_dtypes.float4_e2m1fn, 6.0),
}


def ml_codes(x, fmt):
    """ml_dtypes codes as uint8 (one code per byte)."""
    dt = FORMATS[fmt][0]
    return x.astype(dt).view(np.uint8) if fmt != "e2m1" else x.astype(dt).view(np.uint8) & 0xF


def unpack_e2m1(packed, n):
    out = np.empty(packed.size * 2, np.uint8)
    out[0::2] = packed & 0xF
    out[1::2] = packed >> 4
    return out[:n]


def our_codes(x, fmt):
    c = tessera.encode(x, fmt)
    return unpack_e2m1(c.reshape(-1), x.size) if fmt == "e2m1" else c.reshape(-1)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_code_decodes_like_ml_dtypes(fmt):
    n = 16 if fmt == "e2m1" else 256
    codes = np.arange(n, dtype=np.uint8)
    want = codes.view(FORMATS[fmt][0]).astype(np.float32) if fmt != "e2m1" else \
        np.array([np.uint8(c) for c in codes], np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    packed = (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8) if fmt == "e2m1" else codes
    got = tessera.decode(packed, fmt)
    assert got.shape == want.shape
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), fmt
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), fmt


def stress_values(n, seed):
    """Random bits over the whole float range, fp8-range magnitudes, exact ties, specials."""
    rng = np.random.default_rng(seed)
    parts = [
        rng.integers(0, 2**32, n // 3, dtype=np.uint64).astype(np.uint32).view(np.float32),
        (rng.uniform(1, 2, n // 3) * np.exp2(rng.integers(-30, 20, n // 3))).astype(np.float32)
        * rng.choice([-1, 1], n // 3).astype(np.float32),
    ]
    # Exact ties for each format: midpoints between neighbouring representable values.
    for fmt, (dt, _) in FORMATS.items():
        grid = np.unique(np.arange(256 if fmt != "e2m1" else 16, dtype=np.uint8).view(dt).astype(np.float64))
        grid = grid[np.isfinite(grid)]
        mids = ((grid[1:] + grid[:-1]) / 2).astype(np.float32)
        parts.append(np.concatenate([mids, -mids, np.nextafter(mids, np.inf), np.nextafter(mids, 0)]))
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448, 449, 464, 465, 480, 57344, 61440,
                         61441, 6, 5, 7, 1e-45, 1e-40, 2.0**-127, 2.0**-128, 3e38], np.float32)
    parts.append(specials)
    rest = n - sum(p.size for p in parts)
    parts.append(rng.standard_normal(max(rest, 0)).astype(np.float32) * 10)
    return np.concatenate(parts).astype(np.float32)


@pytest.fixture(scope="module")
def values():
    x = stress_values(10_000_000, 1)
    assert x.size >= 10_000_000
    return x


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_encode_matches_ml_dtypes_in_range_and_saturates_outside(values, fmt):
    dt, fmax = FORMATS[fmt]
    ours = our_codes(values, fmt)
    ref_vals = values.astype(dt).astype(np.float32)
    ref = ml_codes(values, fmt)
    finite_ref = np.isfinite(ref_vals)
    in_range = finite_ref & ~np.isnan(values)
    mismatch = np.flatnonzero(in_range & (ours != ref))
    assert mismatch.size == 0, f"{fmt}: first mismatch x={values[mismatch[0]]!r} ours={ours[mismatch[0]]:#x} ref={ref[mismatch[0]]:#x}"
    # Out of range (ml_dtypes overflows to inf/NaN): ours saturates to the signed max.
    over = ~np.isnan(values) & ~finite_ref
    back = tessera.decode(our_codes(values[over], fmt) if fmt != "e2m1" else tessera.encode(values[over], fmt), fmt,
                          last_dim=int(over.sum()) if fmt == "e2m1" else -1).reshape(-1)
    assert np.array_equal(back, np.where(values[over] < 0, -fmax, fmax).astype(np.float32))
    # NaN in gives NaN out where the format has NaN.
    if fmt != "e2m1":
        nan_in = np.isnan(values)
        assert nan_in.any()
        assert np.isnan(tessera.decode(ours[nan_in], fmt)).all()


ML_DTYPES_VERSION = tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2])


@pytest.mark.skipif(ML_DTYPES_VERSION < (0, 7), reason="ml_dtypes < 0.7 rounds E8M0 of float "
                    "subnormals up (scripts/requirements-test.txt asks for >= 0.7)")
def test_e8m0_encode_matches_ml_dtypes_for_positive_values(values):
    pos = values[(values > 0) & np.isfinite(values) & (values <= 2.0**127)]
    tiny = np.arange(1, 2**23, 97, dtype=np.uint32).view(np.float32)  # float subnormals
    # Around the subnormal midpoint 1.5 * 2^-127 (0x600000) and the normal boundary 2^-126.
    edges = np.arange(0x5fff00, 0x600100, dtype=np.uint32).view(np.float32)
    pos = np.concatenate([pos, tiny, edges, np.array([2.0**-127, 2.0**-126], np.float32)])
    assert np.array_equal(our_codes(pos, "e8m0"), ml_codes(pos, "e8m0"))


def test_half_types_match_numpy_and_ml_dtypes(values):
    v = values[~np.isnan(values)]
    assert np.array_equal(tessera.encode(v, "float16").reshape(-1), v.astype(np.float16).view(np.uint16))
    assert np.array_equal(tessera.encode(v, "bfloat16").reshape(-1), v.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_bfloat16_and_float16_inputs():
    x = np.random.default_rng(3).standard_normal(4096).astype(np.float32) * 50
    xb = x.astype(ml_dtypes.bfloat16)
    assert np.array_equal(tessera.encode(xb, "e4m3"),
                          xb.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
    xh = x.astype(np.float16)
    assert np.array_equal(tessera.encode(xh, "e5m2"),
                          xh.astype(np.float32).astype(ml_dtypes.float8_e5m2).view(np.uint8))


def test_shapes_are_kept_and_e2m1_packs_the_last_dim():
    x = np.linspace(-6, 6, 24, dtype=np.float32).reshape(2, 3, 4)
    assert tessera.encode(x, "e4m3").shape == (2, 3, 4)
    assert tessera.encode(x, "e2m1").shape == (2, 3, 2)
    assert np.array_equal(tessera.decode(tessera.encode(x, "e2m1"), "e2m1"),
                          x.astype(ml_dtypes.float4_e2m1fn).astype(np.float32))
    odd = np.array([0.5, 1.5, 3.0], np.float32)
    assert np.array_equal(tessera.decode(tessera.encode(odd, "e2m1"), "e2m1", last_dim=3), odd)


def test_bad_input_gives_clear_errors():
    x = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="invalid argument: unknown dtype 'e3m3'"):
        tessera.encode(x, "e3m3")
    with pytest.raises(tessera.Error, match="not an encodable format"):
        tessera.encode(x, "int32")
    with pytest.raises(tessera.Error, match="src: dtype int32 is not accepted"):
        tessera.encode(np.ones(8, np.int32), "e4m3")
    with pytest.raises((tessera.Error, TypeError)):
        tessera._tessera.encode(np.ones((4, 4), np.float32)[:, ::2], "e4m3", "")  # non-contiguous
    with pytest.raises(tessera.Error, match="expects uint8"):
        tessera.decode(np.ones(4, np.float32), "e4m3")
