"""One training step (forward + backward) of a grouped linear layer and of a grouped MLP, through
tessera.torch, next to the peers a user would pick instead, in the same run on the same inputs:

    torch BF16     y = torch._grouped_mm(x, Wᵀ, offs); y.backward(dy)          (autograd)
    tessera bf16   tessera.torch.grouped_linear(x, W, offs, "bf16")
    tessera fp8    grouped_linear(..., "fp8_rowwise"), weights re-quantized every step
    tessera fp8 cached-W   the same with the quantized weights cached (a later micro-batch: the
                           weights_unchanged() promise of tessera.torch's weight cache)
    tessera fp8_current    per-tensor current scaling (TE's recipe), weights re-quantized; and
                           cached-W
    tessera fp8_block      1x128 / 128x128 block scaling (DeepSeek-V3's recipe), when asked
                           for (--recipes); and cached-W
    tessera mxfp8          MXFP8 (E8M0 scales per 32 elements; the C++ recipe "mxfp8"), when
                           asked for (--recipes); and cached-W
    tessera nvfp4          NVFP4 (E2M1, E4M3 scales per 16 elements, Hadamard-transformed
                           wgrad copies, stochastically rounded dy; the C++ recipe "nvfp4"),
                           when asked for (--recipes); and cached-W
    torchao fp8    torchao's _to_fp8_rowwise_then_scaled_grouped_mm (when torchao imports)
    ... [graph]    with --graphs: torch BF16 and the tessera rows again, each step captured in
                   one CUDA graph and replayed (no host work between kernels: what the kernels
                   cost); their ratio is to "torch bf16 [graph]"
With --optim, a third suite times one training step plus the optimizer step: torch's BF16 step
then torch.optim.AdamW(fused=True) on its weight, next to each tessera recipe's GroupedLinear with
the same optimizer, its weight copies made either by the next forward (re-quantized in the step)
or right after the optimizer step by tessera.torch.quantize_weights_ (the forward then reads
them: the optimizer-side quantization).
The tessera rows are those of --recipes (default bf16,fp8_rowwise,fp8_current; accepted:
RECIPES below); the MLP suite runs the same recipes as GroupedMLP.

Validate, then time: SQNR (dB) of y, dx and dW against an FP32 reference of the same inputs,
then the median of CUDA-event timings (after warm-up) of whole steps. Shapes (E experts, tokens
per expert, K, N): DeepSeek-V3, Qwen3-30B-A3B and Mixtral fc1/fc2, balanced and imbalanced
(skewed counts, one empty expert, sizes multiples of 16).

    python -m tessera.bench train [--shapes dsv3-fc1,...] [--recipes bf16,fp8_block] [--reps 30]
                                  [--graphs] [--no-mlp] [--optim] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from .shapes import LINEAR_SHAPES as SHAPES, MLP_SHAPES, group_sizes  # noqa: F401 (re-exported)
from .timing import cuda_interleaved_ms as timed_interleaved

# tessera.torch recipes a step can be timed with (fp8_delayed keeps a scale history across
# steps, so one step from a fresh state is not what a user runs: not a contender here).
RECIPES = ("bf16", "fp8_rowwise", "fp8_current", "fp8_block", "mxfp8", "nvfp4")
DEFAULT_RECIPES = ("bf16", "fp8_rowwise", "fp8_current")


def tessera_label(recipe: str, cached_w: bool = False, suffix: str = "") -> str:
    """The row name of a tessera contender; fp8_rowwise keeps its first name, "tessera fp8"
    (results and tools/gpu/profile_train.py use it)."""
    name = "fp8" if recipe == "fp8_rowwise" else recipe
    return f"tessera {name}{suffix}" + (" cached-W" if cached_w else "")


def graphed(step: Callable) -> Callable:
    """`step` captured in one CUDA graph (two warm-up calls on a side stream first, as torch's
    graph docs ask); the returned callable replays it. Tensors the step allocates (outputs,
    gradients, quantized copies) live in the graph's private pool and are rewritten each replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


GRAPH = " [graph]"


