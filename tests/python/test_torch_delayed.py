"""tessera.torch fp8_delayed (TE's DelayedScaling) against an independent pure-PyTorch emulation:
the quantizer's codes, scale_inv and state bit for bit over steps that roll the amax history;
GroupedLinear's y, dx, dW by SQNR against FP64 products of the emulated quantized operands, and
its buffers (a scale and an amax history per role and expert, each expert's its own emulated
quantizer's) bit for bit, over a schedule of train and eval steps with weight updates; roles and
formats from the C++ recipe; state_dict (and the earlier per-role shapes); torch.compile;
CUDA-graph replay."""
import io

import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tessera.torch")
from torch_oracles import ends, sqnr  # noqa: E402
import tessera  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tessera.cuda_compiled() else [])
cuda_only = pytest.mark.skipif("cuda" not in DEVICES, reason="needs CUDA")
SIZES = [48, 0, 32, 16, 0, 64]  # multiples of 16, empty groups
FP8 = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}
FLT_MAX = torch.finfo(torch.float32).max




class OracleRole:
    """Delayed scaling of one role in plain torch (docs/numerics.md): quantize with the current
    scale (x * scale in FP32, clamped to ±fp8_max, RNE cast), scale_inv = 1 / scale, amax into
    history slot 0; update: amax = max(history) or history[0]; amax > 0 and finite: scale =
    (fp8_max / amax) / 2^margin (+inf → FLT_MAX); roll by one toward slot 0, slot 0 cleared."""

    def __init__(self, length, element, algo="max", margin=0):
        self.dtype, self.fp8_max = FP8[element]
        self.algo, self.margin = algo, margin
        self.scale = torch.tensor(1.0)
        self.history = torch.zeros(length)

    def quantize(self, x):
        """(codes (R, C), scale_inv (), dequantized values FP64) of 2-D x; then update."""
        xf = x.detach().float().cpu()
        codes = (xf * self.scale).clamp(-self.fp8_max, self.fp8_max).to(self.dtype)
        scale_inv = torch.tensor(1.0) / self.scale
        self.history[0] = xf.abs().max() if xf.numel() else 0.0
        self.update()
        return codes, scale_inv, codes.double() * scale_inv.double()

    def update(self):
        amax = self.history.max() if self.algo == "max" else self.history[0]
        if amax > 0 and torch.isfinite(amax):
            scale = (torch.tensor(self.fp8_max) / amax) / torch.tensor(2.0 ** self.margin)
            self.scale = torch.tensor(FLT_MAX) if torch.isinf(scale) else scale
        self.history = torch.roll(self.history, -1)
        self.history[0] = 0.0


def grouped_products(xq, wq, dyq, sizes):
    """FP64 y, dx, dW per group of the (dequantized) operands; wq (G·N, K)."""
    g = len(sizes)
    w = wq.reshape(g, -1, wq.shape[1])
    ys, dxs, dws, s = [], [], [], 0
    for i, m in enumerate(sizes):
        ys.append(xq[s:s + m] @ w[i].t())
        if dyq is not None:
            dxs.append(dyq[s:s + m] @ w[i])
            dws.append(dyq[s:s + m].t() @ xq[s:s + m])
        s += m
    if dyq is None:
        return torch.cat(ys), None, None
    return torch.cat(ys), torch.cat(dxs), torch.stack(dws)


# ---- the quantizer ----------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("element,algo,margin", [("e4m3", "max", 0), ("e5m2", "max", 1),
                                                 ("e4m3", "most_recent", 2)])
