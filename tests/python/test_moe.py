"""tessera.torch.moe in one process: the routing op against a sort-based torch oracle (dropless
and capacity), the fused permute + quantize against tessera's standalone quantizer on the
torch-permuted tensor, unpermute's gradients against torch autograd, and MoELayer (one process
holding every expert) against the plain-torch reference_moe — outputs and every gradient bit for
bit, for each recipe whose dispatch is quantized per row, dropless and with capacity. Bad input
is a clear error. On the CPU, and the CUDA cases (the ops' bits against the CPU's, CUDA-graph
replay) where a device is present; skips without torch."""
import pytest

torch = pytest.importorskip("torch")

from tessera import _tessera as C  # noqa: E402

if not hasattr(C, "_moe_routing_into"):
    pytest.skip("expert-parallel routing ops not in this build", allow_module_level=True)

import tessera.torch as tt  # noqa: E402
from tessera.torch import moe, moe_ops  # noqa: E402
from tessera.torch.moe_reference import (ReferenceGroupedMLP, ReferenceRouter, _qdq_rows,  # noqa: E402
                                         reference_moe)
from torch_oracles import capture_step  # noqa: E402

RECIPES = ["bf16", "fp8_rowwise", "fp8_block", "mxfp8"]


def _oracle_routing(idx, num_experts, align, capacity):
    """Per expert: its pairs in (t, j) order, the first `capacity` kept; groups padded."""
    t, k = idx.shape
    flat = idx.reshape(-1).tolist()
    slot = [-1] * (t * k)
    offsets, counts, dropped = [0], [], 0
    for e in range(num_experts):
        mine = [p for p, x in enumerate(flat) if x == e]
        kept = mine if capacity < 0 else mine[:capacity]
        for i, p in enumerate(kept):
            slot[p] = offsets[-1] + i
        size = capacity if capacity >= 0 else -(-len(kept) // align) * align
        offsets.append(offsets[-1] + size)
        counts.append(len(kept))
        dropped += len(mine) - len(kept)
    return counts, offsets, slot, dropped


@pytest.mark.parametrize("align,capacity", [(1, -1), (16, -1), (32, -1), (128, -1), (16, 32),
                                            (32, 0)])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_routing_matches_oracle(align, capacity, dtype):
    g = torch.Generator().manual_seed(align + capacity)
    idx = torch.randint(0, 6, (70, 3), generator=g).to(dtype)
    idx[:20, 0] = 0  # a popular expert, so capacity drops
    counts, offsets, slot, row_pair, dropped, flag = moe.moe_routing(idx, 6, align, capacity)
    want = _oracle_routing(idx, 6, align, capacity)
    assert counts.tolist() == want[0]
    assert offsets.tolist() == want[1]
    assert slot.reshape(-1).tolist() == want[2]
    assert int(dropped) == want[3] and int(flag) == 0
    if capacity == 32:
        assert want[3] > 0
    for p, s in enumerate(want[2]):
        if s >= 0:
            assert int(row_pair[s]) == p
    assert int((row_pair >= 0).sum()) == sum(want[0])


@pytest.mark.parametrize("mode", ["none", "rowwise", "block1x128", "mxfp8"])
def test_permute_quantize_equals_standalone_quantizer(mode):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(40, 200, generator=g) * 3).bfloat16()
    x[5] = 0
    idx = torch.randint(0, 5, (40, 2), generator=g)
    _, _, slot, row_pair, _, _ = moe.moe_routing(idx, 5, 32, -1)
    data, sinv = moe.moe_permute(x, row_pair, 2, mode)
    rows = row_pair.shape[0]
    perm = torch.where((row_pair >= 0).reshape(-1, 1), x[row_pair.clamp(min=0) // 2],
                       torch.zeros((), dtype=x.dtype))
    if mode == "none":
        assert torch.equal(data, perm)
        return
    want_d = torch.empty((rows, 200), dtype=torch.uint8)
    shape, sdtype = moe_ops._scale_shape(mode, rows, 200)
    want_s = torch.empty(shape, dtype=sdtype)
    C._quantize_into(perm, mode, "e4m3", True, False, want_d, want_s,
                     torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=sdtype), 0)
    assert torch.equal(data.view(torch.uint8), want_d)
    assert torch.equal(sinv.view(torch.uint8), want_s.view(torch.uint8))


