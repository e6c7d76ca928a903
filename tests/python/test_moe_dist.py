"""Expert parallelism over torch.distributed on the CPU (Gloo): 1, 2 and 4 processes, launched here
(torch.multiprocessing spawn, a free port on 127.0.0.1, timeouts so nothing hangs), each holding
num_experts / world experts, give the same outputs, input gradients and expert weight gradients
as one process holding every expert (tessera.torch.moe_reference.reference_moe over the
concatenated tokens) — bit for bit for bf16 and for the recipes whose dispatch is quantized per
row (fp8_rowwise, fp8_block, mxfp8), dropless and in capacity mode, where the dropped-pair counts
must be exact. The router's weight gradient is a sum over ranks (a data-parallel all-reduce, whose
order differs from one process's sum): compared to FP32 rounding. Bad input (an expert index out
of range on one rank, counts that do not sum, a world size the experts do not fit, ranks that
disagree on the configuration) raises a clear error on EVERY rank; a rank without tokens works.
Skips without torch."""
import os
import socket
import tempfile
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with Gloo is not available", allow_module_level=True)

from tessera import _tessera as C  # noqa: E402

if not hasattr(C, "_moe_routing_into"):
    pytest.skip("expert-parallel routing ops not in this build", allow_module_level=True)

H, F, E, K, T = 64, 32, 8, 2, 48          # T tokens per rank
# (recipe, capacity factor, quantize_grads): the default (the gradients to the experts quantized
# for fp8_block and mxfp8), and the two cases the default does not take.
CASES = ([(r, cf, None) for r in ("bf16", "fp8_rowwise", "fp8_block", "mxfp8")
          for cf in (None, 0.5)] + [("fp8_rowwise", None, True), ("mxfp8", 0.5, False)])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(world):
    """Global parameters and data, the same in every process."""
    from tessera.torch.moe_reference import ReferenceGroupedMLP, ReferenceRouter
    torch.manual_seed(1234)
    experts = ReferenceGroupedMLP(E, H, F)
    router = ReferenceRouter(H, E)
    x = torch.randn(world * T, H).bfloat16()
    g = torch.randn(world * T, H).bfloat16()
    return experts, router, x, g


def _local_experts(experts, rank, world):
    from tessera.torch.moe_reference import ReferenceGroupedMLP
    lo, hi = rank * E // world, (rank + 1) * E // world
    local = ReferenceGroupedMLP(hi - lo, H, F)
    with torch.no_grad():
        local.fc1_weight.copy_(experts.fc1_weight[lo:hi])
        local.fc2_weight.copy_(experts.fc2_weight[lo:hi])
    return local


def _init(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))


def _worker_cases(rank, world, port, outdir):
    import tessera.torch as tt
    _init(rank, world, port)
    try:
        results = {}
        for recipe, cf, qg in CASES:
            experts, router, x, g = _model(world)
            local = _local_experts(experts, rank, world)
            layer = tt.MoELayer(H, F, E, K, recipe=recipe, ep_group=dist.group.WORLD,
                                capacity_factor=cf, experts=local, router=router,
                                quantize_grads=qg)
            xl = x[rank * T:(rank + 1) * T].clone().requires_grad_()
            y = layer(xl)
            y.backward(g[rank * T:(rank + 1) * T])
            results[(recipe, cf, qg)] = dict(
                y=y.detach(), dx=xl.grad, fc1=local.fc1_weight.grad, fc2=local.fc2_weight.grad,
                router=router.weight.grad, dropped=int(layer.last_dropped),
                dropped_total=int(layer.last_dropped_total), capacity=layer.capacity(T))
        torch.save(results, os.path.join(outdir, f"rank{rank}.pt"))
        # Every rank done before any tears the group down (a rank destroying gloo's group while
        # its peer was still inside it aborted once in CI: "terminate called without an active
        # exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _expect_error(fn, needle):
    try:
        fn()
    except ValueError as e:
        assert needle in str(e), str(e)
        return str(e)
    raise AssertionError(f"no error; expected {needle!r}")