def test_delayed_quantizer_matches_torch_oracle_bit_for_bit(device, element, algo, margin):
    torch.manual_seed(7)
    length = 3
    scale = torch.ones(1, device=device)
    history = torch.zeros(length, device=device)
    oracle = OracleRole(length, element, algo, margin)
    # magnitudes jump (saturation), an all-zero step (amax 0 keeps the scale), more steps than
    # the history holds (old amaxes roll out)
    for step, mag in enumerate([1.0, 30.0, 0.01, 0.0, 2.0, 5.0, 0.5]):
        x = (torch.randn(32, 48) * mag).to(torch.bfloat16).to(device)
        data, sinv, cdata, csinv = tt.quantize_fp8_delayed_impl(x, scale, history, True, True,
                                                                element, algo, margin)
        codes, want_sinv, _ = oracle.quantize(x)
        where = f"step {step} (x * {mag})"
        assert data.dtype == FP8[element][0], where
        assert torch.equal(data.cpu().view(torch.uint8), codes.view(torch.uint8)), where
        assert torch.equal(cdata.cpu().view(torch.uint8), codes.t().contiguous().view(torch.uint8))
        assert sinv.item() == csinv.item() == want_sinv.item(), where
        assert scale.item() == oracle.scale.item(), where
        assert torch.equal(history.cpu(), oracle.history), where


def test_recipe_roles_and_formats_come_from_the_cpp_recipe():
    hybrid = tt.DelayedScaling(amax_history_len=16, amax_compute_algo="most_recent", margin=1)
    assert hybrid.name == "fp8_delayed" and hybrid.elements() == ("e4m3", "e4m3", "e5m2")
    cfg = hybrid.config_for("grad_output", name="fc1")
    assert (cfg["mode"], cfg["element"], cfg["delayed"], cfg["amax_history_len"],
            cfg["amax_compute_algo"], cfg["margin"]) == ("tensor", "e5m2", True, 16,
                                                         "most_recent", 1)
    assert cfg["rowwise"] and cfg["columnwise"]
    assert tt.DelayedScaling(fp8_format="e4m3").elements() == ("e4m3",) * 3
    lin = tt.GroupedLinear(2, 16, 16, recipe="fp8_delayed:e4m3")
    assert lin.delayed_scaling == tt.DelayedScaling(fp8_format="e4m3")
    # TransformerEngine's spellings of the format (its Format enum by member name too)
    assert tt.DelayedScaling(fp8_format="HYBRID") == tt.DelayedScaling()
    assert tt.DelayedScaling(fp8_format="E4M3") == tt.DelayedScaling(fp8_format="e4m3")
    import enum
    assert tt.DelayedScaling(fp8_format=enum.Enum("Format", "E4M3 HYBRID").HYBRID).name \
        == "fp8_delayed"
    with pytest.raises(tessera.InvalidArgumentError, match="fp8_format"):
        tt.DelayedScaling(fp8_format="e5m2")
    with pytest.raises(tessera.Error, match="amax_compute_algo"):
        tt.DelayedScaling(amax_compute_algo="mean")
    with pytest.raises(tessera.Error, match="amax_history_len"):
        tt.DelayedScaling(amax_history_len=0)
    with pytest.raises(ValueError, match="delayed_state"):
        x = torch.randn(16, 16, dtype=torch.bfloat16)
        w = torch.randn(1, 16, 16, dtype=torch.bfloat16)
        tt.grouped_linear(x, w, torch.tensor([16], dtype=torch.int32), "fp8_delayed")


# ---- the layer over a schedule of steps --------------------------------------------------------

class OracleLayer:
    """The layer's delayed-scaling step in plain torch: roles input, weight, grad_output, each
    with one OracleRole per expert (TE's grouped linear: a quantizer per expert) that sees that
    expert's rows (W_g) alone; the weight is re-quantized in every forward (no promise of
    unchanged weights was made, so the layer's weight cache is not reused: tessera.torch.linear's
    contract)."""

    def __init__(self, recipe, groups):
        self.roles = [[OracleRole(recipe.amax_history_len, e, recipe.amax_compute_algo,
                                  recipe.margin) for _ in range(groups)]
                      for e in recipe.elements()]

    def _quantize(self, role, parts):
        return torch.cat([q.quantize(p)[2] for q, p in zip(self.roles[role], parts)])

    def step(self, x, w, dy, sizes):
        self.wq = self._quantize(1, list(w))
        xq = self._quantize(0, x.split(sizes))
        dyq = self._quantize(2, dy.split(sizes)) if dy is not None else None
        return grouped_products(xq, self.wq, dyq, sizes)

    def state(self):
        """(scale (3, G), amax_history (3, L, G)), the layer's buffer layout."""
        return (torch.stack([torch.stack([q.scale for q in r]) for r in self.roles]),
                torch.stack([torch.stack([q.history for q in r], dim=-1) for r in self.roles]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", [tt.DelayedScaling(amax_history_len=3),
                                    tt.DelayedScaling(amax_history_len=2, margin=1,
                                                      amax_compute_algo="most_recent"),
                                    tt.DelayedScaling(amax_history_len=4, fp8_format="e4m3")],
                         ids=["hybrid-max", "hybrid-most_recent-margin1", "e4m3-max"])
