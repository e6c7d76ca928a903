"""tessera.torch: tessera's grouped GEMM as PyTorch ops, autograd functions and modules.

    grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None) ~ torch._grouped_mm
    scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, offs=None, ...) ~ torch._scaled_grouped_mm
    grouped_linear(x, weight, offs, recipe, weight_cache, bias=, delayed_state=, main_grad=)
                                           the training step of a grouped linear layer (one
                                           compiled call per direction: torch.ops.tessera.*)
    fp8_rowwise_grouped_mm(x, w_t, offs)   differentiable dynamic FP8-rowwise grouped GEMM
    quantize_fp8_rowwise(x, rowwise, columnwise), quantize_fp8_tensor(x, rowwise, columnwise),
    quantize_fp8_block(x, mode, element, rowwise, columnwise),
    quantize_mxfp8(x, mode, element, rowwise, columnwise),
    quantize_nvfp4(x, mode, rowwise, columnwise, random_hadamard, stochastic_rounding, seed,
                   offset)                                    both usages in one pass
    scale_shape(mode, rows, cols, columnwise)   the scale_inv shape of a quantized copy
    GroupedLinear(num_groups, in_features, out_features, recipe, bias, params_dtype=,
                  accumulate_main_grad=)   recipes: RECIPES (bf16, fp8_rowwise, fp8_current,
                                           fp8_delayed, fp8_block, mxfp8, nvfp4), a
                                           DelayedScaling
                                           or a CustomRecipe
    GroupedMLP(num_groups, hidden, ffn, recipe, bias, params_dtype=, accumulate_main_grad=)
                                           fc1 -> SwiGLU (x probs) -> fc2
    DelayedScaling(amax_history_len, amax_compute_algo, margin, fp8_format)   TE's recipe
    CustomRecipe(factory, name)            factory(QuantizerRole) -> QuantizerConfig(mode,
                                           element) per role (input, weight, grad_output of a
                                           named layer), wherever a recipe name is accepted
    MoELayer(hidden, ffn, num_experts, top_k, recipe, ep_group)  router -> dispatch -> experts

    quantize_weights_(model), weights_unchanged(), is_first_microbatch=False
                                           when the cached weight copies may be reused
    set_rng_offset(v), rng_offset()        the stochastic-rounding counter of the step

The training step runs in tessera's compiled PyTorch ops (torch.ops.tessera.linear_fwd /
linear_bwd / mlp_fwd / mlp_bwd; PyTorch's stable C++ ABI, fake implementations for
torch.compile(fullgraph=True)), one call per direction, on torch's current stream with torch's
allocator; eager, a C++ autograd node (torch.ops.tessera.linear / mlp) makes those calls; grouped_mm and scaled_grouped_mm are compiled ops of the same binding
(torch.ops.tessera.grouped_mm / scaled_grouped_mm). The quantize ops are torch.library custom ops
over the nanobind module (DLPack, no copies).
"""
from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("tessera.torch needs PyTorch (pip install torch)") from e

from . import _ext  # noqa: F401  (loads the compiled ops: torch.ops.tessera.*)
from .delayed import DelayedScaling, quantize_fp8_delayed, quantize_fp8_delayed_impl
from .fp8 import (quantize_backend, quantize_fp8_block, quantize_fp8_block_impl,
                  quantize_fp8_rowwise, quantize_fp8_rowwise_impl, quantize_fp8_tensor,
                  quantize_fp8_tensor_impl, quantize_mxfp8, quantize_mxfp8_impl, scale_shape,
                  scaled_operands_rowwise)
from .linear import (WeightCache, fp8_rowwise_grouped_mm, grouped_linear, rng_offset,
                     set_rng_offset, weights_unchanged)
from .modules import GroupedLinear, GroupedMLP, quantize_weights_
from .nvfp4 import quantize_nvfp4, quantize_nvfp4_impl
from .ops import grouped_mm, scaled_grouped_mm
from .recipe import RECIPES, CustomRecipe, QuantizerConfig, QuantizerRole

__all__ = ["CustomRecipe", "DelayedScaling", "GroupedLinear", "GroupedMLP", "QuantizerConfig",
           "QuantizerRole", "RECIPES", "WeightCache",
           "fp8_rowwise_grouped_mm", "grouped_linear", "grouped_mm", "quantize_backend",
           "quantize_fp8_block", "quantize_fp8_block_impl", "quantize_fp8_delayed",
           "quantize_fp8_delayed_impl", "quantize_fp8_rowwise", "quantize_fp8_rowwise_impl",
           "quantize_fp8_tensor", "quantize_fp8_tensor_impl", "quantize_mxfp8",
           "quantize_mxfp8_impl", "quantize_nvfp4", "quantize_nvfp4_impl", "quantize_weights_",
           "rng_offset", "scale_shape", "scaled_grouped_mm", "scaled_operands_rowwise",
           "set_rng_offset", "weights_unchanged"]

# Expert parallelism: routing ops and dispatch/combine in tessera.torch.moe (docs/moe.md).
from . import moe  # noqa: E402
from .moe_layer import MoELayer  # noqa: E402

__all__ += ["MoELayer", "moe"]
