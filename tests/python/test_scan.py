"""tessera.splits_to_offsets_multi against np.cumsum."""
import numpy as np
import pytest

import tessera


def expected(splits, stride, leading_zero, dtype, align=1):
    s = np.asarray(splits, dtype=np.int64)
    if align > 1:
        s = (s + align - 1) // align * align
    out = stride * np.cumsum(s)
    if leading_zero:
        out = np.concatenate([[0], out])
    return out.astype(dtype)


@pytest.mark.parametrize("n", [1, 4, 255, 256, 257, 1024, 100000])
@pytest.mark.parametrize("in_dtype", [np.int32, np.int64])
def test_matches_cumsum(n, in_dtype):
    rng = np.random.default_rng(n)
    splits = rng.integers(0, 100, n).astype(in_dtype)
    splits[0] = 0
    splits[-1] = 0
    splits[n // 2] = 0
    k = 64
    strides = [0, 1, 7, k, k + 17, 1]
    lead = [True, False, True, False, True, True]
    dtypes = ["int64", "int32", "int32", "int64", "int32", "int64"]
    outs = tessera.splits_to_offsets_multi(splits, strides, lead, dtypes)
    assert len(outs) == len(strides)
    for out, stride, lz, dt in zip(outs, strides, lead, dtypes):
        want = expected(splits, stride, lz, dt)
        assert out.dtype == np.dtype(dt)
        np.testing.assert_array_equal(out, want)


def test_aligned_outputs():
    splits = np.array([0, 5, 16, 17, 0, 1], np.int32)
    outs = tessera.splits_to_offsets_multi(splits, [1, 1], [True, True], ["int64", "int32"],
                                           aligns=[1, 16])
    np.testing.assert_array_equal(outs[0], expected(splits, 1, True, np.int64))
    np.testing.assert_array_equal(outs[1], expected(splits, 1, True, np.int32, 16))


def test_many_outputs_and_empty_splits():
    splits = np.array([3, 0, 2], np.int64)
    strides = list(range(40))
    outs = tessera.splits_to_offsets_multi(splits, strides, [k % 2 == 0 for k in strides],
                                           ["int64"] * 40)
    for k, out in enumerate(outs):
        np.testing.assert_array_equal(out, expected(splits, k, k % 2 == 0, np.int64))
    empty = tessera.splits_to_offsets_multi(np.zeros(0, np.int32), [1, 1], [True, False],
                                            ["int32", "int64"])
    assert empty[0].tolist() == [0] and empty[1].size == 0


def test_totals_past_2_to_31_in_int64():
    splits = np.full(6, 1 << 30, np.int64)
    (out,) = tessera.splits_to_offsets_multi(splits, [4096], [False], ["int64"])
    np.testing.assert_array_equal(out, 4096 * np.cumsum(splits))


def test_errors():
    with pytest.raises(tessera.Error, match="output 0"):
        tessera.splits_to_offsets_multi(np.array([1 << 20, 1 << 20], np.int32), [4096], [False],
                                        ["int32"])
    with pytest.raises(tessera.Error, match="negative"):
        tessera.splits_to_offsets_multi(np.array([1, -1], np.int32), [1], [False], ["int64"])
    with pytest.raises(tessera.Error):
        tessera.splits_to_offsets_multi(np.array([1, 2], np.int32), [1, 2], [False], ["int64"])
    with pytest.raises(tessera.Error):
        tessera.splits_to_offsets_multi(np.array([1, 2], np.int32), [1], [False], ["float32"])
    with pytest.raises(tessera.Error):
        tessera.splits_to_offsets_multi(np.array([1.0, 2.0], np.float32), [1], [False], ["int64"])
