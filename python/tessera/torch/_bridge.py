"""The zero-copy bridge between torch tensors and tessera._tessera's array-level functions (the
quantize ops of fp8.py, nvfp4.py and delayed.py; the grouped GEMMs and the training step are
compiled ops, _ext.py).

Tensors cross by DLPack as capsules made by torch's C exporter (`dl`: about a microsecond, where
`Tensor.__dlpack__`'s Python wrapper cost ten per tensor), never copied; a capsule is consumed by
the call it is passed to, so every call gets fresh ones. Results are written into tensors the
caller allocated with torch (its caching allocator on CUDA, so nothing mallocs or syncs); CUDA
work is enqueued on torch's current stream of the tensors' device.
"""
from __future__ import annotations

import torch

dl = torch._C._to_dlpack  # tensor -> "dltensor" capsule (zero-copy; nanobind imports it)


def stream_handle(device: torch.device) -> int:
    """The cudaStream_t (as an int) of torch's current stream on `device`; 0 on the CPU."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch._C._cuda_getCurrentRawStream(index)  # no Stream object per call
    return 0


def device_scope(device: torch.device):
    """torch.cuda.device(device) when `device` is a CUDA device other than the current one, else a
    no-op context (entering torch.cuda.device costs two driver calls per op)."""
    if device.type == "cuda" and device.index not in (None, torch.cuda.current_device()):
        return torch.cuda.device(device)
    return _nullcontext()


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
