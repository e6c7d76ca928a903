"""The MoE row ops of one device at DeepSeek-V3-like sizes, through tessera.torch.moe (the ops
MoELayer's dispatch and combine call), next to the PyTorch code a user would write instead, in
the same run on the same inputs:

    python -m tessera.bench moe [--tokens 4096] [--hidden 7168] [--experts 256] [--top-k 8]
                                [--reps 30] [--dtype bf16]

Ops (tessera | torch baseline):
    routing                moe_routing (metadata)            | stable argsort + bincount
    permute <mode>         moe_permute with the routing's slot map, as the dispatch calls it,
                           mode none / rowwise / block1x128 / mxfp8 (the dispatch payload of
                           recipes bf16 / fp8_rowwise / fp8_block / mxfp8, padded to their token
                           alignment)                        | index_select (+ the quantization in
                                                              torch ops)
    dequantize <mode>      dequantize_rows (receiver side)   | the torch passes it replaced
    unpermute              moe_unpermute (weighted combine)  | index_select, FP32 weighted sum
    unpermute backward     moe_unpermute_backward (dy, dprobs) | index_select, multiply, row dots
    permute backward       moe_permute_backward (gather-add) | index_add_ in FP32

Validate, then time: every tessera op first runs on a few hundred tokens of the same sizes on
the CUDA device and on the CPU (tessera's CPU loops, the reference) and must give the same bits
(NaN-free inputs); then each op and its baseline are timed with CUDA events in interleaved
rounds (bench.timing.cuda_interleaved_ms: median of --reps after warm-up). Inputs exceed L2.
The events time each call's GPU work alone: the call is enqueued behind a spin kernel, so its
host cost (argument checks, allocation, launches: tens of µs, as large as some ops' kernels)
is outside them; a call that waits for the device (torch's bincount) cannot be timed so and is
timed with its host enqueue, marked *. --eager times every call as an eager program sees it:
started on an idle GPU, its host enqueue included.

Columns: ms (median); TB/s = (bytes read + bytes written) / time, bytes counted as the op moves
them: a row gathered k times (x in permute, dout in unpermute backward) counts k times; "TB/s
distinct" counts each distinct input byte once (what an op reading every input once would
move). The torch baseline's bytes are the tessera op's (the same work), so its TB/s compares
time alone.
"""
from __future__ import annotations

import argparse
import sys

import torch

from .timing import cuda_interleaved_ms as timed_interleaved

DISPATCH_RECIPES = ("bf16", "fp8_rowwise", "fp8_block", "mxfp8")  # payload none / 3 FP8 modes
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


