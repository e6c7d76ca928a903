"""tessera.GroupedTensor on NumPy: shapes and offsets, member views sharing storage, grouped
quantization against a NumPy/ml_dtypes oracle (FP8 per-tensor current scaling), dequantize,
capacity buffers, repr, and clear errors."""
import ml_dtypes
import numpy as np
import pytest

import tessera


def rand(shape, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-4, 5, shape))).astype(np.float32)


def fp8_tensor_oracle(x):
    """FP8 E4M3 current scaling per docs/numerics.md: scale = 448 / amax (RNE division), saturating RNE."""
    amax = np.float32(np.max(np.abs(x))) if x.size else np.float32(0)
    scale = np.float32(1) if amax == 0 else np.float32(448) / amax
    codes = np.clip(x * scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    return codes, np.float32(1) / scale, amax


def test_shape_modes_and_offsets():
    g = tessera.GroupedTensor([(3, 8), (0, 8), (5, 8)], dtype="bfloat16")
    assert g.mode == "varying first"
    assert g.logical_shape == [8, 8] or tuple(g.logical_shape) == (8, 8)
    np.testing.assert_array_equal(g.tensor_offsets, [0, 24, 24, 64])
    assert g.scale_offsets is None
    assert tessera.GroupedTensor([(2, 3), (2, 5)]).mode == "varying last"
    assert tessera.GroupedTensor([(2, 3), (4, 5)]).mode == "varying both"
    assert tessera.GroupedTensor([(2, 3), (2, 3)]).mode == "all same"


def test_member_views_share_storage():
    g = tessera.GroupedTensor([(2, 3), (1, 3)], dtype="float32")
    m1 = g.member(1)
    assert m1.shape == (1, 3) and m1.dtype == np.float32
    m1[...] = [[1, 2, 3]]
    np.testing.assert_array_equal(g.data[6:9], [1, 2, 3])
    bf = tessera.GroupedTensor([(2, 4)], dtype="bfloat16").member(0)
    assert bf.dtype == ml_dtypes.bfloat16 and bf.shape == (2, 4)


@pytest.mark.parametrize("in_dtype", [np.float32, ml_dtypes.bfloat16])
def test_fp8_tensor_scaling_matches_numpy_oracle(in_dtype):
    shapes = [(16, 32), (0, 32), (7, 32), (33, 32)]
    g = tessera.GroupedTensor(shapes, recipe="tensor", rowwise=True, columnwise=True)
    xs = [rand(s, i).astype(in_dtype) for i, s in enumerate(shapes)]
    g.quantize(xs)
    for i, x in enumerate(xs):
        codes, scale_inv, amax = fp8_tensor_oracle(x.astype(np.float32))
        m = g.member(i)
        np.testing.assert_array_equal(m["data"], codes, err_msg=f"member {i}")
        np.testing.assert_array_equal(m["columnwise_data"], codes.T, err_msg=f"member {i}")
        assert m["scale_inv"][0, 0] == scale_inv
        assert m["amax"][0] == amax
    deq = g.dequantize()
    for i, x in enumerate(xs):
        codes, scale_inv, _ = fp8_tensor_oracle(x.astype(np.float32))
        want = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * scale_inv
        np.testing.assert_array_equal(deq[i], want)
    cw = g.dequantize(columnwise=True)
    for a, b in zip(deq, cw):
        np.testing.assert_array_equal(a, b)


def test_contiguous_quantize_equals_list_and_leaves_capacity_untouched():
    shapes = [(40, 64), (0, 64), (24, 64)]
    a = tessera.GroupedTensor(shapes, recipe="mxfp8", capacity_rows=128)
    b = tessera.GroupedTensor(shapes, recipe="mxfp8")
    assert tuple(a.logical_shape) == (128, 64)
    a.data[...] = 0xA5
    x = rand((128, 64), 3)
    a.quantize_contiguous(x)
    b.quantize([x[:40], x[40:40], x[40:64]])
    for i in range(3):
        for key in ("data", "scale_inv"):
            np.testing.assert_array_equal(a.member(i)[key], b.member(i)[key])
    assert np.all(a.data[64 * 64:] == 0xA5)


def test_nvfp4_members_are_packed_bytes():
    g = tessera.GroupedTensor([(16, 32), (2, 32)], recipe="nvfp4")
    g.quantize([rand((16, 32), 1), rand((2, 32), 2)])
    m = g.member(1)
    assert m["data"].shape == (2, 16) and m["data"].dtype == np.uint8
    assert m["scale_inv"].shape == (2, 2)


def test_repr_names_members_and_recipe():
    g = tessera.GroupedTensor([(32, 64), (64, 64)], recipe="mxfp8", columnwise=True)
    text = repr(g)
    for part in ("2 members", "varying first", "mxfp8 e4m3", "rowwise+columnwise", "[1] (64, 64)"):
        assert part in text, text
    assert g.storage_bytes > 2 * 96 * 64


def test_bad_input_is_a_clear_error():
    with pytest.raises(tessera.Error, match="recipe: 'mxfp9' is neither a recipe .* nor a scaling mode"):
        tessera.GroupedTensor([(2, 32)], recipe="mxfp9")
    with pytest.raises(tessera.Error, match="negative dimension"):
        tessera.GroupedTensor([(2, 32), (-1, 32)])
    g = tessera.GroupedTensor([(2, 32), (3, 32)], recipe="tensor")
    with pytest.raises(tessera.Error, match="1 inputs for 2 members"):
        g.quantize([rand((2, 32), 0)])
    with pytest.raises(tessera.Error, match=r"inputs\[1\]: expected \(3, 32\)"):
        g.quantize([rand((2, 32), 0), rand((4, 32), 0)])
    with pytest.raises(tessera.Error, match="out of range"):
        g.member(2)
    with pytest.raises(tessera.Error, match="cannot be quantized"):
        tessera.GroupedTensor([(2, 32)]).quantize([rand((2, 32), 0)])


@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4", "block1x128", "rowwise"])
def test_members_equal_tessera_quantize_of_each_member(recipe):
    shapes = [(32, 64), (0, 64), (96, 64)]
    g = tessera.GroupedTensor(shapes, recipe=recipe, columnwise=True)
    xs = [rand(s, 10 + i) for i, s in enumerate(shapes)]
    g.quantize(xs)
    for i, x in enumerate(xs):
        alone = tessera.quantize(x, recipe, rowwise=True, columnwise=True)
        m = g.member(i)
        for key in ("data", "scale_inv", "columnwise_data", "columnwise_scale_inv"):
            np.testing.assert_array_equal(m[key].view(np.uint8).reshape(-1),
                                          np.asarray(getattr(alone, key)).view(np.uint8).reshape(-1),
                                          err_msg=f"{recipe} member {i} {key}")
