"""tessera.torch fp8_block (DeepSeek-V3's recipe, the C++ recipe "fp8_block": E4M3, power-of-two
FP32 scales per 1x128 block of x and dy, per 128x128 tile of W) against an independent
pure-PyTorch emulation of docs/numerics.md: the quantizer's codes and scales bit for bit; y, dx,
dW of grouped_linear by SQNR against FP64 products of the emulated operands, and against plain
FP32 (>= 28 dB); GroupedMLP == its composition of linear steps, and against FP64; ragged groups
(empty experts at the start, middle and end, sizes and starts not multiples of 16, on every
device); the weight copies across train/eval alternation, reused only under the caller's
promise; main_grad; torch.compile(fullgraph=True).

The step quantizes the wgrad's columnwise copies of x and dy in its padded layout (every group
starting on a multiple of 128 rows, zero rows between: no 128-token block straddles two groups),
which the oracle mirrors (torch_oracles.pad_groups; test_wgrad_blocks_never_straddle_groups
shows the difference). On CUDA the dgrad of a block recipe needs out_features % 128 == 0 (the
GEMM refuses others); the CPU runs every shape, so the shapes with other N are CPU-only here."""
import math

import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tessera.torch")
import tessera  # noqa: E402
from tessera.torch.fp8 import scale_shape  # noqa: E402
from torch_oracles import (  # noqa: E402
    ends, grouped_products, mlp_eager_and_compiled, mlp_step_against_oracles,
    opcheck_linear_step, pad_groups, padded_sizes, run_step, sqnr, wgrad_align)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tessera.cuda_compiled() else [])
# Empty groups at the start, middle and end; sizes and starts (0, 45, 205, 236, 245) not
# multiples of 16 nor of 128, on every device (the wgrad's padded layout takes any).
SIZES = [0, 45, 160, 0, 31, 9, 272, 0]
ALIGN = wgrad_align("fp8_block")  # 128: the token block of the columnwise copies
E4M3_MAX = 448.0
FLT_MAX = torch.finfo(torch.float32).max
POW2_MASK = -(1 << 23)  # 0xff800000 as int32: sign and exponent kept, mantissa cleared



def step_cases(shapes):
    """(device, K, N) for each shape and device; CUDA only where its FP8 GEMM runs (K % 16 == 0:
    16-byte TMA rows; N % 128 == 0: its block dgrad)."""
    skip = pytest.mark.skip(reason="CUDA's FP8 GEMM needs K % 16 == 0 and N % 128 == 0")
    return [pytest.param(d, k, n, marks=skip) if d == "cuda" and (k % 16 or n % 128)
            else (d, k, n) for k, n in shapes for d in DEVICES]


# ---- the oracle: docs/numerics.md, FP8 current scaling per block, power-of-two scales --------

