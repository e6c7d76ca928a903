"""moe.route's options and MoELayer's: node-limited routing (expert_groups /
groups_per_token), sigmoid scores and a selection bias (DeepSeek-V3's router), against a
per-token oracle written with Python lists; the plain top-k when they are off; the layer against
reference_moe; the argument errors."""
import math

import pytest

torch = pytest.importorskip("torch")

from tessera import _tessera as C  # noqa: E402
import tessera.torch as tt  # noqa: E402
from tessera.torch import moe  # noqa: E402
from tessera.torch.moe_reference import ReferenceGroupedMLP, ReferenceRouter, reference_moe  # noqa: E402


def oracle(probs, top_k, groups, limit):
    """Per token, with lists: group score = sum of its max(1, top_k // limit) largest
    probabilities, the `limit` best groups, then the top_k experts among theirs."""
    e = len(probs)
    per = e // groups
    take = min(per, max(1, top_k // limit))
    score = [sum(sorted(probs[g * per:(g + 1) * per], reverse=True)[:take])
             for g in range(groups)]
    best = sorted(range(groups), key=lambda g: -score[g])[:limit]
    allowed = [i for g in best for i in range(g * per, (g + 1) * per)]
    return sorted(sorted(allowed, key=lambda i: -probs[i])[:top_k])


@pytest.mark.parametrize("groups,limit", [(1, 1), (4, 2), (8, 3)])
def test_sigmoid_scores_with_a_selection_bias(groups, limit):
    """The choice follows sigmoid(logit) + bias (groups included); the weights are the unbiased
    sigmoids of the chosen experts, renormalized."""
    torch.manual_seed(groups)
    e, k = 16, 4
    logits = torch.randn(100, e) * 2
    bias = torch.randn(e) * 0.3
    probs, idx = moe.route(logits, k, score="sigmoid", selection_bias=bias,
                           expert_groups=groups, groups_per_token=limit)
    choice = torch.sigmoid(logits) + bias  # the FP32 values the choice is made on
    for t in range(logits.shape[0]):
        assert sorted(idx[t].tolist()) == oracle(choice[t].tolist(), k, groups, limit), t
        want = [1.0 / (1.0 + math.exp(-v)) for v in logits[t].tolist()]  # sigmoid, in lists
        assert max(abs(a - b) for a, b in zip(choice[t].tolist(),
                                              [w + b for w, b in zip(want, bias.tolist())])) < 1e-6
    sig = torch.sigmoid(logits).gather(1, idx)
    torch.testing.assert_close(probs, sig / sig.sum(1, keepdim=True), rtol=1e-6, atol=1e-7)


def test_the_bias_moves_the_choice_not_the_weight():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    bias = torch.tensor([0.0, 0.0, 0.0, 5.0])
    probs, idx = moe.route(logits, 1, normalize=False, score="sigmoid", selection_bias=bias)
    assert idx.tolist() == [[3]]
    assert probs.item() == torch.sigmoid(torch.tensor(-1.0)).item()


@pytest.mark.parametrize("e,k,groups,limit", [(16, 4, 4, 2), (64, 8, 8, 4), (12, 3, 3, 1),
                                              (8, 2, 2, 2), (20, 6, 5, 3)])
def test_tokens_take_their_experts_from_the_best_groups(e, k, groups, limit):
    torch.manual_seed(e + k)
    logits = torch.randn(200, e) * 3
    probs, idx = moe.route(logits, k, expert_groups=groups, groups_per_token=limit)
    p = torch.softmax(logits.float(), dim=-1)
    for t in range(logits.shape[0]):
        assert sorted(idx[t].tolist()) == oracle(p[t].tolist(), k, groups, limit), t
        assert len({i // (e // groups) for i in idx[t].tolist()}) <= limit
    # The probabilities are the softmax's at the chosen experts, renormalized.
    want = p.gather(1, idx)
    torch.testing.assert_close(probs, want / want.sum(1, keepdim=True), rtol=0, atol=0)
    raw, idx2 = moe.route(logits, k, False, expert_groups=groups, groups_per_token=limit)
    assert torch.equal(idx2, idx) and torch.equal(raw, want)


def test_no_limit_is_plain_top_k():
    torch.manual_seed(3)
    logits = torch.randn(50, 16)
    plain = moe.route(logits, 4)
    for kw in (dict(expert_groups=4), dict(expert_groups=4, groups_per_token=4)):
        got = moe.route(logits, 4, **kw)
        assert torch.equal(got[0], plain[0]) and torch.equal(got[1], plain[1])
    probs, idx = moe.route(torch.randn(0, 16), 4, expert_groups=4, groups_per_token=2)
    assert probs.shape == idx.shape == (0, 4)  # an empty batch


def test_the_limit_changes_the_choice():
    """Token 0 prefers experts 0 and 4 (groups 0 and 1 of 4 experts): limited to one group,
    both experts come from group 0, whose two best sum highest."""
    logits = torch.full((1, 8), -10.0)
    logits[0, 0], logits[0, 1], logits[0, 4] = 3.0, 2.9, 3.5
    _, plain = moe.route(logits, 2)
    _, limited = moe.route(logits, 2, expert_groups=2, groups_per_token=1)
    assert sorted(plain[0].tolist()) == [0, 4]
    assert sorted(limited[0].tolist()) == [0, 1]


@pytest.mark.parametrize("recipe", ["bf16", "fp8_rowwise"])
def test_layer_with_node_limit_equals_reference(recipe):
    torch.manual_seed(21)
    h, f, e, k, t = 32, 16, 8, 2, 64
    experts, router = ReferenceGroupedMLP(e, h, f), ReferenceRouter(h, e)
    layer = tt.MoELayer(h, f, e, k, recipe=recipe, experts=experts, router=router,
                        expert_groups=4, groups_per_token=1)
    assert "groups_per_token=1" in repr(layer)
    x = torch.randn(t, h).bfloat16().requires_grad_()
    g = torch.randn(t, h).bfloat16()
    y = layer(x)
    y.backward(g)
    got = [v.clone() for v in (y, x.grad, experts.fc1_weight.grad, router.weight.grad)]
    experts.zero_grad()
    router.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    yr, _ = reference_moe(x2, router, experts, e, k, recipe, expert_groups=4, groups_per_token=1)
    yr.backward(g)
    want = (yr, x2.grad, experts.fc1_weight.grad, router.weight.grad)
    for name, a, b in zip(["out", "dx", "fc1 dw", "router dw"], got, want):
        assert torch.equal(a, b), name
    # Each token's two experts lie in one group of two experts.
    _, idx = moe.route(router(x.detach()), k, expert_groups=4, groups_per_token=1)
    assert bool(((idx[:, 0] // 2) == (idx[:, 1] // 2)).all())


def test_layer_with_sigmoid_scores_and_its_bias_buffer_equals_reference():
    torch.manual_seed(22)
    h, f, e, k, t = 32, 16, 8, 2, 48
    experts, router = ReferenceGroupedMLP(e, h, f), ReferenceRouter(h, e)
    layer = tt.MoELayer(h, f, e, k, experts=experts, router=router, score="sigmoid",
                        selection_bias=True, expert_groups=2, groups_per_token=1)
    assert torch.equal(layer.state_dict()["selection_bias"], torch.zeros(e))
    with torch.no_grad():
        layer.selection_bias.copy_(torch.randn(e) * 0.2)  # as a balancing step would
    x = torch.randn(t, h).bfloat16().requires_grad_()
    g = torch.randn(t, h).bfloat16()
    layer(x).backward(g)
    got = [x.grad.clone(), router.weight.grad.clone()]
    experts.zero_grad()
    router.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    yr, _ = reference_moe(x2, router, experts, e, k, score="sigmoid",
                          selection_bias=layer.selection_bias, expert_groups=2,
                          groups_per_token=1)
    yr.backward(g)
    assert torch.equal(layer(x.detach()), yr)
    assert torch.equal(got[0], x2.grad) and torch.equal(got[1], router.weight.grad)


def test_balancing_moves_the_bias_by_the_sign_of_the_load_error():
    torch.manual_seed(23)
    h, e, k = 16, 8, 2
    router = ReferenceRouter(h, e)
    layer = tt.MoELayer(h, 8, e, k, experts=ReferenceGroupedMLP(e, h, 8), router=router,
                        score="sigmoid", selection_bias=True)
    layer.update_selection_bias_(0.1)  # before any forward: nothing to count
    assert torch.equal(layer.selection_bias, torch.zeros(e))
    xs = [torch.randn(40, h).bfloat16(), torch.randn(24, h).bfloat16()]
    load = torch.zeros(e, dtype=torch.int64)
    for x in xs:  # two micro-batches: their loads add up
        _, idx = moe.route(router(x), k, score="sigmoid", selection_bias=layer.selection_bias)
        load += torch.bincount(idx.reshape(-1), minlength=e)
        layer(x)
    assert torch.equal(layer.expert_load, load)
    mean = load.sum().item() / e
    want = [0.1 if n < mean else (-0.1 if n > mean else 0.0) for n in load.tolist()]
    layer.update_selection_bias_(0.1)
    assert layer.selection_bias.tolist() == pytest.approx(want)
    assert not layer.expert_load.any()  # the count restarts
    assert "expert_load" not in layer.state_dict()
    with pytest.raises(C.InvalidArgumentError, match="selection_bias"):
        tt.MoELayer(h, 8, e, k, experts=ReferenceGroupedMLP(e, h, 8)).update_selection_bias_(0.1)


def test_bad_scores_and_biases_raise():
    with pytest.raises(C.InvalidArgumentError, match="score"):
        moe.route(torch.randn(4, 8), 2, score="relu")
    with pytest.raises(C.InvalidArgumentError, match="score"):
        tt.MoELayer(16, 8, 8, 2, experts=ReferenceGroupedMLP(8, 16, 8), score="relu")
    with pytest.raises(C.ShapeError, match="selection_bias"):
        moe.route(torch.randn(4, 8), 2, selection_bias=torch.zeros(7))


@pytest.mark.parametrize("kw,what", [
    (dict(expert_groups=3), "expert_groups"),           # does not divide 8
    (dict(expert_groups=0), "expert_groups"),
    (dict(expert_groups=4, groups_per_token=0), "groups_per_token"),
    (dict(expert_groups=4, groups_per_token=5), "groups_per_token"),
    (dict(expert_groups=8, groups_per_token=1), "top_k"),  # 2 experts in 1 group of 1
])
def test_bad_node_limits_raise_naming_the_argument(kw, what):
    with pytest.raises(C.InvalidArgumentError, match=what):
        moe.route(torch.randn(4, 8), 2, **kw)
    with pytest.raises(C.InvalidArgumentError, match=what):
        tt.MoELayer(16, 8, 8, 2, experts=ReferenceGroupedMLP(8, 16, 8), **kw)


@pytest.mark.skipif(not torch.cuda.is_available() or not C.cuda_compiled(),
                    reason="needs a CUDA device and tessera built with CUDA")
@pytest.mark.parametrize("recipe", ["bf16", "fp8_rowwise"])
def test_cuda_router_options_in_a_graph_equal_eager_and_count_every_replay(recipe):
    """On CUDA: sigmoid scores, a selection bias and node-limited routing in a capacity-mode
    layer step (forward + backward) captured in one CUDA graph. Each replay equals the eager
    step bit for bit (out, dx, router dW) on new input, and the load counter adds every replay's
    pairs (the oracle: bincount of the eager step's choices); the choices follow the list oracle
    on the CUDA scores; the balancing step then moves the bias by the summed load."""
    torch.manual_seed(31)
    dev = torch.device("cuda")
    h, f, e, k, t = 64, 32, 16, 4, 128
    layer = tt.MoELayer(h, f, e, k, recipe=recipe, capacity_factor=2.0, sync_checks=False,
                        score="sigmoid", selection_bias=True, expert_groups=4,
                        groups_per_token=2, device=dev)
    with torch.no_grad():
        layer.selection_bias.copy_(torch.randn(e, device=dev) * 0.2)
    x = torch.randn(t, h, device=dev).bfloat16().requires_grad_()
    g = torch.randn(t, h, device=dev).bfloat16()

    def step():
        x.grad = None
        layer.router.weight.grad = None
        out = layer(x)
        out.backward(g)
        return out, x.grad, layer.router.weight.grad

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = step()
    torch.cuda.synchronize()
    layer.expert_load.zero_()
    want_load = torch.zeros(e, dtype=torch.int64)
    for r in range(3):
        with torch.no_grad():
            x.copy_(torch.randn(t, h, device=dev).bfloat16())
        graph.replay()
        torch.cuda.synchronize()
        replayed = [v.clone() for v in got]
        load_after_replay = layer.expert_load.clone()
        eager = step()  # counts its pairs too: take them back out of the counter
        logits = layer.router(x.detach().to(layer.router.weight.dtype))
        _, idx = moe.route(logits, k, score="sigmoid", selection_bias=layer.selection_bias,
                           expert_groups=4, groups_per_token=2)
        step_load = torch.bincount(idx.reshape(-1).cpu(), minlength=e)
        want_load += step_load
        layer.expert_load.sub_(step_load.to(dev))
        for name, a, b in zip(["out", "dx", "router dw"], replayed, eager):
            assert torch.equal(a, b), (r, name)
        assert torch.equal(load_after_replay.cpu(), want_load), r
        choice = (torch.sigmoid(logits.float()) + layer.selection_bias).cpu()
        for row in range(0, t, 7):
            assert sorted(idx[row].tolist()) == oracle(choice[row].tolist(), k, 4, 2), (r, row)
    before = layer.selection_bias.clone()
    layer.update_selection_bias_(0.05)
    mean = want_load.sum().item() / e
    step_want = torch.tensor([0.05 if n < mean else (-0.05 if n > mean else 0.0)
                              for n in want_load.tolist()])
    torch.testing.assert_close((layer.selection_bias - before).cpu(), step_want)
    assert not layer.expert_load.any()
