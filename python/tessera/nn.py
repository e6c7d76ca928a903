"""tessera.nn: the C++ nn layers (tessera::nn::GroupedLinear, GroupedMLP) on NumPy arrays.

The same objects C++ users build — one implementation, docs/nn.md — with their FP32 master
weights shown as NumPy views of the layers' own buffers (`layer.weight[...] = w` writes them),
explicit forward / backward and the contexts a training forward saves:

    lin = tessera.nn.GroupedLinear(4, 256, 128, "fp8_current", bias=True, name="fc1")
    y, ctx = lin.forward(x, splits)        # x (T, 256) float32, splits (4,) group sizes
    dx, dw, db = lin.backward(ctx, dy)     # dy (T, 128)

Recipes: a name ("fp32", "bf16", "fp8_current", "fp8_current:e4m3", "fp8_delayed",
"fp8_rowwise", "fp8_block", "mxfp8", "nvfp4", ...) or a factory
factory(module_type, tensor_type, name) -> {"mode": ..., "element": ...} (a custom recipe,
called once per role while the layer is built; `token_alignment` pads its groups, 0 = 16).
Host (CPU) arrays only; tessera.torch is the PyTorch front end (CPU and CUDA). Every error is a
tessera.Error naming the argument.
"""
from __future__ import annotations

from . import _tessera_errors
from ._tessera import nn as _nn

GroupedLinearContext = _nn.GroupedLinearContext
GroupedMLPContext = _nn.GroupedMLPContext


class GroupedLinear:
    """y_g = x_g W_gᵀ (+ b_g) for each group g (expert) of x's rows.

    weight: FP32 (G, out, in), bias: FP32 (G, out) or None — views of the layer's buffers,
    initialized by reset_parameters(0) (U(±1/sqrt(in))). The recipe's token alignment pads each
    group before quantization (`token_alignment`); a context keeps the quantized operands backward
    reads. Rows of x past the groups (a capacity buffer) give zero rows in y and dx."""

    @_tessera_errors
    def __init__(self, num_groups: int, in_features: int, out_features: int, recipe,
                 bias: bool = False, *, name: str = "grouped_linear",
                 save_original_input: bool = False, token_alignment: int = 0):
        self._impl = _nn.GroupedLinear(num_groups, in_features, out_features, recipe, bias,
                                       name=name, save_original_input=save_original_input,
                                       token_alignment=token_alignment)

    @classmethod
    def _of(cls, impl) -> "GroupedLinear":
        layer = cls.__new__(cls)
        layer._impl = impl
        return layer

    num_groups = property(lambda self: self._impl.num_groups, doc="G, the number of groups")
    in_features = property(lambda self: self._impl.in_features, doc="in, the columns of x")
    out_features = property(lambda self: self._impl.out_features, doc="out, the columns of y")
    token_alignment = property(lambda self: self._impl.token_alignment,
                               doc="rows per group the layer asks of the splits (0: any)")
    name = property(lambda self: self._impl.name, doc="the layer's name in the recipe's roles")
    weight = property(lambda self: self._impl.weight, doc="FP32 (G, out, in), writable view")
    bias = property(lambda self: self._impl.bias, doc="FP32 (G, out) view, or None")

    @_tessera_errors
    def reset_parameters(self, seed: int = 0) -> None:
        """Draws new weights and bias, uniform in ±1/sqrt(in_features), from `seed`."""
        self._impl.reset_parameters(seed)

    @_tessera_errors
    def forward(self, x, splits, *, training: bool = True, requantize_weights: bool = True):
        """(y (T, out) float32, ctx): x (T, in) floating (converted to float32), splits (G,)
        integer group sizes, sum <= T. training=False saves no context (ctx.valid is False);
        requantize_weights=False reuses this step's quantized weights (later micro-batches;
        a forward that re-quantizes them invalidates the earlier contexts)."""
        return self._impl.forward(x, splits, training=training,
                                  requantize_weights=requantize_weights)

    @_tessera_errors
    def backward(self, ctx, dy, *, need_dx: bool = True, need_weight_grads: bool = True,
                 accumulate_into=None):
        """(dx, dw, db) for dy (T, out) of the forward that made ctx; None where not asked for
        (db: None without bias). accumulate_into: (dw,) or (dw, db) FP32 arrays the gradients
        are added to in place (main-grad accumulation), returned as dw, db."""
        return self._impl.backward(ctx, dy, need_dx=need_dx,
                                   need_weight_grads=need_weight_grads,
                                   accumulate_into=accumulate_into)

    def __repr__(self) -> str:
        return (f"tessera.nn.GroupedLinear({self.num_groups}, {self.in_features}, "
                f"{self.out_features}, bias={self.bias is not None}, name={self.name!r}, "
                f"token_alignment={self.token_alignment})")


class GroupedMLP:
    """Per group g of x's rows: h = x W1_gᵀ = [gate | up], a = silu(gate) ⊙ up (⊙ probs),
    y = a W2_gᵀ; fc1 (hidden -> 2·ffn) and fc2 (ffn -> hidden) are GroupedLinear layers named
    "<name>.fc1" and "<name>.fc2" in the recipe's roles, sharing one recipe state."""

    @_tessera_errors
    def __init__(self, num_groups: int, hidden: int, ffn: int, recipe, bias: bool = False, *,
                 name: str = "mlp", save_original_input: bool = False,
                 token_alignment: int = 0):
        self._impl = _nn.GroupedMLP(num_groups, hidden, ffn, recipe, bias, name=name,
                                    save_original_input=save_original_input,
                                    token_alignment=token_alignment)

    num_groups = property(lambda self: self._impl.num_groups, doc="G, the number of groups")
    hidden = property(lambda self: self._impl.hidden, doc="the columns of x and y")
    ffn = property(lambda self: self._impl.ffn, doc="the width of the activation a")
    fc1 = property(lambda self: GroupedLinear._of(self._impl.fc1),
                   doc="the GroupedLinear hidden -> 2·ffn")
    fc2 = property(lambda self: GroupedLinear._of(self._impl.fc2),
                   doc="the GroupedLinear ffn -> hidden")

    @_tessera_errors
    def reset_parameters(self, seed: int = 0) -> None:
        """Draws both layers' parameters anew: fc1 from seed 2·seed, fc2 from 2·seed + 1."""
        self._impl.reset_parameters(seed)

    @_tessera_errors
    def forward(self, x, splits, probs=None, *, training: bool = True,
                requantize_weights: bool = True):
        """(y (T, hidden) float32, ctx): x (T, hidden), splits (G,), probs (T,) routing
        probabilities or None."""
        return self._impl.forward(x, splits, probs, training=training,
                                  requantize_weights=requantize_weights)

    @_tessera_errors
    def backward(self, ctx, dy, *, need_dx: bool = True, need_weight_grads: bool = True,
                 accumulate_into=None) -> dict:
        """A dict: dx, dprobs (when the forward had probs), fc1_dw, fc1_db, fc2_dw, fc2_db (None
        when not asked for or without bias). accumulate_into: a dict of those weight keys with
        FP32 arrays added to in place."""
        return self._impl.backward(ctx, dy, need_dx=need_dx,
                                   need_weight_grads=need_weight_grads,
                                   accumulate_into=accumulate_into)

    def __repr__(self) -> str:
        return (f"tessera.nn.GroupedMLP({self.num_groups}, {self.hidden}, {self.ffn}, "
                f"bias={self.fc1.bias is not None}, fc1={self.fc1.name!r})")


__all__ = ["GroupedLinear", "GroupedLinearContext", "GroupedMLP", "GroupedMLPContext"]