# ---- torch baselines -------------------------------------------------------------------------
def torch_quantize(rows: torch.Tensor, mode: str):
    """The FP8 payload in plain torch ops (amax, scale, cast; E8M0 by exponent rounding up)."""
    r, h = rows.shape
    width = {"rowwise": h, "block1x128": 128, "mxfp8": 32}[mode]
    pad = -h % width
    xb = torch.nn.functional.pad(rows.float(), (0, pad)).reshape(r, -1, width)
    amax = xb.abs().amax(dim=2, keepdim=True)
    if mode == "mxfp8":
        e = torch.ceil(torch.log2(torch.clamp(amax / 448.0, min=2.0 ** -127))).clamp(-127, 127)
        q = (xb * torch.exp2(-e)).clamp(-448, 448).to(torch.float8_e4m3fn)
        return q.reshape(r, -1)[:, :h], (e + 127).to(torch.uint8).reshape(r, -1)
    scale = torch.where(amax > 0, 448.0 / amax, torch.ones_like(amax))
    q = (xb * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.reshape(r, -1)[:, :h], (1.0 / scale).reshape(r, -1)


def torch_dequantize(data: torch.Tensor, sinv: torch.Tensor, mode: str, dtype):
    """dequantize_rows as it was written in torch ops: decode, E8M0 bits, repeat, multiply,
    cast."""
    r, h = data.shape
    q = data.view(torch.float8_e4m3fn).float()
    s = sinv[:r]
    s = s.reshape(r, 1) if s.dim() == 1 else s
    if mode == "mxfp8":
        e = s.view(torch.uint8).to(torch.int32)
        bits = torch.where(e == 0, torch.full_like(e, 0x00400000), e << 23)
        s = torch.where(e == 255, torch.full_like(e, 0x7FC00000), bits).view(torch.float32)
    if s.shape[1] > 1:
        s = s.repeat_interleave({"block1x128": 128, "mxfp8": 32}[mode], dim=1)[:, :h]
    return (q * s).to(dtype)


# ---- the problem ------------------------------------------------------------------------------
class Problem:
    """Routing of T tokens over E experts (top-k, distinct experts per token) and the tensors of
    every op, on `device`."""

    def __init__(self, moe, tokens, hidden, experts, top_k, dtype, device, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.t, self.h, self.e, self.k = tokens, hidden, experts, top_k
        self.idx = torch.rand(tokens, experts, generator=g).argsort(dim=1)[:, :top_k].to(device)
        self.x = torch.randn(tokens, hidden, generator=g).to(dtype).to(device)
        self.probs = torch.rand(tokens, top_k, generator=g).to(device)
        self.dout = torch.randn(tokens, hidden, generator=g).to(dtype).to(device)
        self.routing = {}
        for recipe in DISPATCH_RECIPES:
            mode, align = moe.recipe_dispatch_mode(recipe)
            self.routing[mode] = (align, moe.moe_routing(self.idx, experts, align, -1))
        _, r = self.routing["none"]
        self.slot, self.row_pair = r[2], r[3]
        self.y = moe.moe_permute(self.x, self.row_pair, top_k, "none")[0]
        self.live = self.row_pair >= 0
        self.row_token = (self.row_pair.clamp(min=0) // top_k)  # (rows,) token of each row


def tessera_ops(moe, p: Problem) -> dict:
    """name -> (callable, bytes as moved, distinct bytes)."""
    t, h, k, es = p.t, p.h, p.k, p.x.element_size()
    ops = {}
    rows_none = p.row_pair.shape[0]
    meta = t * k * 8 * 2 + rows_none * 8 + p.e * 16
    ops["routing"] = (lambda: moe.moe_routing(p.idx, p.e, 1, -1), meta, meta)
    for mode, (align, r) in p.routing.items():
        rows, live = r[3].shape[0], t * k
        sinv = moe.moe_permute(p.x, r[3], k, mode)[1]
        out_b = rows * h * (es if mode == "none" else 1) + sinv.numel() * sinv.element_size()
        # with the routing's slot map, as the dispatch calls it (a token's row read once)
        ops[f"permute {mode}"] = (
            lambda r=r, mode=mode: moe.moe_permute(p.x, r[3], k, mode, slot_map=r[2]),
            live * h * es + out_b, t * h * es + out_b)
        if mode != "none":
            data, sinv = moe.moe_permute(p.x, r[3], k, mode)
            deq_b = rows * h + sinv.numel() * sinv.element_size() + rows * h * es
            ops[f"dequantize {mode}"] = (
                lambda d=data, s=sinv, mode=mode: moe.dequantize_rows(d, s, mode, p.x.dtype),
                deq_b, deq_b)
    rows = rows_none
    unp = t * k * h * es + t * k * 12 + t * h * es
    ops["unpermute"] = (lambda: moe.moe_unpermute(p.y, p.slot, p.row_pair, p.probs), unp, unp)
    bwd = t * k * h * es + rows * h * es * 2 + t * k * 16 + rows * 8
    ops["unpermute backward"] = (
        lambda: moe.moe_unpermute_backward(p.dout, p.y, p.slot, p.row_pair, p.probs),
        bwd, bwd - (t * k - t) * h * es)
    pb = t * k * h * es + t * k * 8 + t * h * es
    ops["permute backward"] = (lambda: moe.moe_permute_backward(p.y, p.slot, t), pb, pb)
    return ops


def torch_ops(moe, p: Problem) -> dict:
    """name -> callable: the same work in plain torch ops."""
    k = p.k
    flat = p.idx.reshape(-1)

    def routing():
        order = torch.argsort(flat, stable=True)
        return order, torch.bincount(flat, minlength=p.e)

    order = routing()[0]
    tokens = order // k  # (T*k,) token of each pair in expert order (no padding)
    ops = {"routing": routing}
    for mode in p.routing:
        if mode == "none":
            ops[f"permute {mode}"] = lambda: p.x.index_select(0, tokens)
        else:
            ops[f"permute {mode}"] = (
                lambda mode=mode: torch_quantize(p.x.index_select(0, tokens), mode))
            _, r = p.routing[mode]
            data, sinv = moe.moe_permute(p.x, r[3], k, mode)
            ops[f"dequantize {mode}"] = (
                lambda d=data, s=sinv, mode=mode: torch_dequantize(d, s, mode, p.x.dtype))
    live_rows = p.slot.reshape(-1)
    w = p.probs.reshape(-1)

    def unpermute():
        rows = p.y.index_select(0, live_rows).float().reshape(p.t, k, p.h)
        return (rows * p.probs.unsqueeze(-1)).sum(1).to(p.y.dtype)

    def unpermute_backward():
        pair_of_row = p.row_pair.clamp(min=0)
        g = p.dout.index_select(0, p.row_token).float()
        dy = (g * torch.where(p.live, w[pair_of_row], 0.0).unsqueeze(-1)).to(p.y.dtype)
        rows = p.y.index_select(0, live_rows).float().reshape(p.t, k, p.h)
        return dy, (rows * p.dout.float().unsqueeze(1)).sum(-1)

    live_idx = p.live.nonzero().squeeze(1)  # outside the timed step: no host sync in it
    live_tokens = p.row_token.index_select(0, live_idx)

    def permute_backward():
        out = torch.zeros(p.t, p.h, dtype=torch.float32, device=p.y.device)
        out.index_add_(0, live_tokens, p.y.index_select(0, live_idx).float())
        return out.to(p.y.dtype)

    ops.update({"unpermute": unpermute, "unpermute backward": unpermute_backward,
                "permute backward": permute_backward})
    return ops


def validate(moe, args, dtype) -> bool:
    """Each tessera op on CUDA against the CPU loops, bits, on a smaller token count."""
    small = min(args.tokens, 256)
    outs = {}
    for dev in ("cuda", "cpu"):
        p = Problem(moe, small, args.hidden, args.experts, args.top_k, dtype, dev, seed=1)
        res = {}
        for name, (fn, _, _) in tessera_ops(moe, p).items():
            got = fn()
            got = got if isinstance(got, (tuple, list)) else (got,)
            res[name] = [t.cpu() for t in got]
        outs[dev] = res
    ok = True
    for name, want in outs["cpu"].items():
        got = outs["cuda"][name]
        same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                   for a, b in zip(got, want))
        ok = ok and same
        if not same:
            print(f"VALIDATION FAILED: {name}: CUDA bits differ from the CPU loops")
    print(f"validation (T={small}, CUDA == CPU bits for every op): {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tessera.bench moe")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--eager", action="store_true",
                    help="time each call with its host enqueue (default: its GPU work alone)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("tessera.bench moe: needs a CUDA device", file=sys.stderr)
        return 2
    from tessera.torch import moe
    dtype = DTYPES[a.dtype]
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    ok = validate(moe, a, dtype)
    p = Problem(moe, a.tokens, a.hidden, a.experts, a.top_k, dtype, "cuda")
    ours, theirs = tessera_ops(moe, p), torch_ops(moe, p)
    timing = "eager calls (host enqueue included)" if a.eager else "GPU work of each call"
    print(f"\nT={a.tokens} H={a.hidden} E={a.experts} top-{a.top_k} {a.dtype}; {timing}")
    print("| op | tessera ms | TB/s | TB/s distinct | torch ms | TB/s | x torch |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (fn, moved, distinct) in ours.items():
        synced = set()
        med = timed_interleaved({"tessera": fn, "torch": theirs[name]}, a.reps,
                                device_only=not a.eager, eager=synced)
        ms, tms = med["tessera"], med["torch"]
        mark = {c: " *" if c in synced else "" for c in ("tessera", "torch")}
        print(f"| {name} | {ms:.3f}{mark['tessera']} | {moved / ms / 1e9:.2f} | "
              f"{distinct / ms / 1e9:.2f} | {tms:.3f}{mark['torch']} | {moved / tms / 1e9:.2f} | "
              f"{tms / ms:.2f} |", flush=True)
    if not a.eager:
        print("* the call waits for the device (a host sync), so it was timed with its host "
              "enqueue")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
