"""The zero-copy bridge between torch tensors and tessera._tessera's array-level grouped GEMM.

Tensors cross by DLPack as capsules made by torch's C exporter (`dl`: about a microsecond, where
`Tensor.__dlpack__`'s Python wrapper cost ten per tensor and a step passes ~30), never copied; a
capsule is consumed by the call it is passed to, so every call gets fresh ones. Results are written into
tensors allocated here with torch (its caching allocator on CUDA, so nothing mallocs or syncs);
CUDA work is enqueued on torch's current stream of the tensors' device.
"""
from __future__ import annotations

import torch

from .. import _tessera as _C
from ._errors import python_names

KIND_M_GROUPED = 0  # A (T, K) rows grouped x B (G, ., .) -> D (T, N)
KIND_K_GROUPED = 1  # A (T, M), B (T, N) rows grouped -> D (G, M, N) = A_g^T B_g
KIND_BATCHED = 2    # A (G, M, K) x B (G, ., .) -> D (G, M, N)

_WORKSPACE_ALIGNMENT = 256


dl = torch._C._to_dlpack  # tensor -> "dltensor" capsule (zero-copy; nanobind imports it)


def stream_handle(device: torch.device) -> int:
    """The cudaStream_t (as an int) of torch's current stream on `device`; 0 on the CPU."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch._C._cuda_getCurrentRawStream(index)  # no Stream object per call
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
    return _C._gemm_dense_operand(dl(t))


def quantized(data: torch.Tensor, scale_inv: torch.Tensor, mode: str, rows: int, cols: int,
              columnwise: bool = False, element: str = "e4m3", amax: torch.Tensor | None = None,
              random_hadamard: bool = False):
    """A quantized operand: FP8 codes (any 8-bit dtype, viewed as uint8) or packed E2M1 codes
    (uint8, two per byte) + scale_inv: FP32, or E8M0 / E4M3 bytes (MXFP8 float8_e8m0fnu, NVFP4
    float8_e4m3fn, or uint8; passed as uint8: the extension reads them as the mode's scale
    dtype). NVFP4: `amax` the copy's FP32 global amax, random_hadamard whether the columnwise
    copy was quantized after the Hadamard transform."""
    if scale_inv.element_size() == 1:
        scale_inv = scale_inv.view(torch.uint8)
    return _C._gemm_quantized_operand(dl(data.view(torch.uint8)), dl(scale_inv), mode,
                                      element, rows, cols, columnwise,
                                      None if amax is None else dl(amax), random_hadamard)


# Workspace bytes per problem signature (run's `key`): a repeated problem runs with one call into
# the extension instead of a sizing call and a running call. A stale entry is harmless: the
# extension then answers with the bytes it needs and the call is made again with them.
_workspace_bytes: dict = {}


def device_scope(device: torch.device):
    """torch.cuda.device(device) when `device` is a CUDA device other than the current one, else a
    no-op context (entering torch.cuda.device costs two driver calls per op)."""
    if device.type == "cuda" and device.index not in (None, torch.cuda.current_device()):
        return torch.cuda.device(device)
    return _nullcontext()


def run(kind: int, a, b, out: torch.Tensor, offs: torch.Tensor | None, *, transpose_a: bool,
        transpose_b: bool, alpha: float = 1.0, beta: float = 0.0, key=None,
        zero_unused_rows: bool = False) -> torch.Tensor:
    """Runs one grouped GEMM into `out` (written in place) and returns `out`. `key`: a hashable
    signature of the problem (shapes, dtypes, layouts) to reuse its workspace size.
    zero_unused_rows (M-grouped): out's rows past offs[-1] are zeroed too (read on the device).
    A refused problem raises its tessera.Error with the C++ argument names made tessera.torch's
    (`offs`, not `group_offsets`)."""
    try:
        return _run(kind, a, b, out, offs, transpose_a, transpose_b, alpha, beta, key,
                    zero_unused_rows)
    except _C.Error as e:
        raise python_names(e) from None


def _run(kind, a, b, out, offs, transpose_a, transpose_b, alpha, beta, key, zero_unused_rows):
    device = out.device
    stream = stream_handle(device)
    with device_scope(device):
        known = _workspace_bytes.get(key) if key is not None else None
        ws = workspace(known, device) if known else None
        need = _C._grouped_gemm_into(kind, a, b, dl(out), None if offs is None else dl(offs), True,
                                     transpose_a, transpose_b, alpha, beta,
                                     None if ws is None else dl(ws), stream, zero_unused_rows)
        if need:
            ws = workspace(need, device)
            left = _C._grouped_gemm_into(kind, a, b, dl(out), None if offs is None else dl(offs),
                                         True, transpose_a, transpose_b, alpha, beta, dl(ws),
                                         stream, zero_unused_rows)
            assert left == 0, "tessera grouped GEMM asked for more workspace than it sized"
        if key is not None:
            _workspace_bytes[key] = need if need else (known or 0)
    return out


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