_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and C.cuda_compiled() else [])


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("mode", ["rowwise", "block1x128", "mxfp8"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_weighted_permute_quantizes_the_unpermute_backward_rows(device, mode, dtype):
    """moe_permute(dout, row_pair, k, mode, weights=probs) == the standalone quantizer applied to
    the dy that moe_unpermute_backward(dout, ..., probs) writes (bits of codes and scales), with a
    NaN, an inf, a zero row, a zero weight, and capacity-dropped pairs; and the dprobs-only
    backward equals the full one's dprobs."""
    g = torch.Generator().manual_seed(13)
    t, k, e, h = 40, 3, 5, 264
    dout = (torch.randn(t, h, generator=g) * 5).to(dtype)
    dout[3] = 0
    dout[7, 11] = float("nan")
    dout[9, 100] = float("inf")
    probs = torch.rand(t, k, generator=g)
    probs[4, 1] = 0.0
    idx = torch.randint(0, e, (t, k), generator=g)
    y = torch.randn(t * k + e * 31, h, generator=g).to(dtype)
    for cap in (-1, 32):  # 32 < the pairs of some experts: capacity drops
        r = moe.moe_routing(idx.to(device), e, 32, cap)
        slot, row_pair = r[2], r[3]
        yy = y[:row_pair.shape[0]].to(device)
        d, p = dout.to(device), probs.to(device)
        dy, dprobs = moe.moe_unpermute_backward(d, yy, slot, row_pair, p)
        data, sinv = moe.moe_permute(d, row_pair, k, mode, weights=p)
        rows = row_pair.shape[0]
        want_d = torch.empty((rows, h), dtype=torch.uint8)
        shape, sdtype = moe_ops._scale_shape(mode, rows, h)
        want_s = torch.empty(shape, dtype=sdtype)
        C._quantize_into(dy.cpu(), mode, "e4m3", True, False, want_d, want_s,
                         torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=sdtype), 0)
        assert torch.equal(data.view(torch.uint8).cpu(), want_d), (cap, "codes")
        assert torch.equal(sinv.view(torch.uint8).cpu(), want_s.view(torch.uint8)), (cap, "scales")
        dy0, dprobs_only = moe.moe_unpermute_backward(d, yy, slot, row_pair, p, need_dy=False)
        assert dy0.numel() == 0
        assert torch.equal(dprobs_only.view(torch.int32), dprobs.view(torch.int32))  # NaN bits
    with pytest.raises(ValueError, match="weights need a quantized mode"):
        moe.moe_permute(d, row_pair, k, "none", weights=p)
    with pytest.raises(ValueError, match="weights must be"):
        moe.moe_permute(d, row_pair, k, mode, weights=p[:, :2].contiguous())
    with pytest.raises(ValueError, match="need_dy=False without probs"):
        moe.moe_unpermute_backward(d, yy, slot, row_pair, None, need_dy=False)


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("mode", ["none", "rowwise", "block1x128", "mxfp8"])
@pytest.mark.parametrize("h,dtype", [(264, torch.bfloat16), (7168, torch.bfloat16),
                                     (100, torch.float16), (264, torch.float32),
                                     (8200, torch.bfloat16)])
def test_permute_with_slot_map_gives_the_same_bits(device, mode, h, dtype):
    """moe_permute(..., slot_map=) (on CUDA: a CTA per token writes its pairs' rows, one per row
    the rest) equals the permute without it, bit for bit: dropless and capacity routing, int32
    maps, a NaN / inf / zero token, rows of odd length and past the 8192 elements kept in
    registers (the per-row kernel then), and a slot_map that does not match row_pair (every row
    is still written from row_pair); and the weighted quantize (per-pair weights, a zero one)."""
    g = torch.Generator().manual_seed(h)
    t, k, e = 37, 3, 5
    x = (torch.randn(t, h, generator=g) * 4).to(dtype)
    x[2] = 0
    x[5, 3] = float("nan")
    x[6, 1] = float("inf")
    idx = torch.randint(0, e, (t, k), generator=g)
    xd = x.to(device)
    for cap, map_dtype in ((-1, torch.int64), (16, torch.int64), (-1, torch.int32)):
        r = moe.moe_routing(idx.to(device), e, 16, cap)
        slot, row_pair = r[2].to(map_dtype), r[3].to(map_dtype)
        want = moe.moe_permute(xd, row_pair, k, mode)
        got = moe.moe_permute(xd, row_pair, k, mode, slot_map=slot)
        for a, b in zip(got, want):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (cap, map_dtype)
        if mode != "none":  # per-pair weights (the combine's backward): one quantization a pair
            w = torch.rand(t, k, generator=g).to(device)
            w[1, 2] = 0.0
            want_w = moe.moe_permute(xd, row_pair, k, mode, weights=w)
            got_w = moe.moe_permute(xd, row_pair, k, mode, weights=w, slot_map=slot)
            for a, b in zip(got_w, want_w):
                assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (cap, "weighted")
        # A slot map that points elsewhere (pairs swapped, one pair dropped): same bits.
        wrong = slot.clone().reshape(-1)
        wrong[[0, 1]] = wrong[[1, 0]]
        wrong[4] = -1
        got = moe.moe_permute(xd, row_pair, k, mode, slot_map=wrong.reshape(t, k))
        for a, b in zip(got, want):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (cap, "wrong map")


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("mode", ["none", "rowwise", "block1x128", "mxfp8"])
def test_permute_of_no_rows(device, mode):
    """A rank without tokens routes to no rows at alignment 1 (a dispatch's sender): the permute
    returns empty codes and scales in every mode instead of refusing its empty output."""
    idx = torch.empty(0, 2, dtype=torch.int64, device=device)
    r = moe.moe_routing(idx, 4, 1, -1)
    assert r[3].shape == (0,)
    x = torch.empty(0, 64, dtype=torch.bfloat16, device=device)
    data, sinv = moe.moe_permute(x, r[3], 2, mode, slot_map=r[2])
    assert data.shape == (0, 64) and sinv.numel() == 0


def test_permute_slot_map_errors():
    x = torch.randn(6, 16)
    r = moe.moe_routing(torch.randint(0, 3, (6, 2)), 3, 1, -1)
    slot, row_pair = r[2], r[3]
    with pytest.raises(C.ShapeError, match="slot_map"):
        moe.moe_permute(x, row_pair, 2, slot_map=slot[:5])
    with pytest.raises(C.DTypeError, match="slot_map .* must have row_pair's dtype"):
        moe.moe_permute(x, row_pair, 2, "rowwise", slot_map=slot.to(torch.int32))
    bad = slot.clone()
    bad[0, 0] = row_pair.shape[0]
    with pytest.raises(C.OutOfRangeError, match="slot_map"):
        moe.moe_permute(x, row_pair, 2, slot_map=bad)


def test_unpermute_and_permute_gradients_match_torch():
    g = torch.Generator().manual_seed(4)
    idx = torch.randint(0, 4, (30, 2), generator=g)
    _, _, slot, row_pair, _, _ = moe.moe_routing(idx, 4, 16, -1)
    x = torch.randn(30, 24, generator=g, dtype=torch.float64).float().requires_grad_()
    probs = torch.rand(30, 2, generator=g).requires_grad_()
    perm = moe.permute(x, row_pair, slot, 2)
    out = moe.unpermute(perm * 2.0, slot, row_pair, probs)
    w = torch.randn(30, 24, generator=g)
    (out * w).sum().backward()
    x2 = x.detach().clone().double().requires_grad_()
    p2 = probs.detach().clone().double().requires_grad_()
    ref = sum(p2[:, j:j + 1] * 2.0 * x2 for j in range(2))
    (ref * w.double()).sum().backward()
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(probs.grad.double(), p2.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("capacity_factor", [None, 0.5])
@pytest.mark.parametrize("quantize_grads", [None, True, False])
@pytest.mark.parametrize("k", [2, 3])  # top-k 3: dx adds three pair gradients (FP32, j order)
def test_layer_equals_reference_bitwise(recipe, capacity_factor, quantize_grads, k):
    torch.manual_seed(11)
    h, f, e, t = 64, 32, 8, 96
    experts = ReferenceGroupedMLP(e, h, f)
    router = ReferenceRouter(h, e)
    if quantize_grads and recipe == "bf16":  # no payload quantization to follow
        with pytest.raises(ValueError, match="quantize_grads"):
            tt.MoELayer(h, f, e, k, recipe=recipe, quantize_grads=True)
        return
    layer = tt.MoELayer(h, f, e, k, recipe=recipe, experts=experts, router=router,
                        capacity_factor=capacity_factor, quantize_grads=quantize_grads)
    x = torch.randn(t, h).bfloat16().requires_grad_()
    g = torch.randn(t, h).bfloat16()
    y = layer(x)
    y.backward(g)
    got = [y, x.grad, experts.fc1_weight.grad, experts.fc2_weight.grad, router.weight.grad]
    got = [v.clone() for v in got]
    experts.zero_grad()
    router.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    yr, dropped = reference_moe(x2, router, experts, e, k, recipe, layer.capacity(t),
                                quantize_grads=quantize_grads)
    yr.backward(g)
    want = [yr, x2.grad, experts.fc1_weight.grad, experts.fc2_weight.grad, router.weight.grad]
    for name, a, b in zip(["out", "dx", "fc1 dw", "fc2 dw", "router dw"], got, want):
        assert torch.equal(a, b), f"{recipe} {capacity_factor}: {name} differs"
    assert int(layer.last_dropped) == dropped
    if capacity_factor is not None and recipe == "bf16":
        assert dropped > 0, "capacity 0.5 must drop pairs"


@pytest.mark.parametrize("recipe", ["fp8_rowwise", "fp8_block", "mxfp8"])
def test_quantized_gradients_change_only_what_follows_combine(recipe):
    """quantize_grads on against off, same layer and data: the experts' output
    gradient is rounded to the payload's FP8 grid, so the expert weight gradients and dx change
    (they must: else the option does nothing), by FP8 rounding only (SQNR >= 20 dB); the
    outputs are bit-identical; the gradient rows the experts receive are the standalone
    quantizer's round trip of the BF16 ones."""
    torch.manual_seed(5)
    h, f, e, k, t = 64, 32, 8, 2, 64
    x = torch.randn(t, h).bfloat16()
    g = torch.randn(t, h).bfloat16()
    runs = {}
    for qg in (True, False):
        torch.manual_seed(6)
        experts = ReferenceGroupedMLP(e, h, f)
        router = ReferenceRouter(h, e)
        layer = tt.MoELayer(h, f, e, k, recipe=recipe, experts=experts, router=router,
                            quantize_grads=qg)
        seen = []
        experts.register_full_backward_hook(lambda m, gin, gout: seen.append(gout[0].clone()))
        xi = x.clone().requires_grad_()
        y = layer(xi)
        y.backward(g)
        runs[qg] = (y.detach(), xi.grad, experts.fc2_weight.grad.clone(), seen[0],
                    layer.mode)
    (y_q, dx_q, dw_q, dy_q, mode), (y_b, dx_b, dw_b, dy_b, _) = runs[True], runs[False]
    assert torch.equal(y_q, y_b), "the forward does not depend on quantize_grads"
    assert not torch.equal(dw_q, dw_b) and not torch.equal(dx_q, dx_b)

    def sqnr(ref, got):
        ref, got = ref.double(), got.double()
        return 10 * torch.log10(ref.square().sum() / (ref - got).square().sum()).item()

    assert sqnr(dw_b, dw_q) >= 20 and sqnr(dx_b, dx_q) >= 20
    # the received gradient rows: exactly the standalone quantizer's round trip of the BF16 ones
    assert torch.equal(dy_q, _qdq_rows(dy_b, mode))
    assert not torch.equal(dy_q, dy_b)


def test_quantize_grads_needs_a_quantized_payload():
    with pytest.raises(ValueError, match="quantize_grads: recipe 'bf16' sends its payload"):
        tt.MoELayer(16, 8, 8, 2, recipe="bf16", quantize_grads=True)
    with pytest.raises(ValueError, match="quantize_grads"):
        moe.dispatch(torch.randn(4, 16), torch.zeros(4, 2, dtype=torch.int64), 8,
                     recipe="fp8_current", quantize_grads=True)
    def grads(recipe, qg=None):
        return tt.MoELayer(16, 8, 8, 2, recipe=recipe, experts=ReferenceGroupedMLP(8, 16, 8),
                           quantize_grads=qg).extra_repr().split("grads=")[1]
    # the default: quantized where the payload's scales are powers of two
    assert [grads(r) for r in ("bf16", "fp8_rowwise", "fp8_block", "mxfp8")] == [
        "'none'", "'none'", "'block1x128'", "'mxfp8'"]
    assert grads("fp8_rowwise", True) == "'rowwise'" and grads("mxfp8", False) == "'none'"


def test_bad_input_is_a_clear_error():
    experts = ReferenceGroupedMLP(4, 16, 8)
    with pytest.raises(ValueError, match="holds 4 experts but num_experts 8"):
        tt.MoELayer(16, 8, 8, 2, experts=experts)
    with pytest.raises(ValueError, match="recipe"):
        tt.MoELayer(16, 8, 8, 2, recipe="fp9")
    for factor in (float("nan"), float("inf"), -1.0, 0.0, "2"):  # not a capacity
        with pytest.raises(ValueError, match="capacity_factor"):
            tt.MoELayer(16, 8, 8, 2, capacity_factor=factor)
    for tokens in (0, -3, 2.5, True, "64"):  # not a token count
        with pytest.raises(ValueError, match="capacity_tokens"):
            tt.MoELayer(16, 8, 8, 2, capacity_factor=1.0, capacity_tokens=tokens)
    # one process follows each forward's T unless capacity_tokens fixes it
    follows = tt.MoELayer(16, 8, 8, 2, capacity_factor=1.0, experts=experts.__class__(8, 16, 8))
    fixed = tt.MoELayer(16, 8, 8, 2, capacity_factor=1.0, capacity_tokens=64,
                        experts=experts.__class__(8, 16, 8))
    want = {t: moe.capacity_for(t, 2, 8, 1.0, follows.align) for t in (8, 64)}
    assert [follows.capacity(t) for t in (8, 64)] == [want[8], want[64]] and want[8] < want[64]
    assert fixed.capacity(8) == fixed.capacity(64) == want[64]
    numpy_int = tt.MoELayer(16, 8, 8, 2, capacity_factor=1.0,  # any integral type is a count
                            capacity_tokens=torch.tensor(64).numpy()[()],
                            experts=experts.__class__(8, 16, 8))
    assert numpy_int.capacity_tokens == 64 and type(numpy_int.capacity_tokens) is int
    x = torch.randn(5, 16)
    idx = torch.tensor([[0, 1]] * 4 + [[0, 9]])
    with pytest.raises(ValueError, match="rank 0: an expert index is outside"):
        moe.dispatch(x, idx, 8)
    with pytest.raises(ValueError, match="indices"):
        moe.moe_routing(idx, 8)
    with pytest.raises(ValueError, match="x must be float32, bfloat16 or float16"):
        moe.dispatch(x.double(), idx.clamp(max=7), 8)
    for checks in (None, False):  # its host copy of the split sizes raises either way
        with pytest.raises(ValueError, match="counts do not sum"):
            moe.all_to_all_expert_rows(torch.randn(6, 4), torch.tensor([2, 2, 1, 0]), 4,
                                       sync_checks=checks)
    rows, offs = moe.all_to_all_expert_rows(torch.arange(12.0).reshape(6, 2),
                                            torch.tensor([2, 2, 2, 0]), 4)
    assert offs.tolist() == [2, 4, 6, 6] and torch.equal(rows, torch.arange(12.0).reshape(6, 2))


def test_custom_ops_pass_opcheck_and_compile():
    g = torch.Generator().manual_seed(5)
    idx = torch.randint(0, 4, (12, 2), generator=g)
    x = torch.randn(12, 64, generator=g).bfloat16()
    probs = torch.rand(12, 2, generator=g)
    torch.library.opcheck(torch.ops.tessera.moe_routing.default, (idx, 4, 16, -1))
    torch.library.opcheck(torch.ops.tessera.moe_routing.default, (idx, 4, 16, 32))
    _, _, slot, row_pair, _, _ = moe.moe_routing(idx, 4, 16, -1)
    for mode in moe.QUANT_MODES:
        torch.library.opcheck(torch.ops.tessera.moe_permute.default, (x, row_pair, 2, mode),
                              test_utils=("test_schema", "test_faketensor"))
    y = torch.randn(row_pair.shape[0], 64, generator=g).bfloat16()
    torch.library.opcheck(torch.ops.tessera.moe_unpermute.default, (y, slot, row_pair, probs),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.tessera.moe_permute_backward.default, (y, slot, 12))
    torch.library.opcheck(torch.ops.tessera.moe_unpermute_backward.default,
                          (x, y, slot, row_pair, probs))

    def step(x, idx, probs):
        _, _, slot, row_pair, _, _ = moe.moe_routing(idx, 4, 16, -1)
        data, _ = moe.moe_permute(x, row_pair, 2, "none")
        return moe.moe_unpermute(data * 2, slot, row_pair, probs)

    eager = step(x, idx, probs)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)(x, idx, probs)
    assert torch.equal(eager, compiled)


def test_layer_with_default_router_and_experts_trains():
    torch.manual_seed(2)
    layer = tt.MoELayer(32, 16, 4, 2, recipe="mxfp8", capacity_factor=1.0)
    assert isinstance(layer.router, torch.nn.Linear) and layer.router.weight.dtype == torch.float32
    x = torch.randn(3, 10, 32).bfloat16().requires_grad_()
    y = layer(x)
    assert y.shape == x.shape and y.dtype == x.dtype and torch.isfinite(y.float()).all()
    y.float().square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad.float()).all()
    assert layer.router.weight.grad is not None and layer.router.weight.grad.abs().sum() > 0
    assert int(layer.last_error.max()) == 0


