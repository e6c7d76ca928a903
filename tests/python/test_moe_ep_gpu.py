"""Expert parallelism over N GPUs (NCCL) against the same MoELayer on one GPU holding every
expert, with the same kernels: tessera.torch.GroupedMLP experts, the batch-invariant
ReferenceRouter (FP64 accumulation, so both runs route every token alike).

Runs only under torchrun on a machine with one GPU per process; skipped anywhere else (CI runs
the Gloo version, test_moe_dist.py):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    torchrun --standalone --nproc-per-node 4 -m pytest -q -p no:cacheprovider \
        tests/python/test_moe_ep_gpu.py           (tools/gpu/ep_run.sh N does this first)

Every rank runs every test; each test's collectives run in the same order on every rank, and a
failed check on one rank fails the test on every rank (the verdicts are all-reduced), so nothing
hangs in a later collective.

What is compared, per recipe the dispatch takes (bf16; fp8_rowwise, fp8_block, mxfp8: payload
quantized per row), each rank's T tokens of the W·T the one-GPU layer sees:
* dropless, and capacity mode with a capacity no pair exceeds (dropped_total must be 0): outputs
  and input gradients bit for bit (docs/moe.md: the experts' row computations do not depend on
  the other rows; dispatch moves rows unchanged). Expert weight gradients within a stated bound
  (their K-grouped contraction runs over each expert's rows with the padding of W chunks instead
  of one, so the FP32 sums may be ordered otherwise; every scaling unit of the columnwise copies
  lies inside one expert — docs/numerics.md "Scaling units per group member" — so the codes are
  one GPU's): SQNR of the EP gradient against the one-GPU gradient >= WGRAD_SQNR_DB[recipe]. The router's
  weight gradient summed over ranks matches to the FP32 rounding of the per-rank partial sums
  (they can cancel, so the bound scales with the partials' magnitudes, not the sum's).
* capacity mode with drops: the dropped pairs per rank equal the documented rule (per source
  rank and expert, the first C pairs in pair order), computed here on the host; every token
  none of whose pairs was dropped has bit-identical outputs and input gradients; also with token
  counts that differ by rank and change from step to step (one C on every rank, from the
  largest T of the first forward).
* capacity mode in one CUDA graph (forward + backward), replayed twice: equal to eager bit for bit.
* the experts' output gradient sent quantized against in BF16: the SQNR of the input and expert
  weight gradients between the two (printed; >= GRAD_SQNR_DB; with power-of-two scales the
  experts' re-quantization is exact but for E4M3 subnormals, so the two may agree bit for bit).
The equality tests run with the default (gradients quantized for fp8_block and mxfp8) and with
the two cases it does not take.
"""
import os

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

_WORLD = int(os.environ.get("WORLD_SIZE", "1"))
if _WORLD < 2 or not torch.cuda.is_available() or torch.cuda.device_count() < 1:
    pytest.skip("run under torchrun with 2+ GPUs (see the module docstring)",
                allow_module_level=True)
if not dist.is_available() or not dist.is_nccl_available():
    pytest.skip("torch.distributed with NCCL is not available", allow_module_level=True)

import tessera.torch as tt  # noqa: E402
from tessera.torch import moe  # noqa: E402
from tessera.torch.moe_ops import route  # noqa: E402
from tessera.torch.moe_reference import ReferenceRouter  # noqa: E402
from torch_oracles import capture_step  # noqa: E402

if not hasattr(tt, "GroupedMLP"):
    pytest.skip("this build has no tessera.torch.GroupedMLP", allow_module_level=True)

H, F, K, T = 256, 256, 2, 256           # hidden, ffn, top-k, tokens per rank
E = 4 * _WORLD                          # 4 experts per rank
RECIPES = ("bf16", "fp8_rowwise", "fp8_block", "mxfp8")
# The stated bound of the expert weight gradients (EP vs one GPU), see the module docstring.
WGRAD_SQNR_DB = {"bf16": 80.0, "fp8_rowwise": 50.0, "fp8_block": 50.0, "mxfp8": 50.0}
# Quantized against BF16 gradients to the experts: at most one more FP8 rounding of the output
# gradient (E4M3 keeps 3 mantissa bits: about 30 dB on one rounding), a floor well under that.
GRAD_SQNR_DB = 20.0


