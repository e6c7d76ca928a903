"""Expert parallelism on ONE GPU (issue 17), world size 1 over NCCL. Validates, then times:

1. the whole MoELayer path (router -> dispatch -> experts -> combine, forward + backward) against
   the plain-torch reference_moe run on the CPU copy (bits of outputs and gradients);
2. routing + permute + quantize (fused, tessera) in TB/s next to the PyTorch path it replaces
   (stable argsort of the expert ids, index_select of the token rows, then the same quantization
   written in torch), same run, same data — bits compared first;
3. a CUDA graph of capacity mode (routing + fused permute/quantize + dispatch + combine over
   NCCL) replayed while the routing changes: every replay's bits equal the eager run's;
4. the whole MoELayer step (forward + backward) in tokens/s with the default experts
   (tessera.torch.GroupedMLP; skipped when the build does not have it).

    torchrun --nproc-per-node 1 tools/gpu/ep_bench.py [--tokens 4096 --hidden 7168 --experts 256
                                                       --top-k 8]
PYTHONPATH must reach the built package (<build>/python). Nothing here was run on a GPU by its
author; the integrator's run is the first.
"""
import argparse
import time

import torch
import torch.distributed as dist

import tessera.torch as tt
from tessera.torch import moe
from tessera.torch.moe_reference import ReferenceGroupedMLP, ReferenceRouter, reference_moe

from ep_common import init_nccl, size_args


