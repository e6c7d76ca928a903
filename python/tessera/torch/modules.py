"""tessera.torch.GroupedLinear and GroupedMLP: the layers of an MoE expert block over a token
buffer whose rows are grouped by int32 cumulative end offsets (or group sizes) — thin holders of
parameters and state over the one C++ training step (tessera.torch.linear, tessera.torch.mlp).

    GroupedLinear:  y[rows of g] = x[rows of g] @ W_gᵀ (+ b_g)
    GroupedMLP:     h = x W1_gᵀ = [gate | up];  a = silu(gate) ⊙ up (⊙ p);  y = a W2_gᵀ

Both take every recipe of RECIPES, a DelayedScaling or a CustomRecipe (its roles carry the
layer's `name`: GroupedMLP names its layers "fc1" and "fc2", or "<name>.fc1" / "<name>.fc2").
Weights are single contiguous (G, out, in) parameters (torch.nn.Linear's layout per group) in
`params_dtype` (bf16 by default; FP32 master weights are cast or quantized for compute), so
state_dict round-trips with plain tensors; fp8_delayed adds two buffers per layer,
`delayed_scale` (3, G) and `amax_history` (3, L, G) (rows: input, weight, grad_output; one
scale and history per expert). A state_dict saved with one state per role ((3,) and (3, L))
loads with that state given to every expert.
accumulate_main_grad=True: the weight gradient is added to the FP32 `weight.main_grad`
(Megatron's convention) and weight.grad is left alone; the bias gets a plain .grad.
Weight copies follow tessera.torch.linear's contract: re-made every forward unless the caller
promises (`is_first_microbatch=False`, `weights_unchanged()`, or `quantize_weights_(model)`).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor, nn

from .. import _tessera as _C
from . import _ext
from .linear import WeightCache, linear_step, spec_of
from .mlp import mlp_step
from .moe_dist import recipe_dispatch_mode
from .recipe import RECIPES, resolve


def _sizes_arg(splits, m_splits):
    """The group sizes given as `splits` or as TransformerEngine's `m_splits` (one of them)."""
    if splits is not None and m_splits is not None:
        raise _C.InvalidArgumentError("tessera invalid argument: splits / m_splits: the same "
                                      "group sizes under two names; give one")
    return splits if m_splits is None else m_splits


def offsets_from(offs: Optional[Tensor], splits, groups: int, device=None) -> Tensor:
    """int32 cumulative end offsets from either `offs` (returned as is) or group sizes `splits`
    (a tensor — one cumsum on its device, no host sync — or a list of ints, TransformerEngine's
    m_splits, copied to `device`). A list or tuple given as `offs` holds group sizes (TE's
    positional m_splits); offsets are always a tensor."""
    if isinstance(offs, (list, tuple)) and splits is None:
        offs, splits = None, offs  # TE's forward(inp, m_splits): a list holds group sizes
    if (offs is None) == (splits is None):
        raise _C.InvalidArgumentError("tessera invalid argument: offs / splits: give exactly one "
                                      "(int32 cumulative end offsets, or the group sizes)")
    if offs is not None:
        return offs
    if isinstance(splits, (list, tuple)):
        splits = torch.tensor(splits, dtype=torch.int64, device=device)
    if splits.dim() != 1 or splits.shape[0] != groups:
        raise _C.ShapeError(f"tessera shape mismatch: splits: expected ({groups},) group sizes, "
                            f"got {tuple(splits.shape)}")
    return torch.cumsum(splits, 0, dtype=torch.int32)


def _params_dtype(params_dtype, dtype) -> torch.dtype:
    if params_dtype is not None and dtype is not None and params_dtype != dtype:
        raise _C.InvalidArgumentError(f"tessera invalid argument: params_dtype {params_dtype} and "
                                      f"dtype {dtype}: give one (they name the same thing)")
    chosen = params_dtype if params_dtype is not None else dtype
    return chosen if chosen is not None else torch.bfloat16


