"""tessera.torch.GroupedLinear / GroupedMLP / grouped_linear: the training step against an FP32
reference of the same inputs, the FP8 weight cache (re-quantized only when the weight changes,
never stale across train/eval alternation), state_dict, torch.compile and CUDA-graph replay with
changing device group sizes (empty experts, all tokens on one expert)."""
import io
import math

import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tessera.torch")
from torch_oracles import ends, sqnr, mlp_eager_and_compiled, run_step  # noqa: E402
import tessera  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tessera.cuda_compiled() else [])
cuda_only = pytest.mark.skipif("cuda" not in DEVICES, reason="needs CUDA")
SIZES = [48, 0, 96, 32, 16, 0, 64]  # multiples of 16, empty groups (FP8 needs 16-row groups)




def reference_linear(x, w, dy, sizes):
    """FP32 y, dx, dW per group on the given values."""
    ys, dxs, dws, s = [], [], [], 0
    for g, m in enumerate(sizes):
        xg, dyg, wg = x[s:s + m].float(), dy[s:s + m].float(), w[g].float()
        ys.append(xg @ wg.t())
        dxs.append(dyg @ wg)
        dws.append(dyg.t() @ xg)
        s += m
    return torch.cat(ys), torch.cat(dxs), torch.stack(dws)


def inputs(sizes, k, n, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = sum(sizes)
    x = torch.randn(t, k, generator=g).to(torch.bfloat16).to(device)
    w = (torch.randn(len(sizes), n, k, generator=g) / math.sqrt(k)).to(torch.bfloat16).to(device)
    dy = torch.randn(t, n, generator=g).to(torch.bfloat16).to(device)
    return x, w, dy



@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe,floor_db", [("bf16", 40.0), ("fp8_rowwise", 25.0),
                                             ("fp8_current", 24.0)])
def test_grouped_linear_step_matches_fp32_reference(device, recipe, floor_db):
    x, w, dy = inputs(SIZES, 128, 64, device)
    offs = ends(SIZES, device)
    got = run_step(lambda a, b: tt.grouped_linear(a, b, offs, recipe), x, w, dy)
    ref = reference_linear(x, w, dy, SIZES)
    dbs = [sqnr(g.float(), r) for g, r in zip(got, ref)]
    print(f"\n[{recipe} {device}] SQNR y {dbs[0]:.1f} dx {dbs[1]:.1f} dW {dbs[2]:.1f} dB")
    assert min(dbs) >= floor_db
    assert got[2].dtype == w.dtype and got[1].dtype == x.dtype
    # empty groups get zero weight gradients
    assert torch.count_nonzero(got[2][1]) == 0 and torch.count_nonzero(got[2][5]) == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["fp8_rowwise", "fp8_current"])
def test_fp8_weight_cache_follows_weight_changes_and_never_goes_stale(device, recipe):
    torch.manual_seed(1)
    layer = tt.GroupedLinear(len(SIZES), 64, 32, recipe=recipe, device=device)
    offs = ends(SIZES, device)
    x = torch.randn(sum(SIZES), 64, device=device, dtype=torch.bfloat16)

    def fresh_output():  # the same weights quantized from scratch
        return tt.grouped_linear(x, layer.weight.detach(), offs, recipe)

    y_train = layer(x, offs)
    key = layer.weight_cache.key
    with torch.no_grad():                     # eval step: reuses the cached copies
        y_eval = layer(x, offs)
    assert layer.weight_cache.key == key and torch.equal(y_train.detach(), y_eval)
    y_train.float().square().mean().backward()
    torch.optim.SGD(layer.parameters(), lr=1.0).step()  # in-place update: new version
    with torch.no_grad():
        y_after = layer(x, offs)
    assert layer.weight_cache.key != key
    assert torch.equal(y_after, fresh_output())
    # a training step after the eval step reads a columnwise copy of the CURRENT weights
    xr = x.detach().requires_grad_()
    layer(xr, offs).float().sum().backward()
    xr2 = x.detach().requires_grad_()
    tt.grouped_linear(xr2, layer.weight.detach(), offs, recipe).float().sum().backward()
    assert torch.equal(xr.grad, xr2.grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["bf16", "fp8_rowwise", "fp8_current"])
