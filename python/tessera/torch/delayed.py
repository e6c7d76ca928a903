"""FP8 delayed scaling (TransformerEngine's DelayedScaling) for tessera.torch: the recipe options,
the state a layer keeps on the device, and the quantize-then-update op.

    DelayedScaling(amax_history_len=1024, amax_compute_algo="max", margin=0, fp8_format="hybrid")

The numerics are the C++ recipe's (docs/numerics.md, "FP8 delayed scaling"), run by tessera's
Quantizer on caller-owned state: quantize with the role's current scale (one scale per tensor,
scale_inv = 1 / scale), write the tensor amax into history slot 0; then update: amax = max of the
history (or slot 0: "most_recent"), scale = (fp8_max / amax) / 2^margin (amax 0 or non-finite
keeps the old scale), the history rolls by one toward slot 0 and slot 0 is cleared. As the C++ nn
layer's operand producer does, every quantize is followed by its update, so the next quantize of
the role uses a scale that includes this one's amax. Both steps are device ops on torch's current
stream: no host sync, CUDA-graph capturable.

Roles and formats come from the C++ recipe (`Recipe::config_for`, through `config_for` below):
"hybrid" (TE's default) quantizes input and weight to E4M3 and grad_output to E5M2; "e4m3" uses
E4M3 everywhere.

A grouped layer keeps, per role (ROLES order) and per expert, one FP32 scale and one FP32 amax
history (TransformerEngine's grouped linear keeps a quantizer per expert): scale (3, G) and
amax_history (3, L, G), expert g's history slot i at [role, i, g]. The C++ step quantizes expert
g's rows (W_g) with scale[role, g], writes their amax into its slot 0 and updates each expert's
state alone, so one expert's outliers never change another expert's scale. `initial_state(G)`
makes them (scale 1, history 0) for module buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Tuple

import torch
from torch import Tensor

from .. import _tessera as _C
from . import _bridge as br
from ._errors import check

ROLES = ("input", "weight", "grad_output")  # row order of a layer's delayed-scaling state
_FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
_FORMATS = ("hybrid", "e4m3")


@dataclass(frozen=True)
class DelayedScaling:
    """The fp8_delayed recipe and its options (TE's names and defaults).

    amax_history_len: amaxes kept per role; amax_compute_algo: "max" (over the history) or
    "most_recent" (slot 0); margin: scale = (fp8_max / amax) / 2^margin; fp8_format: "hybrid"
    (E4M3 forward tensors, E5M2 gradients) or "e4m3"."""
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    margin: int = 0
    fp8_format: str = "hybrid"  # also TE's "HYBRID" / "E4M3" / Format.HYBRID
    _elements: Tuple[str, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self):
        # TE's spellings: "HYBRID" / "E4M3", or its Format enum (by member name)
        fmt = getattr(self.fp8_format, "name", self.fp8_format)
        if isinstance(fmt, str):
            object.__setattr__(self, "fp8_format", fmt.lower())
        if self.fp8_format not in _FORMATS:
            raise _C.InvalidArgumentError(
                f"tessera invalid argument: fp8_format: {self.fp8_format!r} is not run by "
                f"tessera.torch; expected one of {_FORMATS} (E5M2 forward operands have no CUDA "
                f"GEMM)")
        # The C++ recipe validates the options (naming a bad one) and gives each role's element.
        object.__setattr__(self, "_elements",
                           tuple(self.config_for(role)["element"] for role in ROLES))

    @property
    def name(self) -> str:
        """The C++ recipe name: "fp8_delayed" (hybrid) or "fp8_delayed:e4m3"."""
        return "fp8_delayed" if self.fp8_format == "hybrid" else "fp8_delayed:e4m3"

    def spec(self) -> str:
        """The recipe's text form (C++ parse_recipe_spec), options included."""
        return (f"{self.name};amax_history_len={self.amax_history_len};"
                f"amax_compute_algo={self.amax_compute_algo};margin={self.margin}")

    def config_for(self, tensor_type: str, module_type: str = "grouped_linear",
                   name: str = "") -> dict:
        """The quantizer config the C++ recipe gives the role {module_type, tensor_type, name}
        (a dict: mode, element, usages, delayed, amax_history_len, amax_compute_algo, margin,
        ...)."""
        return _C._recipe_config(self.name, module_type, tensor_type, name,
                                 {"amax_history_len": self.amax_history_len,
                                  "amax_compute_algo": self.amax_compute_algo,
                                  "margin": self.margin})

    def elements(self) -> Tuple[str, ...]:
        """The FP8 element of each role of ROLES ("e4m3" / "e5m2"), as the C++ recipe says."""
        return self._elements

    def initial_state(self, num_groups: int, device=None) -> Tuple[Tensor, Tensor]:
        """(scale (3, G) ones, amax_history (3, amax_history_len, G) zeros), FP32, rows in
        ROLES order: the state of one layer of G = num_groups experts, as the C++ Quantizer
        starts its own for each."""
        if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
            raise _C.InvalidArgumentError(
                f"tessera invalid argument: initial_state: num_groups must be an int >= 1 (the "
                f"layer's experts), got {num_groups!r}")
        return (torch.ones(len(ROLES), num_groups, dtype=torch.float32, device=device),
                torch.zeros(len(ROLES), self.amax_history_len, num_groups,
                            dtype=torch.float32, device=device))


def quantize_fp8_delayed_impl(x: Tensor, scale: Tensor, amax_history: Tensor, rowwise: bool,
                              columnwise: bool, element: str, amax_compute_algo: str,
                              margin: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """FP8 per-tensor delayed scaling of a 2-D (R, C) tensor with the role state `scale` (1,)
    and `amax_history` (L,) (FP32, x's device), then the state's update. Returns (data (R, C),
    scale_inv (1,), columnwise_data (C, R) = the transposed codes, columnwise_scale_inv (1,)),
    data in torch.float8_e4m3fn / float8_e5m2; a usage not asked for comes back empty."""
    check(x.dim() == 2, _C.ShapeError,
          lambda: f"quantize_fp8_delayed: x must be 2-D, got {x.dim()}-D")
    r, c = x.shape
    dev = x.device
    dt = _FP8_DTYPES[element]
    data = torch.empty((r, c) if rowwise else (0, 0), dtype=dt, device=dev)
    cdata = torch.empty((c, r) if columnwise else (0, 0), dtype=dt, device=dev)
    scales = torch.empty(4, dtype=torch.float32, device=dev)  # scale_inv, cw scale_inv, amaxes
    x_c = x if x.is_contiguous() else x.contiguous()
    dl = br.dl
    stream = br.stream_handle(dev)
    with br.device_scope(dev):
        _C._quantize_into(dl(x_c), "tensor", element, rowwise, columnwise,
                          dl(data.view(torch.uint8)), dl(scales[0:1]),
                          dl(cdata.view(torch.uint8)), dl(scales[1:2]), stream, dl(scales[2:3]),
                          dl(scales[3:4]), dl(scale), dl(amax_history))
        _C._delayed_update(dl(scale), dl(amax_history), element, amax_compute_algo, margin,
                           stream)
    return (data, scales[0:1] if rowwise else scales[:0], cdata,
            scales[1:2] if columnwise else scales[:0])


@torch.library.custom_op("tessera::quantize_fp8_delayed", mutates_args=("scale", "amax_history"))
def quantize_fp8_delayed(x: Tensor, scale: Tensor, amax_history: Tensor, rowwise: bool,
                         columnwise: bool, element: str, amax_compute_algo: str,
                         margin: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The custom op of quantize_fp8_delayed_impl (traceable by torch.compile; it mutates the
    role state)."""
    out = quantize_fp8_delayed_impl(x, scale, amax_history, rowwise, columnwise, element,
                                    amax_compute_algo, margin)
    return tuple(t.clone() if t.dim() == 1 else t for t in out)  # outputs must not alias


@quantize_fp8_delayed.register_fake
def _quantize_delayed_fake(x, scale, amax_history, rowwise, columnwise, element,
                           amax_compute_algo, margin):
    r, c = x.shape
    dt = _FP8_DTYPES[element]
    return (x.new_empty((r, c) if rowwise else (0, 0), dtype=dt),
            x.new_empty((1 if rowwise else 0,), dtype=torch.float32),
            x.new_empty((c, r) if columnwise else (0, 0), dtype=dt),
            x.new_empty((1 if columnwise else 0,), dtype=torch.float32))


__all__ = ["DelayedScaling", "ROLES", "quantize_fp8_delayed", "quantize_fp8_delayed_impl"]
