"""tessera.nn: the C++ nn layers (GroupedLinear, GroupedMLP) on NumPy arrays, against NumPy FP64
oracles — the plain products for the FP32 recipe, and for the quantized recipes the FP64 products
of the very operands the layer's GEMMs read (its context's dequantized copies) plus SQNR floors
against the unquantized products — the weight views, main-grad accumulation, train/eval
alternation, custom recipe factories (released once the layer is built), and the errors."""
import gc
import weakref

import numpy as np
import pytest

import tessera
import tessera.nn as tn

QUANTIZED = {  # recipe: SQNR floor (dB) of y, dx, dW against the unquantized FP64 products
    "bf16": 40.0, "fp8_current": 20.0, "fp8_current:e4m3": 25.0, "fp8_delayed": 20.0,
    "fp8_rowwise": 25.0, "fp8_block": 25.0, "mxfp8": 25.0, "nvfp4": 8.0}
SPLITS = [40, 0, 72, 16]  # an empty expert; the buffer below has 8 capacity rows past them


def sqnr(got, ref):
    ref = np.asarray(ref, np.float64)
    err = np.asarray(got, np.float64) - ref
    return 10 * np.log10(np.sum(ref * ref) / max(np.sum(err * err), 1e-300))


def reference_linear(x, w, b, dy, splits):
    """FP64 y, dx, dW, db of the live rows (rows past the groups: zero)."""
    x, w, dy = (np.asarray(a, np.float64) for a in (x, w, dy))
    y, dx = np.zeros((x.shape[0], w.shape[1])), np.zeros_like(x)
    dw, db = np.zeros_like(w), np.zeros(w.shape[:2])
    s = 0
    for g, m in enumerate(splits):
        y[s:s + m] = x[s:s + m] @ w[g].T + (0 if b is None else b[g])
        dx[s:s + m] = dy[s:s + m] @ w[g]
        dw[g] = dy[s:s + m].T @ x[s:s + m]
        db[g] = dy[s:s + m].sum(0)
        s += m
    return y, dx, dw, db


def data(t, k, n, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((t, k)).astype(np.float32),
            rng.standard_normal((t, n)).astype(np.float32))


def test_linear_fp32_matches_numpy():
    lin = tn.GroupedLinear(len(SPLITS), 96, 48, "fp32", bias=True, name="fc1")
    x, dy = data(sum(SPLITS) + 8, 96, 48, 0)
    y, ctx = lin.forward(x, np.array(SPLITS, np.int32))
    dx, dw, db = lin.backward(ctx, dy)
    ref = reference_linear(x, lin.weight, lin.bias, dy, SPLITS)
    for what, got, want in zip(("y", "dx", "dw", "db"), (y, dx, dw, db), ref):
        assert got.dtype == np.float32 and got.shape == want.shape, what
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=what)
    assert not y[sum(SPLITS):].any() and not dx[sum(SPLITS):].any()  # capacity rows: zero
    assert not dw[1].any() and not db[1].any()                       # the empty expert
    assert lin.num_groups == 4 and lin.in_features == 96 and lin.out_features == 48
    assert lin.token_alignment == 1 and lin.name == "fc1"


def _padded_rows(ctx):
    """Per group: (unpadded row range, padded row range) of the context's layout."""
    o, p = ctx.offsets, ctx.padded_offsets
    return [(slice(o[g], o[g + 1]), slice(p[g], p[g] + o[g + 1] - o[g]))
            for g in range(len(o) - 1)]


@pytest.mark.parametrize("recipe", sorted(QUANTIZED))
def test_linear_quantized_recipes_against_their_operands(recipe):
    g, k, n = len(SPLITS), 128, 128  # n: whole 128-row FP8 blocks per expert (fp8_block)
    lin = tn.GroupedLinear(g, k, n, recipe, name="fc1")
    x, dy = data(sum(SPLITS), k, n, 1)
    y, ctx = lin.forward(x, SPLITS)
    dx, dw, _ = lin.backward(ctx, dy)
    # FP64 products of the operands the dgrad and wgrad GEMMs read, in the step's padded layout
    dy_row = ctx.operand_value("grad_output", columnwise=False)
    dy_col = ctx.operand_value("grad_output", columnwise=True)
    x_col = ctx.operand_value("input", columnwise=True)
    w_col = ctx.operand_value("weight", columnwise=True).reshape(g, n, k).astype(np.float64)
    want_dx, want_dw = np.zeros(dx.shape), np.zeros(dw.shape)
    for e, (rows, prows) in enumerate(_padded_rows(ctx)):
        want_dx[rows] = dy_row[prows].astype(np.float64) @ w_col[e]
        want_dw[e] = dy_col[prows].astype(np.float64).T @ x_col[prows]
    assert sqnr(dx, want_dx) > 80 and sqnr(dw, want_dw) > 80, recipe
    # and against the unquantized products
    ref = reference_linear(x, lin.weight, None, dy, SPLITS)
    dbs = [sqnr(got, want) for got, want in zip((y, dx, dw), ref)]
    print(f"\n[tessera.nn {recipe}] SQNR y {dbs[0]:.1f} dx {dbs[1]:.1f} dW {dbs[2]:.1f} dB")
    assert min(dbs) >= QUANTIZED[recipe], dbs
    assert not dw[1].any()