def test_grouped_linear_delayed_matches_oracle_over_train_and_eval_steps(device, recipe):
    torch.manual_seed(8)
    g, k, n = len(SIZES), 64, 32
    layer = tt.GroupedLinear(g, k, n, recipe=recipe, device=device)
    oracle = OracleLayer(recipe, g)
    with torch.no_grad():  # experts of unlike magnitudes: a shared scale would fit none of them
        layer.weight.mul_(torch.tensor([1.0, 3.0, 0.1, 30.0, 1.0, 0.3],
                                       device=device).view(-1, 1, 1))
    offs = ends(SIZES, device)
    t = sum(SIZES)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    # (phase, magnitude of x and dy): eval steps between train steps, weight updates after
    # every train step, magnitudes that jump (saturating the delayed scale) and settle
    schedule = [("train", 1.0), ("eval", 1.0), ("train", 4.0), ("train", 4.0), ("eval", 0.5),
                ("eval", 0.5), ("train", 0.5), ("train", 2.0)]
    for step, (phase, mag) in enumerate(schedule):
        rows = torch.repeat_interleave(torch.tensor([1.0, 4.0, 0.25, 16.0, 1.0, 2.0]),
                                       torch.tensor(SIZES)).view(-1, 1)  # per expert
        x0 = (torch.randn(t, k) * mag * rows).to(torch.bfloat16).to(device)
        dy = ((torch.randn(t, n) * mag / rows).to(torch.bfloat16).to(device)
              if phase == "train" else None)
        want = oracle.step(x0, layer.weight.detach().cpu(), None if dy is None else dy.cpu(),
                           SIZES)
        x = x0.detach().requires_grad_()
        if phase == "train":
            layer.zero_grad(set_to_none=True)
            y = layer(x, offs)
            y.backward(dy)
            got = (y.detach(), x.grad, layer.weight.grad)
        else:
            with torch.no_grad():
                got = (layer(x, offs), None, None)
        where = f"step {step} ({phase}, x * {mag})"
        for name, a, b in zip(("y", "dx", "dW"), got, want):
            if b is not None:
                db = sqnr(a, b)
                assert db >= 45.0, f"{where}: {name} SQNR {db:.1f} dB against the oracle"
        scale, history = oracle.state()
        assert layer.delayed_scale.shape == (3, g)
        assert layer.amax_history.shape == (3, recipe.amax_history_len, g)
        assert torch.equal(layer.delayed_scale.cpu(), scale), where
        assert torch.equal(layer.amax_history.cpu(), history), where
        if phase == "train":
            opt.step()  # new weights: the next forward quantizes them (as every forward does)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt,floor_dx", [("hybrid", 21.0), ("e4m3", 25.0)])
def test_grouped_linear_delayed_calibrated_step_against_fp32(device, fmt, floor_dx):
    # After one calibration step the scales fit the data: FP8-level SQNR against plain FP32
    # (E5M2 gradients cost about 4 dB on dx and dW, docs/nn.md).
    torch.manual_seed(9)
    g, k, n = len(SIZES), 128, 64
    layer = tt.GroupedLinear(g, k, n, recipe=tt.DelayedScaling(16, fp8_format=fmt),
                             device=device)
    offs = ends(SIZES, device)
    t = sum(SIZES)
    for _ in range(2):
        x = torch.randn(t, k, device=device, dtype=torch.bfloat16).requires_grad_()
        dy = torch.randn(t, n, device=device, dtype=torch.bfloat16)
        layer.zero_grad(set_to_none=True)
        y = layer(x, offs)
        y.backward(dy)
    xf, wf, dyf = x.detach().double().cpu(), layer.weight.detach().double().cpu(), dy.double().cpu()
    want = grouped_products(xf, wf.reshape(g * n, k), dyf, SIZES)
    dbs = [sqnr(a, b) for a, b in zip((y.detach(), x.grad, layer.weight.grad), want)]
    print(f"\n[fp8_delayed {fmt} {device}] SQNR y {dbs[0]:.1f} dx {dbs[1]:.1f} dW {dbs[2]:.1f} dB")
    assert dbs[0] >= 25.0 and min(dbs[1:]) >= floor_dx


