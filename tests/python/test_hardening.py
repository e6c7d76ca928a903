"""The Python entry points at the edges of int64: huge empty extents return at once for every
recipe and mode and both host backends (work scales with elements, not with empty rows); sizes
past int64 raise tessera.Error (out of range) naming what overflowed; a bounded random loop over
quantize / encode / decode / GroupedTensor / grouped_gemm with extents up to 2^63 - 1 gets a
result or a tessera.Error, never another exception, a crash or a hang."""
import random
import time

import numpy as np
import pytest

import tessera

HUGE = 2**40
RECIPES = ["fp8_delayed", "fp8_current", "fp8_current:e5m2", "fp8_block", "mxfp8", "nvfp4"]
MODES = ["tensor", "block1x128", "block128x128", "mxfp8", "mxfp8_32x32", "nvfp4", "nvfp4_16x16"]


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


CASES = [(n, {}) for n in RECIPES + MODES] + [(n, {"layout": "swizzled"}) for n in ("mxfp8", "nvfp4")]


@pytest.mark.parametrize("name,opts", CASES, ids=[n + "".join(o.values()) for n, o in CASES])
@pytest.mark.parametrize("shape", [(HUGE, 0), (0, HUGE)], ids=["2^40x0", "0x2^40"])
@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_quantize_huge_empty_returns_at_once(name, opts, shape, backend):
    x = np.zeros(shape, np.float32)
    q, seconds = timed(tessera.quantize, x, name, rowwise=True, columnwise=True, backend=backend,
                       **opts)
    assert seconds < 2.0, f"{name} {shape}: {seconds:.1f} s for an input without elements"
    assert q.shape == shape and q.data.size == 0 and q.columnwise_data.size == 0
    for columnwise in (False, True):
        y, seconds = timed(q.dequantize, columnwise, backend)
        assert y.shape == shape and seconds < 2.0


@pytest.mark.parametrize("shape", [(2**22, 0), (0, 2**22)], ids=["2^22x0", "0x2^22"])
def test_rowwise_scaling_of_empty_rows_is_one_per_row(shape):
    # Per-row (per-column) FP8 scales exist for empty rows too: the scale of an all-zero row is 1.
    cw = shape[0] == 0
    q, seconds = timed(tessera.quantize, np.zeros(shape, np.float32), "rowwise", rowwise=not cw,
                       columnwise=cw)
    s = q.columnwise_scale_inv if cw else q.scale_inv
    assert seconds < 2.0 and s.shape == (2**22, 1) and np.all(s == 1.0)


def test_sizes_past_int64_are_out_of_range():
    with pytest.raises(tessera.Error, match="out of range.*GroupedTensor"):
        tessera.GroupedTensor([(2**62, 4)])
    with pytest.raises(tessera.Error, match="out of range.*member rows"):
        tessera.GroupedTensor([(2**62, 0), (2**62, 0)], recipe="mxfp8")
    with pytest.raises(tessera.Error, match="out of range.*member 1"):
        tessera.GroupedTensor([(2**62, 1), (2**62, 1)])  # 2^63 elements in all


def test_grouped_huge_empty_members():
    g, seconds = timed(tessera.GroupedTensor, [(HUGE, 0), (0, HUGE), (4, 32)], recipe="mxfp8")
    assert seconds < 2.0
    x = np.full((4, 32), 2.0, np.float32)
    inputs = [np.zeros((HUGE, 0), np.float32), np.zeros((0, HUGE), np.float32), x]
    _, seconds = timed(g.quantize, inputs)
    assert seconds < 2.0
    np.testing.assert_array_equal(g.dequantize()[2], x)  # 2.0 is exact in MXFP8


def test_bounded_random_loop_over_entry_points():
    rng = random.Random(20)
    extents = [0, 1, 3, 32, 2**31, HUGE, 2**60]  # NumPy refuses larger extents, even empty
    meta_extents = extents + [2**62, 2**63 - 1]   # GroupedTensor shapes are metadata only
    calls = 0
    t0 = time.perf_counter()
    for _ in range(400):
        r, c = rng.choice(extents), rng.choice(extents)
        if r * c > 4096:  # NumPy needs memory for a non-empty array: one extent becomes 0
            r, c = (r, 0) if rng.random() < 0.5 else (0, c)
        x = np.zeros((r, c), np.float32)
        op = rng.randrange(5)
        try:
            if op == 0:
                tessera.quantize(x, rng.choice(RECIPES + MODES), columnwise=rng.random() < 0.5)
            elif op == 1:
                tessera.decode(tessera.encode(x, rng.choice(["e4m3", "e5m2", "e2m1"])), "e4m3")
            elif op == 2:
                shapes = [(rng.choice(meta_extents), rng.choice(meta_extents)) for _ in range(3)]
                shapes = [(a, b) if a * b <= 4096 or a * b >= 2**63 else (a, 0) for a, b in shapes]
                tessera.GroupedTensor(shapes, recipe=rng.choice(["none", "mxfp8", "nvfp4"]))
            elif op == 3:
                tessera.grouped_gemm(x, np.zeros((2, 0, c) if c <= 4096 else (2, 0, 0), np.float32),
                                     np.array([0, r // 2, r], np.int64))
            else:
                tessera.quantize(x, "mxfp8", backend="reference", columnwise=True).dequantize(True)
        except tessera.Error:
            pass
        calls += 1
    assert calls == 400 and time.perf_counter() - t0 < 60.0
