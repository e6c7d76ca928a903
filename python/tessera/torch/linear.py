"""The training step of a grouped linear layer on tessera: y = x · W_gᵀ per group of rows, its
dgrad and wgrad, for every recipe the torch front end runs.

    grouped_linear(x (T, K), weight (G, N, K), offs (G,) int32 cumulative end offsets,
                   recipe="bf16" | "fp8_rowwise" | "fp8_current" | "fp8_delayed" | "fp8_block"
                          | "mxfp8" | "nvfp4" | DelayedScaling | CustomRecipe,
                   weight_cache=None, *, delayed_state=None, main_grad=None, name="")
                   -> y (T, N)

Each GEMM reads its operands in the layout they are in (nothing is transposed or copied between
tessera calls, no PyTorch elementwise op runs in the step):
- bf16: forward M-grouped TN (x, W as stored); dgrad M-grouped NN (dy, W as stored: the kernel
  reads W MN-major); wgrad K-grouped (dy, x as stored, MN-major) straight into the weight's
  dtype. The GEMMs run in the weight's dtype when it is bf16/fp16, else in bf16 on a bf16 copy
  of the (FP32 master) weight made once per weight version; dW comes out in the weight's dtype.
- fp8_rowwise (torchao's dynamic rowwise recipe, E4M3 everywhere, FP32 accumulation): x and dy
  are quantized once each, both usages in one pass (rowwise: scales per token row; columnwise:
  the transposed codes with one scale per column); W once per weight version, both usages in one
  pass of the (G·N, K) matrix (rowwise: scales per output row along K; columnwise: the transposed
  codes (K, G·N), one scale per input column k, shared by the groups — what the C++ nn layer
  does). forward = xq · Wq, dgrad = dyq · W columnwise, wgrad = dy columnwise · x columnwise, all
  scales applied in the GEMM epilogue.
- fp8_current (TE's per-tensor current scaling, E4M3 everywhere — the C++ recipe
  "fp8_current:e4m3"): the same step with one scale per tensor (x, dy, and the whole (G·N, K)
  weight), scale = 448 / amax; the columnwise copies are the transposed codes of the same scale.
- fp8_delayed (TE's DelayedScaling, tessera.torch.delayed): the fp8_current step with each
  role's scale taken from its amax history instead of the tensor itself; HYBRID by default (the
  C++ recipe's: E4M3 x and W, E5M2 dy). The state — per role (input, weight, grad_output) one
  FP32 scale and one amax history, `delayed_state = (scale (3,), amax_history (3, L))` — lives on
  the device (GroupedLinear keeps it in buffers) and every quantize updates it in place, no host
  sync.
- fp8_block (DeepSeek-V3's recipe, the C++ recipe "fp8_block": E4M3 everywhere, power-of-two
  FP32 scales): x and dy quantized once each with one scale per 1x128 block along K (rowwise
  copy) and per 128x1 block along the tokens (columnwise copy, stored transposed), both in one
  pass; W once per weight version with one scale per 128x128 tile of the (G·N, K) matrix, both
  usages (the columnwise copy (K, G·N) has the tiles of Wᵀ). forward = x 1x128 · W 128x128,
  dgrad = dy 1x128 · W columnwise (the CUDA GEMM needs N % 128 == 0 here, so that no tile of the
  contraction straddles two experts, and refuses other N; the CPU runs every shape), wgrad = dy
  columnwise · x columnwise (the 128-token blocks may straddle group boundaries: a block's scale
  then covers rows of two experts). Scales applied per block inside the GEMM's main loop.
- mxfp8 (OCP MX, the C++ recipe "mxfp8": E4M3 everywhere, E8M0 scales, exponent rounded up): x
  and dy quantized once each, both usages in one pass — rowwise one scale per 1x32 block along
  K (resp. N), columnwise one per 32x1 block along the tokens; W once per weight version, both
  usages of the (G·N, K) matrix (1x32 blocks along K, 32x1 blocks along G·N). Unlike the FP8
  modes, MXFP8's columnwise copies are NOT transposed: codes stay (T, K), (T, N), (G·N, K), and
  the GEMMs read them in that layout. forward = x rowwise · W rowwise, dgrad = dy rowwise · W
  columnwise, wgrad = dy columnwise · x columnwise, scales (torch.float8_e8m0fnu, compact) applied
  per 32-element block of the contraction. With out_features % 32 == 0 the cached columnwise
  copy of W is kept moved into Wᵀ's rowwise layout per group ((G·K, N) codes, (G·K, N/32)
  scales: the same bytes) and the dgrad runs as the forward's TN GEMM on it, so the CUDA GEMM
  transposes no weight per call. Blocks along G·N and along the tokens may straddle a group
  boundary (out_features or a group size not a multiple of 32): the block's scale then covers
  values of two experts — correct, only coarser. The C++ recipe's token alignment is 32 (what
  its nn layer and tessera.torch.moe's dispatch pad groups to); this step takes any group sizes
  and pads nothing. The CPU GEMM runs every shape; the CUDA GEMM needs group sizes multiples of
  16 and out_features % 32 == 0 (docs/torch_training.md).
- nvfp4 (the C++ recipe "nvfp4": E2M1 codes two per byte, low nibble first; E4M3 scales,
  torch.float8_e4m3fn, compact; one FP32 global amax per copy): x and dy quantized once each,
  both usages in one pass (quantize_nvfp4) — rowwise codes (T, K/2) bytes with one scale per
  1x16 block; the columnwise copy stored TRANSPOSED, (K, T/2) bytes, 16x1 blocks along the
  tokens, quantized after the 16-point random Hadamard transform of each 16 tokens; dy
  stochastically rounded (Philox, the recipe's seed, the offset from SR_OFFSETS: a host counter
  advanced once per stochastically rounded quantization, so every layer and step draws fresh
  bits with no host sync; under torch.compile the offset is read at trace time, not advanced).
  W once per weight version as nvfp4_16x16 (16x16 tiles), both usages, no transform.
  forward = x rowwise · W rowwise, dgrad = dy rowwise · W columnwise, wgrad = dy columnwise ·
  x columnwise (the two transforms cancel), each NVFP4 operand with its copy's global amax.
  in_features and out_features must be even; T a multiple of 16 when the weight needs a
  gradient (the transform). The CPU GEMM takes any group sizes (it undoes each transform); the
  CUDA GEMM needs group sizes multiples of 16 (the transform's blocks may not straddle groups).
- a CustomRecipe (tessera.torch.recipe): the step of the modes and elements its factory gives
  the roles of layer `name` (any mix of the above that the GEMMs pair: one scale family for all
  three roles — "mxfp8" / "mxfp8_32x32" (32x32 weight tiles) in any mix is one —, or MXFP8 and
  NVFP4 modes in any mix (NVFP4 roles from a factory have no transform and no stochastic
  rounding); E5M2 for grad_output only); per-tensor roles use current scaling.
Each FP8 recipe's roles (input, weight, grad_output) get the scaling mode and element the C++
recipe gives them (`_tessera._recipe_config`, `_custom_recipe_config`); the mode travels with the
codes into the GEMM ops.
Group sizes for the FP8 recipes (MXFP8: above) must be multiples of 16 rows (as
torch._scaled_grouped_mm asks): the wgrad reads each group's token columns with 16-byte TMA loads
and writes NaN for a group that breaks this, never silently wrong numbers. Rows past offs[-1] (a
capacity buffer): the BF16 GEMMs leave them unwritten, as torch._grouped_mm; the FP8 and MXFP8
outputs have them zero, because every row of x and dy takes part in the per-column (per 32x1
block) scales of the wgrad operands — a layer's own outputs must not feed unwritten memory
(possibly NaN) into the next layer's scales. Input rows past offs[-1] must be finite for the same
reason.

main_grad (Megatron's gradient-accumulation fusion): an FP32 (G, N, K) tensor the wgrad
accumulates into (the K-grouped GEMM with beta = 1) instead of producing weight.grad, which then
stays untouched.

Quantized (or 16-bit cast) weights are cached across calls (micro-batches, eval/train
alternation) in a `WeightCache` and re-made only when the weight changes (its version counter,
storage or shape): both usages are always produced together, so no usage can go stale.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _tessera as _C
from . import _bridge as br
from .delayed import (ROLES, DelayedScaling, quantize_fp8_delayed, quantize_fp8_delayed_impl,
                      resolve)
from .fp8 import (MX_MODES, quantize_fp8_block, quantize_fp8_block_impl, quantize_fp8_rowwise,
                  quantize_fp8_rowwise_impl, quantize_fp8_tensor, quantize_fp8_tensor_impl,
                  quantize_mxfp8, quantize_mxfp8_impl)
from .nvfp4 import NVFP4_MODES, quantize_nvfp4, quantize_nvfp4_impl
from .linear_ops import (_Ops, fp8_linear_dgrad, fp8_linear_fprop, fp8_linear_wgrad,
                         fp8_linear_wgrad_accumulate, linear_wgrad_accumulate)
from .ops import grouped_mm
from .recipe import CustomRecipe, Fp8Role

RECIPES = ("bf16", "fp8_rowwise", "fp8_current", "fp8_delayed", "fp8_block", "mxfp8", "nvfp4")
_COMPUTE_DTYPES = (torch.bfloat16, torch.float16)  # 16-bit GEMM dtypes of the bf16 recipe


def _recipe_roles(cpp_recipe: str) -> Tuple[Fp8Role, Fp8Role, Fp8Role]:
    """The (input, weight, grad_output) roles of a C++ recipe (Recipe::config_for), NVFP4's
    Hadamard transform, stochastic rounding and seed included."""
    configs = (_C._recipe_config(cpp_recipe, "grouped_linear", r, "", {}) for r in ROLES)
    return tuple(Fp8Role(c["mode"], c["element"], None, c["random_hadamard"],
                         c["stochastic_rounding"], c["rng_seed"]) for c in configs)


# The FP8 and MXFP8 recipes: torch name -> the roles of the C++ recipe it runs (fp8_current is
# E4M3 everywhere; fp8_delayed's elements and state come from its DelayedScaling at each call).
_FP8_ROLES = {"fp8_rowwise": _recipe_roles("fp8_rowwise"),
              "fp8_current": _recipe_roles("fp8_current:e4m3"),
              "fp8_delayed": _recipe_roles("fp8_delayed"),
              "fp8_block": _recipe_roles("fp8_block"),
              "mxfp8": _recipe_roles("mxfp8"),
              "nvfp4": _recipe_roles("nvfp4")}
# Stateless quantizers per mode, called (x, rowwise, columnwise, element): (custom op, eager
# implementation). Block and MXFP8 modes go through quantize_fp8_block / quantize_mxfp8, which
# take mode and element.
_QUANTIZERS = {"rowwise": (quantize_fp8_rowwise, quantize_fp8_rowwise_impl),
               "tensor": (quantize_fp8_tensor, quantize_fp8_tensor_impl)}


class StochasticRoundingOffsets:
    """The Philox offsets of the step's stochastically rounded quantizations (NVFP4 grad_output):
    a host counter, one value per quantization, never repeated in the process, so every layer
    and every step draws fresh random words without reading anything from the device (no host
    sync, CUDA-graph friendly: the offset is a host integer of the quantizer's config).
    Reproducible: the same sequence of calls from the same `reset(value)` draws the same bits.
    Under torch.compile the counter's side effect is refused inside the autograd function: the
    offset is read (not advanced) when the backward is traced, so a compiled step draws the same
    words at every call and in every layer (a known limit, docs/torch_training.md)."""

    def __init__(self) -> None:
        self.value = 0

    def next(self) -> int:
        offset, self.value = self.value, self.value + 1
        return offset

    def reset(self, value: int = 0) -> None:
        self.value = value


SR_OFFSETS = StochasticRoundingOffsets()


def _quantize(role: Fp8Role, x: Tensor, rowwise: bool, columnwise: bool):
    """One pass of the role's quantizer over the 2-D x, the usages asked for:
    (data, scale_inv, columnwise_data, columnwise_scale_inv, amax, columnwise_amax), the amax
    pair None except for NVFP4 (the copies' FP32 global amax). A delayed role's scale and history
    are updated in place; a stochastically rounded NVFP4 role takes the next offset of
    SR_OFFSETS."""
    compiling = torch.compiler.is_compiling()
    if role.mode in NVFP4_MODES:
        quantize = quantize_nvfp4 if compiling else quantize_nvfp4_impl
        # torch.compile refuses the counter's side effect inside the autograd function: a
        # compiled step reads the offset when it is traced and does not advance it.
        offset = (0 if not role.stochastic_rounding
                  else SR_OFFSETS.value if compiling else SR_OFFSETS.next())
        return quantize(x, role.mode, rowwise, columnwise, role.random_hadamard,
                        role.stochastic_rounding, role.rng_seed, offset)
    return tuple(_quantize_fp8(role, x, rowwise, columnwise)) + (None, None)


def _quantize_fp8(role: Fp8Role, x: Tensor, rowwise: bool, columnwise: bool):
    """_quantize's FP8 and MXFP8 modes: (data, scale_inv, columnwise_data,
    columnwise_scale_inv)."""
    compiling = torch.compiler.is_compiling()
    if role.delayed is not None:
        state = role.delayed
        quantize = quantize_fp8_delayed if compiling else quantize_fp8_delayed_impl
        return quantize(x, state[0], state[1], rowwise, columnwise, *state[2:])
    if role.mode in _QUANTIZERS:
        return _QUANTIZERS[role.mode][0 if compiling else 1](x, rowwise, columnwise, role.element)
    if role.mode in MX_MODES:
        quantize = quantize_mxfp8 if compiling else quantize_mxfp8_impl
        return quantize(x, role.mode, role.element, rowwise, columnwise)
    quantize = quantize_fp8_block if compiling else quantize_fp8_block_impl
    return quantize(x, role.mode, role.element, rowwise, columnwise)


def _mx_dgrad_tn(role: Fp8Role, out_features: int) -> bool:
    """Whether the weight's MXFP8 columnwise copy is kept as Wᵀ per group (a rowwise copy of the
    (G·K, N) matrix, _transpose_mx_columnwise) and the dgrad runs as a TN GEMM on it: MXFP8 roles
    with out_features (the dgrad contraction) a multiple of 32, so that every group's 32-row scale
    blocks are its own."""
    return role.mode in MX_MODES and out_features % 32 == 0


def _transpose_mx_columnwise(wcq: Tensor, wcs: Tensor, g: int, n: int, k: int):
    """The columnwise MXFP8 copy of W (G·N, K) (codes as stored, E8M0 scales (G·N/32, K): 32x1
    blocks along N) as the rowwise copy of Wᵀ per group: codes (G·K, N), scales (G·K, N/32),
    1x32 blocks along N — the same codes and scales, moved. The dgrad then reads it K-major as a
    TN GEMM (dx = dy · W_g), so the CUDA GEMM needs no transpose of W per call (nor its
    workspace); made once per weight version with the cached copies."""
    codes = _transpose_bytes(wcq.view(torch.uint8), g, n, k).view(g * k, n)
    scales = _transpose_bytes(wcs.view(torch.uint8), g, n // 32, k).view(g * k, n // 32)
    return codes.view(wcq.dtype), scales.view(wcs.dtype)


def _transpose_bytes(x: Tensor, g: int, r: int, c: int) -> Tensor:
    """x (g·r, c) uint8 → (g, c, r): each group's (r, c) block transposed. On CUDA (r and c
    multiples of 4, eager) tessera's tiled byte transpose: torch's strided uint8 copy ran at
    ~0.35 TB/s on the H100 for DSv3 fc1's 940 MB weight. Elsewhere torch's."""
    if (x.device.type == "cuda" and r % 4 == 0 and c % 4 == 0 and x.numel() > 0
            and not torch.compiler.is_compiling()):
        out = torch.empty((g, c, r), dtype=torch.uint8, device=x.device)
        with br.device_scope(x.device):
            _C._transpose_bytes_into(br.dl(x), br.dl(out), g, r, c, br.stream_handle(x.device))
        return out
    return x.view(g, r, c).transpose(1, 2).contiguous()


# ---- weight cache ----------------------------------------------------------------------------

class WeightCache:
    """The compute copies of one weight (FP8 codes and scales, or a 16-bit cast of FP32 master
    weights), kept until the weight changes.

    Key: the weight's storage pointer, shape, dtype and in-place version counter (an optimizer
    step, `load_state_dict` or any in-place write bumps it), and what the copy is for. Under
    torch.compile nothing is cached (the copy is traced every call). `invalidate()` forces the
    next call to re-make it (a benchmark of whole training steps calls it every step). Both FP8
    usages are made together, so a cached weight never lacks one."""

    def __init__(self):
        self.key = None
        self.value = None

    def invalidate(self) -> None:
        self.key = None
        self.value = None

    def _get(self, weight: Tensor, what, make):
        key = (weight.data_ptr(), tuple(weight.shape), weight._version, weight.dtype, what)
        if torch.compiler.is_compiling():
            return make(weight.detach())
        if self.key != key:
            self.key, self.value = key, make(weight.detach())
        return self.value

    def get(self, weight: Tensor, role: Fp8Role):
        """(wq (G·N, K), ws, wcq (K, G·N) — for MXFP8 (G·N, K), or the rowwise copy of Wᵀ per
        group (G·K, N) when _mx_dgrad_tn; NVFP4 packed bytes (G·N, K/2), (K, G·N/2) —, wcs,
        wa, wca): both usages of weight (G, N, K) read as (G·N, K), quantized as the weight
        `role` says (a delayed role's state is updated when the weight is quantized); wa, wca:
        the NVFP4 copies' global amax (None for the other modes)."""
        g, n, k = weight.shape
        what = (role.mode, role.element, None if role.delayed is None else role.delayed[2:])

        def make(w):
            wq, ws, wcq, wcs, wa, wca = _quantize(role, w.reshape(g * n, k).contiguous(), True,
                                                  True)
            if _mx_dgrad_tn(role, n):
                wcq, wcs = _transpose_mx_columnwise(wcq, wcs, g, n, k)
            return wq, ws, wcq, wcs, wa, wca

        return self._get(weight, what, make)

    def get_cast(self, weight: Tensor, dtype: torch.dtype) -> Tensor:
        """weight (G, N, K) cast to `dtype`, contiguous: the 16-bit compute copy."""
        return self._get(weight, dtype, lambda w: w.to(dtype).contiguous())


# ---- autograd ------------------------------------------------------------------------------

class _Fp8Linear(torch.autograd.Function):
    """The quantized step of one recipe (FP8, MXFP8, NVFP4): quantize once per tensor (both
    usages), three GEMMs with the scales (and NVFP4's global amax) applied inside them. roles:
    the (input, weight, grad_output) Fp8Roles (their modes go to the GEMM ops; a delayed role's
    state is updated in place); w: the weight's cached copies (WeightCache.get); main_grad: the
    FP32 buffer the wgrad accumulates into (then no weight gradient is returned)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, offs: Tensor, roles, wq: Tensor, ws: Tensor,
                wcq: Tensor, wcs: Tensor, wa: Optional[Tensor], wca: Optional[Tensor],
                main_grad: Optional[Tensor]) -> Tensor:
        fprop = _Ops.get().fp8[0]
        g = weight.shape[0]
        x_role, w_role, _ = roles
        need_wgrad = weight.requires_grad
        xq, xs, xcq, xcs, xa, xca = _quantize(x_role, x, True, need_wgrad)  # one pass
        y = fprop(xq, xs, wq, ws, offs, g, x.dtype, x_role.mode, w_role.mode, xa, wa)
        ctx.save_for_backward(xcq, xcs, wcq, wcs, offs, xca, wca)
        # Not saved tensors: backward updates the delayed state and main_grad in place.
        ctx.meta = (g, x.dtype, weight.dtype, roles, main_grad)
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        xcq, xcs, wcq, wcs, offs, xca, wca = ctx.saved_tensors
        g, x_dtype, w_dtype, (x_role, w_role, dy_role), main_grad = ctx.meta
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        fprop, dgrad, wgrad, wgrad_accumulate = _Ops.get().fp8
        dy = dy if dy.is_contiguous() else dy.contiguous()
        dyq, dys, dycq, dycs, dya, dyca = _quantize(dy_role, dy, need_x, need_w)  # one pass
        modes = (dy_role.mode, w_role.mode)
        dx = None
        if need_x and _mx_dgrad_tn(w_role, dy.shape[1]):  # W's copy is Wᵀ per group (G·K, N)
            dx = fprop(dyq, dys, wcq, wcs, offs, g, x_dtype, *modes, dya, wca)
        elif need_x:
            dx = dgrad(dyq, dys, wcq, wcs, offs, g, x_dtype, *modes, dya, wca)
        dw = None
        # the columnwise copies of dy and x, with NVFP4's amax and Hadamard flags
        wgrad_args = (dycq, dycs, xcq, xcs, offs)
        wgrad_tail = (dy_role.mode, x_role.mode, dyca, xca, dy_role.random_hadamard,
                      x_role.random_hadamard)
        if need_w and main_grad is None:
            dw = wgrad(*wgrad_args, w_dtype, *wgrad_tail)
        elif need_w:
            wgrad_accumulate(*wgrad_args, main_grad, *wgrad_tail)
        return dx, dw, None, None, None, None, None, None, None, None, None


class _DenseLinear(torch.autograd.Function):
    """The 16-bit step: forward TN on W as stored, dgrad NN (W read MN-major), wgrad K-grouped on
    the token matrices (read MN-major) into the weight's dtype or accumulated into main_grad.
    weight: the parameter (its dtype is dW's); w_copy: its contiguous compute copy in x's dtype,
    None when the parameter is one (dynamo refuses one tensor passed as two inputs)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, offs: Tensor, w_copy: Optional[Tensor],
                main_grad: Optional[Tensor]) -> Tensor:
        w = weight if w_copy is None else w_copy
        y = _Ops.get().dense[0](x, w, offs)
        ctx.save_for_backward(x, w, offs)
        ctx.meta = (weight.dtype, main_grad)
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        x, w, offs = ctx.saved_tensors
        w_dtype, main_grad = ctx.meta
        _, dgrad, wgrad, wgrad_accumulate = _Ops.get().dense
        dy = dy if dy.is_contiguous() else dy.contiguous()
        dx = dgrad(dy, w, offs) if ctx.needs_input_grad[0] else None  # (T, K) = dy · W_g
        dw = None
        if ctx.needs_input_grad[1] and main_grad is None:               # dW_g = dy_gᵀ x_g
            dw = wgrad(dy, x, offs, w_dtype)
        elif ctx.needs_input_grad[1]:
            wgrad_accumulate(dy, x, offs, main_grad)
        return dx, dw, None, None, None


class _NoTokens(torch.autograd.Function):
    """The step of an empty batch (T = 0) for every recipe, as the C++ nn layer runs it: nothing
    to quantize or multiply (no role's delayed state moves for x or dy), y and dx empty (x's
    dtype), dW zero (a sum over no tokens) or main_grad unchanged. The quantizers and GEMMs are
    not called: a zero-size tensor has no buffer for them to take."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, main_grad: Optional[Tensor]) -> Tensor:
        ctx.meta = (x.shape[1], weight.shape, weight.dtype, main_grad is not None)
        return x.new_empty((0, weight.shape[1]))

    @staticmethod
    def backward(ctx, dy: Tensor):
        k, w_shape, w_dtype, accumulates = ctx.meta
        dx = dy.new_empty((0, k)) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1] and not accumulates:
            dw = dy.new_zeros(w_shape, dtype=w_dtype)
        return dx, dw, None


def _check(x: Tensor, weight: Tensor, offs: Tensor, main_grad: Optional[Tensor]) -> None:
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D (T, in) tensor, got {tuple(x.shape)}")
    if weight.dim() != 3 or weight.shape[2] != x.shape[1]:
        raise ValueError(f"weight: expected (G, out, {x.shape[1]}), got {tuple(weight.shape)}")
    if offs.dim() != 1 or offs.dtype != torch.int32 or offs.shape[0] != weight.shape[0]:
        raise ValueError(f"offs: expected ({weight.shape[0]},) int32 cumulative end offsets, "
                         f"got {tuple(offs.shape)} {offs.dtype}")
    if main_grad is not None and (main_grad.shape != weight.shape
                                  or main_grad.dtype != torch.float32
                                  or main_grad.device != weight.device
                                  or not main_grad.is_contiguous()):
        raise ValueError(f"main_grad: expected a contiguous float32 {tuple(weight.shape)} tensor "
                         f"on {weight.device}, got {tuple(main_grad.shape)} {main_grad.dtype} "
                         f"on {main_grad.device}")


def _delayed_roles(delayed: DelayedScaling, state, device: torch.device):
    """The (input, weight, grad_output) Fp8Roles of a layer's delayed state, checked."""
    if state is None:
        raise ValueError("delayed_state: fp8_delayed keeps a scale and an amax history per role "
                         "across steps; pass delayed_state=(scale (3,), amax_history (3, L)) "
                         "(DelayedScaling.initial_state) or use GroupedLinear, which keeps them")
    scale, history = state
    want = (3, delayed.amax_history_len)
    for t, shape, name in ((scale, want[:1], "scale"), (history, want, "amax_history")):
        if (tuple(t.shape) != shape or t.dtype != torch.float32 or t.device != device
                or not t.is_contiguous()):
            raise ValueError(f"delayed_state: {name} must be a contiguous float32 {shape} "
                             f"tensor on {device}, got {tuple(t.shape)} {t.dtype} on {t.device}")
    return tuple(Fp8Role(role.mode, delayed.elements()[i], delayed.role_state(state, i))
                 for i, role in enumerate(_FP8_ROLES["fp8_delayed"]))


def grouped_linear(x: Tensor, weight: Tensor, offs: Tensor, recipe="bf16",
                   weight_cache: Optional[WeightCache] = None, *,
                   delayed_state: Optional[Tuple[Tensor, Tensor]] = None,
                   main_grad: Optional[Tensor] = None, name: str = "") -> Tensor:
    """y (T, N) = x (T, K) · W_gᵀ for the rows of each group (offs: int32 cumulative ends),
    weight (G, N, K) as torch.nn.Linear stores it per group. Differentiable in x and weight.
    recipe: a name of RECIPES ("fp8_delayed:e4m3" too), a DelayedScaling or a CustomRecipe;
    fp8_delayed needs `delayed_state` (module doc). main_grad: FP32 (G, N, K) that the weight
    gradient is added to instead of being returned. name: the layer's name in the roles a
    CustomRecipe's factory sees. Rows past offs[-1] are left unwritten (as torch._grouped_mm)."""
    _check(x, weight, offs, main_grad)
    cache = weight_cache if weight_cache is not None else WeightCache()
    if isinstance(recipe, CustomRecipe):
        return _fp8_step(x, weight, offs, recipe.roles(name), cache, main_grad)
    recipe_name, delayed = resolve(recipe)
    if recipe_name == "bf16":
        dtype = weight.dtype if weight.dtype in _COMPUTE_DTYPES else torch.bfloat16
        if x.shape[0] == 0:
            return _NoTokens.apply(x.to(dtype), weight, main_grad)
        xc = x.to(dtype)
        xc = xc if xc.is_contiguous() else xc.contiguous()
        if weight.dtype == dtype and not weight.is_contiguous() and main_grad is None:
            return grouped_mm(xc, weight.transpose(-2, -1), offs)  # reads the layout it is in
        same = weight.dtype == dtype and weight.is_contiguous()
        w_copy = None if same else cache.get_cast(weight, dtype)
        return _DenseLinear.apply(xc, weight, offs, w_copy, main_grad)
    if recipe_name in _FP8_ROLES:
        roles = (_FP8_ROLES[recipe_name] if delayed is None
                 else _delayed_roles(delayed, delayed_state, x.device))
        return _fp8_step(x, weight, offs, roles, cache, main_grad)
    raise ValueError(f"recipe: {recipe!r} is not supported by tessera.torch; expected one of "
                     f"{RECIPES}, a DelayedScaling or a CustomRecipe")


def _check_nvfp4_shapes(x: Tensor, weight: Tensor, roles) -> None:
    """The sizes an NVFP4 step needs: in_features and out_features even (codes are packed two
    per byte along them, and the GEMM ops read a copy's logical size from its bytes); the token
    count T even when a columnwise copy (packed along T) feeds the wgrad, and a multiple of 16
    when that copy has the Hadamard transform (it mixes each 16 consecutive tokens)."""
    if not any(r.mode in NVFP4_MODES for r in roles):
        return
    t, k = x.shape
    n = weight.shape[1]
    if k % 2 or n % 2:
        raise ValueError(f"nvfp4: in_features ({k}) and out_features ({n}) must be even (E2M1 "
                         f"codes are packed two per byte along them)")
    if not weight.requires_grad:
        return
    x_role, _, dy_role = roles
    if ((x_role.random_hadamard and x_role.mode in NVFP4_MODES)
            or (dy_role.random_hadamard and dy_role.mode in NVFP4_MODES)) and t % 16:
        raise ValueError(f"nvfp4: the wgrad's columnwise copies of x and dy have the 16-point "
                         f"Hadamard transform along the tokens, so the token count must be a "
                         f"multiple of 16, got {t} (pad the token buffer; on CUDA every group "
                         f"size must be a multiple of 16 too)")
    if (x_role.mode in NVFP4_MODES or dy_role.mode in NVFP4_MODES) and t % 2:
        raise ValueError(f"nvfp4: the token count must be even (the wgrad's columnwise copies "
                         f"pack two tokens per byte), got {t}")


def _fp8_step(x: Tensor, weight: Tensor, offs: Tensor, roles, cache: WeightCache,
              main_grad: Optional[Tensor]) -> Tensor:
    """The quantized step with the (input, weight, grad_output) Fp8Roles `roles`."""
    _check_nvfp4_shapes(x, weight, roles)
    wq, ws, wcq, wcs, wa, wca = cache.get(weight, roles[1])  # per weight version, as any step
    if x.shape[0] == 0:
        return _NoTokens.apply(x, weight, main_grad)
    xc = x if x.is_contiguous() else x.contiguous()
    return _Fp8Linear.apply(xc, weight, offs, roles, wq, ws, wcq, wcs, wa, wca, main_grad)


def fp8_rowwise_grouped_mm(x: Tensor, w_t: Tensor, offs: Tensor) -> Tensor:
    """Differentiable FP8-rowwise grouped GEMM: x (T, K) @ w_t (G, K, N) -> (T, N), the
    functional form of grouped_linear(recipe="fp8_rowwise") with w_t the transposed view of
    (G, N, K) weights (any other layout is copied once). No weight cache: every call quantizes."""
    return grouped_linear(x, w_t.transpose(-2, -1), offs, "fp8_rowwise")


__all__ = ["RECIPES", "SR_OFFSETS", "CustomRecipe", "Fp8Role", "WeightCache", "fp8_linear_dgrad",
           "fp8_linear_fprop", "fp8_linear_wgrad", "fp8_linear_wgrad_accumulate",
           "fp8_rowwise_grouped_mm", "grouped_linear", "linear_wgrad_accumulate"]
