"""The zero-copy bridge between torch tensors and tessera._tessera's array-level grouped GEMM.

Tensors cross by DLPack (nanobind reads `__dlpack__`, never copies); results are written into
tensors allocated here with torch (its caching allocator on CUDA, so nothing mallocs or syncs);
CUDA work is enqueued on torch's current stream of the tensors' device.
"""
from __future__ import annotations

import torch

from .. import _tessera as _C

KIND_M_GROUPED = 0  # A (T, K) rows grouped x B (G, ., .) -> D (T, N)
KIND_K_GROUPED = 1  # A (T, M), B (T, N) rows grouped -> D (G, M, N) = A_g^T B_g
KIND_BATCHED = 2    # A (G, M, K) x B (G, ., .) -> D (G, M, N)

_WORKSPACE_ALIGNMENT = 256


def stream_handle(device: torch.device) -> int:
    """The cudaStream_t (as an int) of torch's current stream on `device`; 0 on the CPU."""
    if device.type == "cuda":
        return torch.cuda.current_stream(device).cuda_stream
    return 0


def workspace(nbytes: int, device: torch.device) -> torch.Tensor:
    """A 256-byte aligned uint8 workspace of `nbytes` from torch's allocator on `device`.

    On CUDA the caching allocator is stream-ordered, so the block may be released as soon as the
    work using it is enqueued on the current stream.
    """
    raw = torch.empty(nbytes + _WORKSPACE_ALIGNMENT, dtype=torch.uint8, device=device)
    offset = (-raw.data_ptr()) % _WORKSPACE_ALIGNMENT
    return raw[offset:offset + nbytes]


def dense(t: torch.Tensor):
    """A dense operand over a C-contiguous tensor (no copy; tessera refuses other layouts)."""
    return _C._gemm_dense_operand(t.detach())


def quantized(data: torch.Tensor, scale_inv: torch.Tensor, mode: str, rows: int, cols: int,
              columnwise: bool = False, element: str = "e4m3"):
    """A quantized operand: FP8 codes (any 8-bit dtype, viewed as uint8) + FP32 scale_inv."""
    return _C._gemm_quantized_operand(data.detach().view(torch.uint8), scale_inv.detach(), mode,
                                      element, rows, cols, columnwise)


def run(kind: int, a, b, out: torch.Tensor, offs: torch.Tensor | None, *, transpose_a: bool,
        transpose_b: bool, alpha: float = 1.0, beta: float = 0.0) -> torch.Tensor:
    """Runs one grouped GEMM into `out` (written in place) and returns `out`."""
    device = out.device
    stream = stream_handle(device)
    offs_arg = None if offs is None else offs.detach()
    with torch.cuda.device(device) if device.type == "cuda" else _nullcontext():
        need = _C._grouped_gemm_into(kind, a, b, out.detach(), offs_arg, True, transpose_a,
                                     transpose_b, alpha, beta, None, stream)
        if need:
            ws = workspace(need, device)
            left = _C._grouped_gemm_into(kind, a, b, out.detach(), offs_arg, True, transpose_a,
                                         transpose_b, alpha, beta, ws, stream)
            assert left == 0, "tessera grouped GEMM asked for more workspace than it sized"
    return out


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
