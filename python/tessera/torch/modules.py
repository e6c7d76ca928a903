"""tessera.torch.GroupedLinear and GroupedMLP: the layers of an MoE expert block over a token
buffer whose rows are grouped by int32 cumulative end offsets (or group sizes).

    GroupedLinear:  y[rows of g] = x[rows of g] @ W_gᵀ (+ b_g)
    GroupedMLP:     h = x W1_gᵀ = [gate | up];  a = silu(gate) ⊙ up (⊙ p);  y = a W2_gᵀ

Both run their GEMMs through tessera.torch.linear.grouped_linear (the operands are read as stored,
FP8 weights are quantized once per weight version) and take every recipe of
tessera.torch.linear.RECIPES, a DelayedScaling or a CustomRecipe (tessera.torch.recipe; its roles
carry the layer's `name`: GroupedMLP names its layers "fc1" and "fc2"). Weights are single
contiguous (G, out, in) parameters (torch.nn.Linear's layout per group) in `params_dtype` (bf16 by
default; FP32 master weights are cast or quantized for compute), so state_dict round-trips with
plain tensors; fp8_delayed adds two buffers per layer, `delayed_scale` (3,) and `amax_history`
(3, L) (rows: input, weight, grad_output), which state_dict carries too. accumulate_main_grad=True:
the weight gradient is added to the FP32 `weight.main_grad` (Megatron's convention) and
weight.grad is left alone.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .delayed import DelayedScaling, resolve
from .linear import RECIPES, WeightCache, grouped_linear
from .recipe import CustomRecipe


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


def _check_recipe(recipe) -> Tuple[object, Optional[DelayedScaling]]:
    """(recipe name or CustomRecipe, DelayedScaling or None) of a recipe argument."""
    if isinstance(recipe, CustomRecipe):
        return recipe, None
    name, delayed = resolve(recipe)
    if name not in RECIPES or (delayed is None and ":" in name):
        raise ValueError(f"recipe: {recipe!r} is not supported by tessera.torch; expected one of "
                         f"{RECIPES} (fp8_delayed also as fp8_delayed:e4m3), a DelayedScaling or "
                         f"a CustomRecipe")
    return name, delayed


def _params_dtype(params_dtype, dtype) -> torch.dtype:
    if params_dtype is not None and dtype is not None and params_dtype != dtype:
        raise ValueError(f"params_dtype {params_dtype} and dtype {dtype}: give one (they name the "
                         f"same thing)")
    chosen = params_dtype if params_dtype is not None else dtype
    return chosen if chosen is not None else torch.bfloat16


def _bias_rows(bias: Tensor, offs: Tensor, rows: int) -> Tensor:
    """bias[group of each row] (rows, out) without a host sync."""
    idx = torch.arange(rows, device=bias.device, dtype=offs.dtype)
    group = torch.bucketize(idx, offs, right=True).clamp_(max=bias.shape[0] - 1)
    return bias[group]


class GroupedLinear(nn.Module):
    """G independent linear layers applied to the row groups of one (T, in_features) tensor.

    weight: (G, out_features, in_features), one contiguous parameter; bias: (G, out_features) or
    None; both in params_dtype (`dtype` is the same argument under torch's factory name).
    recipe (tessera.torch.linear says how each runs): "bf16" (16-bit GEMMs: the parameters'
    dtype, or bf16 for FP32 master weights), "fp8_rowwise", "fp8_current", "fp8_delayed" /
    "fp8_delayed:e4m3" / a DelayedScaling (per-role scale and amax history in the buffers
    `delayed_scale`, `amax_history`), "fp8_block" (1x128 blocks of x and dy, 128x128 tiles of
    W; on CUDA out_features % 128 == 0), "mxfp8" (E8M0 scales per 1x32 block of x, dy and W
    along the contraction of each GEMM, columnwise copies untransposed; on CUDA it needs the CUDA
    GEMM's MXFP8 operands), or a CustomRecipe (its factory's config per role; the roles carry
    `name`, resolved here: a bad config is refused when the layer is made). FP8 and MXFP8
    output is in the input's dtype; FP8 group sizes multiples of 16. The weight's compute copy
    is cached until the weight changes (in-place updates bump its version);
    `invalidate_weight_cache()` drops it. accumulate_main_grad: the wgrad GEMM adds into the
    FP32 `weight.main_grad` (made zero here; the caller zeroes it between optimizer steps) and
    weight.grad stays None; the bias gets a plain .grad.

    forward(x (T, in), offs (G,) int32 cumulative end offsets | splits=(G,) sizes) -> (T, out).
    Rows past offs[-1] are not computed (left unwritten, as torch._grouped_mm does).
    """

    def __init__(self, num_groups: int, in_features: int, out_features: int,
                 recipe="bf16", bias: bool = False, device=None, dtype=None, *,
                 params_dtype=None, accumulate_main_grad: bool = False, name: str = ""):
        super().__init__()
        recipe_name, delayed = _check_recipe(recipe)
        if num_groups < 1 or in_features < 1 or out_features < 1:
            raise ValueError("num_groups, in_features and out_features must be >= 1")
        if isinstance(recipe_name, CustomRecipe):
            recipe_name.roles(name)  # the factory runs now (once per role), errors surface here
        factory = {"device": device, "dtype": _params_dtype(params_dtype, dtype)}
        self.num_groups = num_groups
        self.in_features = in_features
        self.out_features = out_features
        self.name = name
        self.recipe = recipe_name
        self.delayed_scaling = delayed
        self.accumulate_main_grad = accumulate_main_grad
        self.weight = nn.Parameter(torch.empty(num_groups, out_features, in_features, **factory))
        self.bias = (nn.Parameter(torch.empty(num_groups, out_features, **factory)) if bias
                     else None)
        if delayed is not None:
            scale, history = delayed.initial_state(device)
            self.register_buffer("delayed_scale", scale)      # (3,) input, weight, grad_output
            self.register_buffer("amax_history", history)     # (3, amax_history_len)
        self.weight_cache = WeightCache()
        self.reset_parameters()
        if accumulate_main_grad:
            self._main_grad()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)  # nn.Linear's default init, per group
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    def invalidate_weight_cache(self) -> None:
        self.weight_cache.invalidate()

    def _main_grad(self) -> Tensor:
        """weight.main_grad, FP32 zeros made on first use and again when the weight moved
        (module.to) or changed shape."""
        w = self.weight
        mg = getattr(w, "main_grad", None)
        if not torch.compiler.is_compiling() and (
                mg is None or mg.shape != w.shape or mg.device != w.device):
            mg = torch.zeros(w.shape, dtype=torch.float32, device=w.device)
            w.main_grad = mg
        return mg

    def forward(self, x: Tensor, offs: Optional[Tensor] = None,
                splits: Optional[Tensor] = None) -> Tensor:
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"x: expected (T, {self.in_features}), got {tuple(x.shape)}")
        offs = offsets_from(offs, splits, self.num_groups)
        main_grad = self._main_grad() if self.accumulate_main_grad else None
        if self.delayed_scaling is not None:
            y = grouped_linear(x, self.weight, offs, self.delayed_scaling, self.weight_cache,
                               delayed_state=(self.delayed_scale, self.amax_history),
                               main_grad=main_grad)
        else:
            y = grouped_linear(x, self.weight, offs, self.recipe, self.weight_cache,
                               main_grad=main_grad, name=self.name)
        if self.bias is not None:
            y = y + _bias_rows(self.bias, offs, x.shape[0]).to(y.dtype)
        return y

    def extra_repr(self) -> str:
        recipe = self.delayed_scaling if self.delayed_scaling is not None else self.recipe
        return (f"num_groups={self.num_groups}, in_features={self.in_features}, "
                f"out_features={self.out_features}, recipe={recipe!r}, "
                f"bias={self.bias is not None}, params_dtype={self.weight.dtype}"
                + (", accumulate_main_grad=True" if self.accumulate_main_grad else "")
                + (f", name={self.name!r}" if self.name else ""))


class GroupedMLP(nn.Module):
    """The expert computation of an MoE layer: per group g of routed tokens
    h = x W1_gᵀ (G, 2·ffn, hidden) = [gate | up], a = silu(gate) ⊙ up (⊙ probs), y = a W2_gᵀ
    (G, hidden, ffn). fc1 and fc2 are GroupedLinear layers of the same recipe, named "fc1" and
    "fc2" (or "<name>.fc1", "<name>.fc2" when `name` is given) in a CustomRecipe's roles.

    forward(x (T, hidden), offs (G,) int32 cumulative end offsets | splits=(G,) sizes,
            probs (T,) routing probabilities or None) -> (T, hidden).
    """

    def __init__(self, num_groups: int, hidden: int, ffn: int, recipe="bf16",
                 bias: bool = False, device=None, dtype=None, *, params_dtype=None,
                 accumulate_main_grad: bool = False, name: str = ""):
        super().__init__()
        self.recipe, self.delayed_scaling = _check_recipe(recipe)
        self.num_groups, self.hidden, self.ffn = num_groups, hidden, ffn
        self.name = name
        kw = {"params_dtype": params_dtype, "accumulate_main_grad": accumulate_main_grad}
        prefix = f"{name}." if name else ""
        self.fc1 = GroupedLinear(num_groups, hidden, 2 * ffn, recipe, bias, device, dtype, **kw,
                                 name=prefix + "fc1")
        self.fc2 = GroupedLinear(num_groups, ffn, hidden, recipe, bias, device, dtype, **kw,
                                 name=prefix + "fc2")

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
        recipe = self.delayed_scaling if self.delayed_scaling is not None else self.recipe
        return (f"num_groups={self.num_groups}, hidden={self.hidden}, ffn={self.ffn}, "
                f"recipe={recipe!r}")