@pytest.mark.parametrize("device", _DEVICES)
def test_dropless_dispatch_on_one_rank_keeps_the_layout_on_the_device(device):
    """One rank, dropless: no host copy of the layout (no split sizes on the host); recv is the
    routing's whole buffer of permuted_rows(T, k, E, align) rows: each expert's rows at its
    padded offset, every pair's row its token's, zero rows everywhere else (group padding and
    the rows past state.offs[-1])."""
    g = torch.Generator().manual_seed(3)
    t, k, e = 50, 2, 8
    idx = torch.randint(0, e, (t, k), generator=g)
    idx[:20, 0] = 5  # one expert far above the others
    x = torch.randn(t, 32, generator=g).bfloat16()
    for recipe in RECIPES:
        align = moe.recipe_dispatch_mode(recipe)[1]
        recv, state = moe.dispatch(x.to(device), idx.to(device), e, recipe=recipe)
        assert state.send_rows is None and state.recv_chunks is None, recipe
        assert recv.shape == (moe.permuted_rows(t, k, e, align), 32), recipe
        padded = (torch.bincount(idx.reshape(-1), minlength=e) + align - 1) // align * align
        assert torch.equal(state.offs.cpu().long(), padded.cumsum(0)), recipe
        recv, slot = recv.cpu(), state.slot_map.cpu()
        live = torch.zeros(recv.shape[0], dtype=torch.bool)
        live[slot.reshape(-1)] = True
        assert not recv[~live].any(), recipe
        if recipe == "bf16":
            assert torch.equal(recv[slot], x.unsqueeze(1).expand(t, k, 32)), recipe


