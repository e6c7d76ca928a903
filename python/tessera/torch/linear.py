"""The training step of a grouped linear layer on tessera: y = x · W_gᵀ (+ b_g) per group of rows,
its dgrad, wgrad and bias gradient — one autograd node, one call into compiled code per
direction (torch.ops.tessera.linear_fwd / linear_bwd, the C++ step of tessera/nn/linear_step.h).
Eager, the node is C++ (torch.ops.tessera.linear: no Python runs in the backward); under
torch.compile, or where that module was built for another torch, _LinearFn below calls the same
two ops from Python.

    grouped_linear(x (T, K), weight (G, N, K), offs (G,) int32 cumulative end offsets,
                   recipe="bf16" | "fp8_rowwise" | ... | DelayedScaling | CustomRecipe,
                   weight_cache=None, *, bias=None, delayed_state=None, main_grad=None,
                   name="") -> y (T, N)

What the C++ step does (docs/torch_training.md): every recipe of the C++ table, x and dy each
quantized once (both usages in one pass), the weight once per quantization (both usages), the
GEMMs reading every copy as it is stored; activations stay in x's dtype (BF16 in, BF16 out);
dense recipes compute in a 16-bit weight's own dtype, or in the recipe's on a cast copy of FP32
master weights. Rows in no group (past offs[-1]) get y = 0, dx = 0, no bias, and add to no
gradient. T = 0 is a valid step. main_grad (Megatron's gradient-accumulation fusion): an FP32
(G, N, K) tensor the wgrad adds into (the K-grouped GEMM with beta = 1); weight.grad then stays
untouched. Stochastic rounding (NVFP4 gradients) draws its Philox offsets from a counter of the
compiled step: set_rng_offset(v) makes a run reproducible.

The weight cache contract (no stale weight without an explicit promise): a forward re-quantizes
(or re-casts) the weight every call, unless
  * the caller promises that the weights did not change since their copies were made — the
    `weights_unchanged()` context, or `is_first_microbatch=False` (TransformerEngine's spelling)
    in the module's forward; or
  * `quantize_weights_(module)` made the copies from the current weights (the optimizer calls
    it after updating them) and nothing has changed the weight since in a way torch records.
In both cases the copies are re-made anyway when an optimizer has stepped since they were made
(any torch.optim.Optimizer, counted by torch's global step hook: the fused optimizers write the
weights without moving their version counter), or the weight is another tensor (compared by
identity, not by address), has another shape or dtype, or its version counter moved (an
in-place write through torch). Writes through `weight.data` are invisible to torch: after one,
no promise holds — call `quantize_weights_` again (or leave the default, which re-quantizes).
Under torch.compile the weight is quantized in every call (a cache is Python state the graph
cannot see).
"""
from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_post_hook

from .. import _tessera as _C
from . import _ext
from ._errors import double_backward_error
from .recipe import recipe_spec, resolve

_local = threading.local()

# Optimizer steps taken anywhere (torch.optim's global step hook, every torch.optim.Optimizer):
# copies made by quantize_weights_ count as the current weights' only until the next step.
_optimizer_steps = [0]


def _count_optimizer_step(optimizer, args, kwargs) -> None:
    _optimizer_steps[0] += 1


register_optimizer_step_post_hook(_count_optimizer_step)


@contextlib.contextmanager
def weights_unchanged():
    """Inside this context the caller promises that no weight of a tessera layer changed since
    its copies were made (later micro-batches of one optimizer step): forwards reuse the cached
    copies instead of re-quantizing."""
    previous = getattr(_local, "promise", False)
    _local.promise = True
    try:
        yield
    finally:
        _local.promise = previous


def _promised() -> bool:
    return getattr(_local, "promise", False)


def set_rng_offset(offset: int) -> None:
    """Sets the stochastic-rounding counter of the compiled step (every stochastically rounded
    quantization takes the next value): the same sequence of steps from the same offset draws
    the same bits."""
    _ext.call(_ext.ops.set_rng_offset, int(offset))


def rng_offset() -> int:
    """The offset the next stochastically rounded quantization of a step takes."""
    return int(_ext.ops.get_rng_offset())