def quantize_weights_(module: nn.Module) -> None:
    """Re-makes the weight copies of every tessera layer in `module` from its current weights
    (both usages, every recipe) and lets later forwards reuse them until a weight changes in a
    way torch records (tessera.torch.linear's contract): call it after the optimizer step, so that
    no forward of the next step quantizes a weight."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (GroupedLinear, GroupedMLP)) and not m._inside_mlp:
                m._quantize_weights()


class GroupedLinear(nn.Module):
    """G independent linear layers applied to the row groups of one (T, in_features) tensor.

    weight: (G, out_features, in_features), one contiguous parameter; bias: (G, out_features) or
    None; both in params_dtype (`dtype` is the same argument under torch's factory name).

    forward(x (T, in), offs (G,) int32 cumulative end offsets | splits=(G,) sizes (a tensor or
    a list), is_first_microbatch=None) -> (T, out). Rows past offs[-1] give zeros.
    """

    def __init__(self, num_groups: int, in_features: int, out_features: int,
                 recipe="bf16", bias: bool = False, device=None, dtype=None, *,
                 params_dtype=None, accumulate_main_grad: bool = False, name: str = ""):
        super().__init__()
        if min(num_groups, in_features, out_features) < 1:
            raise _C.InvalidArgumentError("tessera invalid argument: num_groups, in_features and "
                                          "out_features must be >= 1")
        recipe, delayed = resolve(recipe)
        factory = {"device": device, "dtype": _params_dtype(params_dtype, dtype)}
        self.num_groups, self.in_features, self.out_features = num_groups, in_features, out_features
        self.name = name
        self.recipe, self.delayed_scaling = recipe, delayed
        # The recipe's text: a custom factory runs now (once per role), errors surface here —
        # and so do the step's refusals of these sizes (the C++ spec of the layer, as the ops
        # make it: e.g. a block-scaled weight's out_features in whole blocks).
        self.spec = spec_of(delayed or recipe, name)
        _ext.linear_sizes(self.spec, name, num_groups, in_features, out_features, bias,
                          factory["dtype"])
        self.accumulate_main_grad = accumulate_main_grad
        self.weight = nn.Parameter(torch.empty(num_groups, out_features, in_features, **factory))
        self.bias = (nn.Parameter(torch.empty(num_groups, out_features, **factory)) if bias
                     else None)
        if delayed is not None:
            scale, history = delayed.initial_state(num_groups, device)
            self.register_buffer("delayed_scale", scale)  # (3, G) input, weight, grad_output
            self.register_buffer("amax_history", history)  # (3, amax_history_len, G)
        self.weight_cache = WeightCache()
        self._inside_mlp = False
        self.reset_parameters()
        if accumulate_main_grad:
            self._main_grad()

    def reset_parameters(self) -> None:
        """torch.nn.Linear's default initialization, per group (uniform in ±1/sqrt(in))."""
        bound = 1.0 / math.sqrt(self.in_features)  # nn.Linear's default init, per group
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    def invalidate_weight_cache(self) -> None:
        """Drops the cached weight copies: the next forward quantizes the weight again."""
        self.weight_cache.invalidate()

    def _delayed_state(self):
        return (self.delayed_scale, self.amax_history) if self.delayed_scaling else None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A state_dict of one delayed state per role (before the state was kept per expert):
        # (3,) and (3, L) load as that state given to every expert.
        for key, dims in (("delayed_scale", 1), ("amax_history", 2)):
            t = state_dict.get(prefix + key)
            if self.delayed_scaling is not None and isinstance(t, Tensor) and t.dim() == dims:
                state_dict[prefix + key] = t.unsqueeze(-1).expand(
                    *t.shape, self.num_groups).contiguous()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _main_grad(self) -> Tensor:
        """weight.main_grad, FP32 zeros made on first use and again when the weight moved
        (module.to) or changed shape."""
        w = self.weight
        mg = getattr(w, "main_grad", None)
        if mg is None or mg.shape != w.shape or mg.device != w.device:
            if torch.compiler.is_compiling():  # a graph cannot give a Parameter an attribute
                raise _C.InvalidArgumentError(
                    "tessera invalid argument: weight.main_grad: accumulate_main_grad=True under "
                    "torch.compile needs weight.main_grad (FP32, the weight's shape and device) "
                    "before the layer is traced: run one eager forward first, or set it (e.g. "
                    "after copy.deepcopy or module.to, which do not carry it)")
            mg = torch.zeros(w.shape, dtype=torch.float32, device=w.device)
            w.main_grad = mg
        return mg

    def _quantize_weights(self) -> None:
        x = self.weight.new_empty((0, self.in_features))
        offs = torch.zeros(self.num_groups, dtype=torch.int32, device=self.weight.device)
        self.weight_cache.invalidate()
        linear_step(x, self.weight, offs, self.spec, self.name, self.weight_cache,
                    delayed_state=self._delayed_state())
        self.weight_cache.mark_fresh()

    def forward(self, x: Tensor, offs: Optional[Tensor] = None, splits=None, *,
                m_splits=None, is_first_microbatch: Optional[bool] = None) -> Tensor:
        """x (T, in_features) -> (T, out_features): rows [offs[g-1], offs[g]) through layer g.

        Give the groups once: `offs` (G,) int32 cumulative end offsets, or their sizes as
        `splits` / `m_splits` (TransformerEngine's name; a tensor or a list of ints; a list
        passed positionally is read as sizes). Rows past offs[-1] give zeros.
        is_first_microbatch=False reuses the weights' quantized copies (unchanged weights).
        """
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise _C.ShapeError(f"tessera shape mismatch: x: expected (T, {self.in_features}), "
                                f"got {tuple(x.shape)}")
        if splits is not None or m_splits is not None or not isinstance(offs, Tensor):
            offs = offsets_from(offs, _sizes_arg(splits, m_splits), self.num_groups,
                                x.device)
        main_grad = self._main_grad() if self.accumulate_main_grad else None
        # TransformerEngine's is_first_microbatch: False promises unchanged weights.
        return linear_step(x, self.weight, offs, self.spec, self.name, self.weight_cache,
                           bias=self.bias, main_grad=main_grad,
                           delayed_state=self._delayed_state(),
                           promised=is_first_microbatch is False)

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
    (G, hidden, ffn). fc1 and fc2 are GroupedLinear layers holding the parameters (and delayed
    state) of one step that runs them together, named "fc1" and "fc2" (or "<name>.fc1",
    "<name>.fc2") in a CustomRecipe's roles.

    forward(x (T, hidden), offs (G,) int32 cumulative end offsets | splits=(G,) sizes,
            probs (T,) routing probabilities or None, is_first_microbatch=None,
            x_rowwise=None) -> (T, hidden).
    """

    def __init__(self, num_groups: int, hidden: int, ffn: int, recipe="bf16",
                 bias: bool = False, device=None, dtype=None, *, params_dtype=None,
                 accumulate_main_grad: bool = False, name: str = ""):
        super().__init__()
        self.recipe, self.delayed_scaling = resolve(recipe)
        self.num_groups, self.hidden, self.ffn = num_groups, hidden, ffn
        self.name = name
        self.prefix = f"{name}." if name else ""
        kw = {"params_dtype": params_dtype, "accumulate_main_grad": accumulate_main_grad}
        self.fc1 = GroupedLinear(num_groups, hidden, 2 * ffn, recipe, bias, device, dtype, **kw,
                                 name=self.prefix + "fc1")
        self.fc2 = GroupedLinear(num_groups, ffn, hidden, recipe, bias, device, dtype, **kw,
                                 name=self.prefix + "fc2")
        self.fc1._inside_mlp = self.fc2._inside_mlp = True
        self._inside_mlp = False

    def invalidate_weight_cache(self) -> None:
        """Drops both layers' cached weight copies."""
        self.fc1.invalidate_weight_cache()
        self.fc2.invalidate_weight_cache()

    def _run(self, x: Tensor, offs: Tensor, probs: Optional[Tensor],
             promised: bool = False, x_rowwise: Optional[tuple] = None,
             grad_rowwise=None) -> Tensor:
        l1, l2 = self.fc1, self.fc2
        main_grads = ((l1._main_grad(), l2._main_grad()) if l1.accumulate_main_grad
                      else (None, None))
        return mlp_step(x, l1.weight, l2.weight, offs, probs, (l1.spec, l2.spec), self.prefix,
                        (l1.weight_cache, l2.weight_cache), b1=l1.bias, b2=l2.bias,
                        states=(l1._delayed_state(), l2._delayed_state()),
                        main_grads=main_grads, promised=promised, x_rowwise=x_rowwise,
                        grad_rowwise=grad_rowwise)

    def rowwise_input_mode(self) -> str:
        """The rowwise quantization whose codes forward(x_rowwise=...) reads as fc1's input: the
        recipe's activation mode where an FP8 dispatch sends its payload in it ("rowwise",
        "block1x128", "mxfp8"), else "none" (MoELayer's codes_to_experts asks this)."""
        if not isinstance(self.recipe, str):
            return "none"
        return recipe_dispatch_mode(self.recipe)[0]

    def rowwise_grad_mode(self) -> str:
        """The rowwise quantization whose codes backward reads as fc2's output gradient
        (forward(grad_rowwise=...)): rowwise_input_mode() where fc2's grad_output role quantizes
        in that mode with E4M3 (what a combine that quantizes gradients sends), else "none"."""
        mode = self.rowwise_input_mode()
        if mode == "none":
            return "none"
        c = _C._recipe_config(self.recipe, "grouped_linear", "grad_output", self.prefix + "fc2", {})
        return mode if c["mode"] == mode and c["element"] == "e4m3" else "none"

    def _quantize_weights(self) -> None:
        x = self.fc1.weight.new_empty((0, self.hidden))
        offs = torch.zeros(self.num_groups, dtype=torch.int32, device=x.device)
        self.invalidate_weight_cache()
        self._run(x, offs, None)
        self.fc1.weight_cache.mark_fresh()
        self.fc2.weight_cache.mark_fresh()

    def forward(self, x: Tensor, offs: Optional[Tensor] = None, probs: Optional[Tensor] = None,
                splits=None, *, m_splits=None,
                is_first_microbatch: Optional[bool] = None,
                x_rowwise: Optional[tuple] = None, grad_rowwise=None) -> Tensor:
        """x (T, hidden) -> (T, hidden): fc1 -> SwiGLU (times probs) -> fc2 per row group.

        Groups as in GroupedLinear.forward (`offs`, or sizes as `splits` / `m_splits`); `probs`
        (T,) scales each row's SwiGLU output (the routing probabilities; None: 1).
        x_rowwise: (codes, scale_inv), x's rowwise copy in fc1's input quantization
        (rowwise_input_mode(): uint8 or float8 codes (T, hidden), compact scales — an FP8
        dispatch's payload): fc1's forward reads it as it is instead of quantizing x, and the
        weight gradient's copy is made from its values (dequantize(x_rowwise), FP32). x then
        gives only the shape, the activations' dtype and the way back for dx: its values are
        not read (an expanded tensor will do).
        grad_rowwise: a tessera.torch.mlp.GradRowwise through which the consumer of the output
        may hand the output's gradient over as its rowwise copy in fc2's grad_output
        quantization (rowwise_grad_mode(): codes, compact scales — a combine's quantized
        gradient): fc2's backward then reads the codes (dgrad) and makes the weight gradient's
        copy from their values, instead of quantizing the gradient it is given.
        """
        offs = offsets_from(offs, _sizes_arg(splits, m_splits), self.num_groups,
                            x.device)
        return self._run(x, offs, probs, promised=is_first_microbatch is False,
                         x_rowwise=x_rowwise, grad_rowwise=grad_rowwise)

    def extra_repr(self) -> str:
        recipe = self.delayed_scaling if self.delayed_scaling is not None else self.recipe
        return (f"num_groups={self.num_groups}, hidden={self.hidden}, ffn={self.ffn}, "
                f"recipe={recipe!r}")


__all__ = ["GroupedLinear", "GroupedMLP", "RECIPES", "offsets_from", "quantize_weights_"]