def test_grouped_mlp_matches_fp32_reference(device, recipe):
    torch.manual_seed(2)
    g, hid, ffn = len(SIZES), 64, 32
    mlp = tt.GroupedMLP(g, hid, ffn, recipe=recipe, device=device)
    offs = ends(SIZES, device)
    x0 = torch.randn(sum(SIZES), hid, device=device, dtype=torch.bfloat16)
    p = torch.rand(sum(SIZES), device=device)
    x = x0.detach().requires_grad_()
    y = mlp(x, offs, probs=p)
    y.float().square().sum().backward()
    # FP32 reference of the same values
    xr = x0.float().detach().requires_grad_()
    w1 = mlp.fc1.weight.detach().float().requires_grad_()
    w2 = mlp.fc2.weight.detach().float().requires_grad_()
    outs, s = [], 0
    for gi, m in enumerate(SIZES):
        h = xr[s:s + m] @ w1[gi].t()
        gate, up = h.chunk(2, dim=-1)
        outs.append((torch.nn.functional.silu(gate) * up * p[s:s + m, None]) @ w2[gi].t())
        s += m
    yr = torch.cat(outs)
    yr.square().sum().backward()
    floor = 35.0 if recipe == "bf16" else 20.0
    dbs = [sqnr(y.detach().float(), yr), sqnr(x.grad.float(), xr.grad),
           sqnr(mlp.fc1.weight.grad.float(), w1.grad), sqnr(mlp.fc2.weight.grad.float(), w2.grad)]
    print(f"\n[mlp {recipe} {device}] SQNR y/dx/dW1/dW2 {[round(d, 1) for d in dbs]}")
    assert min(dbs) >= floor


def test_modules_state_dict_round_trip_and_errors():
    a = tt.GroupedMLP(3, 16, 8, recipe="bf16")
    b = tt.GroupedMLP(3, 16, 8, recipe="fp8_rowwise")
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b.load_state_dict(torch.load(buf))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError, match="recipe"):
        tt.GroupedLinear(2, 8, 8, recipe="int3")
    lin = tt.GroupedLinear(2, 8, 4)
    with pytest.raises(ValueError, match="offs / splits"):
        lin(torch.randn(4, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="x: expected"):
        lin(torch.randn(4, 7, dtype=torch.bfloat16), torch.tensor([2, 4], dtype=torch.int32))
    # splits (group sizes) are accepted instead of offsets
    x = torch.randn(6, 8, dtype=torch.bfloat16)
    assert torch.equal(lin(x, splits=torch.tensor([2, 4])),
                       lin(x, torch.tensor([2, 6], dtype=torch.int32)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["bf16", "fp8_rowwise", "fp8_current"])
def test_torch_compile_fullgraph_module_matches_eager(device, recipe):
    torch.manual_seed(3)
    mlp = tt.GroupedMLP(len(SIZES), 64, 32, recipe=recipe, device=device)
    offs = ends(SIZES, device)
    x0 = torch.randn(sum(SIZES), 64, device=device, dtype=torch.bfloat16)

    eager, compiled = (r[1:] for r in mlp_eager_and_compiled(mlp, x0, offs))  # dx, dW1, dW2
    for e, c in zip(eager, compiled):
        assert torch.equal(e, c)


@cuda_only
@pytest.mark.parametrize("recipe", ["bf16", "fp8_rowwise", "fp8_current", "fp8_block"])
def test_cuda_graph_replay_with_changing_device_group_sizes(recipe):
    torch.manual_seed(4)
    g, hid, ffn = 4, 128, 64
    mlp = tt.GroupedMLP(g, hid, ffn, recipe=recipe, device="cuda")
    t = 256
    x_static = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
    dy_static = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
    offs_static = torch.tensor([64, 128, 192, 256], device="cuda", dtype=torch.int32)
    x_leaf = x_static.detach().requires_grad_()

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
            mlp.zero_grad(set_to_none=False)
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    x_leaf.grad = None
    mlp.zero_grad(set_to_none=False)
    with torch.cuda.graph(graph):
        y_static = step()
    params = [mlp.fc1.weight, mlp.fc2.weight]
    grads = [x_leaf.grad] + [p.grad for p in params]  # the tensors the graph accumulates into
    for sizes in ([64, 64, 64, 64], [0, 256, 0, 0], [16, 0, 240, 0], [256, 0, 0, 0],
                  [0, 0, 0, 0], [32, 96, 0, 128]):
        offs_static.copy_(torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32))
        for gr in grads:
            gr.zero_()
        graph.replay()
        torch.cuda.synchronize()
        valid = sum(sizes)
        got = [y_static[:valid], grads[0][:valid]] + grads[1:]
        # eager on the same inputs (autograd.grad: the captured .grad tensors stay untouched)
        xe = x_static.detach().requires_grad_()
        mlp.invalidate_weight_cache()
        ye = mlp(xe, offs_static)
        want = torch.autograd.grad(ye, [xe] + params, dy_static)
        want = [ye[:valid], want[0][:valid]] + list(want[1:])
        for name, a, b in zip(["y", "dx", "dW1", "dW2"], got, want):
            assert torch.equal(a, b), f"sizes {sizes}: {name} differs from eager"
        if recipe != "bf16":  # FP8 outputs have zeros past offs[-1], written on the device
            for name, a in (("y", y_static), ("dx", grads[0])):
                assert torch.count_nonzero(a[valid:]) == 0, f"sizes {sizes}: {name} tail"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["fp8_rowwise", "fp8_current", "fp8_block"])
