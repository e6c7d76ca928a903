"""A seeded sweep of tessera.torch.GroupedLinear's training step over the cases a fixed test
does not pick: ragged group sizes (empty, 1 row, 15, 17, 129, ...), rows past the last group,
widths that are not multiples of 16 or 128, a few or many experts, bias, FP32 or BF16 input,
and experts whose inputs differ in magnitude by up to 10^4. Every case is checked against an
FP64 product of the same values, group by group:
  - y, dx and dW are finite, in the input's / weight's dtype, and the rows past the groups (of y
    and dx) and the weight gradients of empty groups are exactly zero;
  - every element is within a worst-case bound of its FP64 value: eps · Σ|x_k w_k| (the
    operands' relative rounding, eps per recipe) plus the resolution of the quantization scale
    (delta · max|x| · max|w| · K, where the scale covers a whole tensor);
  - each group's y, dx and dW (16 elements or more) have an SQNR above the recipe's floor, which
    a row or weight of another group (a misrouted or stale read) cannot reach.
A device may refuse a case it does not take (tessera.UnsupportedError or MisalignedError naming
the argument; NVFP4 needs even widths); it must never give other numbers."""
import math
import random

import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tessera.torch")
import tessera  # noqa: E402
from torch_oracles import sqnr  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tessera.cuda_compiled() else [])

# recipe -> (eps, delta, per-group SQNR floor in dB, per-expert magnitudes allowed). eps bounds
# the relative error of one product of two rounded operands (E4M3: 2^-4 each; E5M2 gradients of
# the hybrid recipe: 2^-3; MXFP8: a power-of-two scale may clip the block's largest values by
# up to 1/8 besides); delta the absolute error left by a scale shared by a whole tensor.
RECIPES = {
    "fp32": (2.0 ** -7, 0.0, 45.0, True),  # BF16 x in, BF16 y out
    "bf16": (2.0 ** -6, 0.0, 38.0, True),
    "fp8_rowwise": (0.15, 0.0, 18.0, True),
    "fp8_block": (0.15, 0.0, 18.0, True),
    "mxfp8": (0.30, 0.0, 18.0, True),
    "fp8_rowwise:hybrid": (0.22, 0.0, 14.0, True),
    # per-tensor scales: an expert far below the tensor's largest values keeps only the scale's
    # resolution, so the experts share one magnitude here
    "fp8_current": (0.15, 2.0 ** -14, 18.0, False),
    "fp8_delayed": (0.15, 2.0 ** -14, 18.0, False),
    # NVFP4 (E2M1 values, E4M3 block scales): a loose bound, and none on dW, whose operands are
    # the 16-point Hadamard transforms of dy and x over the tokens (it mixes 16 products); the
    # floor is what the recipe's noise allows
    "nvfp4": (1.0, 0.0, 7.0, True),
}
SIZES = [0, 1, 2, 7, 15, 16, 17, 31, 33, 64, 100, 129]
CASES = 16  # per recipe and device


def cases(recipe, device):
    """The sweep's seeded cases for one recipe and device."""
    rng = random.Random(f"{recipe}/{device}")
    out = []
    for _ in range(CASES):
        g = rng.choice([1, 2, 3, 5, 8, 17])
        out.append(dict(
            sizes=[rng.choice(SIZES) for _ in range(g)],
            k=rng.choice([16, 24, 40, 64, 96, 130, 256]),
            n=rng.choice([8, 24, 33, 64, 72, 128, 200]),
            extra=rng.choice([0, 0, 3]),
            dtype=rng.choice([torch.bfloat16, torch.float32]),
            bias=rng.random() < 0.3,
            seed=rng.randrange(1 << 30)))
    return out


def fp64_step(x, w, b, dy, sizes):
    """FP64 y, dx, dW, db of the grouped linear on the values given (rows past the groups: 0)."""
    x, w, dy = x.double().cpu(), w.double().cpu(), dy.double().cpu()
    y = torch.zeros(x.shape[0], w.shape[1], dtype=torch.float64)
    dx = torch.zeros_like(x)
    dw = torch.zeros_like(w)
    s = 0
    for g, m in enumerate(sizes):
        y[s:s + m] = x[s:s + m] @ w[g].t() + (b[g].double().cpu() if b is not None else 0)
        dx[s:s + m] = dy[s:s + m] @ w[g]
        dw[g] = dy[s:s + m].t() @ x[s:s + m]
        s += m
    return y, dx, dw