class WeightCache:
    """The weight copies (both usages, as one uint8 tensor laid out by the C++ step) of one
    weight, with what they were made from. See the module doc for when they are reused; they
    are never state: pickling, deepcopy and state_dict leave them out."""

    def __init__(self):
        self.invalidate()

    def invalidate(self) -> None:
        """Drops the copies: the next forward re-makes them."""
        self.copies: Optional[Tensor] = None
        self.key = None
        self.weight = None  # a weak reference to the tensor the copies were made from
        self.fresh = False  # made by quantize_weights_ from the current weights
        self.steps = 0      # the optimizer steps counted when the copies were made

    @staticmethod
    def key_of(weight: Tensor, spec: str):
        """What the copies were made from: the weight's storage, shape, dtype and version
        counter, and the step's spec (the tensor itself is compared apart, by identity)."""
        return (weight.data_ptr(), weight.shape, weight.dtype, weight._version, spec)

    def mark_fresh(self) -> None:
        """The copies were just made from the current weights (quantize_weights_): forwards
        may read them without a promise until the weight changes or an optimizer steps (copies
        never outlive an optimizer step, promised or fresh)."""
        self.fresh, self.steps = True, _optimizer_steps[0]

    def usable(self, weight: Tensor, spec: str, promised: bool = False) -> bool:
        """Whether the copies may be read instead of re-made (module doc); `promised`: the
        caller's promise (is_first_microbatch=False), as the weights_unchanged() context."""
        # Copies expire at the next optimizer step, promise or not: torch's fused optimizers
        # write the weights without moving their version counter.
        if self.key is None or self.steps != _optimizer_steps[0]:
            self.fresh = False
            return False
        # Without a promise or fresh copies the answer is no whatever the key (the common step:
        # decided before the key is built).
        if not (self.fresh or promised or _promised()) or torch.compiler.is_compiling():
            return False
        # Another tensor may sit at the old one's address with the same version: identity too.
        if self.weight() is not weight or self.key != self.key_of(weight, spec):
            self.fresh = False
            return False
        # Copies made under torch.inference_mode cannot be saved for a training step's backward.
        return not self.copies.is_inference() or torch.is_inference_mode_enabled()

    def store(self, weight: Tensor, spec: str, copies: Tensor) -> None:
        """Keeps `copies` as made from `weight` under `spec` (not fresh: mark_fresh says so).
        Nothing is kept while compiling."""
        if torch.compiler.is_compiling():
            return
        self.copies, self.key, self.fresh = copies, self.key_of(weight, spec), False
        self.weight, self.steps = weakref.ref(weight), _optimizer_steps[0]

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.invalidate()

    def __deepcopy__(self, memo):
        return WeightCache()


@torch.compiler.assume_constant_result
def spec_of(recipe, name: str = "") -> str:
    """The text form of a recipe argument for layer `name` (tessera.torch.recipe), resolved once
    (a custom factory runs here); a constant under torch.compile. A recipe name's text is kept
    (names are immutable): the functional step checks it once, not every call."""
    return (_name_spec if isinstance(recipe, str) else _resolved_spec)(recipe, name)


def _resolved_spec(recipe, name: str) -> str:
    resolved, _ = resolve(recipe)
    return recipe_spec(resolved, name)


# A name's text, kept (an unknown name raises: nothing is kept then).
_name_spec = functools.lru_cache(maxsize=256)(_resolved_spec)


def is_delayed(spec: str) -> bool:
    return spec.startswith("fp8_delayed")


def _delayed_tensors(spec: str, state, device, groups: int):
    """(delayed_scale (3, G), amax_history (3, L, G)) of a delayed-scaling step over `groups`
    experts, checked; (None, None) otherwise."""
    if not is_delayed(spec):
        return None, None
    if state is None:
        raise _C.InvalidArgumentError(
            "tessera invalid argument: delayed_state: fp8_delayed keeps a scale and an amax "
            "history per role and expert across steps; pass delayed_state=(scale (3, G), "
            "amax_history (3, L, G)) (DelayedScaling.initial_state(G)) or use GroupedLinear, "
            "which keeps them")
    scale, history = state
    for t, dims, name in ((scale, "(3, G)", "scale"), (history, "(3, L, G)", "amax_history")):
        if (t.dim() != len(dims.split(",")) or t.shape[0] != 3 or t.shape[-1] != groups
                or t.dtype != torch.float32 or t.device != device or not t.is_contiguous()):
            raise _C.ShapeError(f"tessera shape mismatch: delayed_state: {name} must be a "
                                f"contiguous float32 {dims} tensor with G = {groups} on {device}, "
                                f"got {tuple(t.shape)} {t.dtype} on {t.device}")
    return scale, history


