"""tessera.torch nvfp4 (the C++ recipe "nvfp4": E2M1 codes two per byte, E4M3 scales per 1x16
block of x and dy and per 16x16 tile of W, FP32 global amax per copy, the 16-point random
Hadamard transform on the wgrad's columnwise copies of x and dy, stochastic rounding of dy)
against tessera's reference quantizer (`tessera.quantize(..., backend="reference")`: the
spec-faithful loops of src/quantize/reference, not the CPU/CUDA kernels the op runs) and its
reference dequantize (which undoes the Hadamard transform): the op's bytes bit for bit; y, dx,
dW of grouped_linear and of each GroupedMLP layer by SQNR against FP64 products of the
reference's dequantized operands and against the unquantized values; the weight quantized once
per quantization, reused only under the caller's promise; fresh stochastic-rounding bits every
step; main_grad; torch.compile(fullgraph=True); CustomRecipe with NVFP4 and MXFP8 roles; bad
input.

Group sizes: any, on every device. The step quantizes x and dy (both copies in one pass) in its
padded layout (every group starting on a multiple of 16 rows, zero rows between: the Hadamard
blocks of 16 tokens never straddle two groups), which the oracle mirrors
(torch_oracles.pad_groups, unpad_groups); dy's quantization takes the step's next
stochastic-rounding offset."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tessera.torch")
import tessera  # noqa: E402
from tessera.torch.fp8 import scale_shape  # noqa: E402
from torch_oracles import (  # noqa: E402
    composed_mlp_step, ends, grouped_products, mlp_eager_and_compiled, opcheck_linear_step,
    pad_groups, padded_sizes, run_step, sqnr, unpad_groups, wgrad_align)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tessera.cuda_compiled() else [])
# Empty experts at the start, middle and end; sizes not multiples of 16, on every device.
SIZES = [0, 40, 100, 0, 7, 53, 72, 0]
ALIGN = wgrad_align("nvfp4")  # 16: the Hadamard block and the E4M3 scale block of 16 tokens


ORACLE_DB = 40.0  # bf16 outputs against FP64 products of the same dequantized operands
PLAIN_DB = 11.0   # E2M1 (1 mantissa bit) against the unquantized values


# ---- the oracle -------------------------------------------------------------------------------

def ref_copies(x, mode, columnwise=True, rht=False, sr=False, offset=0):
    """tessera's reference quantizer on x (2-D): the QuantizedTensor (NumPy buffers)."""
    xf = np.ascontiguousarray(x.detach().float().cpu().numpy())
    return tessera.quantize(xf, mode, rowwise=True, columnwise=columnwise, random_hadamard=rht,
                            stochastic_rounding=sr, seed=0, offset=offset, backend="reference")


def ref_values(q, columnwise):
    """FP64 (R, C) of one copy of q, dequantized by the reference (inverse transform applied)."""
    return torch.from_numpy(q.dequantize(columnwise, "reference")).double()


def member_values(t, rows, mode, rht=False, sr=False, offset=0):
    """FP64 rowwise and columnwise values of t (R, C) quantized member by member (member g: the
    next rows[g] rows, quantized alone with offset + g — the step's per-expert global amax and
    stochastic-rounding offsets, docs/numerics.md)."""
    parts, s = [], 0
    for g, m in enumerate(rows):
        if m:
            q = ref_copies(t[s:s + m], mode, rht=rht, sr=sr, offset=offset + g)
            parts.append((ref_values(q, False), ref_values(q, True)))
        s += m
    return tuple(torch.cat([p[c] for p in parts]) for c in (0, 1))


def oracle_step(x, w, dy, sizes, dy_offset):
    """FP64 y, dx, dW on the reference's operands, in the step's padded layout: x and dy padded,
    each expert quantized alone (both copies; expert g's dy stochastically rounded with
    `dy_offset` + g), W per expert when N % 16 == 0 (else whole); y = x rowwise · W rowwise,
    dx = dy rowwise · W columnwise (their group rows moved back), dW = dy columnwise ·
    x columnwise (the Hadamard-transformed copies, undone)."""
    g, n, k = w.shape
    ps = padded_sizes(sizes, ALIGN)
    xq, xcq = member_values(pad_groups(x, sizes, ALIGN), ps, "nvfp4", rht=True)
    wq, wcq = (v.reshape(g, n, k) for v in member_values(
        w.reshape(g * n, k), [n] * g if n % 16 == 0 else [g * n], "nvfp4_16x16"))
    dyq, dycq = member_values(pad_groups(dy, sizes, ALIGN), ps, "nvfp4", rht=True, sr=True,
                              offset=dy_offset)
    y, _, _ = grouped_products(xq, wq, dyq, ps)
    _, dx, _ = grouped_products(xq, wcq, dyq, ps)
    _, _, dw = grouped_products(xcq, wq, dycq, ps)
    return unpad_groups(y, sizes, ALIGN), unpad_groups(dx, sizes, ALIGN), dw