@pytest.fixture(scope="module")
def group():
    # NVLink multicast stays off in every process (KINDS.md; the launcher's environment too).
    for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                     ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ.setdefault(var, val)
        assert os.environ[var] == val, f"{var} must be {val}"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    yield dist.group.WORLD
    dist.barrier()


def _all_ok(ok: bool, what: str) -> None:
    """Every rank's verdict; one failure fails the test on every rank."""
    flag = torch.tensor([1 if ok else 0], device="cuda")
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    assert flag.item() == 1, f"{what} (rank {dist.get_rank()} own verdict: {ok})"


def _sqnr_db(ref: torch.Tensor, got: torch.Tensor) -> float:
    ref, got = ref.double(), got.double()
    noise = (ref - got).square().sum().item()
    return float("inf") if noise == 0 else 10 * torch.log10(ref.square().sum() / noise).item()


def _layers(recipe, cf, group, quantize_grads=None, grad_codes=False):
    """(one-GPU layer with every expert, EP layer with this rank's slice), equal parameters,
    drawn on the CPU from one seed (the same on every rank)."""
    dev = torch.device("cuda", torch.cuda.current_device())
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    gen = torch.Generator().manual_seed(1234)
    one = tt.MoELayer(H, F, E, K, recipe=recipe, router=ReferenceRouter(H, E, device=dev),
                      quantize_grads=quantize_grads, grad_codes_to_experts=grad_codes,
                      device=dev)
    ep = tt.MoELayer(H, F, E, K, recipe=recipe, ep_group=group, capacity_factor=cf,
                     router=ReferenceRouter(H, E, device=dev), quantize_grads=quantize_grads,
                     grad_codes_to_experts=grad_codes, device=dev)
    lo, hi = rank * E // world, (rank + 1) * E // world
    with torch.no_grad():
        for name, p in one.named_parameters():
            scale = p.shape[-1] ** -0.5
            p.copy_((torch.randn(p.shape, generator=gen) * scale).bfloat16().float())
            q = dict(ep.named_parameters())[name]
            q.copy_(p if name.startswith("router") else p[lo:hi])
    return one, ep


def _data(world):
    gen = torch.Generator().manual_seed(99)
    x = torch.randn(world * T, H, generator=gen).bfloat16()
    g = torch.randn(world * T, H, generator=gen).bfloat16()
    return x.cuda(), g.cuda()


def _run(layer, x, g):
    xi = x.clone().requires_grad_()
    y = layer(xi)
    y.backward(g)
    return y.detach(), xi.grad


def _expert_grads(layer):
    return {n: p.grad for n, p in layer.named_parameters() if not n.startswith("router")}


def _kept_tokens(router, x_all, rows, capacity):
    """(tokens,) bool: this rank's tokens (x_all[rows]) none of whose pairs the capacity rule
    drops, and the pairs this rank drops — the rule of docs/moe.md, on the host."""
    with torch.no_grad():
        _, idx = route(router(x_all), K)
    mine = idx[rows].cpu().reshape(-1)
    seen = torch.zeros(E, dtype=torch.int64)
    kept = torch.ones(mine.numel(), dtype=torch.bool)
    for p, e in enumerate(mine.tolist()):  # pair order: token, then j
        seen[e] += 1
        kept[p] = seen[e] <= capacity
    return kept.reshape(-1, K).all(1).cuda(), int((~kept).sum())


def _check_drops(name, ep, y, dx, y1, dx1, kept, dropped):
    total = torch.tensor([dropped], device="cuda")
    dist.all_reduce(total)
    _all_ok(int(ep.last_dropped.item()) == dropped, name + ": pairs this rank dropped")
    _all_ok(int(ep.last_dropped_total.item()) == int(total.item()), name + ": dropped_total")
    _all_ok(int(total.item()) > 0, name + ": capacity factor 0.5 must drop pairs")
    _all_ok(torch.equal(y[kept], y1[kept]), name + ": outputs of tokens kept whole")
    _all_ok(torch.equal(dx[kept], dx1[kept]), name + ": input gradients of tokens kept whole")


