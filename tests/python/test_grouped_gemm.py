"""tessera.grouped_gemm on NumPy arrays.

The oracle is an independent NumPy implementation of torch._grouped_mm's semantics (B as
(G, K, N), int32 cumulative END offsets, 2D x 3D and 2D x 2D), evaluated in float64 on the same
BF16 values; when PyTorch is installed, torch._grouped_mm itself is checked too (optional).
"""
import ml_dtypes
import numpy as np
import pytest

import tessera

BF16 = ml_dtypes.bfloat16


def np_grouped_mm(a, b, offs):
    """torch._grouped_mm semantics in float64. a, b: float arrays; offs: int32 end offsets."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    start = 0
    if a.ndim == 2 and b.ndim == 3:  # (sum M, K) x (G, K, N) -> (sum M, N), groups along M
        out = np.zeros((a.shape[0], b.shape[2]))
        for g, end in enumerate(offs):
            out[start:end] = a[start:end] @ b[g]
            start = end
        return out
    if a.ndim == 2 and b.ndim == 2:  # (M, sum K) x (sum K, N) -> (G, M, N), groups along K
        out = np.zeros((len(offs), a.shape[0], b.shape[1]))
        for g, end in enumerate(offs):
            out[g] = a[:, start:end] @ b[start:end]
            start = end
        return out
    raise ValueError("unsupported ranks")


def ragged_sizes(rng, groups, empty_first=True):
    sizes = rng.integers(1, 40, size=groups)
    if empty_first:
        sizes[0] = 0
    sizes[groups // 2] = 0
    return sizes


def rel_err(x, ref):
    return float(np.linalg.norm(x.astype(np.float64) - ref) / np.linalg.norm(ref))


# BF16 output: one rounding of each element (2^-8 relative) plus FP32 accumulation, normwise.
BF16_REL_TOL = 2.0 ** -8


@pytest.mark.parametrize("groups", [1, 8, 41])
def test_m_grouped_matches_torch_grouped_mm_semantics(groups):
    rng = np.random.default_rng(groups)
    sizes = ragged_sizes(rng, groups) if groups > 1 else np.array([37])
    offs = np.cumsum(sizes).astype(np.int32)
    total, k, n = int(offs[-1]), 72, 40
    a = rng.standard_normal((total, k)).astype(BF16)
    b = rng.standard_normal((groups, k, n)).astype(BF16)  # torch layout (G, K, N)
    got = tessera.grouped_gemm(a, b, offs, kind="m_grouped", transpose_b=False,
                               offsets_format="end")
    assert got.dtype == BF16 and got.shape == (total, n)
    ref = np_grouped_mm(a, b, offs)
    err = rel_err(got, ref)
    print(f"m_grouped bf16, {groups} groups: relative error {err:.3e}")
    assert err < BF16_REL_TOL


@pytest.mark.parametrize("groups", [1, 8, 41])
def test_k_grouped_matches_torch_grouped_mm_semantics(groups):
    rng = np.random.default_rng(100 + groups)
    sizes = ragged_sizes(rng, groups) if groups > 1 else np.array([53])
    offs = np.cumsum(sizes).astype(np.int32)
    total, m, n = int(offs[-1]), 24, 33
    a_torch = rng.standard_normal((m, total)).astype(BF16)  # torch's mat_a (M, sum K)
    b = rng.standard_normal((total, n)).astype(BF16)
    # tessera's K-grouped A is the token-major (sum K, M) matrix: torch's mat_a transposed.
    got = tessera.grouped_gemm(np.ascontiguousarray(a_torch.T), b, offs, kind="k_grouped",
                               offsets_format="end")
    assert got.dtype == BF16 and got.shape == (groups, m, n)
    ref = np_grouped_mm(a_torch, b, offs)
    for g in np.flatnonzero(np.diff(np.concatenate([[0], offs])) == 0):
        assert np.all(got[g].astype(np.float32) == 0.0), f"empty group {g} is not zero"
    err = rel_err(got, ref)
    print(f"k_grouped bf16, {groups} groups: relative error {err:.3e}")
    assert err < BF16_REL_TOL


def test_against_torch_grouped_mm_when_installed():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    sizes = ragged_sizes(rng, 6)
    offs = np.cumsum(sizes).astype(np.int32)
    total, k, n = int(offs[-1]), 64, 32
    a = rng.standard_normal((total, k)).astype(np.float32)
    b = rng.standard_normal((6, k, n)).astype(np.float32)
    ta = torch.from_numpy(a).bfloat16()
    tb = torch.from_numpy(b).bfloat16()
    try:
        ref = torch._grouped_mm(ta, tb, offs=torch.from_numpy(offs))
    except (RuntimeError, NotImplementedError) as e:  # no CPU kernel in this torch build
        pytest.skip(f"torch._grouped_mm unavailable on CPU: {e}")
    got = tessera.grouped_gemm(ta.float().numpy().astype(BF16), tb.float().numpy().astype(BF16),
                               offs, transpose_b=False, offsets_format="end")
    assert rel_err(got, ref.float().numpy().astype(np.float64)) < BF16_REL_TOL


def test_capacity_rows_are_left_alone():
    rng = np.random.default_rng(3)
    offs = np.array([0, 5, 5, 12], dtype=np.int64)
    a = rng.standard_normal((20, 16)).astype(np.float32)
    a[12:] = np.nan  # capacity rows: never read
    b = rng.standard_normal((3, 8, 16)).astype(np.float32)  # (G, N, K), forward layout
    out = np.full((20, 8), 7.25, dtype=np.float32)
    tessera.grouped_gemm(a, b, offs, out=out)
    assert np.all(out[12:] == 7.25)
    ref = np.concatenate([a[0:5] @ b[0].T, a[5:12] @ b[2].T])
    np.testing.assert_allclose(out[:12], ref, rtol=1e-5, atol=1e-5)


def test_beta_one_accumulates_into_fp32_main_grad():
    rng = np.random.default_rng(4)
    offs = np.array([0, 0, 9, 20], dtype=np.int64)
    a = rng.standard_normal((20, 6)).astype(np.float32)
    b = rng.standard_normal((20, 5)).astype(np.float32)
    main_grad = rng.standard_normal((3, 6, 5)).astype(np.float32)
    before = main_grad.copy()
    tessera.grouped_gemm(a, b, offs, kind="k_grouped", out=main_grad, beta=1.0)
    assert np.array_equal(main_grad[0], before[0])  # empty expert: unchanged
    np.testing.assert_allclose(main_grad[1], before[1] + a[0:9].T @ b[0:9], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(main_grad[2], before[2] + a[9:].T @ b[9:], rtol=1e-5, atol=1e-5)


def test_batched_with_bias_and_group_alpha():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((4, 7, 10)).astype(np.float32)
    b = rng.standard_normal((4, 10, 3)).astype(np.float32)
    bias = rng.standard_normal((4, 3)).astype(np.float32)
    ga = np.array([1.0, 0.5, 2.0, -1.0], dtype=np.float32)
    got = tessera.grouped_gemm(a, b, kind="batched", transpose_b=False, bias=bias, alpha=1.5,
                               group_alpha=ga)
    ref = 1.5 * ga[:, None, None] * (a @ b) + bias[:, None, :]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_errors_name_the_problem():
    a = np.zeros((10, 16), dtype=np.float32)
    b = np.zeros((3, 8, 12), dtype=np.float32)  # K = 12 against A's 16
    with pytest.raises(tessera.Error, match="shape mismatch.*contraction dim"):
        tessera.grouped_gemm(a, b, np.array([0, 3, 5, 8]))
    b = np.zeros((3, 8, 16), dtype=np.float32)
    with pytest.raises(tessera.Error, match="out of range.*group_offsets"):
        tessera.grouped_gemm(a, b, np.array([0, 3, 5, 11]))
    with pytest.raises(tessera.Error, match="buffer too small.*D"):
        tessera.grouped_gemm(a, b, np.array([0, 3, 5, 8]), out=np.zeros((9, 8), np.float32))
    with pytest.raises(tessera.Error, match="dtype mismatch"):
        tessera.grouped_gemm(a.astype(np.float64), b, np.array([0, 3, 5, 8]))


# ---- quantized operands (tessera.quantize results) ---------------------------------------------
def _per_group(offs, fn):
    start = 0
    for g, end in enumerate(offs[1:]):
        fn(g, start, int(end))
        start = int(end)


@pytest.mark.parametrize("mode,w_mode,layout", [
    ("tensor", "tensor", None), ("rowwise", "rowwise", None),
    ("block1x128", "block128x128", None), ("mxfp8", "mxfp8", None),
    ("mxfp8", "mxfp8_32x32", "swizzled"), ("nvfp4", "nvfp4_16x16", None),
    ("nvfp4", "nvfp4", "swizzled")])
def test_quantized_forward_dgrad_wgrad_equal_numpy_on_dequantized(mode, w_mode, layout):
    rng = np.random.default_rng(11)
    offs = np.array([0, 0, 40, 40, 104], dtype=np.int64)  # empty first and third expert
    g, t, k, n = 4, 104, 96, 64
    opts = {"layout": layout} if layout else {}
    x = rng.standard_normal((t, k)).astype(np.float32)
    dy = rng.standard_normal((t, n)).astype(np.float32)
    w = rng.standard_normal((g * n, k)).astype(np.float32)  # (G, N, K) as (G·N, K)
    qx = tessera.quantize(x, mode, rowwise=True, columnwise=True, **opts)
    qdy = tessera.quantize(dy, mode, rowwise=True, columnwise=True, **opts)
    qw = tessera.quantize(w, w_mode, rowwise=True, columnwise=True, **opts)
    xr, xc = qx.dequantize(), qx.dequantize(columnwise=True)
    dyr, dyc = qdy.dequantize(), qdy.dequantize(columnwise=True)
    wr = qw.dequantize().reshape(g, n, k)
    wc = qw.dequantize(columnwise=True).reshape(g, n, k)

    y = tessera.grouped_gemm(qx, qw, offs, out_dtype="float32")  # forward: rowwise x, W
    dx = tessera.grouped_gemm(qdy, qw, offs, transpose_b=False, out_dtype="float32")  # dgrad
    dw = tessera.grouped_gemm(qdy, qx, offs, kind="k_grouped", out_dtype="float32")  # wgrad
    y_ref, dx_ref, dw_ref = np.zeros((t, n)), np.zeros((t, k)), np.zeros((g, n, k))

    def fill(e, s, end):
        y_ref[s:end] = xr[s:end].astype(np.float64) @ wr[e].T
        dx_ref[s:end] = dyr[s:end].astype(np.float64) @ wc[e]
        dw_ref[e] = dyc[s:end].T.astype(np.float64) @ xc[s:end]
    _per_group(offs, fill)
    for got, ref in ((y, y_ref), (dx, dx_ref), (dw, dw_ref)):
        assert rel_err(got, ref) < 1e-5
    assert np.all(dw[0] == 0) and np.all(dw[2] == 0)  # empty experts


def test_quantized_scale_layout_must_be_named_when_ambiguous():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((128, 128)).astype(np.float32)  # compact and swizzled scales: (128, 4)
    qx = tessera.quantize(x, "mxfp8", layout="swizzled")
    qw = tessera.quantize(x, "mxfp8", layout="swizzled")
    offs = np.array([0, 128], dtype=np.int64)
    with pytest.raises(tessera.Error, match="layout"):
        tessera.grouped_gemm(qx, qw, offs)
    got = tessera.grouped_gemm(qx, qw, offs, layout="swizzled", out_dtype="float32")
    ref = qx.dequantize().astype(np.float64) @ qw.dequantize().T
    assert rel_err(got, ref) < 1e-5
    # quantized x dense: no fast kernel; the CPU runs gemm's emulated path (qx dequantized)
    got = tessera.grouped_gemm(qx, x.reshape(1, 128, 128), offs, layout="swizzled",
                               out_dtype="float32")
    assert rel_err(got, qx.dequantize().astype(np.float64) @ x.T) < 1e-5