def _worker_edges(rank, world, port, outdir):
    import tessera.torch as tt
    from tessera.torch import moe
    from tessera.torch.moe_reference import ReferenceGroupedMLP
    _init(rank, world, port)
    group = dist.group.WORLD
    msgs = []
    try:
        x = torch.randn(6, H)
        idx = torch.randint(0, E, (6, K))
        if rank == world - 1:
            idx[2, 1] = E  # only the last rank has a bad index
        for cf in (None, 8):
            msgs.append(_expect_error(lambda: moe.dispatch(x, idx, E, group, capacity=cf),
                                      f"rank {world - 1}: an expert index is outside"))
        counts = torch.tensor([1] * E)
        if rank == 0:
            counts[3] = 2  # rank 0 claims 9 rows but gives 8
        msgs.append(_expect_error(
            lambda: moe.all_to_all_expert_rows(torch.randn(E, 4), counts, E, group),
            "rank 0: per-expert counts do not sum"))
        msgs.append(_expect_error(
            lambda: tt.MoELayer(H, F, E, K, ep_group=group, experts=ReferenceGroupedMLP(E, H, F)),
            f"holds {E} experts but num_experts {E} over an EP world size of {world}"))
        msgs.append(_expect_error(lambda: tt.MoELayer(H, F, world + 1, 1, ep_group=group),
                                  "is not a positive multiple of the EP world size"))
        top_k = 2 if rank == 0 else 3  # ranks disagree: caught by the fixed-size config check
        msgs.append(_expect_error(lambda: moe.dispatch(x, torch.zeros(6, top_k, dtype=torch.int64),
                                                       E, group),
                                  "ranks disagree on the MoE configuration"))
        # A rank without tokens (rank 0) next to one with some: outputs equal one process's.
        from tessera.torch.moe_reference import reference_moe
        experts, router, xs, _ = _model(world)
        n = 0 if rank == 0 else 5
        layer = tt.MoELayer(H, F, E, K, ep_group=group, recipe="mxfp8",
                            experts=_local_experts(experts, rank, world), router=router)
        xl = xs[:n].clone().requires_grad_()
        y = layer(xl)
        y.float().sum().backward()
        with torch.no_grad():
            want, _ = reference_moe(xs[:n], router, experts, E, K, "mxfp8")
        msgs.append(torch.equal(y.detach(), want) and xl.grad.shape == (n, H))
        torch.save(msgs, os.path.join(outdir, f"errors{rank}.pt"))
        dist.barrier()  # every rank done before the teardown (see _worker_cases)
    finally:
        dist.destroy_process_group()


def _worker_balance(rank, world, port, outdir):
    """DeepSeek-V3's router over the EP group: sigmoid scores, a selection bias, node-limited
    to one of two expert groups; after each rank's forward, one balancing step."""
    import tessera.torch as tt
    _init(rank, world, port)
    try:
        experts, router, x, _ = _model(world)
        layer = tt.MoELayer(H, F, E, K, ep_group=dist.group.WORLD,
                            experts=_local_experts(experts, rank, world), router=router,
                            score="sigmoid", selection_bias=True, expert_groups=2,
                            groups_per_token=1)
        layer(x[rank * T:(rank + 1) * T])
        load = layer.expert_load.clone()
        layer.update_selection_bias_(0.25)
        torch.save({"load": load, "bias": layer.selection_bias.clone()},
                   os.path.join(outdir, f"balance{rank}.pt"))
    finally:
        dist.destroy_process_group()


# Capacity mode with ranks holding different token counts, changing from step to step: per step,
# (tokens per rank, capacity_tokens). The first step's largest T (40) fixes C for later steps.
UNEVEN = [([40, 24], None), ([16, 56], None), ([40, 24], 32)]


def _uneven_batch(step, sizes):
    torch.manual_seed(100 + step)
    return torch.randn(sum(sizes), H).bfloat16(), torch.randn(sum(sizes), H).bfloat16()


