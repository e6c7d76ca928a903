"""FP64 oracles and the small helpers shared by the tessera.torch layer tests."""
import math

import torch


def ends(sizes, device):
    """torch's offs: int32 cumulative end offsets of the group sizes, on `device`."""
    return torch.tensor(sizes, device=device).cumsum(0).to(torch.int32)


def sqnr(x, ref):
    """Signal-to-quantization-noise ratio of x against ref in dB (inf when equal), in FP64."""
    x, ref = x.double().cpu(), ref.double().cpu()
    noise = (x - ref).square().sum().item()
    return math.inf if noise == 0 else 10 * math.log10(ref.square().sum().item() / noise)


def grouped_products(x, w, dy, sizes):
    """FP64 y, dx, dW per group; x (T, K), w (G, N, K), dy (T, N)."""
    x, w, dy = x.double().cpu(), w.double().cpu(), dy.double().cpu()
    ys, dxs, dws, s = [], [], [], 0
    for g, m in enumerate(sizes):
        ys.append(x[s:s + m] @ w[g].t())
        dxs.append(dy[s:s + m] @ w[g])
        dws.append(dy[s:s + m].t() @ x[s:s + m])
        s += m
    return torch.cat(ys), torch.cat(dxs), torch.stack(dws)


def run_step(fn, x0, w0, dy):
    """y, dx, dW of fn(x, w) on fresh leaves of x0, w0, backward with dy."""
    x, w = x0.detach().requires_grad_(), w0.detach().requires_grad_()
    y = fn(x, w)
    y.backward(dy)
    return y.detach(), x.grad, w.grad


def mlp_eager_and_compiled(mlp, x0, offs):
    """(y, dx, dW1, dW2) of a sum-of-squares step through `mlp`, eager and under
    torch.compile(fullgraph=True, backend="aot_eager")."""
    def step(fn):
        x = x0.detach().requires_grad_()
        mlp.zero_grad(set_to_none=True)
        y = fn(x, offs)
        y.float().square().sum().backward()
        return y.detach(), x.grad, mlp.fc1.weight.grad.clone(), mlp.fc2.weight.grad.clone()

    eager = step(mlp)
    torch._dynamo.reset()
    return eager, step(torch.compile(mlp, fullgraph=True, backend="aot_eager"))


def mlp_layer_tensors(mlp, x, offs, probs):
    """A sum-of-squares step through GroupedMLP `mlp` on x (a leaf: its .grad is set) with
    routing probs; returns (y, {"fc1": [...], "fc2": [...]}): the output, and each layer's input,
    output, output gradient and input gradient as the step saw them (forward and full backward
    hooks)."""
    seen = {}
    for name in ("fc1", "fc2"):
        layer = getattr(mlp, name)
        layer.register_forward_hook(lambda m, i, o, name=name: seen.update(
            {name: [i[0].detach(), o.detach()]}))
        layer.register_full_backward_hook(lambda m, gi, go, name=name: seen[name].extend(
            [go[0].detach(), gi[0].detach()]))
    y = mlp(x, offs, probs=probs)
    y.float().square().sum().backward()
    return y, seen


# ---- the step's wgrad layout -------------------------------------------------------------------

def wgrad_align(recipe_spec, name="", groups=1, k=32, n=32):
    """Rows every group of the wgrad's columnwise copies starts on (the C++ step's
    LinearSpec::wgrad_align: max(16, the token block of the copies' modes); 1 for dense)."""
    from tessera import _tessera
    return _tessera._linear_step_sizes(recipe_spec, name, groups, k, n, False, "bfloat16")[3]


def padded_starts(sizes, align):
    """(starts of each group padded to `align` rows, padded rows): the C++ step's wgrad layout,
    whose row count is rounded up from T + G·(align − 1)."""
    starts, p = [], 0
    for m in sizes:
        starts.append(p)
        p += (m + align - 1) // align * align
    t = sum(sizes)
    rows = (t + len(sizes) * (align - 1) + align - 1) // align * align
    return starts, rows