# ---- state_dict, compile, graphs -------------------------------------------------------------

def test_delayed_state_dict_round_trip_continues_bit_for_bit():
    torch.manual_seed(10)
    recipe = tt.DelayedScaling(amax_history_len=5)
    a = tt.GroupedMLP(len(SIZES), 32, 16, recipe=recipe)
    offs = ends(SIZES, "cpu")
    xs = [torch.randn(sum(SIZES), 32, dtype=torch.bfloat16) for _ in range(3)]
    for x in xs[:2]:
        a(x, offs).float().square().sum().backward()
    sd = a.state_dict()
    assert {"fc1.delayed_scale", "fc1.amax_history", "fc2.delayed_scale",
            "fc2.amax_history"} <= set(sd)
    g = len(SIZES)
    assert sd["fc1.amax_history"].shape == (3, 5, g) and sd["fc1.delayed_scale"].shape == (3, g)
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    b = tt.GroupedMLP(len(SIZES), 32, 16, recipe=recipe)
    b.load_state_dict(torch.load(buf))
    for name, t in a.state_dict().items():
        assert torch.equal(t, b.state_dict()[name]), name
    a.invalidate_weight_cache()  # b quantizes its loaded weights afresh: so does a now
    ya = a(xs[2].requires_grad_(), offs)
    yb = b(xs[2].detach().requires_grad_(), offs)
    ya.float().sum().backward()
    yb.float().sum().backward()
    assert torch.equal(ya, yb)
    for (name, t), u in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(t, u), f"{name} differs after the next step"
    short = tt.GroupedMLP(len(SIZES), 32, 16, recipe=tt.DelayedScaling(amax_history_len=4))
    with pytest.raises(RuntimeError, match="amax_history"):
        short.load_state_dict(a.state_dict())