def _worker_uneven(rank, world, port, outdir):
    import tessera.torch as tt
    _init(rank, world, port)
    try:
        results = {}
        for recipe in ("bf16", "fp8_rowwise"):
            experts, router, _, _ = _model(world)
            local = _local_experts(experts, rank, world)
            layers = {ct: tt.MoELayer(H, F, E, K, recipe=recipe, ep_group=dist.group.WORLD,
                                      capacity_factor=0.5, experts=local, router=router,
                                      capacity_tokens=ct) for ct in (None, 32)}
            for step, (sizes, ct) in enumerate(UNEVEN):
                x, g = _uneven_batch(step, sizes)
                lo = sum(sizes[:rank])
                xl = x[lo:lo + sizes[rank]].clone().requires_grad_()
                for p in (*local.parameters(), *router.parameters()):
                    p.grad = None
                y = layers[ct](xl)
                y.backward(g[lo:lo + sizes[rank]])
                results[(recipe, step)] = dict(
                    y=y.detach(), dx=xl.grad, fc1=local.fc1_weight.grad,
                    fc2=local.fc2_weight.grad, dropped=int(layers[ct].last_dropped_total),
                    capacity=layers[ct].capacity(sizes[rank]))
        torch.save(results, os.path.join(outdir, f"uneven{rank}.pt"))
        dist.barrier()  # every rank done before the teardown (see _worker_cases)
    finally:
        dist.destroy_process_group()


def _spawn(fn, world, outdir):
    import torch.multiprocessing as mp
    ctx = mp.start_processes(fn, args=(world, _free_port(), outdir), nprocs=world, join=False,
                             start_method="spawn")
    for _ in range(240):  # <= 120 s
        if ctx.join(timeout=0.5):
            return
    for p in ctx.processes:
        p.kill()
    raise AssertionError("the distributed workers did not finish in time (a hang)")


@pytest.mark.parametrize("world", [1, 2, 4])
def test_expert_parallel_equals_one_process(world):
    from tessera.torch.moe_reference import reference_moe
    with tempfile.TemporaryDirectory() as outdir:
        _spawn(_worker_cases, world, outdir)
        ranks = [torch.load(os.path.join(outdir, f"rank{r}.pt")) for r in range(world)]
    torch.set_num_threads(1)
    for recipe, cf, qg in CASES:
        experts, router, x, g = _model(world)
        cap = ranks[0][(recipe, cf, qg)]["capacity"]
        xr = x.clone().requires_grad_()
        y, dropped = reference_moe(xr, router, experts, E, K, recipe, cap, [T] * world,
                                   quantize_grads=qg)
        y.backward(g)
        name = f"world {world} {recipe} capacity_factor {cf} quantize_grads {qg}"
        got = [r[(recipe, cf, qg)] for r in ranks]
        assert torch.equal(torch.cat([r["y"] for r in got]), y.detach()), name + ": outputs"
        assert torch.equal(torch.cat([r["dx"] for r in got]), xr.grad), name + ": dx"
        assert torch.equal(torch.cat([r["fc1"] for r in got]), experts.fc1_weight.grad), name
        assert torch.equal(torch.cat([r["fc2"] for r in got]), experts.fc2_weight.grad), name
        router_sum = sum(r["router"].double() for r in got)
        torch.testing.assert_close(router_sum.float(), router.weight.grad, rtol=1e-5, atol=1e-6)
        assert sum(r["dropped"] for r in got) == dropped, name + ": dropped pairs"
        assert all(r["dropped_total"] == dropped for r in got), name + ": dropped_total"
        if cf is not None and recipe == "bf16":
            assert dropped > 0, name + ": capacity 0.5 must drop pairs"


