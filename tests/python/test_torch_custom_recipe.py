"""tessera.torch.CustomRecipe (a Python factory role -> QuantizerConfig, the C++ CustomRecipe's
front end): factories that reproduce fp8_rowwise, fp8_current and fp8_block give y, dx, dW bit
for bit equal to the named recipes; mixed factories (per layer, per role, E5M2 gradients) match
an independent FP64 oracle of the emulated operands; bad configs are refused with errors naming
the recipe, the role and the accepted values; the factory runs once per role; state_dict round
trip; torch.compile(fullgraph=True) == eager."""
import collections
import math

import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tessera.torch")
import tessera  # noqa: E402
from tessera.torch.fp8 import quantize_fp8_rowwise_impl  # noqa: E402
from torch_oracles import (  # noqa: E402
    composed_mlp_step, grouped_products, ends, sqnr, mlp_eager_and_compiled, run_step)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tessera.cuda_compiled() else [])
# Empty groups at the start, middle and end; group sizes multiples of 16 (the FP8 rule).
SIZES = [0, 48, 160, 0, 32, 16, 272, 0]
FP8 = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}
FLT_MAX = torch.finfo(torch.float32).max
POW2_MASK = -(1 << 23)  # 0xff800000 as int32: sign and exponent kept, mantissa cleared
ORACLE_BAR_DB = 45.0    # as test_torch_block: the bf16 outputs' own rounding bounds it