class _LinearFn(torch.autograd.Function):
    """One grouped linear step: forward and backward each one call of the compiled step.
    `w_in`: the weight copies to read, or None to make them now; the copies made are the second
    output (uint8, not differentiable; (0,) when none were made) for the caller's cache."""

    @staticmethod
    def forward(ctx, x, weight, offs, bias, spec, name, w_in, scale, history, main_grad):
        requantize = w_in is None
        save = ctx.needs_input_grad[1]  # the wgrad reads the saved copy of x
        y, saved, made = _ext.call(_ext.linear_fwd, x, weight, offs, bias, w_in, requantize,
                                   spec, name, scale, history, save)
        copies = made if requantize else w_in
        dense_x = saved.numel() == 0  # the step saved no copy of x: backward reads x itself
        ctx.save_for_backward(offs, x if dense_x and save else None, weight, copies, saved,
                              scale, history, main_grad)
        ctx.meta = (spec, name, bias is not None, x.dtype, weight.dtype,
                    bias.dtype if bias is not None else x.dtype)
        ctx.mark_non_differentiable(made)
        ctx.set_materialize_grads(False)  # no zero tensor for the copies' (unused) gradient
        return y, made

    @staticmethod
    def backward(ctx, dy, _):
        if torch.is_grad_enabled():
            raise double_backward_error("grouped_linear")
        if dy is None:  # y took no part in the loss
            return (None,) * 10
        offs, x, weight, copies, saved, scale, history, main_grad = ctx.saved_tensors
        spec, name, has_bias, x_dtype, w_dtype, b_dtype = ctx.meta
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_db = has_bias and ctx.needs_input_grad[3]
        dy = dy if dy.is_contiguous() else dy.contiguous()
        dx, dw, db = _ext.call(_ext.linear_bwd, dy, offs, x, weight,
                               copies if copies.numel() else None, saved, spec, name, has_bias,
                               scale, history, main_grad, need_dx, need_dw, need_db, x_dtype,
                               w_dtype, b_dtype)
        return (dx if need_dx else None, dw if need_dw and main_grad is None else None, None,
                db if need_db else None) + (None,) * 6


_OFFSET_DTYPES = (torch.int32, torch.int64)


