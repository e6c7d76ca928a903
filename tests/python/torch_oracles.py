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