def inputs(sizes, k, n, device, seed=0):
    """x (T, K), w (G, N, K), dy (T, N) in bf16, with magnitudes varying along K."""
    gen = torch.Generator().manual_seed(seed)
    t = sum(sizes)
    mag = torch.tensor([1e-2, 1.0, 1e2, 1e-1])[torch.arange(k) // 16 % 4]
    x = (torch.randn(t, k, generator=gen) * mag).to(torch.bfloat16)
    w = (torch.randn(len(sizes), n, k, generator=gen) / mag / math.sqrt(k)).to(torch.bfloat16)
    dy = torch.randn(t, n, generator=gen).to(torch.bfloat16)
    return x.to(device), w.to(device), dy.to(device)


def check_step(got, oracle, plain, where):
    vs_oracle = [sqnr(a, b) for a, b in zip(got, oracle)]
    vs_plain = [sqnr(a, b) for a, b in zip(got, plain)]
    print(f"\n[{where}] SQNR y/dx/dW vs the FP64 products of the unquantized values "
          f"{[round(d, 1) for d in vs_plain]}, vs the reference oracle "
          f"{[round(d, 1) for d in vs_oracle]} dB")
    assert min(vs_oracle) >= ORACLE_DB, where
    assert min(vs_plain) >= PLAIN_DB, where


# ---- the quantize op ----------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["nvfp4", "nvfp4_16x16"])
@pytest.mark.parametrize("shape", [(64, 96), (48, 33), (32, 1), (80, 200)])
@pytest.mark.parametrize("rht,sr", [(False, False), (True, False), (True, True)])
def test_quantizer_matches_reference_bit_for_bit(device, mode, shape, rht, sr):
    torch.manual_seed(3)
    r, c = shape
    x = torch.randn(r, c) * torch.logspace(-3, 3, c)[None, :]
    x[:16, :16] = 0.0  # an all-zero block: scale byte 0
    for xin in (x.bfloat16(), x):
        out = tt.quantize_nvfp4_impl(xin.to(device), mode, True, True, rht, sr, 7, 11)
        data, sinv, cdata, csinv, amax, camax = out
        where = f"{mode} {shape} rht={rht} sr={sr} {xin.dtype}"
        assert data.dtype == cdata.dtype == torch.uint8, where
        assert sinv.dtype == csinv.dtype == torch.float8_e4m3fn, where
        assert data.shape == (r, (c + 1) // 2) and cdata.shape == (c, (r + 1) // 2), where
        assert sinv.shape == scale_shape(mode, r, c) == (r, -(-c // 16)), where
        assert csinv.shape == scale_shape(mode, r, c, True) == (c, -(-r // 16)), where
        xf = np.ascontiguousarray(xin.float().numpy())
        q = tessera.quantize(xf, mode, rowwise=True, columnwise=True, random_hadamard=rht,
                             stochastic_rounding=sr, seed=7, offset=11, backend="reference")
        u8 = lambda t: t.cpu().view(torch.uint8).numpy()  # noqa: E731
        for got, want, name in ((data, q.data, "data"), (sinv, q.scale_inv, "scale_inv"),
                                (cdata, q.columnwise_data, "columnwise_data"),
                                (csinv, q.columnwise_scale_inv, "columnwise_scale_inv")):
            assert np.array_equal(u8(got), want), f"{where} {name}"
        assert amax.cpu().numpy()[0] == q.amax[0] and camax.cpu().numpy()[0] == q.columnwise_amax[0]
        op = torch.ops.tessera.quantize_nvfp4(xin.to(device), mode, True, True, rht, sr, 7, 11)
        assert all(torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a,
                               b.view(torch.uint8) if b.element_size() == 1 else b)
                   for a, b in zip(op, out)), where


def test_offset_changes_the_stochastic_bits_only():
    x = torch.randn(64, 64)
    a = tt.quantize_nvfp4_impl(x, "nvfp4", True, True, True, True, 0, 1)
    b = tt.quantize_nvfp4_impl(x, "nvfp4", True, True, True, True, 0, 2)
    c = tt.quantize_nvfp4_impl(x, "nvfp4", True, True, True, False, 0, 1)
    d = tt.quantize_nvfp4_impl(x, "nvfp4", True, True, True, False, 0, 2)
    assert not torch.equal(a[0], b[0]) and not torch.equal(a[2], b[2])
    assert torch.equal(c[0], d[0]) and torch.equal(c[2], d[2])  # RNE: the offset is unused
    assert torch.equal(a[1].view(torch.uint8), b[1].view(torch.uint8))  # scales: no rounding


def test_quantizer_bad_input_is_a_clear_error():
    x = torch.randn(64, 64)
    empty = tt.quantize_nvfp4_impl(torch.zeros(0, 64), "nvfp4", True, True)
    assert all(t.numel() == 0 for t in empty[:4]) and empty[4].item() == 0
    with pytest.raises(tessera.InvalidArgumentError, match="quantize_nvfp4: mode 'mxfp8' is not one of"):
        tt.quantize_nvfp4_impl(x, "mxfp8")
    with pytest.raises(tessera.ShapeError, match="quantize_nvfp4: x must be 2-D, got 3-D"):
        tt.quantize_nvfp4_impl(x[None])
    with pytest.raises(tessera.Error, match="Hadamard transform of the columnwise copy needs M"):
        tt.quantize_nvfp4_impl(x[:40], "nvfp4", True, True, True)
    with pytest.raises(tessera.Error, match="rowwise/columnwise: at least one usage"):
        tt.quantize_nvfp4_impl(x, "nvfp4", False, False)


def test_step_ops_pass_opcheck():
    x, w, dy = inputs([32, 0, 16], 96, 64, "cpu", seed=13)
    opcheck_linear_step("nvfp4", x, w, ends([32, 0, 16], "cpu"), dy)


def test_roles_come_from_the_cpp_recipe():
    from tessera import _tessera
    cfg = {t: _tessera._recipe_config("nvfp4", "grouped_linear", t, "", {})
           for t in ("input", "weight", "grad_output")}
    assert (cfg["input"]["mode"], cfg["input"]["element"], cfg["input"]["random_hadamard"],
            cfg["input"]["stochastic_rounding"]) == ("nvfp4", "e2m1", True, False)
    assert (cfg["weight"]["mode"], cfg["weight"]["random_hadamard"]) == ("nvfp4_16x16", False)
    assert (cfg["grad_output"]["random_hadamard"], cfg["grad_output"]["stochastic_rounding"]) \
        == (True, True)
    layer = tt.GroupedLinear(2, 64, 64, recipe="nvfp4")
    assert "nvfp4" in tt.RECIPES and layer.recipe == "nvfp4" and layer.spec == "nvfp4"


# ---- the linear step --------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
# N: a multiple of 16 with several experts (make_linear_spec refuses others: a 16-row tile of W
# would span two); one expert takes any even N
@pytest.mark.parametrize("sizes,k,n", [(SIZES, 160, 96), (SIZES, 72, 48), ([16], 64, 40),
                                       ([0, 48, 0], 96, 208)])
def test_grouped_linear_step_matches_oracle_and_fp64(device, sizes, k, n):
    x, w, dy = inputs(sizes, k, n, device, seed=k + n)
    offs = ends(sizes, device)
    tt.set_rng_offset(100)  # dy is the step's one stochastically rounded quantization
    got = run_step(lambda a, b: tt.grouped_linear(a, b, offs, "nvfp4"), x, w, dy)
    assert tt.rng_offset() == 100 + len(sizes)  # one offset per expert
    assert all(t.dtype == torch.bfloat16 for t in got)
    check_step(got, oracle_step(x, w, dy, sizes, 100), grouped_products(x, w, dy, sizes),
               f"nvfp4 {device} sizes={sizes} K={k} N={n}")
    for gi, m in enumerate(sizes):  # empty experts get zero weight gradients
        if m == 0:
            assert torch.count_nonzero(got[2][gi]) == 0


def test_the_oracle_sees_a_wrong_offset():
    # the dW check above would fail if the step's dy bits came from another offset
    x, w, dy = inputs(SIZES, 96, 64, "cpu", seed=5)
    offs = ends(SIZES, "cpu")
    tt.set_rng_offset(0)
    got = run_step(lambda a, b: tt.grouped_linear(a, b, offs, "nvfp4"), x, w, dy)
    right, wrong = oracle_step(x, w, dy, SIZES, 0), oracle_step(x, w, dy, SIZES, 1)
    assert sqnr(got[2], right[2]) >= ORACLE_DB > sqnr(got[2], wrong[2])


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_mlp_is_the_composition_of_linear_steps(device):
    S = SIZES
    torch.manual_seed(9)
    mlp = tt.GroupedMLP(len(S), 96, 80, recipe="nvfp4", device=device)
    offs = ends(S, device)
    x0 = torch.randn(sum(S), 96, device=device, dtype=torch.bfloat16)
    probs = torch.rand(sum(S), device=device)
    dy = torch.randn(sum(S), 96, device=device, dtype=torch.bfloat16)
    tt.set_rng_offset(0)  # fc2's backward draws offset 0, fc1's 1: in both runs
    x = x0.detach().requires_grad_()
    p = probs.detach().requires_grad_()
    y = mlp(x, offs, probs=p)
    y.backward(dy)
    tt.set_rng_offset(0)
    want = composed_mlp_step("nvfp4", mlp.fc1.weight, mlp.fc2.weight, None, None, x0, offs,
                             probs, dy)
    got = (y.detach(), x.grad, mlp.fc1.weight.grad, mlp.fc2.weight.grad, p.grad)
    dbs = [sqnr(a, b) for a, b in zip(got, want)]
    print(f"\n[mlp nvfp4 {device}] SQNR vs the composed linear steps y/dx/dW1/dW2/dp "
          f"{[round(d, 1) for d in dbs]}")
    assert min(dbs) >= ORACLE_DB


@pytest.mark.parametrize("device", DEVICES)
def test_weight_copies_are_reused_only_under_the_promise(device):
    g, k, n = len(SIZES), 96, 64
    layer = tt.GroupedLinear(g, k, n, recipe="nvfp4", device=device)
    offs = ends(SIZES, device)
    x, _, dy = inputs(SIZES, k, n, device, seed=4)
    with torch.no_grad():
        y_eval = layer(x, offs)
    first = layer.weight_cache.copies
    assert first.dtype == torch.uint8 and first.numel() > 0  # both usages, laid out by C++
    with torch.no_grad():                     # no promise: the copies are made again
        assert torch.equal(layer(x, offs), y_eval)
    assert layer.weight_cache.copies is not first
    kept = layer.weight_cache.copies
    for _ in range(3):                        # later micro-batches: reused
        xr = x.detach().requires_grad_()
        y = layer(xr, offs, is_first_microbatch=False)
        y.backward(dy)
        assert layer.weight_cache.copies is kept
    assert torch.equal(y.detach(), y_eval)
    torch.optim.SGD(layer.parameters(), lr=0.1).step()  # a new weight version: re-made
    y2 = layer(x.detach(), offs, is_first_microbatch=False)
    assert layer.weight_cache.copies is not kept and not torch.equal(y2.detach(), y_eval)


def test_successive_steps_draw_fresh_rounding_bits():
    S = SIZES
    layer = tt.GroupedLinear(len(S), 64, 32, recipe="nvfp4")
    x, _, dy = inputs(S, 64, 32, "cpu", seed=6)
    offs = ends(S, "cpu")
    grads = []
    for _ in range(2):
        layer.zero_grad(set_to_none=True)
        xr = x.detach().requires_grad_()
        layer(xr, offs).backward(dy)
        grads.append((xr.grad, layer.weight.grad))
    assert not torch.equal(grads[0][0], grads[1][0]) and not torch.equal(grads[0][1], grads[1][1])
    # the same offsets again: the same bits
    start = tt.rng_offset()
    runs = []
    for _ in range(2):
        tt.set_rng_offset(start)
        layer.zero_grad(set_to_none=True)
        xr = x.detach().requires_grad_()
        layer(xr, offs).backward(dy)
        runs.append((xr.grad, layer.weight.grad))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize("device", DEVICES)
def test_fp32_master_weights_and_main_grad(device):
    S = SIZES
    torch.manual_seed(11)
    g, k, n = len(S), 96, 64
    kw = dict(recipe="nvfp4", device=device, params_dtype=torch.float32)
    plain = tt.GroupedLinear(g, k, n, **kw)
    acc = tt.GroupedLinear(g, k, n, accumulate_main_grad=True, **kw)
    acc.load_state_dict(plain.state_dict())
    offs = ends(S, device)
    want = torch.zeros(g, n, k, dtype=torch.float64)
    for step in range(2):
        x0, _, dy = inputs(S, k, n, device, seed=20 + step)
        for layer in (plain, acc):
            tt.set_rng_offset(10 * step)  # both layers draw the same bits
            layer.zero_grad(set_to_none=True)
            layer(x0.detach().requires_grad_(), offs).backward(dy)
        assert plain.weight.grad.dtype == torch.float32 and acc.weight.grad is None
        want += plain.weight.grad.double().cpu()
        oracle = oracle_step(x0, plain.weight.detach(), dy, S, 10 * step)[2]
        assert sqnr(plain.weight.grad, oracle) >= (100.0 if device == "cpu" else 70.0)
    assert sqnr(acc.weight.main_grad, want) >= 100.0


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    S = SIZES
    torch.manual_seed(12)
    mlp = tt.GroupedMLP(len(S), 96, 48, recipe="nvfp4", device=device)
    x0 = torch.randn(sum(S), 96, device=device, dtype=torch.bfloat16)
    offs = ends(S, device)
    eager, compiled = mlp_eager_and_compiled(mlp, x0, offs)
    # the forward has no stochastic rounding: bit for bit; the gradients' dy bits come from
    # other offsets (the compiled backward's offsets are read when it is traced)
    assert torch.equal(eager[0], compiled[0])
    for e, c in zip(eager[1:], compiled[1:]):
        assert torch.isfinite(c).all() and sqnr(c, e) >= 8.0


@pytest.mark.parametrize("device", DEVICES)
def test_custom_recipe_mxfp8_forward_nvfp4_gradients(device):
    S = SIZES

    def factory(role):
        return tt.QuantizerConfig("nvfp4" if role.tensor_type == "grad_output" else "mxfp8")
    recipe = tt.CustomRecipe(factory, name="mx-fwd-nvfp4-grad")
    assert recipe.spec("fc1") == ("custom:mx-fwd-nvfp4-grad;input=mxfp8/e4m3;weight=mxfp8/e4m3;"
                                  "grad_output=nvfp4/e2m1")
    x, w, dy = inputs(S, 96, 64, device, seed=15)
    offs = ends(S, device)
    got = run_step(lambda a, b: tt.grouped_linear(a, b, offs, recipe, name="fc1"), x, w, dy)
    plain = grouped_products(x, w, dy, S)
    dbs = [sqnr(a, b) for a, b in zip(got, plain)]
    print(f"\n[custom mxfp8 fwd / nvfp4 dy {device}] SQNR y/dx/dW vs FP64 "
          f"{[round(d, 1) for d in dbs]}")
    assert dbs[0] >= 25.0 and min(dbs[1:]) >= PLAIN_DB
    # all-NVFP4 custom roles (no Hadamard transform, no SR) run too
    nv = tt.CustomRecipe(lambda r: tt.QuantizerConfig(
        "nvfp4_16x16" if r.tensor_type == "weight" else "nvfp4"), name="nv")
    got = run_step(lambda a, b: tt.grouped_linear(a, b, offs, nv), x, w, dy)
    assert min(sqnr(a, b) for a, b in zip(got, plain)) >= PLAIN_DB


# ---- errors -----------------------------------------------------------------------------------

def test_any_token_count_and_bad_input():
    # any token count: the wgrad's copies are padded per group (no multiple of 16 asked for)
    x, w, dy = inputs([40], 64, 32, "cpu")
    tt.set_rng_offset(3)
    got = run_step(lambda a, b: tt.grouped_linear(a, b, ends([40], "cpu"), "nvfp4"), x, w, dy)
    check_step(got, oracle_step(x, w, dy, [40], 3), grouped_products(x, w, dy, [40]), "T = 40")
    with pytest.raises(tessera.UnsupportedError,
                       match=r"in_features \(63\) and out_features \(32\): both must be even"):
        tt.grouped_linear(x[:, :63], w[:, :, :63], ends([40], "cpu"), "nvfp4")
    with pytest.raises(tessera.UnsupportedError, match="cannot meet"):
        tt.CustomRecipe(lambda r: tt.QuantizerConfig(
            "nvfp4" if r.tensor_type == "input" else "block1x128")).spec()
    with pytest.raises(tessera.InvalidArgumentError, match="recipe"):
        tt.GroupedLinear(2, 64, 64, recipe="nvfp4:e4m3")