def timed(fn, iters=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def torch_rowwise(x):
    amax = x.abs().amax(dim=1, keepdim=True).float()
    ok = (amax > 0) & torch.isfinite(amax)
    scale = torch.where(ok, torch.full_like(amax, 448.0) / torch.where(ok, amax, 1.0), 1.0)
    q = (x.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, (1.0 / scale).reshape(-1)


def torch_mxfp8(x):
    r, h = x.shape
    xb = x.float().reshape(r, h // 32, 32)
    amax = xb.abs().amax(dim=2, keepdim=True)
    v = amax * (1.0 / 448.0)
    bits = v.view(torch.int32)
    e = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    e = e + ((mant != 0) & (e != 0xFE) & ~((e == 0) & (mant <= 0x400000))).int()
    e = torch.where(v == 0, torch.zeros_like(e), e)
    mult = torch.where(e == 0xFE, torch.full_like(e, 0x00400000), (254 - e) << 23)
    mult = mult.view(torch.float32)
    q = (xb * mult).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(r, h)
    return q, e.reshape(r, h // 32).to(torch.uint8)


def torch_permute(x, idx, num_experts):
    """The PyTorch path: stable sort of the pairs by expert, gather the token rows (no padding)."""
    k = idx.shape[1]
    order = torch.argsort(idx.reshape(-1), stable=True)
    return x.index_select(0, order // k)


def check_layer(device, args):
    torch.manual_seed(0)
    h, f, e, k, t = 256, 128, 16, 4, 512
    for recipe in ("bf16", "fp8_rowwise", "mxfp8", "fp8_block"):
        for cf in (None, 1.0):
            experts = ReferenceGroupedMLP(e, h, f)
            router = ReferenceRouter(h, e)
            x = torch.randn(t, h).bfloat16()
            g = torch.randn(t, h).bfloat16()
            ref_x = x.clone().requires_grad_()
            layer_cpu = tt.MoELayer(h, f, e, k, recipe=recipe, experts=experts, router=router,
                                    capacity_factor=cf)
            y_ref, _ = reference_moe(ref_x, router, experts, e, k, recipe, layer_cpu.capacity(t))
            y_ref.backward(g)
            want = [y_ref.detach(), ref_x.grad, experts.fc1_weight.grad.clone()]
            experts.zero_grad()
            router.zero_grad()
            ex_gpu = ReferenceGroupedMLP(e, h, f, device=device)
            ex_gpu.load_state_dict(experts.state_dict())
            ro_gpu = ReferenceRouter(h, e, device=device)
            ro_gpu.load_state_dict(router.state_dict())
            layer = tt.MoELayer(h, f, e, k, recipe=recipe, ep_group=dist.group.WORLD,
                                experts=ex_gpu, router=ro_gpu, capacity_factor=cf)
            xg = x.to(device).requires_grad_()
            y = layer(xg)
            y.backward(g.to(device))
            got = [y.detach().cpu(), xg.grad.cpu(), ex_gpu.fc1_weight.grad.cpu()]
            same = [torch.equal(a, b) for a, b in zip(got, want)]
            diff = [(a.float() - b.float()).abs().max().item() for a, b in zip(got, want)]
            print(f"layer {recipe:12s} capacity_factor={cf}: out/dx/dW1 bit-identical to the CPU "
                  f"reference: {same} (max |diff| {diff})")


def bench_permute(device, args):
    t, h, e, k = args.tokens, args.hidden, args.experts, args.top_k
    x = torch.randn(t, h, device=device).bfloat16()
    idx = torch.stack([torch.randperm(e, device=device)[:k] for _ in range(t)])
    for mode, tq in (("rowwise", torch_rowwise), ("mxfp8", torch_mxfp8), ("none", None)):
        def ours():
            _, _, slot, row_pair, _, _ = moe.moe_routing(idx, e, 1, -1)
            return moe.moe_permute(x, row_pair, k, mode)

        def theirs():
            rows = torch_permute(x, idx, e)
            return tq(rows) if tq is not None else (rows, None)

        d1, s1 = ours()
        d2, s2 = theirs()
        same = torch.equal(d1[:t * k].view(torch.uint8), d2.view(torch.uint8))
        if s2 is not None:
            same = same and torch.equal(s1[:t * k].reshape(-1).view(torch.uint8),
                                        s2.reshape(-1).view(torch.uint8))
        t_ours, t_theirs = timed(ours), timed(theirs)
        moved = t * h * 2 + d1[:t * k].numel() * d1.element_size() + (
            s1.numel() * s1.element_size() if s1.numel() else 0)
        print(f"permute+quantize {mode:8s} T={t} H={h} E={e} k={k}: tessera "
              f"{t_ours * 1e6:8.1f} us {moved / t_ours / 1e12:6.3f} TB/s | torch sort+index_select"
              f"+quantize {t_theirs * 1e6:8.1f} us {moved / t_theirs / 1e12:6.3f} TB/s | "
              f"x{t_theirs / t_ours:5.2f} | bits equal: {same}")


def graph_capacity(device, args):
    t, h, e, k = 1024, 1024, 32, 4
    x = torch.randn(t, h, device=device).bfloat16()
    idx = torch.zeros(t, k, dtype=torch.int64, device=device)
    probs = torch.rand(t, k, device=device)
    cap = moe.capacity_for(t, k, e, 1.0, 32)

    def step():
        recv, state = moe.dispatch(x, idx, e, dist.group.WORLD, recipe="mxfp8", capacity=cap,
                                   sync_checks=False, verify_config=False)
        y = recv * 2.0  # the experts' offs live on the device; a graph-safe stand-in
        return moe.combine(y, probs, state), state.dropped

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_g, dropped_g = step()
    ok = True
    for r in range(4):
        g = torch.Generator(device=device).manual_seed(r)
        new = torch.randint(0, e, (t, k), device=device, generator=g)
        new[: 64 * (r + 1), 0] = 0  # a popular expert: drops change every round
        idx.copy_(new)
        graph.replay()
        eager, dropped = step()
        torch.cuda.synchronize()
        same = torch.equal(out_g, eager) and int(dropped_g) == int(dropped)
        ok = ok and same
        print(f"graph replay {r}: dropped {int(dropped_g)} (eager {int(dropped)}), bits equal "
              f"eager: {same}")
    print("CUDA graph of capacity mode:", "PASS" if ok else "FAIL")


def bench_layer(device, args):
    """The whole path, forward + backward, tokens/s (needs tessera.torch.GroupedMLP)."""
    if not hasattr(tt, "GroupedMLP"):
        print("whole-path timing skipped: tessera.torch.GroupedMLP is not in this build")
        return
    t, h, e, k = args.tokens, args.hidden, args.experts, args.top_k
    x = torch.randn(t, h, device=device).bfloat16()
    for recipe in ("bf16", "fp8_rowwise", "mxfp8"):
        for cf in (None, 1.25):
            try:
                layer = tt.MoELayer(h, args.ffn, e, k, recipe=recipe, ep_group=dist.group.WORLD,
                                    capacity_factor=cf, device=device)

                def step():
                    xi = x.clone().requires_grad_()
                    layer(xi).float().square().mean().backward()

                sec = timed(step, iters=5, warmup=2)
                print(f"MoELayer {recipe:12s} capacity_factor={cf}: fwd+bwd {sec * 1e3:8.2f} ms "
                      f"{t / sec:10.0f} tokens/s")
            except Exception as exc:  # a recipe the experts do not run on this device
                print(f"MoELayer {recipe} capacity_factor={cf}: skipped ({exc})")


def main():
    args = size_args(argparse.ArgumentParser()).parse_args()
    device = init_nccl()
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, world size "
          f"{dist.get_world_size()} over NCCL")
    check_layer(device, args)
    bench_permute(device, args)
    graph_capacity(device, args)
    bench_layer(device, args)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