def oracle_block(x, tile_rows):
    """Block quantization of the copy x (R, C) in plain torch: blocks of tile_rows x 128
    (1 or 128 rows); per block a = amax; a == 0 or non-finite: scale 1; else scale = 448 / a
    (IEEE FP32 division; +inf → FLT_MAX) rounded down to a power of two (bits & 0xff800000);
    codes = RNE cast of x * scale clamped to ±448; scale_inv = 1 / scale. Returns (codes (R, C),
    compact scale_inv with the padding of the mode (zeros), dequantized values FP64 (R, C))."""
    xf = x.detach().float().cpu()
    r, c = xf.shape
    nr, nc = -(-r // tile_rows), -(-c // 128)
    padded = torch.zeros(nr * tile_rows, nc * 128)
    padded[:r, :c] = xf
    amax = padded.abs().reshape(nr, tile_rows, nc, 128).amax(dim=(1, 3))       # (nr, nc)
    ok = (amax > 0) & torch.isfinite(amax)
    scale = torch.where(ok, torch.full_like(amax, E4M3_MAX) / torch.where(ok, amax, 1.0), 1.0)
    scale = scale.clamp(max=FLT_MAX)
    scale = (scale.view(torch.int32) & POW2_MASK).view(torch.float32)
    per_elem = scale.repeat_interleave(tile_rows, 0).repeat_interleave(128, 1)[:r, :c]
    codes = (xf * per_elem).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    scale_inv = torch.tensor(1.0) / scale
    deq = codes.double() * scale_inv.repeat_interleave(tile_rows, 0).repeat_interleave(
        128, 1)[:r, :c].double()
    mode = "block1x128" if tile_rows == 1 else "block128x128"
    stored = torch.zeros(scale_shape(mode, r, c))
    stored[:nr, :nc] = scale_inv
    return codes, stored, deq


def oracle_copies(x, mode):
    """(rowwise codes, scales, dequantized), (columnwise ...) of x: the columnwise copy is the
    block quantization of xᵀ (stored transposed)."""
    tile_rows = 1 if mode == "block1x128" else 128
    return oracle_block(x, tile_rows), oracle_block(x.t(), tile_rows)


def oracle_step(x, w, dy, sizes, align=ALIGN):
    """FP64 y, dx, dW of the fp8_block step on the emulated operands: y = x 1x128 · W 128x128,
    dx = dy 1x128 · W's columnwise copy, dW = dy's columnwise copy · x's columnwise copy, both
    quantized in the wgrad layout (each group starting on a multiple of `align` rows; align=1:
    the unpadded copies, token blocks straddling groups)."""
    g, n, k = w.shape
    (_, _, xq), _ = oracle_copies(x, "block1x128")
    (_, _, dyq), _ = oracle_copies(dy, "block1x128")
    _, (_, _, xcq) = oracle_copies(pad_groups(x, sizes, align), "block1x128")
    _, (_, _, dycq) = oracle_copies(pad_groups(dy, sizes, align), "block1x128")
    (_, _, wq), (_, _, wcq) = oracle_copies(w.reshape(g * n, k), "block128x128")
    y, _, _ = grouped_products(xq, wq.reshape(g, n, k), dyq, sizes)
    _, dx, _ = grouped_products(xq, wcq.t().reshape(g, n, k), dyq, sizes)
    _, _, dw = grouped_products(xcq.t(), wq.reshape(g, n, k), dycq.t(),
                                padded_sizes(sizes, align))
    return y, dx, dw


def inputs(sizes, k, n, device, seed=0, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(seed)
    t = sum(sizes)
    x = torch.randn(t, k, generator=gen).to(dtype).to(device)
    w = (torch.randn(len(sizes), n, k, generator=gen) / math.sqrt(k)).to(dtype).to(device)
    dy = torch.randn(t, n, generator=gen).to(dtype).to(device)
    return x, w, dy


# ---- the quantizer ----------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["block1x128", "block128x128"])
@pytest.mark.parametrize("shape", [(200, 300), (128, 256), (130, 64), (16, 1), (300, 129)])
def test_block_quantizer_matches_torch_oracle_bit_for_bit(device, mode, shape):
    torch.manual_seed(8)
    r, c = shape
    # magnitudes that differ per block (each block its own power-of-two scale, which puts the
    # block's amax into (224, 448]), one all-zero block (scale 1)
    x = torch.randn(r, c) * torch.logspace(-3, 3, c)[None, :]
    x[: min(r, 128), : min(c, 128)] = 0.0
    for dtype in (torch.bfloat16, torch.float32):
        xd = x.to(dtype).to(device)
        data, sinv, cdata, csinv = tt.quantize_fp8_block_impl(xd, mode, "e4m3", True, True)
        (codes, scales, _), (ccodes, cscales, _) = oracle_copies(xd, mode)
        where = f"{mode} {shape} {dtype}"
        assert data.dtype == cdata.dtype == torch.float8_e4m3fn, where
        assert sinv.shape == scale_shape(mode, r, c) and csinv.shape == scale_shape(mode, r, c,
                                                                                    True), where
        assert torch.equal(data.cpu().view(torch.uint8), codes.view(torch.uint8)), where
        assert torch.equal(cdata.cpu().view(torch.uint8), ccodes.view(torch.uint8)), where
        assert torch.equal(sinv.cpu(), scales), where      # padding entries 0 included
        assert torch.equal(csinv.cpu(), cscales), where
        # one usage only: the other comes back empty
        d1, s1, d2, s2 = tt.quantize_fp8_block_impl(xd, mode, "e4m3", False, True)
        assert d1.numel() == s1.numel() == 0 and torch.equal(d2, cdata) and torch.equal(s2, csinv)


def test_block_quantizer_edges():
    x = torch.zeros(0, 256, dtype=torch.bfloat16)  # no tokens: every output empty, no call
    assert all(t.numel() == 0 for t in tt.quantize_fp8_block_impl(x, "block1x128", "e4m3",
                                                                  True, True))
    e5 = tt.quantize_fp8_block_impl(torch.randn(16, 128), "block1x128", "e5m2", True, False)
    assert e5[0].dtype == torch.float8_e5m2
    with pytest.raises(tessera.InvalidArgumentError, match="mode"):
        tt.quantize_fp8_block_impl(torch.randn(16, 128), "rowwise", "e4m3", True, False)
    with pytest.raises(ValueError, match="scaling mode"):
        scale_shape("block64x64", 16, 16)


def test_quantize_op_and_step_ops_pass_opcheck():
    # schema and fake implementations of the quantizer and of the step's ops (forward and
    # backward of the linear and MLP steps) with block operands
    sizes, k, n = [16, 0, 48], 256, 128
    x, w, dy = inputs(sizes, k, n, "cpu", seed=13)
    for mode in ("block1x128", "block128x128"):
        torch.library.opcheck(torch.ops.tessera.quantize_fp8_block.default,
                              (x, mode, "e4m3", True, True),
                              test_utils=("test_schema", "test_faketensor"))
    opcheck_linear_step("fp8_block", x, w, ends(sizes, "cpu"), dy)


def test_roles_and_formats_come_from_the_cpp_recipe():
    cfg = {t: tessera._tessera._recipe_config("fp8_block", "grouped_linear", t, "", {})
           for t in ("input", "weight", "grad_output")}
    assert (cfg["input"]["mode"], cfg["input"]["element"]) == ("block1x128", "e4m3")
    assert (cfg["weight"]["mode"], cfg["weight"]["element"]) == ("block128x128", "e4m3")
    assert (cfg["grad_output"]["mode"], cfg["grad_output"]["element"]) == ("block1x128", "e4m3")
    assert all(c["power_of_two_scales"] for c in cfg.values())
    assert ALIGN == 128
    layer = tt.GroupedLinear(2, 128, 128, recipe="fp8_block")
    assert "fp8_block" in tt.RECIPES and layer.recipe == "fp8_block" and layer.spec == "fp8_block"
    with pytest.raises(tessera.UnsupportedError,
                       match="element 'e5m2' is taken for grad_output only"):
        tt.GroupedLinear(2, 128, 128, recipe="fp8_block:e5m2")
    with pytest.raises(tessera.InvalidArgumentError, match="recipe"):
        tt.GroupedLinear(2, 128, 128, recipe="fp8_blocks")


# ---- the linear step ----------------------------------------------------------------------------

# K, N: blocks partial along K (320, 136, 144); N a multiple of 128 (make_linear_spec refuses
# others with several experts: a 128-row block of W would span two).
@pytest.mark.parametrize("device,k,n", step_cases([(320, 256), (256, 128), (128, 384),
                                                   (136, 128), (144, 128)]))
def test_grouped_linear_step_matches_fp64_oracle_and_fp32(device, k, n):
    x, w, dy = inputs(SIZES, k, n, device, seed=k + n)
    offs = ends(SIZES, device)
    got = run_step(lambda a, b: tt.grouped_linear(a, b, offs, "fp8_block"), x, w, dy)
    assert got[0].dtype == got[1].dtype == got[2].dtype == torch.bfloat16
    oracle = oracle_step(x, w, dy, SIZES)
    plain = grouped_products(x, w, dy, SIZES)
    vs_oracle = [sqnr(g, r) for g, r in zip(got, oracle)]
    vs_plain = [sqnr(g, r) for g, r in zip(got, plain)]
    print(f"\n[fp8_block {device} K={k} N={n}] SQNR vs oracle y/dx/dW "
          f"{[round(d, 1) for d in vs_oracle]}, vs FP32 {[round(d, 1) for d in vs_plain]}")
    assert min(vs_oracle) >= 45.0   # bf16 outputs: their own rounding bounds this
    assert min(vs_plain) >= 28.0
    for gi, m in enumerate(SIZES):  # empty experts get zero weight gradients
        if m == 0:
            assert torch.count_nonzero(got[2][gi]) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_wgrad_blocks_never_straddle_groups(device):
    # Group 1 (16 tokens) is 2^-17 times smaller than its neighbours, which share its 128-token
    # block in the unpadded columnwise copies (rows 0..127: groups 0, 1 and 2): there the
    # neighbours' scale flushes group 1's dy and x to (near) zero. In the step's padded layout
    # each group has blocks of its own: dW_1 matches the padded oracle and the unquantized
    # values, not the unpadded oracle.
    sizes, k, n = [45, 16, 70], 128, 128
    x, w, dy = inputs(sizes, k, n, "cpu", seed=31)
    small = torch.ones(sum(sizes), 1, dtype=torch.bfloat16)
    small[45:61] = 2.0 ** -17
    x, w, dy = (x * small).to(device), w.to(device), (dy * small).to(device)
    offs = ends(sizes, device)
    got = run_step(lambda a, b: tt.grouped_linear(a, b, offs, "fp8_block"), x, w, dy)
    padded, unpadded = oracle_step(x, w, dy, sizes), oracle_step(x, w, dy, sizes, align=1)
    plain = grouped_products(x, w, dy, sizes)
    assert min(sqnr(a, b) for a, b in zip(got, padded)) >= 45.0
    dbs = [sqnr(got[2][1], r[2][1]) for r in (padded, plain, unpadded)]
    print(f"\n[fp8_block {device} straddle] dW of the small group vs padded oracle / "
          f"unquantized / unpadded oracle {[round(d, 1) for d in dbs]} dB")
    assert dbs[0] >= 45.0 and dbs[1] >= 25.0 > 10.0 > dbs[2]


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_mlp_is_the_composition_of_linear_steps(device):
    # GroupedMLP's one fused step == fc1 and fc2 as grouped_linear steps (each checked against
    # the oracle above) with the SwiGLU × probs between; and the whole MLP against FP64
    # fc1 out 256, fc2 out 256: CUDA's dgrad runs both
    composed, plain = mlp_step_against_oracles("fp8_block", SIZES, 256, 128, device)
    assert min(composed) >= 45.0
    assert min(plain) >= 21.0  # measured 23.6-23.9 on the CPU: two FP8 layers in series


@pytest.mark.parametrize("device", DEVICES)
def test_weight_copies_across_train_eval_alternation(device):
    torch.manual_seed(10)
    g, k, n = len(SIZES), 256, 128
    layer = tt.GroupedLinear(g, k, n, recipe="fp8_block", device=device)
    offs = ends(SIZES, device)
    x = torch.randn(sum(SIZES), k, device=device, dtype=torch.bfloat16)

    def fresh(x_in):  # the same weights quantized from scratch
        return tt.grouped_linear(x_in, layer.weight.detach(), offs, "fp8_block")

    with torch.no_grad():                     # eval first: both usages are made all the same
        y_eval = layer(x, offs)
    kept = layer.weight_cache.copies
    # both usages in one uint8 tensor laid out by C++, of the size the op's fake gives
    wbytes = tessera._tessera._linear_step_sizes("fp8_block", "", g, k, n, False, "bfloat16")[2]
    assert kept.dtype == torch.uint8 and kept.numel() == wbytes > 0
    xr = x.detach().requires_grad_()
    y_train = layer(xr, offs, is_first_microbatch=False)  # train step: reuses the eval copies
    assert layer.weight_cache.copies is kept and torch.equal(y_train.detach(), y_eval)
    y_train.float().square().mean().backward()  # the dgrad reads the eval's columnwise copy
    xr2 = x.detach().requires_grad_()
    fresh(xr2).float().square().mean().backward()
    assert torch.equal(xr.grad, xr2.grad)
    torch.optim.SGD(layer.parameters(), lr=1.0).step()  # in-place update: new version
    with torch.no_grad():                     # re-made despite the promise
        y_after = layer(x, offs, is_first_microbatch=False)
    assert layer.weight_cache.copies is not kept and torch.equal(y_after, fresh(x))
    kept = layer.weight_cache.copies
    xr, xr2 = x.detach().requires_grad_(), x.detach().requires_grad_()
    layer(xr, offs, is_first_microbatch=False).float().sum().backward()  # train after eval:
    assert layer.weight_cache.copies is kept          # the CURRENT weights' copies
    fresh(xr2).float().sum().backward()
    assert torch.equal(xr.grad, xr2.grad)
    tt.quantize_weights_(layer)               # made by quantize_weights_: reused unpromised
    made = layer.weight_cache.copies
    assert made is not kept
    with torch.no_grad():
        assert torch.equal(layer(x, offs), y_after)
    assert layer.weight_cache.copies is made


@pytest.mark.parametrize("device", DEVICES)
def test_fp32_master_weights_and_main_grad(device):
    torch.manual_seed(11)
    g, k, n = len(SIZES), 256, 128
    kw = dict(recipe="fp8_block", device=device, params_dtype=torch.float32)
    plain = tt.GroupedLinear(g, k, n, **kw)
    acc = tt.GroupedLinear(g, k, n, accumulate_main_grad=True, **kw)
    acc.load_state_dict(plain.state_dict())
    offs = ends(SIZES, device)
    want = torch.zeros(g, n, k, dtype=torch.float64)
    for step in range(2):                     # two micro-batches
        x0, _, dy = inputs(SIZES, k, n, device, seed=20 + step)
        for layer in (plain, acc):
            layer.zero_grad(set_to_none=True)
            layer(x0.detach().requires_grad_(), offs).backward(dy)
        assert plain.weight.grad.dtype == torch.float32 and acc.weight.grad is None
        want += plain.weight.grad.double().cpu()
        oracle = oracle_step(x0, plain.weight.detach(), dy, SIZES)[2]
        # FP32 dW: FP32 accumulation only on the CPU; the CUDA FP8 wgmma adds each k32 step with
        # a shortened alignment (docs/gemm_cuda.md's budget; 79.7 dB measured on the H100).
        floor = 100.0 if device == "cpu" else 70.0
        assert sqnr(plain.weight.grad, oracle) >= floor
    assert sqnr(acc.weight.main_grad, want) >= 100.0


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_matches_eager(device):
    torch.manual_seed(12)
    mlp = tt.GroupedMLP(len(SIZES), 128, 64, recipe="fp8_block", device=device)
    offs = ends(SIZES, device)
    x0 = torch.randn(sum(SIZES), 128, device=device, dtype=torch.bfloat16)

    eager, compiled = mlp_eager_and_compiled(mlp, x0, offs)
    for e, c in zip(eager, compiled):
        assert torch.equal(e, c)


def test_bench_train_runs_fp8_block_as_a_tessera_recipe():
    from tessera.bench import train
    assert "fp8_block" in train.RECIPES and set(train.RECIPES) <= set(tt.RECIPES)
    contenders = dict(train.linear_contenders(tt, None, train.RECIPES))
    assert {"tessera fp8_block", "tessera fp8_block cached-W", "tessera fp8"} <= set(contenders)
    sizes = [16, 0, 48]
    x, w, dy = inputs(sizes, 128, 128, "cpu", seed=14)
    offs = ends(sizes, "cpu")
    want = run_step(lambda a, b: tt.grouped_linear(a, b, offs, "fp8_block"), x, w, dy)
    for label in ("tessera fp8_block", "tessera fp8_block cached-W"):
        got = run_step(lambda a, b: contenders[label](a, b, offs), x, w, dy)
        assert all(torch.equal(g, r) for g, r in zip(got, want)), label
    with pytest.raises(SystemExit):
        train.main(["--recipes", "fp8_block,fp9"])