def test_a_state_dict_of_one_state_per_role_loads_into_every_expert():
    """A state_dict saved when the layer kept one delayed state per role ((3,) and (3, L)):
    every expert starts from that state, and the next step is that of a layer whose experts'
    states were set to it."""
    torch.manual_seed(13)
    recipe = tt.DelayedScaling(amax_history_len=4)
    g = len(SIZES)
    a = tt.GroupedLinear(g, 32, 16, recipe=recipe)
    old = dict(a.state_dict())
    old["delayed_scale"] = torch.tensor([0.5, 2.0, 8.0])
    old["amax_history"] = torch.arange(12, dtype=torch.float32).view(3, 4)
    a.load_state_dict(old)
    assert torch.equal(a.delayed_scale, old["delayed_scale"].view(3, 1).expand(3, g))
    assert torch.equal(a.amax_history, old["amax_history"].view(3, 4, 1).expand(3, 4, g))
    b = tt.GroupedLinear(g, 32, 16, recipe=recipe)
    b.load_state_dict(a.state_dict())
    x = torch.randn(sum(SIZES), 32, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(a(x, ends(SIZES, "cpu")), b(x, ends(SIZES, "cpu")))
    with pytest.raises(RuntimeError, match="amax_history"):  # another length: refused
        old["amax_history"] = torch.zeros(3, 5)
        tt.GroupedLinear(g, 32, 16, recipe=recipe).load_state_dict(old)


def test_the_functional_step_refuses_a_state_of_another_shape():
    x = torch.randn(16, 16, dtype=torch.bfloat16)
    w = torch.randn(2, 16, 16, dtype=torch.bfloat16)
    offs = torch.tensor([8, 16], dtype=torch.int32)
    recipe = tt.DelayedScaling(amax_history_len=4)
    scale, history = recipe.initial_state(2)
    assert scale.shape == (3, 2) and history.shape == (3, 4, 2)
    assert torch.equal(scale, torch.ones(3, 2)) and torch.equal(history, torch.zeros(3, 4, 2))
    tt.grouped_linear(x, w, offs, recipe, delayed_state=(scale, history))
    for bad in ((torch.ones(3), torch.zeros(3, 4)), recipe.initial_state(3)):
        with pytest.raises(tessera.ShapeError, match=r"\(3, G\).*G = 2"):
            tt.grouped_linear(x, w, offs, recipe, delayed_state=bad)
    with pytest.raises(tessera.InvalidArgumentError, match="num_groups"):
        recipe.initial_state("cpu")


@pytest.mark.parametrize("device", DEVICES)
def test_delayed_torch_compile_fullgraph_matches_eager(device):
    # One step from fresh state: eager and compiled quantize the same tensors with the same
    # scales and leave the same state. (Compiled steps re-quantize the weight on every call:
    # the weight cache is not traced, so later steps' weight history differs from eager's.)
    def run(compiled):
        torch.manual_seed(11)
        mlp = tt.GroupedMLP(len(SIZES), 64, 32, recipe="fp8_delayed", device=device)
        fn = torch.compile(mlp, fullgraph=True, backend="aot_eager") if compiled else mlp
        x = torch.randn(sum(SIZES), 64, device=device, dtype=torch.bfloat16).requires_grad_()
        fn(x, ends(SIZES, device)).float().square().sum().backward()
        return [x.grad, mlp.fc1.weight.grad, mlp.fc2.weight.grad] + list(mlp.buffers())

    torch._dynamo.reset()
    for e, c in zip(run(False), run(True)):
        assert torch.equal(e, c)


@cuda_only
def test_delayed_cuda_graph_replay_matches_eager_from_the_same_state():
    torch.manual_seed(12)
    g, hid, ffn, t = 4, 128, 64, 256
    mlp = tt.GroupedMLP(g, hid, ffn, recipe=tt.DelayedScaling(amax_history_len=4),
                        device="cuda", params_dtype=torch.float32, accumulate_main_grad=True)
    x_static = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
    dy_static = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
    offs_static = torch.tensor([64, 128, 192, 256], device="cuda", dtype=torch.int32)
    x_leaf = x_static.detach().requires_grad_()
    params = [mlp.fc1.weight, mlp.fc2.weight]

    def step():
        mlp.invalidate_weight_cache()  # the graph re-quantizes the weights every replay
        y = mlp(x_leaf, offs_static)
        y.backward(dy_static)
        return y

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            x_leaf.grad = None
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    x_leaf.grad = None
    with torch.cuda.graph(graph):
        y_static = step()
    state = list(mlp.buffers()) + [p.main_grad for p in params]  # what a step updates in place
    for sizes in ([64, 64, 64, 64], [0, 256, 0, 0], [16, 0, 240, 0], [0, 0, 0, 0],
                  [32, 96, 0, 128]):
        offs_static.copy_(torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32))
        before = [b.clone() for b in state]
        x_leaf.grad.zero_()
        graph.replay()
        torch.cuda.synchronize()
        valid = sum(sizes)
        got = [y_static[:valid].clone(), x_leaf.grad[:valid].clone()]
        after = [b.clone() for b in state]
        for b, v in zip(state, before):  # eager from the same state
            b.copy_(v)
        xe = x_static.detach().requires_grad_()
        mlp.invalidate_weight_cache()
        ye = mlp(xe, offs_static)
        (dxe,) = torch.autograd.grad(ye, [xe], dy_static)
        for name, a, b in zip(["y", "dx"], got, [ye[:valid], dxe[:valid]]):
            assert torch.equal(a, b), f"sizes {sizes}: {name} differs from eager"
        for i, (a, b) in enumerate(zip(after, state)):
            assert torch.equal(a, b), f"sizes {sizes}: state tensor {i} differs from eager"