def test_accumulate_into_adds_to_main_grads():
    lin = tn.GroupedLinear(len(SPLITS), 64, 32, "fp8_current", bias=True)
    x, dy = data(sum(SPLITS), 64, 32, 2)
    _, ctx = lin.forward(x, SPLITS)
    _, dw, db = lin.backward(ctx, dy, need_dx=False)
    rng = np.random.default_rng(3)
    main_w = rng.standard_normal(dw.shape).astype(np.float32)
    main_b = rng.standard_normal(db.shape).astype(np.float32)
    before_w, before_b = main_w.copy(), main_b.copy()
    dx, got_w, got_b = lin.backward(ctx, dy, need_dx=False, accumulate_into=(main_w, main_b))
    assert dx is None and got_w is main_w and got_b is main_b
    np.testing.assert_allclose(main_w, before_w + dw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(main_b, before_b + db, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(main_w[1], before_w[1])  # the empty expert adds nothing
    with pytest.raises(tessera.DTypeError, match="accumulate_into"):
        lin.backward(ctx, dy, accumulate_into=(main_w.astype(np.float64), main_b))
    with pytest.raises(tessera.ShapeError, match="accumulate_into"):
        lin.backward(ctx, dy, accumulate_into=(main_w[:2], main_b))
    with pytest.raises(tessera.InvalidArgumentError, match="accumulate_into"):
        lin.backward(ctx, dy, accumulate_into=(main_w,))  # the bias needs its buffer too


def test_weight_views_train_eval_and_requantization():
    lin = tn.GroupedLinear(2, 32, 16, "fp8_current:e4m3")
    x, dy = data(32, 32, 16, 4)
    w = lin.weight
    assert w.shape == (2, 16, 32) and w.dtype == np.float32 and lin.bias is None
    w[...] = np.random.default_rng(5).standard_normal(w.shape).astype(np.float32)
    np.testing.assert_array_equal(lin.weight, w)  # a view of the layer's own buffer
    y1, ctx = lin.forward(x, [16, 16])
    # a later micro-batch that keeps the quantized weights: the context stays usable
    w *= 2
    y_same, ctx_same = lin.forward(x, [16, 16], requantize_weights=False)
    np.testing.assert_array_equal(y_same, y1)
    lin.backward(ctx, dy)
    # an eval forward: no context; it re-quantizes the (changed) weights; an earlier context
    # keeps the copies its forward read, so its backward is what it was
    y_eval, none = lin.forward(x, [16, 16], training=False)
    assert not none.valid and none.saved_bytes == 0
    assert sqnr(y_eval, 2 * y1.astype(np.float64)) > 25
    with pytest.raises(tessera.InvalidArgumentError, match="eval forward"):
        lin.backward(none, dy)
    for got, want in zip(lin.backward(ctx_same, dy), lin.backward(ctx, dy)):
        np.testing.assert_array_equal(got, want)
    # train after eval: the columnwise copy the dgrad reads is fresh (never a stale usage)
    y2, ctx2 = lin.forward(x, [16, 16])
    np.testing.assert_array_equal(y2, y_eval)
    dx2 = lin.backward(ctx2, dy)[0]
    dx_ref = reference_linear(x, lin.weight, None, dy, [16, 16])[1]
    assert sqnr(dx2, dx_ref) > 25
    # the view outlives the layer object
    del lin, ctx, ctx_same, ctx2
    gc.collect()
    assert np.isfinite(w).all()


def test_no_tokens():
    lin = tn.GroupedLinear(3, 64, 32, "mxfp8", bias=True)
    y, ctx = lin.forward(np.zeros((0, 64), np.float32), [0, 0, 0])
    dx, dw, db = lin.backward(ctx, np.zeros((0, 32), np.float32))
    assert y.shape == (0, 32) and dx.shape == (0, 64)
    assert not dw.any() and not db.any()


def reference_mlp(x, splits, probs, w1, b1, w2, b2, dy):
    """FP64 forward and backward of the SwiGLU MLP (the live rows)."""
    f = w2.shape[2]
    x, dy, probs = (np.asarray(a, np.float64) for a in (x, dy, probs))
    w1, b1, w2, b2 = (np.asarray(a, np.float64) for a in (w1, b1, w2, b2))
    y, dx, dp = np.zeros_like(x), np.zeros_like(x), np.zeros(x.shape[0])
    dw1, db1, dw2, db2 = (np.zeros_like(a) for a in (w1, b1, w2, b2))
    s = 0
    for g, m in enumerate(splits):
        r = slice(s, s + m)
        h = x[r] @ w1[g].T + b1[g]
        gate, up = h[:, :f], h[:, f:]
        sig = 1 / (1 + np.exp(-gate))
        act = gate * sig * up
        a = act * probs[r, None]
        y[r] = a @ w2[g].T + b2[g]
        da = dy[r] @ w2[g]
        dw2[g], db2[g] = dy[r].T @ a, dy[r].sum(0)
        dp[r] = (da * act).sum(1)
        dact = da * probs[r, None]
        dgate = dact * up * sig * (1 + gate * (1 - sig))
        dh = np.concatenate([dgate, dact * gate * sig], axis=1)
        dw1[g], db1[g] = dh.T @ x[r], dh.sum(0)
        dx[r] = dh @ w1[g]
        s += m
    return {"y": y, "dx": dx, "dprobs": dp, "fc1_dw": dw1, "fc1_db": db1, "fc2_dw": dw2,
            "fc2_db": db2}


@pytest.mark.parametrize("recipe,floor", [("fp32", None), ("bf16", 35.0), ("fp8_current", 18.0),
                                          ("mxfp8", 20.0), ("fp8_block", 20.0)])
def test_mlp_against_numpy(recipe, floor):
    g, hidden, ffn = len(SPLITS), 128, 64  # fc1, fc2: 128 out_features (fp8_block's blocks)
    mlp = tn.GroupedMLP(g, hidden, ffn, recipe, bias=True, name="experts")
    assert mlp.fc1.name == "experts.fc1" and mlp.fc2.weight.shape == (g, hidden, ffn)
    mlp.reset_parameters(7)
    x, dy = data(sum(SPLITS), hidden, hidden, 6)
    probs = np.random.default_rng(8).random(sum(SPLITS)).astype(np.float32)
    y, ctx = mlp.forward(x, SPLITS, probs)
    grads = mlp.backward(ctx, dy)
    ref = reference_mlp(x, SPLITS, probs, mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight,
                        mlp.fc2.bias, dy)
    got = dict(grads, y=y)
    assert ctx.valid and ctx.saved_bytes > 0 and set(got) == set(ref)
    for what in ref:
        assert got[what].dtype == np.float32 and got[what].shape == ref[what].shape, what
        if floor is None:
            np.testing.assert_allclose(got[what], ref[what], rtol=1e-4, atol=1e-4, err_msg=what)
        else:
            assert sqnr(got[what], ref[what]) >= floor, (what, sqnr(got[what], ref[what]))
    # without probs: no dprobs; weight grads skipped on request
    y2, ctx2 = mlp.forward(x, SPLITS)
    out = mlp.backward(ctx2, dy, need_weight_grads=False)
    assert out["dprobs"] is None and out["fc1_dw"] is None and out["dx"].shape == x.shape


def test_custom_factory_reproduces_the_named_recipe_and_is_released():
    calls = []

    def factory(module_type, tensor_type, name):
        calls.append((module_type, tensor_type, name))
        return {"mode": "tensor", "element": "e4m3"}

    ref = weakref.ref(factory)
    custom = tn.GroupedLinear(2, 64, 32, factory, name="fc2")
    named = tn.GroupedLinear(2, 64, 32, "fp8_current:e4m3", name="fc2")
    assert sorted(c[1] for c in calls) == ["grad_output", "input", "weight"]
    assert all(c[0] == "grouped_linear" and c[2] == "fc2" for c in calls)
    del factory
    gc.collect()
    assert ref() is None  # the layer keeps no reference to the factory
    x, dy = data(48, 64, 32, 9)
    outs = []
    for lin in (custom, named):
        y, ctx = lin.forward(x, [16, 32])
        outs.append((y,) + lin.backward(ctx, dy)[:2])
    for what, a, b in zip(("y", "dx", "dw"), *outs):
        np.testing.assert_array_equal(a, b, err_msg=what)
    # mixed formats per role; the factory's token alignment is the recipe's (what MoE dispatch
    # pads to), while the step pads the wgrad's copies to its own alignment (16 for FP8 rowwise)
    mixed = tn.GroupedLinear(2, 64, 32, lambda m, t, n: {"mode": "rowwise", "element":
                                                         "e5m2" if t == "grad_output" else "e4m3"},
                             token_alignment=32)
    assert mixed.token_alignment == 32
    _, ctx15 = mixed.forward(x[:47], [15, 32])
    assert list(ctx15.padded_offsets) == [0, 16, 48]
    y, ctx = mixed.forward(x, [16, 32])
    assert list(ctx.padded_offsets) == [0, 16, 48]
    ref_y = reference_linear(x, mixed.weight, None, dy, [16, 32])[0]
    assert sqnr(y, ref_y) > 25


def test_errors_name_the_argument():
    with pytest.raises(tessera.InvalidArgumentError, match="fp9"):
        tn.GroupedLinear(2, 32, 32, "fp9")
    with pytest.raises(tessera.InvalidArgumentError, match="recipe: expected"):
        tn.GroupedLinear(2, 32, 32, 3)
    with pytest.raises(tessera.InvalidArgumentError, match="dict"):
        tn.GroupedLinear(2, 32, 32, lambda *a: 3)
    with pytest.raises(tessera.InvalidArgumentError, match="bogus"):
        tn.GroupedLinear(2, 32, 32, lambda *a: {"mode": "bogus"})
    with pytest.raises(ZeroDivisionError):  # the factory's own exception comes through
        tn.GroupedLinear(2, 32, 32, lambda *a: 1 / 0)
    with pytest.raises(tessera.InvalidArgumentError, match="token_alignment"):
        tn.GroupedLinear(2, 32, 32, "bf16", token_alignment=32)
    with pytest.raises(tessera.InvalidArgumentError, match="num_groups"):
        tn.GroupedLinear(0, 32, 32, "bf16")
    lin, other = tn.GroupedLinear(2, 32, 16, "bf16"), tn.GroupedLinear(2, 32, 16, "bf16")
    with pytest.raises(tessera.ShapeError, match="x"):
        lin.forward(np.zeros((4, 31), np.float32), [2, 2])
    with pytest.raises(tessera.OutOfRangeError, match="splits"):
        lin.forward(np.zeros((4, 32), np.float32), [2, 3])
    with pytest.raises(tessera.ShapeError, match="groups"):
        lin.forward(np.zeros((4, 32), np.float32), [2, 2, 0])
    _, ctx = lin.forward(np.zeros((4, 32), np.float32), [2, 2])
    with pytest.raises(tessera.InvalidArgumentError, match="another layer"):
        other.backward(ctx, np.zeros((4, 16), np.float32))
    with pytest.raises(tessera.ShapeError, match="dy"):
        lin.backward(ctx, np.zeros((4, 15), np.float32))
    with pytest.raises(tessera.InvalidArgumentError, match="operand"):
        ctx.operand_value("bias")
    with pytest.raises(tessera.ArgumentTypeError):  # nanobind's TypeError, as a tessera.Error
        tn.GroupedLinear("2", 32, 16, "bf16")
    with pytest.raises(tessera.ArgumentTypeError):
        lin.backward("ctx", np.zeros((4, 16), np.float32))
    with pytest.raises(tessera.DTypeError, match="x: expected a real floating array"):
        lin.forward(np.zeros((4, 32), np.int32), [2, 2])
    with pytest.raises(tessera.DTypeError, match="splits: expected integer"):
        lin.forward(np.zeros((4, 32), np.float32), np.array([2.0, 2.0]))
    with pytest.raises(tessera.InvalidArgumentError, match="x: not an array"):
        lin.forward([[1.0], [1.0, 2.0]], [1, 1])
    mlp = tn.GroupedMLP(2, 32, 16, "bf16")
    assert "GroupedMLP(2, 32, 16" in repr(mlp) and "GroupedLinear(2, 32, 32" in repr(mlp.fc1)
    with pytest.raises(tessera.ShapeError, match="probs"):
        mlp.forward(np.zeros((4, 32), np.float32), [2, 2], np.zeros(3, np.float32))
