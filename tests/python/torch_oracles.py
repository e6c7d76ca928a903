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