def inputs(sizes, k, n, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t = sum(sizes)
    x = torch.randn(t, k, generator=gen).to(torch.bfloat16).to(device)
    w = (torch.randn(len(sizes), n, k, generator=gen) / math.sqrt(k)).to(torch.bfloat16)
    dy = torch.randn(t, n, generator=gen).to(torch.bfloat16).to(device)
    return x, w.to(device), dy



def by_type(**configs):
    """A factory giving each tensor type the QuantizerConfig(mode, element) of `configs`."""
    return lambda role: tt.QuantizerConfig(*configs[role.tensor_type])


# ---- the oracle: docs/numerics.md, FP8 current scaling per tile --------------------------------

def oracle_dequantized(x, mode, element):
    """FP64 values of the copy x (R, C) quantized in plain torch: one scale per tile (tensor: the
    whole copy; rowwise: a row; block1x128: 1x128; block128x128: 128x128); per tile a = amax,
    a == 0 or non-finite: scale 1, else scale = fp8_max / a (IEEE FP32; +inf -> FLT_MAX),
    block modes rounded down to a power of two; codes = RNE cast of x * scale clamped to
    ±fp8_max; value = code * (1 / scale)."""
    xf = x.detach().float().cpu()
    r, c = xf.shape
    tr, tc = {"tensor": (r, c), "rowwise": (1, c), "block1x128": (1, 128),
              "block128x128": (128, 128)}[mode]
    dtype, fp8_max = FP8[element]
    nr, nc = -(-r // tr), -(-c // tc)
    padded = torch.zeros(nr * tr, nc * tc)
    padded[:r, :c] = xf
    amax = padded.abs().reshape(nr, tr, nc, tc).amax(dim=(1, 3))
    ok = (amax > 0) & torch.isfinite(amax)
    scale = torch.where(ok, torch.full_like(amax, fp8_max) / torch.where(ok, amax, 1.0), 1.0)
    scale = scale.clamp(max=FLT_MAX)
    if mode.startswith("block"):
        scale = (scale.view(torch.int32) & POW2_MASK).view(torch.float32)
    expand = lambda s: s.repeat_interleave(tr, 0).repeat_interleave(tc, 1)[:r, :c]  # noqa: E731
    codes = (xf * expand(scale)).clamp(-fp8_max, fp8_max).to(dtype)
    return codes.double() * expand(torch.tensor(1.0) / scale).double()


def per_expert(t, sizes, mode, element, transposed):
    """t's rows quantized expert by expert (each expert's rows alone; transposed: the copy of
    each expert's transpose), as the step scales the units a whole-matrix copy would share
    across experts (docs/numerics.md, scaling units per group member)."""
    parts, start = [], 0
    for size in sizes:
        part = t[start:start + size]
        start += size
        if size == 0:
            parts.append(part.detach().double().cpu())
        elif transposed:
            parts.append(oracle_dequantized(part.t(), mode, element).t())
        else:
            parts.append(oracle_dequantized(part, mode, element))
    return torch.cat(parts)


def oracle_copies(t, sizes, mode, element):
    """(rowwise copy, columnwise copy) of t as the step makes them: per-tensor current scaling
    per expert (both copies), the rowwise mode's columnwise copy per (expert, column), block
    modes over the whole matrix (the step's aligned layout keeps their blocks inside experts)."""
    if mode == "tensor":
        q = per_expert(t, sizes, mode, element, False)
        return q, q
    rowwise = oracle_dequantized(t, mode, element)
    if mode == "rowwise":
        return rowwise, per_expert(t, sizes, mode, element, True)
    return rowwise, oracle_dequantized(t.t(), mode, element).t()


def oracle_step(x, w, dy, sizes, roles):
    """FP64 y, dx, dW of the step on the emulated operands; roles: (mode, element) of input,
    weight, grad_output (oracle_copies; a weight's experts are its (n, k) slices)."""
    g, n, k = w.shape
    (xm, xe), (wm, we), (dm, de) = roles
    xq, xcq = oracle_copies(x, sizes, xm, xe)
    wq, wcq = oracle_copies(w.reshape(g * n, k), [n] * g, wm, we)
    dyq, dycq = oracle_copies(dy, sizes, dm, de)
    y = grouped_products(xq, wq.reshape(g, n, k), dyq, sizes)[0]
    dx = grouped_products(xq, wcq.reshape(g, n, k), dyq, sizes)[1]
    dw = grouped_products(xcq, wq.reshape(g, n, k), dycq, sizes)[2]
    return y, dx, dw


# ---- reproducing the named recipes -------------------------------------------------------------

REPRODUCTIONS = {
    "fp8_rowwise": by_type(input=("rowwise",), weight=("rowwise",), grad_output=("rowwise",)),
    # fp8_current in tessera.torch is E4M3 everywhere (the C++ recipe fp8_current:e4m3)
    "fp8_current": lambda role: {"mode": "tensor", "element": "e4m3"},
    "fp8_block": by_type(input=("block1x128",), weight=("block128x128",),
                         grad_output=("block1x128",)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("named", sorted(REPRODUCTIONS))
def test_factory_reproducing_a_named_recipe_is_bit_identical(device, named):
    recipe = tt.CustomRecipe(REPRODUCTIONS[named], name=f"custom_{named}")
    k, n = 256, 128
    x, w, dy = inputs(SIZES, k, n, device, seed=1)
    offs = ends(SIZES, device)
    want = run_step(lambda a, b: tt.grouped_linear(a, b, offs, named), x, w, dy)
    got = run_step(lambda a, b: tt.grouped_linear(a, b, offs, recipe), x, w, dy)
    for what, g, r in zip(("y", "dx", "dW"), got, want):
        assert torch.equal(g, r), f"{named} {device}: {what}"
    # the module: an MLP of the custom recipe == the MLP of the named one, same weights
    torch.manual_seed(2)
    named_mlp = tt.GroupedMLP(len(SIZES), k, n, recipe=named, device=device)
    custom_mlp = tt.GroupedMLP(len(SIZES), k, n, recipe=recipe, device=device)
    custom_mlp.load_state_dict(named_mlp.state_dict())
    outs = []
    for mlp in (named_mlp, custom_mlp):
        xr = x.detach().requires_grad_()
        y = mlp(xr, offs)
        y.float().square().sum().backward()
        outs.append((y.detach(), xr.grad, mlp.fc1.weight.grad, mlp.fc2.weight.grad))
    for what, g, r in zip(("y", "dx", "dW1", "dW2"), outs[1], outs[0]):
        assert torch.equal(g, r), f"{named} MLP {device}: {what}"


# ---- mixed recipes against the FP64 oracle ------------------------------------------------------

MIXED_LINEAR = {
    # per-tensor current scaling with E5M2 gradients (TE's HYBRID current scaling)
    "tensor hybrid": (("tensor", "e4m3"), ("tensor", "e4m3"), ("tensor", "e5m2")),
    "rowwise hybrid": (("rowwise", "e4m3"), ("rowwise", "e4m3"), ("rowwise", "e5m2")),
    # 1x128 weights instead of fp8_block's 128x128 tiles, E5M2 gradients
    "block 1x128 weights, e5m2 dy": (("block1x128", "e4m3"), ("block1x128", "e4m3"),
                                     ("block1x128", "e5m2")),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(MIXED_LINEAR))
def test_mixed_factory_step_matches_fp64_oracle(device, case):
    roles = MIXED_LINEAR[case]
    recipe = tt.CustomRecipe(by_type(**dict(zip(("input", "weight", "grad_output"), roles))))
    k, n = 320, 256  # K: a partial 128-block; N % 128 == 0 (CUDA's block dgrad)
    x, w, dy = inputs(SIZES, k, n, device, seed=3)
    offs = ends(SIZES, device)
    got = run_step(lambda a, b: tt.grouped_linear(a, b, offs, recipe), x, w, dy)
    oracle = oracle_step(x, w, dy, SIZES, roles)
    plain = grouped_products(x, w, dy, SIZES)
    vs_oracle = [sqnr(g, r) for g, r in zip(got, oracle)]
    vs_plain = [sqnr(g, r) for g, r in zip(got, plain)]
    print(f"\n[custom {case} {device}] SQNR vs oracle y/dx/dW "
          f"{[round(d, 1) for d in vs_oracle]}, vs FP32 {[round(d, 1) for d in vs_plain]}")
    assert min(vs_oracle) >= ORACLE_BAR_DB
    assert min(vs_plain) >= 20.0  # E5M2 gradients: 2 mantissa bits


def mixed_mlp_factory(role):
    """fc1 rowwise E4M3; fc2 per-tensor with E5M2 gradients."""
    if role.name == "fc1":
        return {"mode": "rowwise"}
    return tt.QuantizerConfig("tensor", "e5m2" if role.tensor_type == "grad_output" else "e4m3")


MIXED_MLP_ROLES = {"fc1": (("rowwise", "e4m3"),) * 3,
                   "fc2": (("tensor", "e4m3"), ("tensor", "e4m3"), ("tensor", "e5m2"))}


@pytest.mark.parametrize("device", DEVICES)
def test_mlp_with_per_layer_configs_is_the_composition_of_its_linear_steps(device):
    torch.manual_seed(4)
    recipe = tt.CustomRecipe(mixed_mlp_factory, name="mixed")
    mlp = tt.GroupedMLP(len(SIZES), 256, 128, recipe=recipe, device=device)
    for layer, roles in MIXED_MLP_ROLES.items():  # each layer's own configs, from its factory
        assert recipe.spec(layer) == "custom:mixed;" + ";".join(
            f"{t}={m}/{e}" for t, (m, e) in zip(("input", "weight", "grad_output"), roles))
    offs = ends(SIZES, device)
    x0 = torch.randn(sum(SIZES), 256, device=device, dtype=torch.bfloat16)
    probs = torch.rand(sum(SIZES), device=device)
    dy = torch.randn(sum(SIZES), 256, device=device, dtype=torch.bfloat16)
    x = x0.detach().requires_grad_()
    y = mlp(x, offs, probs=probs)
    y.backward(dy)
    want = composed_mlp_step(recipe, mlp.fc1.weight, mlp.fc2.weight, None, None, x0, offs, probs,
                             dy)
    got = (y.detach(), x.grad, mlp.fc1.weight.grad, mlp.fc2.weight.grad)
    dbs = [sqnr(a, b) for a, b in zip(got, want[:4])]
    print(f"\n[custom mixed MLP {device}] SQNR vs the composed linear steps y/dx/dW1/dW2 "
          f"{[round(d, 1) for d in dbs]}")
    assert min(dbs) >= ORACLE_BAR_DB


# ---- what is refused ----------------------------------------------------------------------------

BAD = [
    ("nvfp4 with fp8", lambda r: {"mode": "nvfp4" if r.tensor_type == "input" else "rowwise"},
     ValueError, r"modes \(input nvfp4, weight rowwise, grad_output rowwise\) cannot meet"),
    ("unknown mode", lambda r: {"mode": "block64x64"}, ValueError,
     "mode 'block64x64' is not a scaling mode; expected one of tensor, rowwise"),
    ("no mode", lambda r: {"element": "e4m3"}, ValueError, "the config has no 'mode'"),
    ("unknown element", lambda r: {"mode": "tensor", "element": "e3m4"}, ValueError,
     "unknown dtype 'e3m4'; expected one of"),
    ("element not FP8", lambda r: tt.QuantizerConfig("rowwise", "bf16"), ValueError,
     "config.element: bfloat16 is not allowed for rowwise; expected e4m3 or e5m2"),
    ("unknown key", lambda r: {"mode": "tensor", "margin": 1}, ValueError,
     "config key 'margin' is not known; expected mode and element"),
    ("not a config", lambda r: "fp8_rowwise", TypeError,
     "must return a tessera.torch.QuantizerConfig or a dict"),
    ("e5m2 weight", lambda r: tt.QuantizerConfig("tensor", "e5m2"), ValueError,
     r"role grouped_linear/input/.*'e5m2' is taken for grad_output only"),
    ("families mixed", by_type(input=("rowwise",), weight=("tensor",), grad_output=("rowwise",)),
     ValueError, "cannot meet in the step's GEMMs"),
    ("block with rowwise", by_type(input=("block1x128",), weight=("block128x128",),
                                   grad_output=("rowwise",)), ValueError, "one scale family"),
    ("mxfp8 with block", by_type(input=("mxfp8",), weight=("mxfp8_32x32",),
                                 grad_output=("block1x128",)), ValueError,
     r"\(input mxfp8, weight mxfp8_32x32, grad_output block1x128\) cannot meet"),
    ("mxfp8 e5m2 weight", by_type(input=("mxfp8",), weight=("mxfp8_32x32", "e5m2"),
                                  grad_output=("mxfp8",)), ValueError,
     r"role grouped_linear/weight/.*'e5m2' is taken for grad_output only"),
]


@pytest.mark.parametrize("what,factory,exc,match", BAD, ids=[b[0] for b in BAD])
def test_bad_configs_are_refused_when_the_layer_is_made(what, factory, exc, match):
    recipe = tt.CustomRecipe(factory, name="bad")
    with pytest.raises(exc, match=match) as info:
        tt.GroupedLinear(2, 128, 128, recipe=recipe, name="fc9")
    assert "recipe 'bad'" in str(info.value), what  # every refusal names the recipe
    x = torch.randn(32, 128, dtype=torch.bfloat16)
    with pytest.raises(exc, match=match):  # the functional form refuses it too
        tt.grouped_linear(x, torch.randn(2, 128, 128, dtype=torch.bfloat16),
                          ends([16, 16], "cpu"), recipe, name="fc9")


def test_bad_arguments_of_the_recipe_itself():
    with pytest.raises(TypeError, match="factory: expected a callable"):
        tt.CustomRecipe({"mode": "tensor"})
    with pytest.raises(ValueError, match="name: expected a non-empty str"):
        tt.CustomRecipe(lambda r: {"mode": "tensor"}, name="")
    with pytest.raises(ZeroDivisionError):  # the factory's own error comes through unchanged
        tt.CustomRecipe(lambda r: 1 / 0).spec("fc1")
    with pytest.raises(ValueError, match="a CustomRecipe"):
        tt.GroupedLinear(2, 128, 128, recipe="fp9")


# ---- roles, caching, state_dict, compile --------------------------------------------------------

def test_factory_is_called_once_per_role_and_sees_the_layer_names():
    calls = collections.Counter()

    def factory(role):
        calls[(role.module_type, role.tensor_type, role.name)] += 1
        return {"mode": "rowwise"}

    recipe = tt.CustomRecipe(factory)
    mlp = tt.GroupedMLP(len(SIZES), 128, 64, recipe=recipe)
    named = tt.GroupedMLP(len(SIZES), 128, 64, recipe=recipe, name="layer3")
    offs = ends(SIZES, "cpu")
    for _ in range(3):  # train steps, an eval step, and a second MLP of the same names
        for m in (mlp, named):
            x = torch.randn(sum(SIZES), 128, dtype=torch.bfloat16).requires_grad_()
            m(x, offs).float().sum().backward()
            with torch.no_grad():
                m(x, offs)
    tt.GroupedMLP(len(SIZES), 128, 64, recipe=recipe)
    names = ("fc1", "fc2", "layer3.fc1", "layer3.fc2")
    assert calls == {("grouped_linear", t, n): 1 for n in names
                     for t in ("input", "weight", "grad_output")}
    assert mlp.fc1.name == "fc1" and named.fc2.name == "layer3.fc2"
    assert "name='fc1'" in repr(mlp.fc1) and "CustomRecipe(factory" in repr(mlp)
    # the functional form's roles have the name it is given ("" by default)
    x = torch.randn(16, 128, dtype=torch.bfloat16)
    tt.grouped_linear(x, torch.randn(1, 64, 128, dtype=torch.bfloat16), ends([16], "cpu"),
                      recipe)
    assert calls[("grouped_linear", "weight", "")] == 1


def test_config_for_is_the_cpp_config():
    recipe = tt.CustomRecipe(by_type(input=("block1x128",), weight=("block128x128",),
                                     grad_output=("block1x128", "e5m2")))
    c = recipe.config_for("weight", name="fc1")
    assert (c["mode"], c["element"], c["power_of_two_scales"]) == ("block128x128", "e4m3", True)
    assert recipe.config_for("grad_output")["element"] == "e5m2"
    assert tt.CustomRecipe(lambda r: {"mode": "tensor"}).config_for("input")["delayed"] is False


@pytest.mark.parametrize("device", DEVICES)
def test_state_dict_round_trip(device):
    torch.manual_seed(5)
    recipe = tt.CustomRecipe(mixed_mlp_factory)
    a = tt.GroupedMLP(len(SIZES), 128, 128, recipe=recipe, device=device)
    b = tt.GroupedMLP(len(SIZES), 128, 128, recipe=recipe, device=device)
    assert set(a.state_dict()) == {"fc1.weight", "fc2.weight"}  # current scaling: no state
    b.load_state_dict(a.state_dict())
    offs = ends(SIZES, device)
    x = torch.randn(sum(SIZES), 128, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(a(x, offs), b(x, offs))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_matches_eager(device):
    torch.manual_seed(6)
    recipe = tt.CustomRecipe(mixed_mlp_factory)
    mlp = tt.GroupedMLP(len(SIZES), 128, 128, recipe=recipe, device=device)
    offs = ends(SIZES, device)
    x0 = torch.randn(sum(SIZES), 128, device=device, dtype=torch.bfloat16)

    eager, compiled = mlp_eager_and_compiled(mlp, x0, offs)
    for e, c in zip(eager, compiled):
        assert torch.equal(e, c)


# ---- the E5M2 quantizers the custom roles use ---------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["tensor", "rowwise"])
def test_e5m2_quantizers_match_the_oracle(device, mode):
    torch.manual_seed(7)
    x = (torch.randn(48, 200) * torch.logspace(-3, 3, 200)[None, :]).to(torch.bfloat16)
    quantize = tt.quantize_fp8_tensor_impl if mode == "tensor" else tt.quantize_fp8_rowwise_impl
    data, sinv, cdata, csinv = quantize(x.to(device), True, True, "e5m2")
    assert data.dtype == cdata.dtype == torch.float8_e5m2
    rows = data.double().cpu() * sinv.double().cpu().reshape(-1, 1)
    cols = cdata.double().cpu() * csinv.double().cpu().reshape(-1, 1)
    assert torch.equal(rows, oracle_dequantized(x, mode, "e5m2"))
    assert torch.equal(cols, oracle_dequantized(x.t(), mode, "e5m2"))
    if mode == "rowwise":  # the torch fallback quantizer (no tessera quantizer) agrees
        from tessera.torch.fp8 import _quantize_torch
        q, s = _quantize_torch(x, 1, "e5m2")
        assert torch.equal(q.view(torch.uint8), data.cpu().view(torch.uint8))
        assert torch.equal(s, sinv.cpu())


def test_quantizer_ops_with_element_pass_opcheck():
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    for op in (torch.ops.tessera.quantize_fp8_tensor, torch.ops.tessera.quantize_fp8_rowwise):
        torch.library.opcheck(op.default, (x, True, True, "e5m2"),
                              test_utils=("test_schema", "test_faketensor"))
    assert quantize_fp8_rowwise_impl(x, True, False)[0].dtype == torch.float8_e4m3fn  # default