@pytest.mark.skipif(not torch.cuda.is_available() or not C.cuda_compiled(),
                    reason="needs a CUDA device and tessera built with CUDA")
def test_cuda_dispatch_reports_an_expert_index_out_of_range():
    """On CUDA the routing kernel flags a bad index (no Python-side check). One rank has no
    host copy of the layout, dropless or not: the flag is recorded in state.error
    (sync_checks=False, the CUDA default) or raised (True); the pair is dropped, the other rows
    arrive as on good input."""
    x = torch.randn(6, 16, device="cuda")
    idx = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7], [1, 9], [3, 2]], device="cuda")
    for bad in (9, -1):
        idx[4, 1] = bad
        with pytest.raises(ValueError, match="rank 0: an expert index is outside"):
            moe.dispatch(x, idx, 8, sync_checks=True)
        recv, state = moe.dispatch(x, idx, 8)
        assert int(state.error.max()) == 1 and not recv[int(state.offs[-1]):].any()
        with pytest.raises(ValueError, match="rank 0: an expert index is outside"):
            moe.dispatch(x, idx, 8, capacity=4, sync_checks=True)
        recv, state = moe.dispatch(x, idx, 8, capacity=4, sync_checks=False)
        assert int(state.error.max()) == 1
        good = idx.clone()
        good[4, 1] = 0
        recv_good, _ = moe.dispatch(x, good, 8, capacity=4)
        # expert 0's rows: token 0 (and token 4's pair in the good run only)
        assert torch.equal(recv[:1], recv_good[:1]) and torch.equal(recv[4:], recv_good[4:])
        assert not recv[1:4].any() and torch.equal(recv_good[1], x[4])