def within_bound(got, ref, abs_terms, eps, delta_term):
    """Elements of got outside |got − ref| <= eps·abs_terms + delta_term + a BF16 ulp of ref."""
    err = (got.double().cpu() - ref).abs()
    bound = eps * abs_terms + delta_term + 2.0 ** -7 * ref.abs() + 1e-30
    return int((err > bound).sum().item())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_grouped_linear_sweep_against_fp64(device, recipe):
    eps, delta, floor_db, skew = RECIPES[recipe]
    if recipe == "fp32" and device == "cuda":
        # FP32 operands run on the CPU backend only: CUDA refuses them by name
        layer = tt.GroupedLinear(2, 64, 64, recipe=recipe, params_dtype=torch.float32, device=device)
        x = torch.randn(32, 64, device=device)
        with pytest.raises(tessera.UnsupportedError, match="CPU backend"):
            layer(x, torch.tensor([16, 32], dtype=torch.int32, device=device))
        return
    ran, refused = 0, []
    for case in cases(recipe, device):
        sizes, k, n, extra = case["sizes"], case["k"], case["n"], case["extra"]
        t = sum(sizes) + extra
        torch.manual_seed(case["seed"])
        try:  # a block-scaled weight takes out_features in whole blocks (refused when made)
            layer = tt.GroupedLinear(len(sizes), k, n, recipe=recipe, bias=case["bias"],
                                     params_dtype=torch.float32, device=device)
        except tessera.UnsupportedError as e:
            assert any(ch.isdigit() for ch in str(e)) and len(str(e)) > 30, str(e)
            refused.append(f"{sizes} k={k} n={n}: {str(e)[:80]}")
            continue
        scale = torch.tensor([10 ** random.Random(case["seed"] + g).uniform(-2, 2) if skew
                              else 1.0 for g in range(len(sizes))])
        row_scale = torch.cat([torch.repeat_interleave(scale, torch.tensor(sizes)),
                               torch.ones(extra)])
        x = (torch.randn(t, k) * row_scale[:, None]).to(case["dtype"]).to(device)
        x.requires_grad_(True)
        dy = torch.randn(t, n).to(case["dtype"]).to(device)
        offs = torch.tensor(sizes).cumsum(0).to(torch.int32).to(device)
        try:
            y = layer(x, offs)
            y.backward(dy)
        except (tessera.UnsupportedError, tessera.MisalignedError) as e:
            # a refusal says what it needs (NVFP4 packs two codes per byte), with the values
            assert any(ch.isdigit() for ch in str(e)) and len(str(e)) > 30, str(e)
            refused.append(f"{sizes} k={k} n={n}: {str(e)[:80]}")
            continue
        ran += 1
        what = f"{recipe} {device} sizes={sizes} extra={extra} k={k} n={n} {case['dtype']}"
        w = layer.weight.detach()
        b = layer.bias.detach() if layer.bias is not None else None
        dx, dw = x.grad, layer.weight.grad
        assert y.dtype == x.dtype and dx.dtype == x.dtype and dw.dtype == w.dtype, what
        for name, v in (("y", y), ("dx", dx), ("dW", dw)):
            assert torch.isfinite(v).all(), f"{what}: {name} not finite"
        if extra:
            assert not y.detach()[-extra:].any() and not dx[-extra:].any(), \
                f"{what}: rows past the groups are not zero"
        for g, m in enumerate(sizes):
            if m == 0:
                assert not dw[g].any(), f"{what}: empty group {g} has a weight gradient"
        ry, rdx, rdw = fp64_step(x.detach(), w, b, dy, sizes)
        xa, wa, dya = x.detach().double().cpu().abs(), w.double().cpu().abs(), dy.double().cpu().abs()
        ay, adx, adw = fp64_step(xa, wa, None, dya, sizes)
        # the scale's resolution: per tensor, the largest operand values bound the step
        d = lambda a, c, kk: delta * a.max().item() * c.max().item() * kk if a.numel() else 0.0
        bad = {"y": within_bound(y.detach(), ry, ay, eps, d(xa, wa, k)),
               "dx": within_bound(dx, rdx, adx, eps, d(dya, wa, n)),
               "dW": 0 if recipe == "nvfp4" else within_bound(dw, rdw, adw, eps, d(dya, xa, t))}
        assert not any(bad.values()), f"{what}: elements outside the bound {bad}"
        s = 0
        for g, m in enumerate(sizes):
            pairs = {"y": (y.detach()[s:s + m], ry[s:s + m]), "dx": (dx[s:s + m], rdx[s:s + m]),
                     "dW": (dw[g], rdw[g])}
            for name, (got, ref) in pairs.items():
                if got.numel() >= 16 and ref.abs().max() > 0:
                    db = sqnr(got, ref)
                    assert db >= floor_db, f"{what}: group {g} ({m} rows) {name} {db:.1f} dB"
            s += m
    assert ran > 0, f"{recipe} on {device}: every case was refused: {refused[:3]}"
    if refused:
        print(f"\n[{recipe} {device}] {ran} ran, {len(refused)} refused, e.g. {refused[0]}")
