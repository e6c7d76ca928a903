"""tessera.quantize against the independent NumPy + ml_dtypes oracle of test_quantize_oracle.py,
for every recipe/mode, usage, scale layout and input dtype, plus round trips and errors."""
import ml_dtypes
import numpy as np
import pytest

import tessera
import test_quantize_oracle as O

SHAPES = [(1, 300), (33, 17), (130, 257), (64, 96)]
DTYPES = ["float32", "bfloat16", "float16"]
KINDS = ["gaussian", "specials", "zeros", "max", "tiny"]


def make(shape, dtype, kind, seed=0):
    rng = np.random.default_rng(seed)
    m, k = shape
    mag = np.float32(2.0) ** ((np.arange(m * k) // 7) % 11 - 5).reshape(m, k).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32) * mag
    if kind == "specials":
        flat = x.reshape(-1)
        flat[::97] = np.array([np.nan, np.inf, -np.inf], np.float32)[np.arange(flat[::97].size) % 3]
    elif kind == "zeros":
        x = np.zeros((m, k), np.float32)
        x.reshape(-1)[::3] = -0.0
    elif kind == "max":
        big = {"float32": np.finfo(np.float32).max, "float16": 65504.0,
               "bfloat16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)}[dtype]
        x = np.full((m, k), big, np.float32) * np.where(np.arange(m * k).reshape(m, k) % 2, -1, 1)
    elif kind == "tiny":
        x = x * np.float32(1e-6)
    x = x.astype(np.float32)
    if dtype == "bfloat16":
        xin = x.astype(ml_dtypes.bfloat16)
    elif dtype == "float16":
        xin = x.astype(np.float16)
    else:
        xin = x
    return xin, xin.astype(np.float32)


def same(name, got, want):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape} vs {want.shape}"
    gb, wb = got.view(np.uint8).reshape(-1), np.ascontiguousarray(want).view(np.uint8).reshape(-1)
    bad = np.nonzero(gb != wb)[0]
    if bad.size:
        i = bad[0] // got.itemsize
        idx = np.unravel_index(i, got.shape)
        raise AssertionError(f"{name}: first mismatch at {idx}: {got[idx]!r} vs {want[idx]!r} "
                             f"({bad.size} bytes differ)")


def same_amax(name, got, want):
    got = np.asarray(got, np.float32).reshape(-1)[0]
    if np.isnan(want):
        assert np.isnan(got), f"{name}: {got} vs NaN"
    else:
        assert got == np.float32(want), f"{name}: {got} vs {want}"


FP8_CASES = [("tensor", {}), ("tensor", {"element": "e5m2"}),
             ("tensor", {"power_of_two_scales": True, "amax_epsilon": 1e-3}),
             ("rowwise", {}), ("rowwise", {"element": "e5m2"}),
             ("block1x128", {}), ("block128x128", {}), ("block1x128", {"power_of_two_scales": False}),
             ("block128x128", {"element": "e5m2", "power_of_two_scales": False})]


def oracle_fp8(mode, opts, x, columnwise):
    el = opts.get("element", "e4m3")
    a = x.T.copy() if columnwise else x
    if mode == "tensor":
        c, s, amax = O.quantize_tensor(a, el, opts.get("amax_epsilon", 0.0), opts.get("power_of_two_scales", False))
        return c, s, amax
    if mode == "rowwise":
        c, s = O.quantize_rowwise(a, el)
        return c, s, None
    c, s = O.quantize_block(a, el, mode == "block128x128", opts.get("power_of_two_scales", True))
    return c, s, None


@pytest.mark.parametrize("mode,opts", FP8_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", DTYPES)
def test_fp8_fp32_scales_match_oracle(mode, opts, dtype):
    for shape in SHAPES:
        for kind in KINDS:
            xin, x = make(shape, dtype, kind, seed=shape[0])
            q = tessera.quantize(xin, mode, rowwise=True, columnwise=True, backend="reference", **opts)
            for cw in (False, True):
                c, s, amax = oracle_fp8(mode, opts, x, cw)
                tag = f"{mode} {opts} {dtype} {shape} {kind} columnwise={cw}"
                same(tag + " data", q.columnwise_data if cw else q.data, c)
                same(tag + " scale_inv", q.columnwise_scale_inv if cw else q.scale_inv, s)
                if amax is not None:
                    same_amax(tag + " amax", q.columnwise_amax if cw else q.amax, amax)


MX_CASES = [("mxfp8", {}), ("mxfp8", {"element": "e5m2"}), ("mxfp8", {"e8m0_rounding": "floor"}),
            ("mxfp8", {"layout": "swizzled"}), ("mxfp8_32x32", {}),
            ("mxfp8_32x32", {"layout": "swizzled", "e8m0_rounding": "floor"})]


@pytest.mark.parametrize("mode,opts", MX_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp8_matches_oracle(mode, opts, dtype):
    for shape in SHAPES:
        for kind in KINDS:
            xin, x = make(shape, dtype, kind, seed=shape[1])
            q = tessera.quantize(xin, mode, rowwise=True, columnwise=True, backend="reference", **opts)
            for cw in (False, True):
                c, s = O.quantize_mxfp8(x, opts.get("element", "e4m3"), opts.get("e8m0_rounding", "round_up"),
                                        cw, mode == "mxfp8_32x32", opts.get("layout", "compact"))
                tag = f"{mode} {opts} {dtype} {shape} {kind} columnwise={cw}"
                same(tag + " data", q.columnwise_data if cw else q.data, c)
                same(tag + " scales", q.columnwise_scale_inv if cw else q.scale_inv, s)


NV_CASES = [("nvfp4", {}), ("nvfp4_16x16", {}), ("nvfp4", {"layout": "swizzled"}),
            ("nvfp4", {"random_hadamard": True}),
            ("nvfp4", {"stochastic_rounding": True, "seed": 1234, "offset": 7}),
            ("nvfp4_16x16", {"random_hadamard": True, "stochastic_rounding": True, "seed": 2**40 + 3,
                             "offset": 2**33 + 1, "layout": "swizzled"})]


@pytest.mark.parametrize("mode,opts", NV_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", DTYPES)
def test_nvfp4_matches_oracle(mode, opts, dtype):
    shapes = [(16, 1), (32, 33), (48, 300), (64, 96)] if opts.get("random_hadamard") else SHAPES
    for shape in shapes:
        for kind in KINDS:
            xin, x = make(shape, dtype, kind, seed=shape[0] + 1)
            q = tessera.quantize(xin, mode, rowwise=True, columnwise=True, backend="reference", **opts)
            sr = (opts["seed"], opts["offset"]) if opts.get("stochastic_rounding") else None
            for cw in (False, True):
                d, s, g = O.quantize_nvfp4(x, cw, mode == "nvfp4_16x16", opts.get("random_hadamard", False),
                                           sr, opts.get("layout", "compact"))
                tag = f"{mode} {opts} {dtype} {shape} {kind} columnwise={cw}"
                same(tag + " data", q.columnwise_data if cw else q.data, d)
                same(tag + " scales", q.columnwise_scale_inv if cw else q.scale_inv, s)
                same_amax(tag + " amax", q.columnwise_amax if cw else q.amax, g)


@pytest.mark.parametrize("recipe", ["fp8_delayed", "fp8_current", "fp8_current:e4m3", "fp8_rowwise",
                                    "fp8_block", "mxfp8", "nvfp4"])
@pytest.mark.parametrize("role", ["input", "weight", "grad_output"])
def test_recipes_cpu_equals_reference_and_round_trip(recipe, role):
    xin, x = make((128, 160), "bfloat16", "gaussian", seed=3)
    a = tessera.quantize(xin, recipe, rowwise=True, columnwise=True, role=role)
    b = tessera.quantize(xin, recipe, rowwise=True, columnwise=True, role=role, backend="reference")
    for field in ("data", "scale_inv", "columnwise_data", "columnwise_scale_inv"):
        same(f"{recipe} {role} {field}", getattr(a, field), getattr(b, field))
    for cw in (False, True):
        y = a.dequantize(columnwise=cw)
        assert y.shape == x.shape and y.dtype == np.float32
        same(f"{recipe} dequantize cpu vs reference", y, a.dequantize(columnwise=cw, backend="reference"))
        sqnr = 10 * np.log10(np.sum(x.astype(np.float64) ** 2) / np.sum((y - x).astype(np.float64) ** 2))
        assert sqnr > (12 if "nvfp4" in recipe else 20), f"{recipe} {role} columnwise={cw}: {sqnr:.1f} dB"
    if recipe == "fp8_current":
        assert a.element == ("e5m2" if role == "grad_output" else "e4m3")  # HYBRID by role


def test_delayed_one_shot_uses_initial_scale_one():
    xin, x = make((8, 40), "float32", "gaussian")
    q = tessera.quantize(xin, "fp8_delayed:e4m3")
    same("delayed data", q.data, O.fp8_codes(x * np.float32(1.0), "e4m3"))
    same_amax("delayed amax", q.amax, O.amax_of(x))


def test_usages_reported():
    q = tessera.quantize(np.ones((4, 32), np.float32), "mxfp8", rowwise=False, columnwise=True)
    assert q.columnwise and not q.rowwise and q.data is None and q.columnwise_data.shape == (4, 32)


def test_recipe_table():
    rows = {r["name"]: r for r in tessera.recipe_table}
    assert rows["mxfp8"]["token_alignment"] == 32 and rows["nvfp4"]["token_alignment"] == 128
    assert rows["fp8_current"]["token_alignment"] == 16 and rows["fp8_block"]["weight_mode"] == "block128x128"
    assert {"bf16", "fp32", "fp8_delayed", "fp8_rowwise"} <= set(rows)


def ceil_div(n, d):
    return (n + d - 1) // d


def round_up(n, m):
    return ceil_div(n, m) * m


@pytest.mark.parametrize("mode", [m["name"] for m in tessera.scaling_mode_table])
def test_scaling_mode_table_gives_the_scale_shapes_of_the_quantizer(mode):
    # The table's rule (docs/numerics.md "Scale layouts"): one scale per stored block of the copy
    # (r, c) = x or xᵀ, padded; a columnwise copy stored untransposed keeps x's orientation.
    row = {m["name"]: m for m in tessera.scaling_mode_table}[mode]
    assert row["scale_dtype"] in ("float32", "e8m0", "e4m3")
    for rows, cols in [(200, 300), (1, 1), (128, 256), (129, 130), (16, 2048), (48, 33)]:
        x = np.linspace(-3, 3, rows * cols, dtype=np.float32).reshape(rows, cols)
        q = tessera.quantize(x, mode, rowwise=True, columnwise=True, random_hadamard=False)
        for columnwise, scale in ((False, q.scale_inv), (True, q.columnwise_scale_inv)):
            r, c = (cols, rows) if columnwise else (rows, cols)
            (br, bc), (pr, pc) = row["scale_block"], row["pad"]
            nr = round_up(1 if br == 0 else ceil_div(r, br), pr)  # block 0: the whole dim
            nc = round_up(1 if bc == 0 else ceil_div(c, bc), pc)
            want = (nc, nr) if columnwise and not row["columnwise_transposed"] else (nr, nc)
            assert scale.shape[:2] == want, (rows, cols, columnwise)


@pytest.mark.parametrize("call,needle", [
    (lambda x: tessera.quantize(x, "fp9"), "neither a recipe"),
    (lambda x: tessera.quantize(x, "nvfp4:e5m2"), "format suffix"),
    (lambda x: tessera.quantize(x, "nvfp4", element="e5m2"), "e2m1"),
    (lambda x: tessera.quantize(x, "tensor", layout="swizzled"), "swizzled"),
    (lambda x: tessera.quantize(x, "mxfp8", colour="red"), "colour"),
    (lambda x: tessera.quantize(x.reshape(-1), "mxfp8"), "2-D"),
    (lambda x: tessera.quantize(x[:7], "nvfp4", columnwise=True, random_hadamard=True), "multiple of 16"),
    (lambda x: tessera.quantize(x.astype(np.int32), "mxfp8"), "int32"),
])
def test_errors_are_clear(call, needle):
    x = np.ones((32, 64), np.float32)
    with pytest.raises(tessera.Error, match=needle):
        call(x)