@pytest.mark.skipif(not torch.cuda.is_available() or not C.cuda_compiled(),
                    reason="needs a CUDA device and tessera built with CUDA")
@pytest.mark.parametrize("capacity", [-1, 32])
def test_cuda_ops_equal_cpu_and_graph_replay(capacity):
    g = torch.Generator().manual_seed(9)
    idx = torch.randint(0, 16, (300, 4), generator=g)
    idx[:100, 0] = 0
    x = torch.randn(300, 256, generator=g).bfloat16()
    probs = torch.rand(300, 4, generator=g)
    dout = torch.randn(300, 256, generator=g).bfloat16()

    def run(dev):
        r = moe.moe_routing(idx.to(dev), 16, 32, capacity)
        outs = [t.cpu() for t in r[:5]]
        for mode in moe.QUANT_MODES:
            outs += [t.cpu() for t in moe.moe_permute(x.to(dev), r[3], 4, mode)]
        y, _ = moe.moe_permute(x.to(dev), r[3], 4, "none")
        outs.append(moe.moe_unpermute(y, r[2], r[3], probs.to(dev)).cpu())
        outs.append(moe.moe_permute_backward(y, r[2], 300).cpu())
        outs += [t.cpu() for t in moe.moe_unpermute_backward(dout.to(dev), y, r[2], r[3],
                                                             probs.to(dev))]
        return outs

    for a, b in zip(run("cuda"), run("cpu")):
        assert torch.equal(a.view(torch.uint8) if a.dtype.itemsize == 1 else a,
                           b.view(torch.uint8) if b.dtype.itemsize == 1 else b)
    # Dispatch + combine in a CUDA graph (world size 1, no group: dropless syncs nothing there
    # either): replay with new routing.
    dev = torch.device("cuda")
    xs, ids, ps = x.to(dev), idx.to(dev), probs.to(dev)

    def step():
        recv, state = moe.dispatch(xs, ids, 16, None, recipe="mxfp8",
                                   capacity=capacity if capacity >= 0 else None,
                                   sync_checks=False)
        return moe.combine(recv * 2, ps, state), state.dropped

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_g, dropped_g = step()
    for r in range(3):
        ids.copy_(torch.randint(0, 16, (300, 4), generator=g).to(dev))
        ids[: 50 * (r + 1), 1] = 3
        graph.replay()
        eager, dropped = step()
        torch.cuda.synchronize()
        assert torch.equal(out_g, eager) and int(dropped_g) == int(dropped)


@pytest.mark.skipif(not torch.cuda.is_available() or not C.cuda_compiled(),
                    reason="needs a CUDA device and tessera built with CUDA")
@pytest.mark.parametrize("recipe", ["bf16", "fp8_rowwise"])
def test_dropless_layer_on_one_gpu_in_a_cuda_graph(recipe):
    """Dropless MoELayer without an EP group syncs nothing: forward + backward captured in one
    CUDA graph, replayed with new tokens (so new routing and new group sizes) equal to a fresh
    eager layer with the same parameters, bit for bit: outputs, input and parameter gradients."""
    dev = torch.device("cuda")
    h, f, e, k, t = 128, 64, 8, 2, 200
    torch.manual_seed(7)
    layer = tt.MoELayer(h, f, e, k, recipe=recipe, router=ReferenceRouter(h, e, device=dev),
                        device=dev)
    x = torch.randn(t, h, device=dev).bfloat16().requires_grad_()
    g = torch.randn(t, h, device=dev).bfloat16()
    graph, y = capture_step(layer, x, g)
    for it in range(3):
        xn = torch.randn(t, h, device=dev).bfloat16()
        xn[: 40 * (it + 1)] = xn[0]  # skew: many tokens take the same experts
        with torch.no_grad():
            x.copy_(xn)
        graph.replay()
        torch.cuda.synchronize()
        eager = tt.MoELayer(h, f, e, k, recipe=recipe, router=ReferenceRouter(h, e, device=dev),
                            device=dev)
        eager.load_state_dict(layer.state_dict())
        xe = xn.clone().requires_grad_()
        ye = eager(xe)
        ye.backward(g)
        assert torch.equal(y, ye), (recipe, it)
        assert torch.equal(x.grad, xe.grad), (recipe, it)
        grads = dict(eager.named_parameters())
        for n, p in layer.named_parameters():
            assert torch.equal(p.grad, grads[n].grad), (recipe, it, n)


# ---- dequantize_rows: the C++ op against the torch passes it replaced ------------------------
# The oracle: the former dequantize_rows in plain torch (E4M3 decode, E8M0 bit tricks,
# repeat_interleave of the scales, one FP32 multiply, one cast), kept as the moe bench's baseline.
from tessera.bench.moe import torch_dequantize as _torch_dequantize_rows  # noqa: E402