@pytest.mark.parametrize("recipe,quantize_grads,grad_codes",
                         [(r, None, False) for r in RECIPES]
                         + [("fp8_rowwise", True, False), ("mxfp8", False, False),
                            ("fp8_block", None, True), ("fp8_rowwise", True, True)])
@pytest.mark.parametrize("mode", ["dropless", "capacity"])
def test_ep_equals_one_gpu(group, recipe, quantize_grads, grad_codes, mode):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    cf = None if mode == "dropless" else float(E)   # capacity >= every pair: nothing drops
    one, ep = _layers(recipe, cf, group, quantize_grads, grad_codes)
    x, g = _data(world)
    y1, dx1 = _run(one, x, g)
    rows = slice(rank * T, (rank + 1) * T)
    y, dx = _run(ep, x[rows], g[rows])
    name = (f"EP x{world} {recipe} {mode} quantize_grads={quantize_grads}"
            f"{' grad codes' if grad_codes else ''}")
    if cf is not None:
        _all_ok(int(ep.last_dropped_total.item()) == 0, name + ": no pair may drop")
    _all_ok(torch.equal(y, y1[rows]), name + ": outputs bit-identical to one GPU")
    _all_ok(torch.equal(dx, dx1[rows]), name + ": input gradients bit-identical to one GPU")
    lo, hi = rank * E // world, (rank + 1) * E // world
    worst = min(_sqnr_db(g1[lo:hi], _expert_grads(ep)[n])
                for n, g1 in _expert_grads(one).items())
    print(f"{name}: expert weight gradients vs one GPU: SQNR {worst:.1f} dB "
          f"(bound {WGRAD_SQNR_DB[recipe]} dB)")
    _all_ok(worst >= WGRAD_SQNR_DB[recipe], name + f": expert weight gradients SQNR {worst:.1f}")
    # The router's weight gradient: each rank's partial sum over its tokens is rounded to FP32,
    # then the partials are added (an all-reduce). The partials can be far larger than their
    # sum (they cancel), so the bound is FP32 rounding of the partials, element by element:
    # |sum_r fl(P_r) - fl(P)| <= (world + 1) * 2^-24 * sum_r |P_r| (+ a subnormal floor).
    part = ep.router.weight.grad.clone()
    router_sum, magnitude = part.clone(), part.abs()
    dist.all_reduce(router_sum)
    dist.all_reduce(magnitude)
    err = (router_sum.double() - one.router.weight.grad.double()).abs()
    bound = (world + 1) * 2.0 ** -24 * magnitude.double() + 1e-30
    _all_ok(bool((err <= bound).all()), name + f": router gradient off by {err.max().item():.3g}"
            f" past the FP32 rounding of the per-rank partial sums")


@pytest.mark.parametrize("recipe", RECIPES)
def test_capacity_drops_follow_the_rule(group, recipe):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    one, ep = _layers(recipe, 0.5, group)
    x, g = _data(world)
    y1, dx1 = _run(one, x, g)
    rows = slice(rank * T, (rank + 1) * T)
    y, dx = _run(ep, x[rows], g[rows])
    cap = ep.capacity(T)
    kept, dropped = _kept_tokens(one.router, x, rows, cap)
    _check_drops(f"EP x{world} {recipe} capacity {cap}", ep, y, dx, y1[rows], dx1[rows], kept,
                 dropped)


