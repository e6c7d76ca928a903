"""The training step of the grouped MLP on tessera: fc1 → SwiGLU (× routing probabilities) → fc2
per group of rows, forward and backward each one call into compiled code
(torch.ops.tessera.mlp_fwd / mlp_bwd, the C++ step of tessera/nn/mlp_step.h). Eager, the autograd
node is C++ (torch.ops.tessera.mlp); under torch.compile, _MlpFn calls the same ops from Python.

    h = x W1_gᵀ (+ b1_g) = [gate | up];  a = silu(gate) ⊙ up (⊙ p);  y = a W2_gᵀ (+ b2_g)

The step keeps the SwiGLU input h in x's dtype for the backward, and fc1's and fc2's quantized
input copies (or, for dense recipes, fc2's input a; x itself is the autograd input). Same
contracts as tessera.torch.linear: weight caches (re-quantized every forward unless promised),
rows in no group, T = 0, main grads, stochastic rounding.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import _tessera as _C
from . import _ext
from ._errors import double_backward_error
from .linear import WeightCache, _delayed_tensors, autocast_input


class GradRowwise:
    """Where the op that consumes y's gradient leaves it as its rowwise quantized copy for the
    MLP's backward (GroupedMLP.forward(grad_rowwise=...)): put((codes, scale_inv)) in its own
    backward, which runs first, and return an expanded zero tensor as y's gradient; the MLP's
    backward then take()s the codes and reads them as fc2's dy (LinearBackwardArgs::dy_rowwise),
    its gradient argument giving only the shape and dtype. A backward that finds nothing put
    reads its gradient as usual."""

    def __init__(self):
        self._codes = None

    def put(self, codes: tuple) -> None:
        self._codes = codes

    def take(self) -> Optional[tuple]:
        codes, self._codes = self._codes, None
        return codes


class _MlpFn(torch.autograd.Function):
    """One grouped MLP step. wc1 / wc2: the weight copies to read, or None to make them now (then
    returned as the second and third outputs for the caller's caches)."""

    @staticmethod
    def forward(ctx, x, w1, w2, offs, probs, b1, b2, spec1, spec2, prefix, wc1, wc2, ds1, ah1, ds2,
                ah2, mg1, mg2, x_codes=None, x_scale_inv=None, grad_rowwise=None):
        requantize = wc1 is None
        need_wgrad = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        y, s1, h, s2, a, made1, made2 = _ext.call(
            _ext.mlp_fwd, x, w1, w2, offs, probs, b1, b2, wc1, wc2, requantize, spec1, spec2,
            prefix, ds1, ah1, ds2, ah2, need_wgrad, x_codes, x_scale_inv)
        c1, c2 = (made1, made2) if requantize else (wc1, wc2)
        dense_x = s1.numel() == 0 and need_wgrad  # fc1's weight gradient reads x itself
        ctx.save_for_backward(offs, x if dense_x else None, probs, w1, w2, c1, c2, s1, h, s2, a,
                              ds1, ah1, ds2, ah2, mg1, mg2)
        ctx.meta = (spec1, spec2, prefix, b1 is not None, w1.dtype,
                    b1.dtype if b1 is not None else w1.dtype,
                    probs.dtype if probs is not None else torch.float32)
        ctx.grad_rowwise = grad_rowwise
        ctx.mark_non_differentiable(made1, made2)
        ctx.set_materialize_grads(False)  # no zero tensors for the copies' (unused) gradients
        return y, made1, made2

    @staticmethod
    def backward(ctx, dy, _1, _2):
        if torch.is_grad_enabled():
            raise double_backward_error("GroupedMLP")
        if dy is None:  # y took no part in the loss
            return (None,) * 21
        (offs, x, probs, w1, w2, c1, c2, s1, h, s2, a, ds1, ah1, ds2, ah2, mg1,
         mg2) = ctx.saved_tensors
        spec1, spec2, prefix, has_bias, w_dtype, b_dtype, p_dtype = ctx.meta
        need = ctx.needs_input_grad
        need_dx, need_dprobs = need[0], probs is not None and need[4]
        need_dw = need[1] or need[2]
        need_db = has_bias and (need[5] or need[6])
        codes = ctx.grad_rowwise.take() if ctx.grad_rowwise is not None else None
        dy_codes, dy_scale_inv = codes if codes is not None else (None, None)
        if codes is None and not dy.is_contiguous():  # (with codes, dy's values are not read)
            dy = dy.contiguous()
        dx, dprobs, dw1, db1, dw2, db2 = _ext.call(
            _ext.mlp_bwd, dy, offs, x, probs, w1, w2, c1 if c1.numel() else None,
            c2 if c2.numel() else None, s1, h, s2, a, spec1, spec2, prefix, has_bias, ds1, ah1, ds2,
            ah2, mg1, mg2, need_dx, need_dprobs, need_dw, need_db, w_dtype, b_dtype, p_dtype,
            dy_codes, dy_scale_inv)
        accumulate = mg1 is not None
        return (dx if need_dx else None, dw1 if need[1] and not accumulate else None,
                dw2 if need[2] and not accumulate else None, None,
                dprobs if need_dprobs else None, db1 if need_db else None,
                db2 if need_db else None) + (None,) * 14


def mlp_step(x: Tensor, w1: Tensor, w2: Tensor, offs: Tensor, probs: Optional[Tensor],
             specs, prefix: str, caches, *, b1: Optional[Tensor] = None,
             b2: Optional[Tensor] = None, states=(None, None),
             main_grads=(None, None), promised: bool = False,
             x_rowwise: Optional[tuple] = None,
             grad_rowwise: Optional[GradRowwise] = None) -> Tensor:
    """The step (GroupedMLP's forward). specs: the recipe texts of fc1 and fc2 (spec_of);
    caches: (WeightCache, WeightCache) of fc1 and fc2; states: fc1's and fc2's delayed state
    ((scale, history) or None); main_grads: FP32 main grads of fc1 and fc2 (both or neither);
    promised: the caller promises unchanged weights (is_first_microbatch=False); x_rowwise:
    (codes, scale_inv), x's rowwise copy in fc1's input quantization (x then gives only the
    shape, the activations' dtype and the gradient's way back: its values are not read);
    grad_rowwise: where y's gradient may arrive as its rowwise copy in fc2's grad_output
    quantization (GradRowwise; the step then runs the Python autograd node)."""
    spec1, spec2 = specs
    x_codes, x_scale_inv = x_rowwise if x_rowwise is not None else (None, None)
    if x_rowwise is None:
        x = autocast_input(x)
    if x.dim() != 2 or x.shape[1] != w1.shape[2]:
        raise _C.ShapeError(f"tessera shape mismatch: x: expected (T, {w1.shape[2]}), got "
                            f"{tuple(x.shape)}")
    if probs is not None and tuple(probs.shape) != (x.shape[0],):
        raise _C.ShapeError(f"tessera shape mismatch: probs: expected ({x.shape[0]},), got "
                            f"{tuple(probs.shape)}")
    (ds1, ah1), (ds2, ah2) = (_delayed_tensors(sp, st, x.device, w1.shape[0])
                              for sp, st in zip(specs, states))
    c1, c2 = caches
    usable = (c1 is not None and c2 is not None and c1.usable(w1, spec1, promised)
              and c2.usable(w2, spec2, promised))
    wc1, wc2 = (caches[0].copies, caches[1].copies) if usable else (None, None)
    xc = x if x.is_contiguous() or x_rowwise is not None else x.contiguous()
    # The C++ node, unless y's gradient may come as codes (GradRowwise: the Python node reads
    # them) or torch.compile traces the step (it traces _MlpFn's calls of the ops).
    if _ext.mlp is not None and grad_rowwise is None and not torch.compiler.is_compiling():
        y, made1, made2 = _ext.call(_ext.mlp, xc, w1, w2, offs, probs, b1, b2, wc1, wc2, spec1,
                                    spec2, prefix, ds1, ah1, ds2, ah2, *main_grads, x_codes,
                                    x_scale_inv)
    else:
        y, made1, made2 = _MlpFn.apply(xc, w1, w2, offs, probs, b1, b2, spec1, spec2, prefix,
                                       wc1, wc2, ds1, ah1, ds2, ah2, *main_grads, x_codes,
                                       x_scale_inv, grad_rowwise)
    if not usable and caches[0] is not None:
        caches[0].store(w1, spec1, made1)
        caches[1].store(w2, spec2, made2)
    return y


__all__ = ["GradRowwise", "WeightCache", "mlp_step"]
