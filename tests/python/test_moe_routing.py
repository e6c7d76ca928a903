"""Node-limited routing (moe.route's expert_groups / groups_per_token, MoELayer's): against a
per-token oracle written with Python lists, the plain top-k when the limit is off, the layer
against reference_moe, and the argument errors."""
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