@pytest.mark.parametrize("recipe", ["bf16", "fp8_rowwise"])
def test_capacity_with_token_counts_that_differ_by_rank_and_step(group, recipe):
    """Ranks holding different token counts, changing from step to step: every rank sends the
    same C (from the largest T of the first forward) and the drop rule holds on each rank."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    one, ep = _layers(recipe, 0.5, group)
    x, g = _data(world)
    first = None
    for step, shift in enumerate((T // 2, -T // 4, T // 8)):
        sizes = [T + shift if r % 2 == 0 else T - shift for r in range(world)]
        sizes[-1] = world * T - sum(sizes[:-1])
        first = first or max(sizes)
        lo = sum(sizes[:rank])
        rows = slice(lo, lo + sizes[rank])
        y1, dx1 = _run(one, x, g)
        y, dx = _run(ep, x[rows], g[rows])
        cap = ep.capacity(sizes[rank])
        caps = [torch.zeros(1, dtype=torch.int64, device="cuda") for _ in range(world)]
        dist.all_gather(caps, torch.tensor([cap], device="cuda"))
        want = moe.capacity_for(first, K, E, 0.5, ep.align)
        name = f"EP x{world} {recipe} step {step} tokens {sizes} capacity {cap}"
        _all_ok(all(int(c.item()) == want for c in caps), name + ": one C on every rank")
        kept, dropped = _kept_tokens(one.router, x, rows, cap)
        _check_drops(name, ep, y, dx, y1[rows], dx1[rows], kept, dropped)


@pytest.mark.parametrize("recipe", ["bf16", "fp8_rowwise"])
def test_capacity_step_in_a_cuda_graph(group, recipe):
    """Capacity mode syncs nothing: forward + backward captured in one graph on every rank,
    replayed (twice, new inputs between) equal to eager bit for bit."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    _, ep = _layers(recipe, 1.0, group)
    x, g = _data(world)
    rows = slice(rank * T, (rank + 1) * T)
    sx = x[rows].clone().requires_grad_()
    sg = g[rows].clone()
    graph, sy = capture_step(ep, sx, sg)  # the warm-up's first forward checks the configuration
    name = f"EP x{world} {recipe} capacity graph"
    for it in range(2):
        with torch.no_grad():
            sx.copy_(x[rows] * (1 + it))
        graph.replay()
        torch.cuda.synchronize()
        got = (sy.clone(), sx.grad.clone(), {n: v.clone() for n, v in _expert_grads(ep).items()})
        eager = tt.MoELayer(H, F, E, K, recipe=recipe, ep_group=group, capacity_factor=1.0,
                            router=ReferenceRouter(H, E, device=x.device), device=x.device)
        eager.load_state_dict(ep.state_dict())
        ye, dxe = _run(eager, x[rows] * (1 + it), g[rows])
        _all_ok(torch.equal(got[0], ye), name + f": replay {it} outputs")
        _all_ok(torch.equal(got[1], dxe), name + f": replay {it} input gradients")
        _all_ok(all(torch.equal(got[2][n], v) for n, v in _expert_grads(eager).items()),
                name + f": replay {it} expert weight gradients")


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r != "bf16"])
def test_quantized_gradients_against_bf16_gradients(group, recipe):
    """EP over every rank, the experts' output gradient quantized (quantize_grads=True) vs in
    BF16 (False), equal parameters and data: the outputs are equal; the input and expert weight
    gradients differ by at most one more FP8 rounding of that gradient (SQNR printed)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    _, ep_q = _layers(recipe, None, group, quantize_grads=True)
    _, ep_b = _layers(recipe, None, group, quantize_grads=False)
    x, g = _data(world)
    rows = slice(rank * T, (rank + 1) * T)
    yq, dxq = _run(ep_q, x[rows], g[rows])
    yb, dxb = _run(ep_b, x[rows], g[rows])
    name = f"EP x{world} {recipe} quantized vs BF16 gradients"
    _all_ok(torch.equal(yq, yb), name + ": outputs equal")
    gq, gb = _expert_grads(ep_q), _expert_grads(ep_b)
    db = {"dx": _sqnr_db(dxb, dxq)} | {n: _sqnr_db(gb[n], gq[n]) for n in gb}
    print(f"{name}: SQNR " + ", ".join(f"{n} {v:.1f} dB" for n, v in db.items())
          + f" (bound {GRAD_SQNR_DB} dB)")
    _all_ok(min(db.values()) >= GRAD_SQNR_DB, name + f": SQNR {db}")
