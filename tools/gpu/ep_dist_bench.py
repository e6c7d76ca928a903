"""Expert parallelism over N GPUs (issue 18; launched by tools/gpu/ep_run.sh through torchrun).

Correctness (EP over N GPUs against the same MoELayer on one GPU) is the test
tests/python/test_moe_ep_gpu.py, which tools/gpu/ep_run.sh runs under torchrun first.
1. dispatch / combine GB/s per rank at DSv3-like sizes (4096 tokens/rank, hidden 7168, top-8,
   256 experts): tessera dispatch with an FP8 payload (mxfp8 / fp8_rowwise) and BF16 combine,
   next to a plain all_to_all_single of the same BF16 rows (torch sort + index_select + a2a);
   GB/s = bytes this rank sends / time;
2. a MoE training step (forward + backward) in tokens/s: MoELayer (bf16 and fp8 recipes, the
   experts tessera.torch.GroupedMLP when the build has it) next to a PyTorch-only BF16 MoE
   (sort, index_select, all_to_all_single, torch._grouped_mm experts, index_add combine). Every
   step starts with the parameters' .grad set to None (one micro-batch per optimizer step: no
   accumulation into .grad). FP8 recipes run twice: weights re-quantized by every forward, and
   "cached" (tessera.torch.quantize_weights_ once, as after an optimizer step: the forwards of
   that step's micro-batches reuse the copies). fp8_rowwise's experts read the dispatched codes
   (MoELayer's default); its "dequantized rows" rows turn that off, fp8_block's "codes" row on. The experts' output gradient travels as
   MoELayer's default has it (quantized for fp8_block and mxfp8); one fp8_rowwise row sends it
   quantized too ("quantized grads"), one fp8_block row in BF16 ("bf16 grads"). Capacity-mode rows
   (capacity factor 1.0: pairs past it dropped, no host sync) also run captured in one CUDA
   graph; the baseline stays dropless (its all-to-all needs host split sizes).
Timings are rank 0's: the median over 5 rounds of each round's mean (10 dispatches or combines,
3 steps a round, after warm-up; every round starts on all ranks together), the rounds' range in
brackets.
--profile: rank 0 also prints each step's GPU time by kernel (torch.profiler, one step);
--trace DIR writes rank 0's Chrome trace of that step; --only LABEL,... runs those steps.
"""
import argparse
import gc
import statistics
import time
from collections import defaultdict
from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.nn.functional as F

import tessera.torch as tt
from tessera.torch import moe

from ep_common import init_nccl, size_args


class Timing(NamedTuple):
    """Seconds per call: the median over rounds of each round's mean, and the rounds' range."""
    median: float
    low: float
    high: float

    def us(self) -> str:
        return f"{self.median * 1e6:9.1f} us ({self.low * 1e6:.0f}-{self.high * 1e6:.0f})"


def timed(fn, iters=10, warmup=3, rounds=5) -> Timing:
    """`rounds` rounds of `iters` back-to-back calls, each round between a synchronize and a
    barrier (every rank starts it together); per round the mean time per call."""
    for _ in range(warmup):
        fn()
    per_round = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        per_round.append((time.perf_counter() - t0) / iters)
    return Timing(statistics.median(per_round), min(per_round), max(per_round))