def test_capacity_mode_with_token_counts_that_differ_by_rank_and_step():
    """Every rank sends the same C even when the ranks' T differ and change from step to step
    (C from the largest T of the first forward, or from capacity_tokens): the outputs and
    gradients equal one process's over the concatenated tokens with that C."""
    from tessera.torch.moe_dist import capacity_for, recipe_dispatch_mode
    from tessera.torch.moe_reference import reference_moe
    world = 2
    with tempfile.TemporaryDirectory() as outdir:
        _spawn(_worker_uneven, world, outdir)
        ranks = [torch.load(os.path.join(outdir, f"uneven{r}.pt")) for r in range(world)]
    torch.set_num_threads(1)
    for recipe in ("bf16", "fp8_rowwise"):
        for step, (sizes, ct) in enumerate(UNEVEN):
            got = [r[(recipe, step)] for r in ranks]
            cap = capacity_for(ct or 40, K, E, 0.5, recipe_dispatch_mode(recipe)[1])
            assert [r["capacity"] for r in got] == [cap, cap], (recipe, step)
            experts, router, _, _ = _model(world)
            x, g = _uneven_batch(step, sizes)
            xr = x.clone().requires_grad_()
            y, dropped = reference_moe(xr, router, experts, E, K, recipe, cap, sizes)
            y.backward(g)
            name = f"{recipe} step {step} tokens {sizes}"
            assert torch.equal(torch.cat([r["y"] for r in got]), y.detach()), name
            assert torch.equal(torch.cat([r["dx"] for r in got]), xr.grad), name
            assert torch.equal(torch.cat([r["fc1"] for r in got]), experts.fc1_weight.grad), name
            assert torch.equal(torch.cat([r["fc2"] for r in got]), experts.fc2_weight.grad), name
            assert all(r["dropped"] == dropped for r in got), name
            assert dropped > 0 or recipe != "bf16", name + ": capacity 0.5 must drop pairs"


def test_balancing_step_sums_the_load_over_the_group():
    """Every rank's selection bias moves by the sign of the GROUP's load error (the replicas of
    the router stay equal), and each rank's load is its own tokens' choices."""
    from tessera.torch import moe
    world = 2
    with tempfile.TemporaryDirectory() as outdir:
        _spawn(_worker_balance, world, outdir)
        ranks = [torch.load(os.path.join(outdir, f"balance{r}.pt")) for r in range(world)]
    torch.set_num_threads(1)
    _, router, x, _ = _model(world)
    total = torch.zeros(E, dtype=torch.int64)
    for r, got in enumerate(ranks):
        _, idx = moe.route(router(x[r * T:(r + 1) * T]), K, score="sigmoid",
                           selection_bias=torch.zeros(E), expert_groups=2, groups_per_token=1)
        assert torch.equal(got["load"], torch.bincount(idx.reshape(-1), minlength=E)), r
        total += got["load"]
    mean = total.sum().item() / E
    want = torch.tensor([0.25 if n < mean else (-0.25 if n > mean else 0.0)
                         for n in total.tolist()])
    assert not torch.equal(want, torch.zeros(E)), "the test's routing is perfectly balanced"
    for got in ranks:
        assert torch.equal(got["bias"], want)


def test_bad_input_raises_on_every_rank_and_empty_ranks_work():
    world = 2
    with tempfile.TemporaryDirectory() as outdir:
        _spawn(_worker_edges, world, outdir)
        msgs = [torch.load(os.path.join(outdir, f"errors{r}.pt")) for r in range(world)]
    assert len(msgs[0]) == len(msgs[1]) == 7
    assert msgs[0][:3] == msgs[1][:3]  # the same message on every rank
    assert msgs[0][6] is True and msgs[1][6] is True, "a rank without tokens"


@pytest.mark.parametrize("world,local,align", [(1, 1, 1), (2, 3, 1), (4, 2, 1), (3, 5, 1),
                                               (2, 3, 4), (3, 5, 16)])
def test_regroup_index_matches_the_chunk_by_chunk_regroup(world, local, align):
    """The dropless regrouping (one gather each way, its index built on the device) against the
    chunk-by-chunk oracle: source-major chunks (s, e) of random sizes, empty ones included,
    become expert-major chunks (e, s) and back, every row exactly once; with align > 1 each
    expert's rows are followed by zero rows up to a multiple of align (gathered from the zero
    row _send_forward leaves after the received rows)."""
    from tessera.torch import moe_dist as md
    g = torch.Generator().manual_seed(world * 10 + local + align)
    sizes = torch.randint(0, 4, (world, local), generator=g)
    sizes[0, 0] = 0  # an empty chunk first
    chunks = sizes.tolist()
    total = int(sizes.sum())
    rows = torch.arange(1, total * 3 + 1, dtype=torch.float32).reshape(total, 3)
    state = md.DispatchState(group=None, world=world, num_experts=world * local,
                             local_experts=local, num_tokens=0, hidden=3, capacity=-1,
                             slot_map=torch.zeros(0), row_pair=torch.zeros(0), rows=0,
                             send_rows=None, recv_chunks=chunks,
                             offs=torch.zeros(local, dtype=torch.int32),
                             dropped=torch.zeros(1), dropped_total=torch.zeros(1),
                             error=torch.zeros(1), extra=dict(recv_counts=sizes), align=align)
    pieces, at = {}, 0
    for s in range(world):
        for e in range(local):
            pieces[s, e] = rows[at:at + chunks[s][e]]
            at += chunks[s][e]
    groups = []
    for e in range(local):
        group = torch.cat([pieces[s, e] for s in range(world)])
        pad = -group.shape[0] % align
        groups += [group, torch.zeros(pad, 3)]
    expert_major = torch.cat(groups)
    assert md._padded_rows(state) == expert_major.shape[0]
    received = torch.cat([rows, torch.zeros(1, 3)]) if expert_major.shape[0] > total else rows
    got = md._to_expert_major(received, state)
    assert torch.equal(got, expert_major)
    assert torch.equal(md._to_source_major(got, state), rows)
    # The row index the quantized dispatch's dequantize gathers with: the same order.
    assert torch.equal(received[md._regroup_index(state)[0]], expert_major)


