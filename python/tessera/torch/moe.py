"""Expert parallelism for tessera.torch (docs/moe.md): the public surface of the MoE modules.

    one device (moe_ops)          route (top-k routing of router logits); the compiled torch
                                  ops moe_routing, moe_permute, moe_permute_backward,
                                  moe_unpermute, moe_unpermute_backward; permute, unpermute
                                  (differentiable), dequantize_rows, permuted_rows, QUANT_MODES
    over torch.distributed        dispatch, combine, DispatchState, all_to_all_expert_rows,
    (moe_dist)                    capacity_for, check_config, recipe_dispatch_mode,
                                  grad_payload_mode

The modules import one way only: moe_dist imports moe_ops, this module imports both, and
neither imports this one.
"""
from __future__ import annotations

from .moe_dist import (DispatchState, all_to_all_expert_rows, capacity_for, check_config, combine,
                       dispatch, grad_payload_mode, recipe_dispatch_mode)
from .moe_ops import (QUANT_MODES, dequantize_rows, moe_permute, moe_permute_backward,
                      moe_routing, moe_unpermute, moe_unpermute_backward, permute, permuted_rows,
                      route, unpermute)

__all__ = ["DispatchState", "QUANT_MODES", "all_to_all_expert_rows", "capacity_for",
           "check_config", "combine", "dequantize_rows", "dispatch", "grad_payload_mode",
           "moe_permute",
           "moe_permute_backward", "moe_routing", "moe_unpermute", "moe_unpermute_backward",
           "permute", "permuted_rows", "recipe_dispatch_mode", "route", "unpermute"]