def sqnr(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    noise = (x - ref).square().sum().item()
    return math.inf if noise == 0 else 10 * math.log10(ref.square().sum().item() / noise)


def torchao_rowwise() -> Optional[Callable]:
    """torchao's FP8 rowwise grouped GEMM (autograd), or None (the reason printed) when torchao
    does not import."""
    errors = []
    for mod in ("torchao.prototype.moe_training.scaled_grouped_mm",
                "torchao.prototype.moe_training.fp8_grouped_mm",
                "torchao.prototype.moe_training"):
        try:
            m = __import__(mod, fromlist=["_to_fp8_rowwise_then_scaled_grouped_mm"])
            return getattr(m, "_to_fp8_rowwise_then_scaled_grouped_mm")
        except Exception as ex:  # noqa: BLE001 - any failure means "no peer"
            errors.append(f"{mod}: {type(ex).__name__}: {str(ex)[:160]}")
    print("torchao peer unavailable:\n  " + "\n  ".join(errors))
    return None


class Case:
    """Inputs of one linear step: x (T, K), W (G, N, K), dy (T, N), offs, and the FP32 reference
    y, dx, dW of the valid rows."""

    def __init__(self, experts, per_expert, k, n, imbalanced, seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.sizes = group_sizes(experts, per_expert, imbalanced)
        t = sum(self.sizes)
        self.offs = torch.tensor(self.sizes, device="cuda").cumsum(0).to(torch.int32)
        self.x = torch.randn(t, k, device="cuda", generator=g).to(torch.bfloat16)
        self.w = (torch.randn(experts, n, k, device="cuda", generator=g) / math.sqrt(k)).to(
            torch.bfloat16)
        self.dy = torch.randn(t, n, device="cuda", generator=g).to(torch.bfloat16)
        self.flops = 3 * 2 * t * k * n  # fwd + dgrad + wgrad, valid rows only

    def reference(self):
        """FP32 y, dx, dW per group (torch matmuls in FP32 on the BF16 inputs' values)."""
        ys, dxs, dws, start = [], [], [], 0
        for gi, m in enumerate(self.sizes):
            x = self.x[start:start + m].float()
            dy = self.dy[start:start + m].float()
            w = self.w[gi].float()
            ys.append(x @ w.t())
            dxs.append(dy @ w)
            dws.append(dy.t() @ x)
            start += m
        return torch.cat(ys), torch.cat(dxs), torch.stack(dws)


def linear_step(fn, case: Case):
    """A step closure: fresh leaf tensors' grads, forward, backward with dy."""
    x = case.x.detach().requires_grad_()
    w = case.w.detach().requires_grad_()

    def step():
        x.grad = None
        w.grad = None
        y = fn(x, w)
        y.backward(case.dy)
        return y

    return step, x, w


def cached_step(tt, recipe, cache):
    """A grouped_linear step that reuses `cache`'s weight copies: the caller's promise that the
    weights did not change (tessera.torch.weights_unchanged), as a later micro-batch makes it."""
    def step(x, w, o):
        with tt.weights_unchanged():
            return tt.grouped_linear(x, w, o, recipe, cache)
    return step


def linear_contenders(tt, ao, recipes=DEFAULT_RECIPES):
    """(label, step(x, w, offs)) of torch's BF16 step, each tessera recipe (FP8 ones twice:
    weights re-quantized every step, and cached) and torchao's FP8 rowwise step."""
    rows = [("torch bf16", lambda x, w, o: torch._grouped_mm(x, w.transpose(-2, -1), offs=o))]
    for r in recipes:
        rows.append((tessera_label(r), lambda x, w, o, r=r: tt.grouped_linear(
            x, w, o, r, tt.WeightCache())))
        if r != "bf16":
            rows.append((tessera_label(r, cached_w=True), cached_step(tt, r, tt.WeightCache())))
    if ao is not None:
        rows.append(("torchao fp8", lambda x, w, o: ao(x, w.transpose(-2, -1), o,
                                                       out_dtype=torch.bfloat16,
                                                       pad_token_groups_for_grouped_mm=False)))
    return rows


def bench_linear(names, reps, out_rows, recipes=DEFAULT_RECIPES, graphs=False):
    import tessera.torch as tt
    ao = torchao_rowwise()
    print(f"torchao: {'yes' if ao else 'no (peer rows absent)'}")
    for name in names:
        e, per, k, n = SHAPES[name]
        for imb in (False, True):
            case = Case(e, per, k, n, imb)
            ref = case.reference()
            steps, rows = {}, []
            contenders = linear_contenders(tt, ao, recipes)
            # torch's step twice: the spread between the two is the run's own noise
            contenders.append(("torch bf16 (again)", contenders[0][1]))
            for label, f in contenders:  # validate first: SQNR of one step against FP32
                row = {"suite": "linear", "shape": name, "imbalanced": imb, "impl": label}
                rows.append(row)
                try:
                    step, x, w = linear_step(lambda a, b, f=f: f(a, b, case.offs), case)
                    y = step()
                    torch.cuda.synchronize()
                    row["sqnr_y"] = sqnr(y.float(), ref[0])
                    row["sqnr_dx"] = sqnr(x.grad.float(), ref[1])
                    row["sqnr_dw"] = sqnr(w.grad.float(), ref[2])
                    del y
                    steps[label] = step
                except Exception as ex:  # noqa: BLE001 - report and go on
                    row["error"] = f"{type(ex).__name__}: {str(ex)[:200]}"
            if graphs:  # torch BF16 and tessera's rows once more, each captured in a graph
                for label in [l for l in steps if l.startswith(("torch bf16", "tessera"))
                              and l != "torch bf16 (again)"]:
                    row = {"suite": "linear", "shape": name, "imbalanced": imb,
                           "impl": label + GRAPH}
                    rows.append(row)
                    try:
                        steps[label + GRAPH] = graphed(steps[label])
                    except Exception as ex:  # noqa: BLE001 - report and go on
                        row["error"] = f"{type(ex).__name__}: {str(ex)[:200]}"
            ms = timed_interleaved(steps, reps)
            for row in rows:
                if row["impl"] in ms:
                    row["ms"] = ms[row["impl"]]
                    row["tflops"] = case.flops / row["ms"] / 1e9
                    base = "torch bf16" + (GRAPH if row["impl"].endswith(GRAPH) else "")
                    row["x_torch_bf16"] = ms[base] / row["ms"] if base in ms else None
                out_rows.append(row)
                print(json.dumps(row), flush=True)
            del case, ref, steps
            torch.cuda.empty_cache()


def torch_mlp(x, w1, w2, offs, probs):
    h = torch._grouped_mm(x, w1.transpose(-2, -1), offs=offs)
    gate, up = h.chunk(2, dim=-1)
    a = F.silu(gate) * up * probs.unsqueeze(-1)
    return torch._grouped_mm(a, w2.transpose(-2, -1), offs=offs)


def bench_mlp(names, reps, out_rows, recipes=DEFAULT_RECIPES):
    import tessera.torch as tt
    for name in names:
        e, per, hid, ffn = MLP_SHAPES[name]
        for imb in (False, True):
            sizes = group_sizes(e, per, imb)
            t = sum(sizes)
            offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
            x0 = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
            probs = torch.rand(t, device="cuda", dtype=torch.bfloat16)
            dy = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
            first = tt.GroupedMLP(e, hid, ffn, recipe="bf16", device="cuda")
            mods = {}
            for r in recipes:  # the same weights for every recipe
                mods[r] = tt.GroupedMLP(e, hid, ffn, recipe=r, device="cuda")
                mods[r].load_state_dict(first.state_dict())
            w1 = first.fc1.weight.detach().clone().requires_grad_()
            w2 = first.fc2.weight.detach().clone().requires_grad_()
            del first
            flops = 3 * 2 * t * hid * ffn * 3  # fc1 (2·ffn) + fc2 (ffn), fwd + 2 bwd GEMMs
            steps, rows = {}, []
            contenders = [("torch bf16 mlp", lambda x: torch_mlp(x, w1, w2, offs, probs),
                           [w1, w2])]
            for r, m in mods.items():
                params = list(m.parameters())
                # by default a forward re-quantizes; is_first_microbatch=False promises unchanged
                # weights (a later micro-batch) and reuses the copies
                contenders.append((tessera_label(r, suffix=" mlp"),
                                   lambda x, m=m: m(x, offs, probs), params))
                if r != "bf16":
                    contenders.append((tessera_label(r, cached_w=True, suffix=" mlp"),
                                       lambda x, m=m: m(x, offs, probs,
                                                        is_first_microbatch=False), params))
            for label, fn, params in contenders:
                x = x0.detach().requires_grad_()

                def step(fn=fn, params=params, x=x):
                    x.grad = None
                    for p in params:
                        p.grad = None
                    fn(x).backward(dy)
                steps[label] = step
                rows.append({"suite": "mlp", "shape": name, "imbalanced": imb, "impl": label})
            ms = timed_interleaved(steps, reps)
            for row in rows:
                row["ms"] = ms[row["impl"]]
                row["tflops"] = flops / row["ms"] / 1e9
                row["x_torch_bf16"] = ms["torch bf16 mlp"] / row["ms"]
                out_rows.append(row)
                print(json.dumps(row), flush=True)
            del mods, x0, dy
            torch.cuda.empty_cache()


OPTIM = " +adamw"


def optim_contenders(tt, case: Case, recipes=DEFAULT_RECIPES):
    """(label, step) of the optimizer suite on `case`: each step is forward, backward, then
    AdamW(fused=True) on the weight (tessera: then quantize_weights_ where the label says so).
    torch's weight and every tessera layer's start from case.w (on its device)."""
    x = case.x.detach().requires_grad_()
    device = case.w.device

    def adamw(params):
        return torch.optim.AdamW(params, lr=1e-6, fused=True)

    w = case.w.detach().clone().requires_grad_()
    opt_t = adamw([w])

    def torch_step():
        x.grad = None
        w.grad = None
        torch._grouped_mm(x, w.transpose(-2, -1), offs=case.offs).backward(case.dy)
        opt_t.step()

    rows = [("torch bf16" + OPTIM, torch_step)]
    e, k, n = case.w.shape[0], case.w.shape[2], case.w.shape[1]
    for r in recipes:
        for side in ((False, True) if r != "bf16" else (False,)):
            m = tt.GroupedLinear(e, k, n, recipe=r, device=device, params_dtype=case.w.dtype)
            with torch.no_grad():
                m.weight.copy_(case.w)
            opt = adamw(list(m.parameters()))

            def step(m=m, opt=opt, side=side):
                x.grad = None
                m.zero_grad(set_to_none=True)
                m(x, case.offs).backward(case.dy)
                opt.step()
                if side:  # the copies for the next forward, made here
                    tt.quantize_weights_(m)

            label = tessera_label(r, suffix=OPTIM + (" +quantize_weights_" if side else ""))
            rows.append((label, step))
    return rows


def bench_optim(names, reps, out_rows, recipes=DEFAULT_RECIPES):
    """The optimizer suite (--optim) on the linear shapes `names`, balanced and skewed."""
    import tessera.torch as tt
    for name in names:
        e, per, k, n = SHAPES[name]
        for imb in (False, True):
            case = Case(e, per, k, n, imb)
            steps = dict(optim_contenders(tt, case, recipes))
            ms = timed_interleaved(steps, reps)
            for label in steps:
                row = {"suite": "optim", "shape": name, "imbalanced": imb, "impl": label,
                       "ms": ms[label], "tflops": case.flops / ms[label] / 1e9,
                       "x_torch_bf16": ms["torch bf16" + OPTIM] / ms[label]}
                out_rows.append(row)
                print(json.dumps(row), flush=True)
            del case, steps
            torch.cuda.empty_cache()


def format_table(rows) -> str:
    """The run's markdown table (printed, and written into the results page by
    `python -m tessera.bench results`)."""
    lines = ["| suite | shape | balance | impl | ms | TFLOP/s | × torch BF16 | "
             "SQNR y / dx / dW (dB) |", "|---|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        bal = "imb" if r["imbalanced"] else "bal"
        if "error" in r:
            lines.append(f"| {r['suite']} | {r['shape']} | {bal} | {r['impl']} | "
                         f"error: {r['error']} ||||")
            continue
        q = ("" if "sqnr_y" not in r else
             f"{r['sqnr_y']:.1f} / {r['sqnr_dx']:.1f} / {r['sqnr_dw']:.1f}")
        ratio = f"{r['x_torch_bf16']:.2f}" if r.get("x_torch_bf16") else ""
        lines.append(f"| {r['suite']} | {r['shape']} | {bal} | {r['impl']} | {r['ms']:.3f} | "
                     f"{r['tflops']:.0f} | {ratio} | {q} |")
    return "\n".join(lines)


def print_table(rows):
    print("\n" + format_table(rows))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tessera.bench train")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated linear shapes")
    ap.add_argument("--mlp-shapes", default=",".join(MLP_SHAPES))
    ap.add_argument("--recipes", default=",".join(DEFAULT_RECIPES),
                    help=f"comma-separated tessera recipes, of {','.join(RECIPES)} (with the "
                         f"recipe text's options, e.g. 'mxfp8;weight_tiles=1')")
    ap.add_argument("--no-mlp", action="store_true")
    ap.add_argument("--optim", action="store_true",
                    help="also time each linear step plus torch.optim.AdamW(fused=True) (with "
                         "tessera's weight copies made by quantize_weights_ or by the forward)")
    ap.add_argument("--graphs", action="store_true",
                    help="also time torch BF16 and the tessera linear steps as CUDA graph replays")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", default=None, help="write the rows as JSON to this file")
    a = ap.parse_args(argv)
    recipes = tuple(r for r in a.recipes.split(",") if r)
    unknown = [r for r in recipes if r.split(";")[0] not in RECIPES]  # options: "mxfp8;weight_tiles=1"
    if unknown:
        ap.error(f"--recipes: {unknown} not accepted; expected some of {','.join(RECIPES)}")
    if not torch.cuda.is_available():
        print("tessera.bench train: needs a CUDA device", file=sys.stderr)
        return 2
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    rows: list = []
    bench_linear([s for s in a.shapes.split(",") if s], a.reps, rows, recipes, a.graphs)
    if not a.no_mlp:
        bench_mlp([s for s in a.mlp_shapes.split(",") if s], a.reps, rows, recipes)
    if a.optim:
        bench_optim([s for s in a.shapes.split(",") if s], a.reps, rows, recipes)
    print_table(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0