def say(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


def torch_a2a_rows(x, idx, e, world):
    """The plain path: sort pairs by expert, gather rows, all_to_all_single with host splits."""
    k = idx.shape[1]
    order = torch.argsort(idx.reshape(-1), stable=True)
    rows = x.index_select(0, order // k)
    counts = torch.bincount(idx.reshape(-1), minlength=e).reshape(world, -1).sum(1)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts)
    send, recv = counts.tolist(), recv_counts.tolist()
    out = rows.new_empty((sum(recv), rows.shape[1]))
    dist.all_to_all_single(out, rows, recv, send)
    return out, rows.numel() * rows.element_size()


def bandwidth(device, world, args):
    t, h, e, k = args.tokens, args.hidden, args.experts, args.top_k
    torch.manual_seed(dist.get_rank())
    x = torch.randn(t, h, device=device).bfloat16()
    idx = torch.stack([torch.randperm(e, device=device)[:k] for _ in range(t)])
    probs = torch.rand(t, k, device=device)
    _, sent_bf16 = torch_a2a_rows(x, idx, e, world)
    tp = timed(lambda: torch_a2a_rows(x, idx, e, world))
    t_plain = tp.median
    say(f"plain all_to_all_single BF16 rows: {tp.us()} "
        f"{sent_bf16 / t_plain / 1e9:7.1f} GB/s per rank")
    # codes: the received rows left as codes for the experts (deliver_codes, MoELayer's
    # codes_to_experts), not dequantized
    for recipe, codes in (("fp8_rowwise", False), ("fp8_rowwise", True), ("mxfp8", False),
                          ("bf16", False)):
        for cf in (None, 1.0):
            cap = None if cf is None else moe.capacity_for(t, k, e, cf, 32)
            state_box = {}

            def disp():
                recv, state = moe.dispatch(x, idx, e, dist.group.WORLD, recipe=recipe,
                                           capacity=cap, sync_checks=False, verify_config=False,
                                           deliver_codes=codes)
                state_box["s"], state_box["r"] = state, recv
                return recv

            moe.check_config(dist.group.WORLD, recipe=len(recipe))
            disp()
            td = timed(disp)
            # combine sends expert outputs: a real (R, H) tensor where recv is the codes' stand-in
            y_rows = state_box["r"].contiguous() if codes else state_box["r"]

            def comb():
                return moe.combine(y_rows, probs, state_box["s"])

            tc = timed(comb)
            t_d, t_c = td.median, tc.median
            rows = state_box["s"].live_rows
            payload = rows * h * (2 if recipe == "bf16" else 1)
            name = recipe + (" codes" if codes else "")
            say(f"tessera {name:18s} capacity_factor={cf}: dispatch {td.us()} "
                f"{payload / t_d / 1e9:7.1f} GB/s | combine (BF16) {tc.us()} "
                f"{rows * h * 2 / t_c / 1e9:7.1f} GB/s per rank")
            if args.profile:
                kernel_profile(f"dispatch {name} capacity_factor={cf}", disp,
                               trace_dir=args.trace)
                kernel_profile(f"combine {name} capacity_factor={cf}", comb,
                               trace_dir=args.trace)


class TorchMoE(torch.nn.Module):
    """PyTorch-only BF16 expert-parallel MoE (the baseline a user would write)."""

    def __init__(self, h, f, e, k, world, device):
        super().__init__()
        self.e, self.k, self.world, self.local = e, k, world, e // world
        self.router = torch.nn.Linear(h, e, bias=False, device=device)
        self.w1 = torch.nn.Parameter(torch.randn(self.local, h, 2 * f, device=device,
                                                 dtype=torch.bfloat16) * h ** -0.5)
        self.w2 = torch.nn.Parameter(torch.randn(self.local, f, h, device=device,
                                                 dtype=torch.bfloat16) * f ** -0.5)

    def forward(self, x):
        t, h = x.shape
        p, idx = torch.softmax(self.router(x.float()), -1).topk(self.k, -1)
        order = torch.argsort(idx.reshape(-1), stable=True)
        rows = x.index_select(0, order // self.k)
        counts = torch.bincount(idx.reshape(-1), minlength=self.e)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)
        host = torch.cat([counts, recv_counts]).tolist()
        send = [sum(host[d * self.local:(d + 1) * self.local]) for d in range(self.world)]
        rc = host[self.e:]
        recv = [sum(rc[s * self.local:(s + 1) * self.local]) for s in range(self.world)]
        got = _A2A.apply(rows, recv, send)
        chunks = torch.split(got, rc)
        xe = torch.cat([chunks[s * self.local + j] for j in range(self.local)
                        for s in range(self.world)])
        sizes = [sum(rc[s * self.local + j] for s in range(self.world)) for j in range(self.local)]
        offs = torch.tensor(sizes, device=x.device).cumsum(0).to(torch.int32)
        hmid = torch._grouped_mm(xe, self.w1, offs=offs)
        a = F.silu(hmid[:, :hmid.shape[1] // 2]) * hmid[:, hmid.shape[1] // 2:]
        ye = torch._grouped_mm(a, self.w2, offs=offs)
        sizes_sm = [rc[s * self.local + j] for j in range(self.local) for s in range(self.world)]
        ch = torch.split(ye, sizes_sm)
        back = torch.cat([ch[j * self.world + s] for s in range(self.world)
                          for j in range(self.local)])
        y_rows = _A2A.apply(back, send, recv)
        w = p.reshape(-1)[order].unsqueeze(1).to(y_rows.dtype)
        return torch.zeros_like(x).index_add(0, order // self.k, y_rows * w)


class _A2A(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_splits, in_splits):
        ctx.splits = (out_splits, in_splits)
        out = x.new_empty((sum(out_splits), x.shape[1]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits)
        return out

    @staticmethod
    def backward(ctx, g):
        out_splits, in_splits = ctx.splits
        return _A2A.apply(g.contiguous(), in_splits, out_splits), None, None


def kernel_profile(label, fn, top=14, trace_dir=None):
    """Rank 0 prints one call of fn's GPU time by kernel name (summed), the largest first, and
    the host's waits on the device (CUDA runtime calls that synchronize or copy); trace_dir: also
    writes rank 0's Chrome trace of that call there."""
    torch.cuda.synchronize()
    dist.barrier()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        torch.cuda.synchronize()
    if trace_dir and dist.get_rank() == 0:
        name = "".join(c if c.isalnum() else "_" for c in label)
        prof.export_chrome_trace(f"{trace_dir}/{name}.rank{dist.get_rank()}.json")
    by = defaultdict(lambda: [0.0, 0])
    waits = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        us = ev.time_range.end - ev.time_range.start
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            if not ev.name.startswith("nccl:"):  # the collective's record beside its kernel
                by[ev.name[:90]][0] += us
                by[ev.name[:90]][1] += 1
        elif "Synchronize" in ev.name or "Memcpy" in ev.name:
            waits[ev.name][0] += us
            waits[ev.name][1] += 1
    say(f"  profile {label}: GPU {sum(v[0] for v in by.values()) / 1e3:8.2f} ms in "
        f"{sum(v[1] for v in by.values())} kernels; host waits: " +
        ", ".join(f"{n} {c}x {t:.0f} us" for n, (t, c) in sorted(waits.items())))
    for name, (us, n) in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]:
        say(f"    {us:9.1f} us {n:4d}x  {name}")


def step_of(module, x):
    """One training step of `module` on a fresh leaf copy of x, its parameters' .grad reset."""
    def step():
        for p in module.parameters():
            p.grad = None
        xi = x.clone().requires_grad_()
        module(xi).float().square().mean().backward()
    return step


def graphed_step_of(module, x):
    """step_of(module, x) captured in one CUDA graph (capacity mode syncs nothing); returns the
    replay. The captured backward assigns fresh .grad tensors, as step_of's does."""
    xi = x.clone().requires_grad_()

    def step():
        for p in module.parameters():
            p.grad = None
        xi.grad = None
        module(xi).float().square().mean().backward()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture (the first forward checks the group)
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    for p in module.parameters():
        p.grad = None
    xi.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        module(xi).float().square().mean().backward()
    return graph.replay


def training_step(device, world, args):
    t, h, e, k, f = args.tokens, args.hidden, args.experts, args.top_k, args.ffn
    x = torch.randn(t, h, device=device).bfloat16()
    base = TorchMoE(h, f, e, k, world, device)
    step_torch = step_of(base, x)
    tb = timed(step_torch, iters=3)
    t_base = tb.median
    say(f"PyTorch-only BF16 MoE step: {t / t_base:10.0f} tokens/s per rank "
        f"(rounds {t / tb.high:.0f}-{t / tb.low:.0f})")
    if args.profile:
        kernel_profile("PyTorch-only BF16", step_torch, trace_dir=args.trace)
    # (recipe, weights cached, capacity factor (None: dropless, as the baseline), CUDA graph,
    #  quantize_grads: None, MoELayer's default; True, the gradients to the experts quantized;
    #  codes_to_experts: None, MoELayer's default (on for fp8_rowwise); False, the dispatched
    #  rows dequantized first; True, the codes for the other FP8 recipes too;
    #  grad codes: the quantized output gradient read by fc2's backward as codes)
    runs = [("bf16", False, None, False, None, None, False),
            ("fp8_rowwise", False, None, False, None, None, False),
            ("fp8_rowwise", True, None, False, None, None, False),
            ("fp8_rowwise", True, None, False, None, False, False),
            ("fp8_rowwise", True, None, False, True, None, False),
            ("fp8_rowwise", True, None, False, True, None, True),
            ("fp8_block", False, None, False, None, None, False),
            ("fp8_block", True, None, False, None, None, False),
            ("fp8_block", True, None, False, None, True, False),
            ("fp8_block", True, None, False, None, None, True),
            ("fp8_block", True, None, False, False, None, False),
            ("mxfp8", False, None, False, None, None, False),
            ("mxfp8", True, None, False, None, None, False),
            ("bf16", False, 1.0, False, None, None, False),
            ("bf16", False, 1.0, True, None, None, False),
            ("fp8_rowwise", True, 1.0, False, None, None, False),
            ("fp8_rowwise", True, 1.0, False, None, False, False),
            ("fp8_rowwise", True, 1.0, True, None, None, False)]
    for recipe, cached, cf, graph, qg, codes, grad_codes in runs:
        label = (f"{recipe}{' cached W' if cached else ''}"
                 f"{f' capacity {cf}' if cf is not None else ''}{' graph' if graph else ''}"
                 f"{' quantized grads' if qg else ' bf16 grads' if qg is False else ''}"
                 f"{' codes' if codes else ' dequantized rows' if codes is False else ''}"
                 f"{' grad codes' if grad_codes else ''}")
        if args.only and label not in args.only.split(","):
            continue
        layer = step = None
        try:
            layer = tt.MoELayer(h, f, e, k, recipe=recipe, ep_group=dist.group.WORLD,
                                capacity_factor=cf, quantize_grads=qg, codes_to_experts=codes,
                                grad_codes_to_experts=grad_codes, device=device)
            if cached:
                tt.quantize_weights_(layer)
            step = graphed_step_of(layer, x) if graph else step_of(layer, x)
            to = timed(step, iters=3)
            t_ours = to.median
            say(f"tessera MoELayer {label:37s} step ({type(layer.experts).__name__}): "
                f"{t / t_ours:10.0f} tokens/s per rank, x{t_base / t_ours:5.2f} vs PyTorch "
                f"(rounds x{t_base / to.high:.2f}-{t_base / to.low:.2f})")
            if args.profile:
                kernel_profile(label, step, trace_dir=args.trace)
        except Exception as exc:  # a recipe the experts cannot run on this device, or memory
            say(f"tessera MoELayer {label}: skipped ({exc})")
        finally:
            # The row's layer, gradients and weight copies go before the next row builds its
            # own, also after a failure (an out-of-memory row must not leave its tensors to
            # every later row).
            layer = step = None
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    ta = timed(step_torch, iters=3)
    say(f"PyTorch-only BF16 MoE step (again, drift): {t / ta.median:10.0f} tokens/s per rank "
        f"(rounds {t / ta.high:.0f}-{t / ta.low:.0f})")


def main():
    p = size_args(argparse.ArgumentParser())
    p.add_argument("--skip-step", action="store_true")
    p.add_argument("--skip-bandwidth", action="store_true")
    p.add_argument("--profile", action="store_true",
                   help="each dispatch's, combine's and step's GPU time by kernel")
    p.add_argument("--trace", default=None, help="with --profile: a folder for Chrome traces")
    p.add_argument("--only", default="", help="comma-separated step labels to run (default all)")
    args = p.parse_args()
    device = init_nccl()
    world = dist.get_world_size()
    say(f"{world} x {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    if not args.skip_bandwidth:
        bandwidth(device, world, args)
    if not args.skip_step:
        training_step(device, world, args)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
