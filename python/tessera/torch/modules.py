"""tessera.torch.GroupedLinear and GroupedMLP: the layers of an MoE expert block over a token
buffer whose rows are grouped by int32 cumulative end offsets (or group sizes).

    GroupedLinear:  y[rows of g] = x[rows of g] @ W_gᵀ (+ b_g)
    GroupedMLP:     h = x W1_gᵀ = [gate | up];  a = silu(gate) ⊙ up (⊙ p);  y = a W2_gᵀ

Both run their GEMMs through tessera.torch.linear.grouped_linear (the operands are read as
stored, FP8 weights are quantized once per weight version) and take every recipe of
tessera.torch.linear.RECIPES. Weights are single contiguous (G, out, in) parameters
(torch.nn.Linear's layout per group), so state_dict round-trips with plain tensors.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .linear import RECIPES, WeightCache, grouped_linear


def offsets_from(offs: Optional[Tensor], splits: Optional[Tensor], groups: int) -> Tensor:
    """int32 cumulative end offsets from either `offs` (returned as is) or group sizes `splits`
    (one cumsum on their device, no host sync)."""
    if (offs is None) == (splits is None):
        raise ValueError("offs / splits: give exactly one (int32 cumulative end offsets, or "
                         "the group sizes)")
    if offs is not None:
        return offs
    if splits.dim() != 1 or splits.shape[0] != groups:
        raise ValueError(f"splits: expected ({groups},) group sizes, got {tuple(splits.shape)}")
    return torch.cumsum(splits, 0, dtype=torch.int32)


def _check_recipe(recipe: str) -> None:
    if recipe not in RECIPES:
        raise ValueError(f"recipe: {recipe!r} is not supported by tessera.torch; expected one of "
                         f"{RECIPES}")


def _bias_rows(bias: Tensor, offs: Tensor, rows: int) -> Tensor:
    """bias[group of each row] (rows, out) without a host sync."""
    idx = torch.arange(rows, device=bias.device, dtype=offs.dtype)
    group = torch.bucketize(idx, offs, right=True).clamp_(max=bias.shape[0] - 1)
    return bias[group]


class GroupedLinear(nn.Module):
    """G independent linear layers applied to the row groups of one (T, in_features) tensor.

    weight: (G, out_features, in_features), one contiguous parameter; bias: (G, out_features) or
    None. recipe: "bf16" (GEMMs in the parameters' dtype, bf16) or "fp8_rowwise" (dynamic FP8
    E4M3 rowwise scaling of activations, weights and gradients, FP32 accumulation, output in the
    input's dtype; group sizes multiples of 16). The FP8 weight copies are cached until the
    weight changes (in-place updates bump its version); `invalidate_weight_cache()` drops them.

    forward(x (T, in), offs (G,) int32 cumulative end offsets | splits=(G,) sizes) -> (T, out).
    Rows past offs[-1] are not computed (left unwritten, as torch._grouped_mm does).
    """

    def __init__(self, num_groups: int, in_features: int, out_features: int,
                 recipe: str = "bf16", bias: bool = False, device=None, dtype=None):
        super().__init__()
        _check_recipe(recipe)
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
        self.weight_cache = WeightCache()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)  # nn.Linear's default init, per group
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    def invalidate_weight_cache(self) -> None:
        self.weight_cache.invalidate()

    def forward(self, x: Tensor, offs: Optional[Tensor] = None,
                splits: Optional[Tensor] = None) -> Tensor:
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"x: expected (T, {self.in_features}), got {tuple(x.shape)}")
        offs = offsets_from(offs, splits, self.num_groups)
        y = grouped_linear(x, self.weight, offs, self.recipe, self.weight_cache)
        if self.bias is not None:
            y = y + _bias_rows(self.bias, offs, x.shape[0]).to(y.dtype)
        return y

    def extra_repr(self) -> str:
        return (f"num_groups={self.num_groups}, in_features={self.in_features}, "
                f"out_features={self.out_features}, recipe={self.recipe!r}, "
                f"bias={self.bias is not None}")


class GroupedMLP(nn.Module):
    """The expert computation of an MoE layer: per group g of routed tokens
    h = x W1_gᵀ (G, 2·ffn, hidden) = [gate | up], a = silu(gate) ⊙ up (⊙ probs), y = a W2_gᵀ
    (G, hidden, ffn). fc1 and fc2 are GroupedLinear layers of the same recipe.

    forward(x (T, hidden), offs (G,) int32 cumulative end offsets | splits=(G,) sizes,
            probs (T,) routing probabilities or None) -> (T, hidden).
    """

    def __init__(self, num_groups: int, hidden: int, ffn: int, recipe: str = "bf16",
                 bias: bool = False, device=None, dtype=None):
        super().__init__()
        _check_recipe(recipe)
        self.num_groups, self.hidden, self.ffn, self.recipe = num_groups, hidden, ffn, recipe
        self.fc1 = GroupedLinear(num_groups, hidden, 2 * ffn, recipe, bias, device, dtype)
        self.fc2 = GroupedLinear(num_groups, ffn, hidden, recipe, bias, device, dtype)

    def invalidate_weight_cache(self) -> None:
        self.fc1.invalidate_weight_cache()
        self.fc2.invalidate_weight_cache()

    def forward(self, x: Tensor, offs: Optional[Tensor] = None, probs: Optional[Tensor] = None,
                splits: Optional[Tensor] = None) -> Tensor:
        offs = offsets_from(offs, splits, self.num_groups)
        h = self.fc1(x, offs)                                   # (T, 2·ffn)
        gate, up = h.chunk(2, dim=-1)
        a = F.silu(gate) * up                                   # (T, ffn)
        if probs is not None:
            if probs.shape != (x.shape[0],):
                raise ValueError(f"probs: expected ({x.shape[0]},), got {tuple(probs.shape)}")
            a = a * probs.to(a.dtype).unsqueeze(-1)
        return self.fc2(a, offs)

    def extra_repr(self) -> str:
        return (f"num_groups={self.num_groups}, hidden={self.hidden}, ffn={self.ffn}, "
                f"recipe={self.recipe!r}")