def _same_bits_nan_as_nan(got, want):
    """Bit equality, except that a NaN equals any NaN (CPU and GPU NaN payloads differ; the op
    writes the canonical one)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = torch.isnan(want.float())
    assert torch.equal(torch.isnan(got.float()), nan)
    ints = {4: torch.int32, 2: torch.int16}[got.element_size()]
    assert torch.equal(got.view(ints)[~nan], want.view(ints)[~nan])


def _payload(mode, rows, h, g):
    """Random codes (every byte, NaN codes 0x7F / 0xFF included) and scales with specials:
    FP32 0, inf, NaN, subnormal and huge scales; E8M0 codes 0 and 255."""
    data = torch.randint(0, 256, (rows, h), generator=g, dtype=torch.uint8)
    if rows:
        data[0, : min(h, 4)] = torch.tensor([0x7F, 0xFF, 0x00, 0x80],
                                            dtype=torch.uint8)[: min(h, 4)]
    if mode == "mxfp8":
        s = torch.randint(100, 160, (rows, -(-h // 32)), generator=g, dtype=torch.uint8)
        if rows:
            s[0, 0], s[-1, -1] = 0, 255
        if rows > 2:
            s[1, :] = 0
        return data, s
    cols = 1 if mode == "rowwise" else -(-h // 128)
    srows = rows if mode == "rowwise" else -(-rows // 4) * 4
    s = torch.exp2(torch.randint(-20, 20, (srows, cols), generator=g).float()) * (
        1 + torch.rand(srows, cols, generator=g))
    specials = [0.0, float("inf"), float("nan"), 2.0 ** -140, 2.0 ** 100]
    for i, v in enumerate(specials[: srows]):
        s[i, -1] = v
    return data, (s.reshape(-1) if mode == "rowwise" and rows % 2 else s)


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() and
                                              C.cuda_compiled() else []))
@pytest.mark.parametrize("mode", ["rowwise", "block1x128", "mxfp8"])
def test_dequantize_rows_equals_torch_passes(device, mode):
    g = torch.Generator().manual_seed(17)
    for rows, h in [(5, 7), (6, 130), (3, 136), (37, 256), (9, 7168), (1, 33), (0, 64)]:
        data, sinv = _payload(mode, rows, h, g)
        for out_dtype in (torch.float32, torch.bfloat16, torch.float16):
            want = _torch_dequantize_rows(data, sinv, mode, out_dtype)
            got = moe.dequantize_rows(data.to(device).view(torch.float8_e4m3fn), sinv.to(device),
                                      mode, out_dtype)
            assert got.device.type == device
            _same_bits_nan_as_nan(got.cpu(), want)


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() and
                                              C.cuda_compiled() else []))
@pytest.mark.parametrize("mode", ["rowwise", "block1x128", "mxfp8"])
def test_dequantize_rows_gathers_source_rows(device, mode):
    """source_rows: out row r is data row source_rows[r] dequantized (the torch passes on the
    gathered rows), an index outside [0, R) a zero row; repeated and skipped rows allowed."""
    g = torch.Generator().manual_seed(29)
    for rows, h in [(6, 130), (37, 256), (9, 7168), (1, 33)]:
        data, sinv = _payload(mode, rows, h, g)
        src = torch.cat([torch.randperm(rows, generator=g), torch.randint(0, rows, (3,), generator=g),
                         torch.tensor([-1, rows, rows + 7])])
        src = src[torch.randperm(src.numel(), generator=g)]
        inside = (src >= 0) & (src < rows)
        for out_dtype in (torch.float32, torch.bfloat16):
            full = _torch_dequantize_rows(data, sinv, mode, out_dtype)
            want = torch.where(inside.unsqueeze(1), full[torch.where(inside, src, 0)],
                               torch.zeros((), dtype=out_dtype))
            got = moe.dequantize_rows(data.to(device).view(torch.float8_e4m3fn), sinv.to(device),
                                      mode, out_dtype, src.to(device))
            assert got.shape == (src.numel(), h) and got.device.type == device
            _same_bits_nan_as_nan(got.cpu(), want)
    empty = moe.dequantize_rows(data.view(torch.float8_e4m3fn), sinv, mode, torch.bfloat16,
                                torch.empty(0, dtype=torch.int64))
    assert empty.shape == (0, data.shape[1])
    with pytest.raises(Exception, match="source_rows"):
        moe.dequantize_rows(data.view(torch.float8_e4m3fn), sinv, mode, torch.bfloat16,
                            torch.zeros(2, dtype=torch.int32))
    # opcheck compares values (a NaN there differs from itself): no NaN codes, unit scales.
    finite = torch.where((data & 0x7F) == 0x7F, 0, data)
    unit = torch.full_like(sinv, 127) if mode == "mxfp8" else torch.ones_like(sinv)
    torch.library.opcheck(torch.ops.tessera.moe_dequantize_rows.default,
                          (finite, unit, mode, torch.bfloat16, src))


def test_dequantize_rows_of_a_permuted_payload_and_errors():
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, 8, (40, 2), generator=g)
    x = torch.randn(40, 96, generator=g).bfloat16()
    r = moe.moe_routing(idx, 8, 32)
    for mode in moe.QUANT_MODES[1:]:
        data, sinv = moe.moe_permute(x, r[3], 2, mode)
        _same_bits_nan_as_nan(moe.dequantize_rows(data, sinv, mode, torch.bfloat16),
                              _torch_dequantize_rows(data, sinv, mode, torch.bfloat16))
    assert torch.equal(moe.dequantize_rows(x, torch.empty(0), "none", torch.float32), x.float())
    assert torch.equal(moe.dequantize_rows(x, torch.empty(0), "none", torch.float32,
                                           torch.tensor([2, -1, 0, 40])),
                       torch.stack([x[2].float(), torch.zeros(96), x[0].float(), torch.zeros(96)]))
    data, sinv = moe.moe_permute(x, r[3], 2, "block1x128")
    with pytest.raises(ValueError, match="mode 'tensor'"):
        moe.dequantize_rows(data, sinv, "tensor", torch.bfloat16)
    with pytest.raises(Exception, match="scale_inv"):
        moe.dequantize_rows(data, sinv[:, :0], "block1x128", torch.bfloat16)
    with pytest.raises(Exception, match="scale_inv"):
        moe.dequantize_rows(data, sinv.view(torch.uint8), "block1x128", torch.bfloat16)
    with pytest.raises(Exception, match="out"):
        moe.dequantize_rows(data, sinv, "block1x128", torch.float64)
    torch.library.opcheck(torch.ops.tessera.moe_dequantize_rows.default,
                          (data.view(torch.uint8), sinv, "block1x128", torch.bfloat16))


# ---- the experts reading the dispatched codes (codes_to_experts) ------------------------------
def _layer_run(recipe, capacity_factor, device, **options):
    """One forward + backward of a MoELayer built with `options`: (layer, [out, dx, fc1 dW,
    fc2 dW, router dW])."""
    torch.manual_seed(41)
    h, f, e, k, t = 128, 64, 8, 2, 96  # FP8 block dgrad on CUDA: contractions % 128 == 0
    router = ReferenceRouter(h, e, device=device)
    layer = tt.MoELayer(h, f, e, k, recipe=recipe, router=router,
                        capacity_factor=capacity_factor, sync_checks=False, device=device,
                        **options)
    torch.manual_seed(42)
    x = torch.randn(t, h, device=device).bfloat16().requires_grad_()
    g = torch.randn(t, h, device=device).bfloat16()
    y = layer(x)
    y.backward(g)
    ex = layer.experts
    return layer, [y.detach(), x.grad, ex.fc1.weight.grad, ex.fc2.weight.grad, router.weight.grad]


def _sqnr_db(ref, got):
    ref, got = ref.double(), got.double()
    return 10 * torch.log10(ref.square().sum() / (ref - got).square().sum()).item()


_NAMES = ["out", "dx", "fc1 dw", "fc2 dw", "router dw"]


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("capacity_factor", [None, 0.75])
@pytest.mark.parametrize("recipe", ["fp8_block", "mxfp8"])
def test_experts_reading_power_of_two_codes_equal_the_dequantized_rows(recipe, capacity_factor,
                                                                       device):
    """Power-of-two scales: a dispatched row's values code · 2^e are exact in BF16 and its
    re-quantization multiplies the same values, so the experts reading the codes
    (codes_to_experts=True) give the same bits as reading the dequantized rows, everywhere."""
    on, got = _codes_run(recipe, True, capacity_factor, device)
    off, want = _codes_run(recipe, False, capacity_factor, device)
    assert on.codes_to_experts and not off.codes_to_experts
    assert "codes_to_experts=True" in repr(on)
    for name, a, b in zip(_NAMES, got, want):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("capacity_factor", [None, 0.75])
def test_experts_reading_rowwise_codes(capacity_factor, device):
    """fp8_rowwise takes the codes by default. fc1's forward reads them as they are: its
    re-quantization of the dequantized rows gives the same codes, so the output, dx, fc2's and
    the router's gradients equal the dequantized path's bit for bit; fc1's weight gradient reads
    the columnwise copy of the FP32 values code · s instead of their BF16 rounding: it differs
    at the FP8 copy's rounding (>= 30 dB to the other), no more."""
    on, got = _codes_run("fp8_rowwise", None, capacity_factor, device)
    off, want = _codes_run("fp8_rowwise", False, capacity_factor, device)
    assert on.codes_to_experts and not off.codes_to_experts
    for name, a, b in zip(_NAMES, got, want):
        if name == "fc1 dw":
            assert _sqnr_db(b, a) >= 30, name
        else:
            assert torch.equal(a, b), name


