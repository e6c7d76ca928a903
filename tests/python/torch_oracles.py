"""FP64 oracles shared by the tessera.torch layer tests."""
import torch


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