def pad_groups(t, sizes, align):
    """t (T, C) in the wgrad layout: group g's rows from padded start g, zeros elsewhere."""
    starts, rows = padded_starts(sizes, align)
    out = t.new_zeros((rows, t.shape[1]))
    s = 0
    for start, m in zip(starts, sizes):
        out[start:start + m] = t[s:s + m]
        s += m
    return out


def padded_sizes(sizes, align):
    """The group sizes of the wgrad layout (each rounded up to `align`)."""
    return [(m + align - 1) // align * align for m in sizes]


def composed_mlp_step(recipe, w1, w2, b1, b2, x0, offs, probs, dy, name=""):
    """y, dx, dW1, dW2 (and dprobs) of the MLP written as its parts: fc1 and fc2 through
    tessera.torch.grouped_linear (the linear step, checked against its own oracles), the SwiGLU ×
    probs in FP32 rounded to x's dtype as the C++ step computes it. GroupedMLP's step is this
    composition, so its outputs must equal these up to the SwiGLU's rounding."""
    import torch.nn.functional as F
    from tessera import torch as tt
    prefix = f"{name}." if name else ""
    x = x0.detach().requires_grad_()
    a1 = w1.detach().requires_grad_()
    a2 = w2.detach().requires_grad_()
    p = probs.detach().requires_grad_() if probs is not None else None
    h = tt.grouped_linear(x, a1, offs, recipe, bias=b1, name=prefix + "fc1")
    gate, up = h.float().chunk(2, dim=-1)
    act = F.silu(gate) * up
    if p is not None:
        act = act * p.float().unsqueeze(-1)
    y = tt.grouped_linear(act.to(x.dtype), a2, offs, recipe, bias=b2, name=prefix + "fc2")
    y.backward(dy)
    return y.detach(), x.grad, a1.grad, a2.grad, (p.grad if p is not None else None)


def opcheck_linear_step(spec, x, w, offs, dy, utils=("test_schema", "test_faketensor")):
    """torch.library.opcheck of the compiled step's ops (schema: mutations declared, no output
    aliasing an input; fake implementations: the shapes, dtypes and byte sizes of the real op)
    for the recipe text `spec`, with every tensor a forward and a backward pass."""
    ops = torch.ops.tessera
    y, saved, made = ops.linear_fwd(x, w, offs, None, None, True, spec, "", None, None, True)
    torch.library.opcheck(ops.linear_fwd.default,
                          (x, w, offs, None, None, True, spec, "", None, None, True),
                          test_utils=utils)
    torch.library.opcheck(ops.linear_fwd.default,
                          (x, w, offs, None, made if made.numel() else None, False, spec, "",
                           None, None, False), test_utils=utils)
    bwd = (dy, offs, x if saved.numel() == 0 else None, w, made if made.numel() else None, saved,
           spec, "", False, None, None, None, True, True, False, x.dtype, w.dtype, x.dtype)
    torch.library.opcheck(ops.linear_bwd.default, bwd, test_utils=utils)
    g, n, k = w.shape
    w2 = w.new_zeros((g, k, n // 2)).normal_()
    ys = ops.mlp_fwd(x, w, w2, offs, None, None, None, None, None, True, spec, spec, "", None,
                     None, None, None, True)
    torch.library.opcheck(ops.mlp_fwd.default,
                          (x, w, w2, offs, None, None, None, None, None, True, spec, spec, "",
                           None, None, None, None, True), test_utils=utils)
    mlp_bwd = (x.new_zeros(x.shape).normal_(), offs, x, None, w, w2,
               ys[5] if ys[5].numel() else None, ys[6] if ys[6].numel() else None,
               ys[1], ys[2], ys[3], ys[4], spec, spec, "", False, None, None, None, None, None,
               None, True, False, True, False, w.dtype, w.dtype, torch.float32)
    torch.library.opcheck(ops.mlp_bwd.default, mlp_bwd, test_utils=utils)


def mlp_step_against_oracles(recipe, sizes, hidden, ffn, device):
    """One GroupedMLP step (probs, ragged sizes) of `recipe`, and its SQNRs in dB: (vs
    composed_mlp_step on y/dx/dW1/dW2/dprobs, vs the FP64 mlp_products of the unquantized values
    on y/dx/dW1/dW2). Prints both lists."""
    from tessera import torch as tt
    torch.manual_seed(9)
    mlp = tt.GroupedMLP(len(sizes), hidden, ffn, recipe=recipe, device=device)
    offs = ends(sizes, device)
    t = sum(sizes)
    x0 = torch.randn(t, hidden, device=device, dtype=torch.bfloat16)
    probs = torch.rand(t, device=device)
    dy = torch.randn(t, hidden, device=device, dtype=torch.bfloat16)
    x = x0.detach().requires_grad_()
    p = probs.detach().requires_grad_()
    y = mlp(x, offs, probs=p)
    y.backward(dy)
    got = (y.detach(), x.grad, mlp.fc1.weight.grad, mlp.fc2.weight.grad, p.grad)
    w1, w2 = mlp.fc1.weight, mlp.fc2.weight
    composed = [sqnr(a, b) for a, b in
                zip(got, composed_mlp_step(recipe, w1, w2, None, None, x0, offs, probs, dy))]
    plain = [sqnr(a, b) for a, b in zip(got, mlp_products(x0, w1, w2, probs, sizes, dy))]
    print(f"\n[mlp {recipe} {device}] SQNR vs the composed linear steps y/dx/dW1/dW2/dp "
          f"{[round(d, 1) for d in composed]}; vs FP64 y/dx/dW1/dW2 "
          f"{[round(d, 1) for d in plain]}")
    return composed, plain


def mlp_products(x, w1, w2, probs, sizes, dy):
    """FP64 y, dx, dW1, dW2 of the unquantized grouped MLP (x (T, H), w1 (G, 2F, H), w2 (G, H, F),
    probs (T,) or None; h = x W1_gᵀ = [gate | up], a = silu(gate) ⊙ up (⊙ p), y = a W2_gᵀ),
    backward with dy (T, H)."""
    import torch.nn.functional as F
    xr = x.detach().double().cpu().requires_grad_()
    a1 = w1.detach().double().cpu().requires_grad_()
    a2 = w2.detach().double().cpu().requires_grad_()
    p = probs.detach().double().cpu() if probs is not None else None
    outs, s = [], 0
    for g, m in enumerate(sizes):
        gate, up = (xr[s:s + m] @ a1[g].t()).chunk(2, dim=-1)
        act = F.silu(gate) * up
        if p is not None:
            act = act * p[s:s + m, None]
        outs.append(act @ a2[g].t())
        s += m
    y = torch.cat(outs)
    y.backward(dy.detach().double().cpu())
    return y.detach(), xr.grad, a1.grad, a2.grad


def unpad_groups(tp, sizes, align):
    """The group rows of tp (padded layout of pad_groups) back in the groups' own rows."""
    starts, _ = padded_starts(sizes, align)
    return torch.cat([tp[s:s + m] for s, m in zip(starts, sizes)]) if sizes else tp[:0]


def capture_step(module, x, g, warmup=2):
    """A training step of `module` captured in one CUDA graph: forward of x (requires grad),
    backward of g. Warmed up on a side stream first (first-call work stays out of the graph),
    gradients set to None before the capture, so that each replay writes them anew.
    Returns (graph, y): y and the .grad tensors hold each replay's results."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            module.zero_grad(set_to_none=True)
            x.grad = None
            module(x).backward(g)
    torch.cuda.current_stream().wait_stream(side)
    module.zero_grad(set_to_none=True)
    x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = module(x)
        y.backward(g)
    return graph, y
