"""DLPack plumbing of tessera._tessera without PyTorch: arrays cross with zero copies (the data
pointer tessera reads is the producer's), results land in caller-provided outputs, and the
grouped GEMM entry point matches a NumPy loop oracle on ragged groups (empty ones included)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera
from tessera import _tessera as C

HAS_GEMM = hasattr(C, "_grouped_gemm_into")
needs_gemm = pytest.mark.skipif(not HAS_GEMM, reason="grouped GEMM layer not in this build")


@pytest.mark.parametrize("dtype,name", [(np.float32, "float32"), (np.float16, "float16"),
                                        (np.int32, "int32"), (np.int64, "int64"),
                                        (np.uint8, "uint8"), (np.float64, "float64")])
def test_array_view_is_zero_copy(dtype, name):
    x = np.arange(24, dtype=dtype).reshape(2, 3, 4)
    info = C._array_view(x)
    assert info["data_ptr"] == x.ctypes.data
    assert info["shape"] == (2, 3, 4)
    assert info["dtype"] == name
    assert info["device"] == "cpu"


def test_array_view_through_a_raw_dlpack_capsule():
    x = np.ones((5, 7), np.float32)
    info = C._array_view(x.__dlpack__())
    assert info["data_ptr"] == x.ctypes.data and info["shape"] == (5, 7)


def test_non_contiguous_array_is_refused_not_copied():
    # In a child process: a crash in the array import must fail this test, not the whole session.
    code = """
import numpy as np, tessera
from tessera import _tessera as C
x = np.zeros((8, 6), np.float32)
for bad in (x.T, x[:, ::2]):
    try:
        C._array_view(bad)
        raise SystemExit("a non-contiguous array was accepted")
    except tessera.Error as e:
        assert "C-contiguous" in str(e), str(e)
assert C._array_view(x[2:4])["data_ptr"] == x[2:4].ctypes.data  # a contiguous slice is fine
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout, r.stderr)


def test_unsupported_element_type_is_named():
    with pytest.raises(tessera.Error, match="x: array element type"):
        C._array_view(np.zeros(4, np.complex64))


def test_size_one_dims_may_have_any_stride():
    x = np.zeros((4, 1, 3), np.float32)
    y = np.lib.stride_tricks.as_strided(x, shape=(4, 1, 3), strides=(12, 999 * 4, 4))
    assert C._array_view(y)["data_ptr"] == x.ctypes.data


# ---- grouped GEMM into caller outputs ------------------------------------------------------------

def _run(kind, a, b, out, offs, ta, tb):
    """The two-step workspace protocol: ask, allocate aligned, run. Returns the workspace size."""
    a_op, b_op = C._gemm_dense_operand(a), C._gemm_dense_operand(b)
    need = C._grouped_gemm_into(kind, a_op, b_op, out, offs, True, ta, tb)
    if need:
        raw = np.empty(need + 256, np.uint8)
        off = (-raw.ctypes.data) % 256
        assert C._grouped_gemm_into(kind, a_op, b_op, out, offs, True, ta, tb, 1.0, 0.0,
                                    raw[off:off + need]) == 0
    return need


def _ends(sizes):
    return np.cumsum(sizes).astype(np.int32)


@needs_gemm
@pytest.mark.parametrize("sizes", [[3, 0, 5, 1], [0, 4, 0], [7], [0, 0, 2, 0]])
@pytest.mark.parametrize("tb", [True, False])
def test_m_grouped_into_caller_output(sizes, tb):
    rng = np.random.default_rng(1)
    g, k, n, capacity = len(sizes), 24, 16, sum(sizes) + 3
    a = rng.standard_normal((capacity, k), dtype=np.float32)
    w = rng.standard_normal((g, n, k) if tb else (g, k, n), dtype=np.float32)
    out = np.full((capacity, n), 7.0, np.float32)                # sentinel past the last offset
    ptr = out.ctypes.data
    offs = _ends(sizes)
    _run(0, a, w, out, offs, False, tb)
    assert out.ctypes.data == ptr                                # written in place
    start = 0
    for gi, end in enumerate(offs):
        wg = w[gi].T if tb else w[gi]                            # (K, N)
        np.testing.assert_allclose(out[start:end], a[start:end] @ wg, rtol=1e-5, atol=1e-4)
        start = end
    assert np.all(out[start:] == 7.0)                            # rows past the end untouched


@needs_gemm
def test_k_grouped_wgrad_writes_zeros_for_empty_groups():
    rng = np.random.default_rng(2)
    sizes = [4, 0, 6]
    t, m, n = sum(sizes), 8, 16
    a = rng.standard_normal((t, m), dtype=np.float32)            # (T, M)
    b = rng.standard_normal((t, n), dtype=np.float32)            # (T, N)
    out = np.full((3, m, n), np.nan, np.float32)
    _run(1, a, b, out, _ends(sizes), True, False)
    start = 0
    for gi, end in enumerate(_ends(sizes)):
        np.testing.assert_allclose(out[gi], a[start:end].T @ b[start:end], rtol=1e-5, atol=1e-4)
        start = end
    assert np.all(out[1] == 0.0)


@needs_gemm
def test_batched_without_offsets():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 5, 16), dtype=np.float32)
    b = rng.standard_normal((3, 8, 16), dtype=np.float32)        # (G, N, K): TN
    out = np.empty((3, 5, 8), np.float32)
    _run(2, a, b, out, None, False, True)
    np.testing.assert_allclose(out, a @ b.transpose(0, 2, 1), rtol=1e-5, atol=1e-4)