def test_fp8_rows_past_the_groups_are_zero_in_y_and_dx(device, recipe):
    # 48 capacity rows (the token count stays a multiple of 16, as the FP8 wgrad needs); 128
    # features (block dgrad contracts over whole 128-blocks on CUDA).
    sizes = [32, 0, 48]
    x, w, dy = inputs(sizes, 128, 128, device, seed=3)
    x, dy = (torch.cat([t, torch.randn_like(t[:48])]) for t in (x, dy))
    offs = ends(sizes, device)
    # Garbage where the outputs will be allocated: freed NaN blocks the caching allocator reuses.
    del [torch.full(x.shape, float("nan"), dtype=torch.bfloat16, device=device)
         for _ in range(2)][:]
    y, dx, _ = run_step(lambda a, b: tt.grouped_linear(a, b, offs, recipe), x, w, dy)
    live = sum(sizes)
    assert torch.count_nonzero(y[live:]) == 0 and torch.count_nonzero(dx[live:]) == 0
    assert torch.isfinite(y[:live]).all() and torch.count_nonzero(y[:live]) > 0


@cuda_only
def test_fp8_dsv3_shape_with_2048_outputs_runs_forward_and_backward():
    # (32 experts x 512 tokens, K 7168, N 2048) crashed with cudaErrorInvalidValue before.
    sizes = [512] * 32
    x, w, dy = inputs(sizes, 7168, 2048, "cuda")
    got = run_step(lambda a, b: tt.grouped_linear(a, b, ends(sizes, "cuda"), "fp8_rowwise"),
                   x, w, dy)
    ref = reference_linear(x, w, dy, sizes)
    assert min(sqnr(g.float(), r) for g, r in zip(got, ref)) >= 25.0


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_current_quantizer_matches_torch_oracle(device):
    # TE's current scaling: scale = 448 / amax (IEEE division), RNE saturating cast, one scale
    # for both copies; the columnwise copy is the transposed codes.
    torch.manual_seed(6)
    x = (torch.randn(48, 80) * 3).to(torch.bfloat16).to(device)
    data, sinv, cdata, csinv = tt.quantize_fp8_tensor_impl(x, True, True)
    amax = x.float().abs().max()
    scale = torch.tensor(448.0) / amax.cpu()
    want = (x.float().cpu() * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(data.cpu().view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(cdata.cpu().view(torch.uint8), want.t().contiguous().view(torch.uint8))
    assert sinv.shape == (1,) and csinv.shape == (1,)
    assert sinv.item() == (torch.tensor(1.0) / scale).item() == csinv.item()