# ---- the experts reading the quantized output gradient (grad_codes_to_experts) ---------------
def _codes_run(recipe, codes, capacity_factor, device):
    return _layer_run(recipe, capacity_factor, device, codes_to_experts=codes)


def _grad_codes_run(recipe, grad_codes, capacity_factor, device, quantize_grads=None):
    return _layer_run(recipe, capacity_factor, device, grad_codes_to_experts=grad_codes,
                      quantize_grads=quantize_grads)


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("capacity_factor", [None, 0.75])
@pytest.mark.parametrize("recipe", ["fp8_block", "mxfp8"])
def test_experts_reading_power_of_two_gradient_codes_equal_the_dequantized_rows(
        recipe, capacity_factor, device):
    """The combine's backward sends the experts' output gradient quantized (power-of-two scales,
    the default for these recipes). fc2's backward reading those codes as they are
    (grad_codes_to_experts=True: its dgrad does not quantize them again, its weight gradient's
    copy is made from their values) gives the same bits as reading the dequantized rows: the
    values code · 2^e are exact in BF16, and re-quantizing them in the same blocks gives the same
    codes and scales."""
    on, got = _grad_codes_run(recipe, True, capacity_factor, device)
    off, want = _grad_codes_run(recipe, False, capacity_factor, device)
    assert on.grad_codes_to_experts and not off.grad_codes_to_experts
    assert "grad_codes_to_experts=True" in repr(on)
    for name, a, b in zip(_NAMES, got, want):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("device", _DEVICES)
def test_experts_reading_rowwise_gradient_codes(device):
    """fp8_rowwise with quantize_grads=True: fc2's dgrad reads the codes with their FP32 row
    scales (the dequantized path re-quantizes their BF16 rounding), and its weight gradient's
    copy quantizes the FP32 values code · s: every gradient stays within the FP8 copies'
    rounding of the dequantized path's (>= 30 dB); the output is the same."""
    on, got = _grad_codes_run("fp8_rowwise", True, None, device, quantize_grads=True)
    off, want = _grad_codes_run("fp8_rowwise", False, None, device, quantize_grads=True)
    assert torch.equal(got[0], want[0])
    for name, a, b in zip(_NAMES[1:], got[1:], want[1:]):
        assert torch.isfinite(a).all(), name
        assert _sqnr_db(b, a) >= 30, name