@needs_gemm
def test_bad_arguments_are_named():
    a = np.zeros((4, 16), np.float32)
    b = np.zeros((2, 8, 16), np.float32)
    out = np.zeros((4, 8), np.float32)
    with pytest.raises(tessera.Error, match="kind"):
        C._grouped_gemm_into(7, C._gemm_dense_operand(a), C._gemm_dense_operand(b), out,
                             _ends([2, 2]))
    with pytest.raises(tessera.Error, match="offsets"):
        C._grouped_gemm_into(0, C._gemm_dense_operand(a), C._gemm_dense_operand(b), out, None)
    with pytest.raises(tessera.Error, match="C-contiguous"):
        C._gemm_dense_operand(np.zeros((16, 4), np.float32).T)


# ---- _quantize_into: tessera's Quantizer into caller-owned arrays ------------------------------

needs_quantize_into = pytest.mark.skipif(not hasattr(C, "_quantize_into"),
                                         reason="_quantize_into not in this build")


def rowwise_e4m3_oracle(x):
    """Independent NumPy rule (docs/numerics.md current scaling): scale = 448 / amax per row (amax 0
    -> 1, non-finite -> NaN), codes = saturating RNE cast; returns (codes as uint8, scale_inv (M,))."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    amax = np.abs(x).max(axis=1).astype(np.float32)
    ok = (amax > 0) & np.isfinite(amax)
    scale = np.where(ok, np.float32(448.0) / np.where(ok, amax, 1), 1).astype(np.float32)
    scale[~np.isfinite(amax)] = np.nan
    q = np.clip(x * scale[:, None], -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return q.view(np.uint8), (np.float32(1) / scale).astype(np.float32)


@needs_quantize_into
@pytest.mark.parametrize("rows,cols", [(37, 80), (1, 16), (64, 5)])
def test_quantize_into_rowwise_matches_reference_and_oracle(rows, cols):
    rng = np.random.default_rng(rows * cols)
    x = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 100, (rows, 1))).astype(np.float32)
    x[0] = 0.0                                                    # an all-zero row: scale 1
    if rows > 2:                                                  # rows (and columns) of NaN
        x[1, cols // 2] = np.nan
        x[2, cols - 1] = -np.inf
    data = np.full((rows, cols), 0xAB, np.uint8)
    sinv = np.zeros(rows, np.float32)                             # 1-D, as torch keeps them
    cdata = np.full((cols, rows), 0xAB, np.uint8)
    csinv = np.zeros((cols, 1), np.float32)
    ptrs = [a.ctypes.data for a in (data, sinv, cdata, csinv)]
    C._quantize_into(x, "rowwise", "e4m3", True, True, data, sinv, cdata, csinv, 0)
    assert ptrs == [a.ctypes.data for a in (data, sinv, cdata, csinv)]  # written in place
    ref = tessera.quantize(x, "rowwise", rowwise=True, columnwise=True, backend="reference")
    np.testing.assert_array_equal(data, ref.data)
    np.testing.assert_array_equal(sinv, ref.scale_inv.reshape(-1))
    np.testing.assert_array_equal(cdata, ref.columnwise_data)
    np.testing.assert_array_equal(csinv, ref.columnwise_scale_inv)
    q, s = rowwise_e4m3_oracle(x)
    np.testing.assert_array_equal(data, q)
    np.testing.assert_array_equal(sinv, s)
    q, s = rowwise_e4m3_oracle(np.ascontiguousarray(x.T))
    np.testing.assert_array_equal(cdata, q)
    np.testing.assert_array_equal(csinv.reshape(-1), s)


@needs_quantize_into
def test_quantize_into_one_usage_ignores_the_other_outputs():
    x = np.linspace(-3, 3, 64 * 32, dtype=np.float32).reshape(64, 32)
    data, sinv = np.zeros((64, 32), np.uint8), np.zeros(64, np.float32)
    empty_u8, empty_f32 = np.zeros((0, 0), np.uint8), np.zeros(0, np.float32)
    C._quantize_into(x, "rowwise", "e4m3", True, False, data, sinv, empty_u8, empty_f32)
    q, s = rowwise_e4m3_oracle(x)
    np.testing.assert_array_equal(data, q)
    np.testing.assert_array_equal(sinv, s)


@needs_quantize_into
def test_quantize_into_errors_name_the_argument():
    x = np.ones((8, 16), np.float32)
    ok_u8, ok_f32 = np.zeros((8, 16), np.uint8), np.zeros(8, np.float32)
    c_u8, c_f32 = np.zeros((16, 8), np.uint8), np.zeros(16, np.float32)
    with pytest.raises(tessera.Error, match="scale_inv"):
        C._quantize_into(x, "rowwise", "e4m3", True, False, ok_u8, np.zeros(7, np.float32),
                         c_u8, c_f32)
    with pytest.raises(tessera.Error, match="columnwise_data"):
        C._quantize_into(x, "rowwise", "e4m3", False, True, ok_u8, ok_f32,
                         np.zeros((8, 16, 2), np.uint8), c_f32)
    with pytest.raises(tessera.Error, match="mode"):
        C._quantize_into(x, "tensor", "e4m3", True, False, ok_u8, ok_f32, c_u8, c_f32)
    with pytest.raises(tessera.Error, match="usage"):
        C._quantize_into(x, "rowwise", "e4m3", False, False, ok_u8, ok_f32, c_u8, c_f32)