@pytest.mark.parametrize("world,local,cap", [(2, 3, 2), (4, 2, 1), (3, 1, 4)])
def test_capacity_regroup_index_matches_the_chunk_by_chunk_regroup(world, local, cap):
    """Capacity mode: every (source, expert) chunk holds `cap` rows; the regrouping (and the row
    index the dequantize gathers with) against the chunk-by-chunk oracle, and back."""
    from tessera.torch import moe_dist as md
    total = world * local * cap
    rows = torch.arange(total * 2, dtype=torch.float32).reshape(total, 2)
    state = md.DispatchState(group=None, world=world, num_experts=world * local,
                             local_experts=local, num_tokens=0, hidden=2, capacity=cap,
                             slot_map=torch.zeros(0), row_pair=torch.zeros(0), rows=total,
                             send_rows=None, recv_chunks=None,
                             offs=torch.zeros(local, dtype=torch.int32),
                             dropped=torch.zeros(1), dropped_total=torch.zeros(1),
                             error=torch.zeros(1))
    expert_major = torch.cat([rows[(s * local + e) * cap:(s * local + e + 1) * cap]
                              for e in range(local) for s in range(world)])
    assert torch.equal(md._to_expert_major(rows, state), expert_major)
    assert torch.equal(rows[md._regroup_index(state)[0]], expert_major)
    assert torch.equal(md._to_source_major(expert_major, state), rows)


def _chunk_oracle(counts, align=1):
    """(source_of, expert_of) of a (W, L) count table, chunk by chunk in Python; each expert's
    rows padded to a multiple of align by rows whose source is the total (the zero row)."""
    w, l = len(counts), len(counts[0])
    starts, at = {}, 0
    for s in range(w):
        for e in range(l):
            starts[s, e] = at
            at += counts[s][e]
    source_of = []
    for e in range(l):
        group = [starts[s, e] + i for s in range(w) for i in range(counts[s][e])]
        source_of += group + [at] * (-len(group) % align)
    expert_of = [0] * at
    for r, q in enumerate(source_of):
        if q < at:
            expert_of[q] = r
    return source_of, expert_of


_REGROUP_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and C.cuda_compiled() else [])


@pytest.mark.parametrize("device", _REGROUP_DEVICES)
@pytest.mark.parametrize("align", [1, 16])
@pytest.mark.parametrize("world,local,dtype", [(1, 1, torch.int64), (2, 3, torch.int32),
                                               (4, 64, torch.int64), (8, 32, torch.int32),
                                               (3, 700, torch.int64)])