def test_grad_codes_to_experts_needs_a_quantized_gradient_and_experts_that_read_it():
    with pytest.raises(ValueError, match="grad_codes_to_experts"):
        tt.MoELayer(16, 8, 8, 2, recipe="fp8_rowwise", grad_codes_to_experts=True)  # BF16 grads
    with pytest.raises(ValueError, match="grad_codes_to_experts"):
        tt.MoELayer(128, 64, 8, 2, recipe="fp8_block", grad_codes_to_experts=True,
                    experts=ReferenceGroupedMLP(8, 128, 64))
    with pytest.raises(ValueError, match="grad_codes_to_experts"):  # E5M2 gradients in fc2
        tt.MoELayer(128, 64, 8, 2, recipe="fp8_block:hybrid", grad_codes_to_experts=True)
    assert not tt.MoELayer(128, 64, 8, 2, recipe="fp8_block").grad_codes_to_experts  # opt in
    assert tt.GroupedMLP(2, 128, 64, recipe="fp8_block").rowwise_grad_mode() == "block1x128"
    assert tt.GroupedMLP(2, 128, 64, recipe="mxfp8").rowwise_grad_mode() == "mxfp8"
    assert tt.GroupedMLP(2, 128, 64, recipe="fp8_current").rowwise_grad_mode() == "none"


def test_grouped_mlp_dy_rowwise_arguments_are_checked():
    """The op's dy codes are checked against fc2's grad_output quantization, naming dy_codes /
    dy_scale_inv (the holder hands them to the MLP's backward)."""
    from tessera.torch.mlp import GradRowwise
    mlp = tt.GroupedMLP(2, 32, 16, recipe="fp8_rowwise")
    assert mlp.rowwise_grad_mode() == "rowwise"
    offs = torch.tensor([4, 8], dtype=torch.int32)
    for codes, sinv, match in [(torch.zeros(8, 16, dtype=torch.uint8), torch.ones(8, 1), "dy_codes"),
                               (torch.zeros(8, 32, dtype=torch.uint8), torch.ones(3, 1),
                                "dy_scale_inv")]:
        holder = GradRowwise()
        x = torch.randn(8, 32).bfloat16().requires_grad_()
        y = mlp(x, offs, grad_rowwise=holder)
        holder.put((codes, sinv))
        with pytest.raises(ValueError, match=match):
            y.backward(torch.zeros((), dtype=y.dtype).expand(y.shape))
    # nothing put: the backward reads its gradient as usual (the C++ node's result)
    holder = GradRowwise()
    x = torch.randn(8, 32).bfloat16().requires_grad_()
    g = torch.randn(8, 32).bfloat16()
    mlp.zero_grad()
    mlp(x, offs, grad_rowwise=holder).backward(g)
    got = (x.grad.clone(), mlp.fc2.weight.grad.clone())
    x2 = x.detach().requires_grad_()
    mlp.zero_grad()
    mlp(x2, offs).backward(g)
    assert torch.equal(got[0], x2.grad) and torch.equal(got[1], mlp.fc2.weight.grad)


def test_codes_to_experts_needs_a_quantized_payload_and_experts_that_read_it():
    with pytest.raises(ValueError, match="codes_to_experts"):
        tt.MoELayer(16, 8, 8, 2, recipe="bf16", codes_to_experts=True)
    with pytest.raises(ValueError, match="codes_to_experts"):
        tt.MoELayer(16, 8, 8, 2, recipe="fp8_rowwise", codes_to_experts=True,
                    experts=ReferenceGroupedMLP(8, 16, 8))
    # the plain-torch experts read dequantized rows: off by default
    assert not tt.MoELayer(16, 8, 8, 2, recipe="fp8_rowwise",
                           experts=ReferenceGroupedMLP(8, 16, 8)).codes_to_experts
    assert not tt.MoELayer(32, 16, 8, 2, recipe="mxfp8").codes_to_experts  # FP32 image: opt in
    with pytest.raises(ValueError, match="deliver_codes"):
        moe.dispatch(torch.randn(4, 16), torch.zeros(4, 2, dtype=torch.int64), 8,
                     recipe="bf16", deliver_codes=True)


def test_grouped_mlp_x_rowwise_arguments_are_checked():
    mlp = tt.GroupedMLP(2, 32, 16, recipe="fp8_rowwise")
    x = torch.randn(8, 32).bfloat16()
    offs = torch.tensor([4, 8], dtype=torch.int32)
    codes = torch.zeros(8, 32, dtype=torch.uint8)
    sinv = torch.ones(8, 1)
    assert mlp.rowwise_input_mode() == "rowwise"
    assert mlp(x, offs, x_rowwise=(codes, sinv)).shape == (8, 32)  # zero codes: y = 0
    with pytest.raises(ValueError, match="x_codes"):
        mlp(x, offs, x_rowwise=(codes[:, :16].contiguous(), sinv))
    with pytest.raises(ValueError, match="x_scale_inv"):
        mlp(x, offs, x_rowwise=(codes, torch.ones(4, 1)))
    with pytest.raises(C.DTypeError, match="x_scale_inv"):
        mlp(x, offs, x_rowwise=(codes, torch.ones(8, 1, dtype=torch.float64)))
    with pytest.raises(ValueError, match="x_codes"):
        tt.GroupedMLP(2, 32, 16)(x, offs, x_rowwise=(codes, sinv))  # bf16 does not quantize x


def test_grouped_mlp_x_rowwise_under_torch_compile_equals_eager():
    """The rowwise input through torch.compile (fullgraph, the Python autograd function and the
    ops' fake implementations): the same y, dx (through an expanded stand-in for x, as the
    dispatch hands it over) and fc1 weight gradient as eager."""
    torch.manual_seed(43)
    mlp = tt.GroupedMLP(2, 32, 16, recipe="fp8_rowwise")
    offs = torch.tensor([4, 8], dtype=torch.int32)
    codes, sinv = moe_ops.moe_permute(torch.randn(8, 32), torch.arange(8), 1, "rowwise")[:2]

    def step(anchor):
        return mlp(anchor, offs, x_rowwise=(codes, sinv.reshape(8, 1)))

    runs = []
    for fn in (step, torch.compile(step, backend="aot_eager", fullgraph=True)):
        mlp.zero_grad()
        anchor = torch.zeros((), dtype=torch.bfloat16).expand(8, 32).requires_grad_()
        y = fn(anchor)
        y.float().square().sum().backward()
        runs.append((y.detach(), anchor.grad, mlp.fc1.weight.grad.clone()))
    for name, a, b in zip(["y", "dx", "fc1 dw"], *runs):
        assert torch.equal(a, b), name
    assert runs[0][2].abs().sum() > 0