def _check(x: Tensor, weight: Tensor, offs: Tensor, bias: Optional[Tensor],
           main_grad: Optional[Tensor]) -> None:
    xs, ws, offs_shape = x.shape, weight.shape, offs.shape
    if (len(xs) == 2 and len(ws) == 3 and ws[2] == xs[1] and len(offs_shape) == 1
            and offs_shape[0] == ws[0]
            and offs.dtype in _OFFSET_DTYPES and bias is None and main_grad is None):
        return  # the common case, checked at once; the messages below name what is wrong
    if x.dim() != 2:
        raise _C.ShapeError(f"tessera shape mismatch: x: expected a 2-D (T, in) tensor, got "
                            f"{tuple(x.shape)}")
    if weight.dim() != 3 or weight.shape[2] != x.shape[1]:
        raise _C.ShapeError(f"tessera shape mismatch: weight: expected (G, out, "
                            f"{x.shape[1]}), got {tuple(weight.shape)}")
    if offs.dim() != 1 or offs.dtype not in (torch.int32, torch.int64) \
            or offs.shape[0] != weight.shape[0]:
        raise _C.ShapeError(f"tessera shape mismatch: offs: expected ({weight.shape[0]},) int32 "
                            f"cumulative end offsets, got {tuple(offs.shape)} {offs.dtype}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0], weight.shape[1]):
        raise _C.ShapeError(f"tessera shape mismatch: bias: expected "
                            f"{(weight.shape[0], weight.shape[1])}, got {tuple(bias.shape)}")
    if main_grad is not None and (main_grad.shape != weight.shape
                                  or main_grad.dtype != torch.float32
                                  or main_grad.device != weight.device
                                  or not main_grad.is_contiguous()):
        raise _C.ShapeError(f"tessera shape mismatch: main_grad: expected a contiguous float32 "
                            f"{tuple(weight.shape)} tensor on {weight.device}, got "
                            f"{tuple(main_grad.shape)} {main_grad.dtype} on {main_grad.device}")


def autocast_input(x: Tensor) -> Tensor:
    """x in torch.autocast's dtype when autocast is on for its device (the layer then computes
    and returns in that dtype, as torch's own layers do under autocast)."""
    if not torch._C._is_any_autocast_enabled():  # the common case, one cheap call
        return x
    dev = x.device.type
    if torch.is_autocast_enabled(dev) and x.is_floating_point():
        dt = torch.get_autocast_dtype(dev)
        if x.dtype != dt:
            return x.to(dt)
    return x


def linear_step(x: Tensor, weight: Tensor, offs: Tensor, spec: str, name: str,
                cache: Optional[WeightCache], *, bias: Optional[Tensor] = None,
                delayed_state=None, main_grad: Optional[Tensor] = None,
                promised: bool = False) -> Tensor:
    """The step of a recipe text (spec_of) (GroupedLinear's forward and grouped_linear).
    promised: the caller promises unchanged weights (is_first_microbatch=False)."""
    x = autocast_input(x)
    _check(x, weight, offs, bias, main_grad)
    scale = history = None
    if is_delayed(spec):
        scale, history = _delayed_tensors(spec, delayed_state, x.device, weight.shape[0])
    w_in = (cache.copies if cache is not None and cache.usable(weight, spec, promised)
            else None)
    xc = x if x.is_contiguous() else x.contiguous()
    w = weight if weight.is_contiguous() else weight.contiguous()
    if _ext.linear is not None and not torch.compiler.is_compiling():  # the C++ node
        y, made = _ext.call(_ext.linear, xc, w, offs, bias, w_in, spec, name, scale, history,
                            main_grad)
    else:
        y, made = _LinearFn.apply(xc, w, offs, bias, spec, name, w_in, scale, history, main_grad)
    if w_in is None and cache is not None:
        cache.store(weight, spec, made)
    return y


def grouped_linear(x: Tensor, weight: Tensor, offs: Tensor, recipe="bf16",
                   weight_cache: Optional[WeightCache] = None, *, bias: Optional[Tensor] = None,
                   delayed_state: Optional[Tuple[Tensor, Tensor]] = None,
                   main_grad: Optional[Tensor] = None, name: str = "") -> Tensor:
    """y (T, N) = x (T, K) · W_gᵀ (+ bias_g) for the rows of each group (offs: int32 cumulative
    ends), weight (G, N, K) as torch.nn.Linear stores it per group. Differentiable in x, weight
    and bias. recipe: a name of RECIPES, a DelayedScaling or a CustomRecipe; fp8_delayed needs
    `delayed_state` = (scale (3, G), amax_history (3, L, G)), one per role and expert
    (DelayedScaling.initial_state(G)), updated in place. weight_cache: a WeightCache whose
    copies may be reused (module doc: only under a promise). main_grad: FP32 (G, N, K) that the
    weight gradient is added to instead of being returned. name: the layer's name in the roles a
    CustomRecipe's factory sees."""
    return linear_step(x, weight, offs, spec_of(recipe, name), name, weight_cache, bias=bias,
                       delayed_state=delayed_state, main_grad=main_grad)


def fp8_rowwise_grouped_mm(x: Tensor, w_t: Tensor, offs: Tensor,
                           out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """Differentiable FP8-rowwise grouped GEMM: x (T, K) @ w_t (G, K, N) -> (T, N), the
    functional form of grouped_linear(recipe="fp8_rowwise") with w_t the transposed view of
    (G, N, K) weights (any other layout is copied once). No weight cache: every call quantizes.
    out_dtype (torchao's argument): None or x's dtype — y comes out in x's dtype."""
    if out_dtype is not None and out_dtype != x.dtype:
        raise _C.UnsupportedError(
            f"tessera unsupported: out_dtype: {out_dtype} differs from x's dtype {x.dtype}; the "
            f"step writes y in x's dtype (pass out_dtype=None or {x.dtype}, or cast x)")
    return grouped_linear(x, w_t.transpose(-2, -1), offs, "fp8_rowwise")


__all__ = ["WeightCache", "fp8_rowwise_grouped_mm", "grouped_linear", "linear_step", "spec_of",
           "rng_offset", "set_rng_offset", "weights_unchanged"]