def test_regroup_index_op_matches_the_chunk_oracle(device, world, local, dtype, align):
    """moe_regroup_index against the chunk-by-chunk oracle, counts given as a column slice of a
    header (rows of stride L + 2, as the dispatch passes them), empty chunks included, each
    expert's rows padded to align; the CUDA kernel (shared-memory scans, 8 rows a thread) past
    one block of rows."""
    from tessera.torch import moe_ops
    g = torch.Generator().manual_seed(world * 1000 + local)
    sizes = torch.randint(0, 40, (world, local), generator=g)
    sizes[0, 0] = 0
    sizes[-1, -1] = 0
    header = torch.cat([sizes, torch.full((world, 2), 7)], dim=1).to(dtype).to(device)
    counts = header[:, :local]
    assert not counts.is_contiguous() or world == 1
    rows = int(sizes.sum())
    want_src, want_exp = _chunk_oracle(sizes.tolist(), align)
    source_of, expert_of = moe_ops.moe_regroup_index(counts, rows, align, len(want_src))
    assert source_of.dtype == expert_of.dtype == torch.int64 and source_of.device == counts.device
    assert source_of.cpu().tolist() == want_src and expert_of.cpu().tolist() == want_exp


def test_regroup_index_op_errors_and_fake():
    from tessera.torch import moe_ops
    counts = torch.tensor([[2, 1], [0, 3]])
    with pytest.raises(C.ShapeError, match="sum to 6, not to the 8 rows"):
        moe_ops.moe_regroup_index(counts, 8)
    with pytest.raises(C.ShapeError, match="sum past the 5 rows"):
        moe_ops.moe_regroup_index(counts, 5)
    with pytest.raises(C.InvalidArgumentError, match=r"counts\[1, 0\] = -1 is negative"):
        moe_ops.moe_regroup_index(torch.tensor([[2, 1], [-1, 4]]), 6)
    with pytest.raises(C.ShapeError, match="counts must be \\(sources, local experts\\)"):
        moe_ops.moe_regroup_index(torch.tensor([2, 1, 3]), 6)
    with pytest.raises(C.DTypeError, match="counts"):
        moe_ops.moe_regroup_index(counts.float(), 6)
    with pytest.raises(C.ShapeError, match="padded to multiples of 4 sum to 8, not to the 10"):
        moe_ops.moe_regroup_index(counts, 6, 4, 10)
    with pytest.raises(C.InvalidArgumentError, match="padded_rows 7 must equal rows 6 when align"):
        moe_ops.moe_regroup_index(counts, 6, 1, 7)
    with pytest.raises(C.InvalidArgumentError, match="align 0 must be >= 1"):
        moe_ops.moe_regroup_index(counts, 6, 0, 6)
    src, exp = moe_ops.moe_regroup_index(torch.zeros(2, 3, dtype=torch.int64), 0)
    assert src.shape == exp.shape == (0,)
    torch.library.opcheck(torch.ops.tessera.moe_regroup_index.default, (counts, 6))
    torch.library.opcheck(torch.ops.tessera.moe_regroup_index.default, (counts, 6, 4, 8))


@pytest.mark.skipif(not torch.cuda.is_available() or not C.cuda_compiled(),
                    reason="needs a CUDA device and a CUDA build")
def test_regroup_index_cuda_keeps_every_index_in_range_for_inconsistent_counts():
    """CUDA cannot check Σ counts = rows without a sync: rows the counts do not place, and
    mappings past the rows, map to themselves, so a gather through the index stays in range."""
    from tessera.torch import moe_ops
    for counts, rows in (([[2, 1], [0, 3]], 9), ([[5, 5], [5, 5]], 7), ([[3, -4], [2, 1]], 6)):
        src, exp = moe_ops.moe_regroup_index(torch.tensor(counts, device="cuda"), rows)
        for t in (src, exp):
            assert int(t.min()) >= 0 and int(t.max()) < rows
    src, _ = moe_ops.moe_regroup_index(torch.tensor([[2, 1], [0, 3]], device="cuda"), 9)
    assert src.tolist()[6:] == [6, 7, 8]  # past the placed rows: themselves
    # Padded (align 4): source_of in [0, rows] (rows: the zero row), expert_of in [0, padded).
    for counts, rows, padded in (([[2, 1], [0, 3]], 9, 12), ([[5, 5], [5, 5]], 7, 8),
                                 ([[3, -4], [2, 1]], 6, 20)):
        src, exp = moe_ops.moe_regroup_index(torch.tensor(counts, device="cuda"), rows, 4, padded)
        assert src.shape == (padded,) and exp.shape == (rows,)
        assert int(src.min()) >= 0 and int(src.max()) <= rows
        assert int(exp.min()) >= 0 and int(exp.max()) < padded
