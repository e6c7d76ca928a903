"""tessera.torch.GroupedLinear: one linear layer per group (expert) over a token buffer whose
rows are grouped by int32 cumulative end offsets — y[rows of g] = x[rows of g] @ W_g^T (+ b_g).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .fp8 import fp8_rowwise_grouped_mm
from .ops import grouped_mm

RECIPES = ("bf16", "fp8_rowwise")


class GroupedLinear(nn.Module):
    """G independent linear layers applied to the row groups of one (T, in_features) tensor.

    weight: (G, out_features, in_features) — torch.nn.Linear's layout per group, one contiguous
    parameter (the GEMM reads it as the (G, in, out) transposed view, no copy).
    bias: (G, out_features) or None.
    recipe: "bf16" (the GEMM in the parameters' dtype: bf16, fp16 or fp32) or "fp8_rowwise"
    (dynamic FP8 E4M3 rowwise quantization of activations, weights and gradients; FP32
    accumulation; output in the input's dtype).

    forward(x (T, in), offs (G,) int32 cumulative end offsets) -> (T, out). Rows past offs[-1]
    are not computed (left unwritten, as torch._grouped_mm does).
    """

    def __init__(self, num_groups: int, in_features: int, out_features: int,
                 recipe: str = "bf16", bias: bool = False, device=None, dtype=None):
        super().__init__()
        if recipe not in RECIPES:
            raise ValueError(f"recipe: {recipe!r} is not supported; expected one of {RECIPES}")
        if num_groups < 1 or in_features < 1 or out_features < 1:
            raise ValueError("num_groups, in_features and out_features must be >= 1")
        factory = {"device": device, "dtype": dtype if dtype is not None else torch.bfloat16}
        self.num_groups = num_groups
        self.in_features = in_features
        self.out_features = out_features
        self.recipe = recipe
        self.weight = nn.Parameter(torch.empty(num_groups, out_features, in_features, **factory))
        self.bias = (nn.Parameter(torch.empty(num_groups, out_features, **factory)) if bias
                     else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)  # nn.Linear's default init, per group
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    def forward(self, x: Tensor, offs: Tensor) -> Tensor:
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"x: expected (T, {self.in_features}), got {tuple(x.shape)}")
        w_t = self.weight.transpose(-2, -1)                       # (G, in, out) view
        if self.recipe == "fp8_rowwise":
            y = fp8_rowwise_grouped_mm(x, w_t, offs)
        else:
            y = grouped_mm(x.to(self.weight.dtype), w_t, offs)
        if self.bias is not None:
            rows = torch.arange(x.shape[0], device=x.device, dtype=offs.dtype)
            group = torch.bucketize(rows, offs, right=True).clamp_(max=self.num_groups - 1)
            y = y + self.bias[group].to(y.dtype)                  # (T, out), no host sync
        return y

    def extra_repr(self) -> str:
        return (f"num_groups={self.num_groups}, in_features={self.in_features}, "
                f"out_features={self.out_features}, recipe={self.recipe!r}, "
                f"bias={self.bias is not None}")
