"""tessera.torch.MoELayer: router -> dispatch -> local experts -> combine (docs/moe.md).

    layer = MoELayer(hidden, ffn, num_experts, top_k, recipe="bf16", ep_group=None,
                     capacity_factor=None, experts=None)
    y = layer(x)                       # x (..., hidden) -> (..., hidden)

Experts are sharded over `ep_group` (a torch ProcessGroup; None = one process holding every
expert): this rank owns global experts [rank * L, (rank + 1) * L), L = num_experts / world. The
expert module (default tessera.torch.GroupedMLP when the build has it, else the plain-torch
ReferenceGroupedMLP) is called as experts(x (R, hidden), offs (L,) int32, probs=None); routing
probabilities are applied in the combine. R is offs[-1], except dropless on one rank: there x is
the routing's whole buffer (no host sync), its rows past offs[-1] zero and in no expert's group,
their outputs never read. The router (default a bias-free FP32 Linear) is replicated: its
gradient, like any data-parallel parameter's, is summed over ranks by the user's data-parallel
wrapper, not here.

capacity_factor None = dropless (over several ranks one host copy of split sizes per step; on
one rank none); a number = capacity mode, C = ceil(factor * T * k / E) rounded up to the
recipe's alignment per (rank, expert), no host sync after the first forward (over an EP group,
T is then the largest over the ranks and C stays; capacity_tokens fixes T instead);
`last_dropped` / `last_dropped_total` hold the pairs dropped by the last forward (device
tensors: this rank's, and the group's). `last_error` holds every rank's error bits of the last
forward (capacity mode, and dropless on one rank, record on CUDA instead of raising; call
check_errors()).
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

import torch
from torch import Tensor, nn

from .. import _tessera as _C
from . import moe_dist
from .mlp import GradRowwise
from .moe_ops import _check_routing, route
from .moe_reference import ReferenceGroupedMLP
from .recipe import base_name


def _default_experts(local: int, hidden: int, ffn: int, recipe: str, device, dtype):
    from .. import torch as tt
    # tessera's GroupedMLP for the recipes it runs (mxfp8 included: on CUDA that needs the CUDA
    # GEMM's MXFP8 operands); other dispatch recipes fall back to the plain-torch experts.
    if (hasattr(tt, "GroupedMLP") and isinstance(recipe, str)
            and base_name(recipe) in getattr(tt, "RECIPES", ())):
        return tt.GroupedMLP(local, hidden, ffn, recipe=recipe, bias=False, device=device,
                             dtype=dtype)
    return ReferenceGroupedMLP(local, hidden, ffn, recipe=recipe, device=device, dtype=dtype)


class MoELayer(nn.Module):
    """A mixture-of-experts layer: router -> top-k dispatch -> local experts -> combine.

    MoELayer(hidden, ffn, num_experts, top_k, recipe="bf16", ep_group=None,
             capacity_factor=None, experts=None, router=None, normalize_probs=True,
             sync_checks=None, quantize_grads=None, expert_groups=1, groups_per_token=None,
             score="softmax", selection_bias=False, codes_to_experts=None,
             grad_codes_to_experts=False, capacity_tokens=None, device=None,
             dtype=torch.bfloat16)

    hidden, ffn: model width and each expert's FFN width (the experts are a GroupedMLP:
      fc1 -> SwiGLU -> fc2). num_experts, top_k: experts in all, experts per token.
    recipe: the experts' precision ("bf16", "fp8_rowwise", "fp8_block", "mxfp8", ...; see
      tessera.torch.RECIPES); FP8 recipes also quantize the dispatched rows.
    ep_group: a torch.distributed ProcessGroup over which the experts are sharded (each rank
      holds num_experts / world of them); None: this process holds every expert.
    capacity_factor: None for dropless routing; a number caps each expert's rows per rank at
      C = ceil(factor * T * top_k / num_experts), rounded up to the recipe's alignment.
    capacity_tokens: the T that C is computed from (capacity mode). None (default): one
      process follows each forward's T; over an EP group of several ranks, every rank must send
      the same C, so C comes from the largest T over the ranks at the first forward (one
      all_reduce) and stays for later forwards, whatever their T. Give it (an int > 0, the same
      on every rank) to choose C yourself.
    experts, router: modules replacing the default GroupedMLP and bias-free FP32 Linear.
    quantize_grads: True: the backward sends the experts' output gradient quantized like the
      forward's dispatched rows (recipes whose dispatch is quantized: fp8_rowwise, fp8_block,
      mxfp8); False: in the activation dtype; None (default): quantized for fp8_block and mxfp8
      (power-of-two scales), not for fp8_rowwise (moe.grad_payload_mode).
    expert_groups, groups_per_token: node-limited routing (moe.route): each token's experts
      come from at most groups_per_token of expert_groups contiguous groups of experts (one
      group per node: expert_groups = nodes of the EP group, its ranks node by node; the
      experts of a rank lie in one group when expert_groups divides the world size). Default:
      no limit.
    score: the router's expert scores, "softmax" (default) or "sigmoid" (DeepSeek-V3's).
    selection_bias: True registers the buffer `selection_bias` (num_experts,) FP32, zeros, in
      the state_dict: added to the scores when choosing experts only (DeepSeek-V3's
      auxiliary-loss-free balancing; update_selection_bias_ moves it by the sign of each
      expert's load error, as DeepSeek-V3 does).
    codes_to_experts: the experts read the dispatched FP8 rows as they arrive, codes and
      scales, as fc1's rowwise input (GroupedMLP's x_rowwise): no dequantize, and no second
      quantization of the rows for fc1's forward; fc1's weight gradient reads a copy made from
      their values. None (default): on where the recipe's payload is rowwise FP8 (fp8_rowwise:
      CUDA makes that copy from the codes) and the experts take codes (a tessera GroupedMLP of
      the recipe); True: wherever the experts take the payload's codes (fp8_block and mxfp8 too:
      their copy goes through an FP32 image of the rows); False: the rows are dequantized to
      the activation dtype first.
    grad_codes_to_experts: where the backward sends the experts' output gradient quantized
      (quantize_grads), the experts read it as it arrives, codes and scales, as fc2's rowwise
      output gradient (GroupedMLP's grad_rowwise): no dequantize, and fc2's dgrad does not
      quantize it again; fc2's weight gradient reads a copy made from their values. True needs
      a quantized gradient payload and experts that take its codes (a tessera GroupedMLP of the
      recipe whose fc2 quantizes its gradient in the payload's mode with E4M3). Default False.
      Not under torch.compile (the codes pass between two backward nodes outside the graph):
      there the gradient is dequantized.

    forward(x): x (..., hidden) -> (..., hidden); differentiable. Every rank of ep_group calls
    it with its own tokens. After a forward, last_dropped / last_dropped_total hold the dropped
    (token, expert) pairs (capacity mode) and check_errors() raises for bad input anywhere in the
    group. docs/moe.md has a two-process example.
    """

    def __init__(self, hidden: int, ffn: int, num_experts: int, top_k: int, recipe: str = "bf16",
                 ep_group=None, capacity_factor: Optional[float] = None,
                 experts: Optional[nn.Module] = None, router: Optional[nn.Module] = None,
                 normalize_probs: bool = True, sync_checks: Optional[bool] = None,
                 quantize_grads: Optional[bool] = None, expert_groups: int = 1,
                 groups_per_token: Optional[int] = None, score: str = "softmax",
                 selection_bias: bool = False, codes_to_experts: Optional[bool] = None,
                 grad_codes_to_experts: bool = False, capacity_tokens: Optional[int] = None,
                 device=None, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        world = 1 if ep_group is None else torch.distributed.get_world_size(ep_group)
        if num_experts < 1 or num_experts % world != 0:
            raise _C.InvalidArgumentError(f"tessera invalid argument: MoELayer: num_experts "
                                          f"{num_experts} is not a positive multiple of the EP "
                                          f"world size {world}")
        if not 1 <= top_k <= num_experts:
            raise _C.InvalidArgumentError(f"tessera invalid argument: MoELayer: top_k {top_k} must "
                                          f"be in [1, num_experts {num_experts}]")
        _check_routing(num_experts, top_k, expert_groups, groups_per_token, score)
        if capacity_factor is not None and not (isinstance(capacity_factor, (int, float))
                                                and math.isfinite(capacity_factor)
                                                and capacity_factor > 0):
            raise _C.InvalidArgumentError(f"tessera invalid argument: MoELayer: capacity_factor "
                                          f"{capacity_factor!r} must be None (dropless) or a "
                                          f"finite number > 0")
        if capacity_tokens is not None and (isinstance(capacity_tokens, bool)
                                            or not isinstance(capacity_tokens, numbers.Integral)
                                            or capacity_tokens <= 0):
            raise _C.InvalidArgumentError(f"tessera invalid argument: MoELayer: capacity_tokens "
                                          f"{capacity_tokens!r} must be None or an int > 0")
        self.capacity_tokens = None if capacity_tokens is None else int(capacity_tokens)
        self._agreed_tokens: Optional[int] = None  # EP capacity mode: max T at the 1st forward
        self.expert_groups, self.groups_per_token = expert_groups, groups_per_token
        self.score = score
        if selection_bias:
            self.register_buffer("selection_bias",
                                 torch.zeros(num_experts, dtype=torch.float32, device=device))
            # (num_experts,) int64: the (token, expert) pairs this rank's forwards routed to each
            # expert since the last update_selection_bias_. Counted in place, so that a forward
            # captured in a CUDA graph adds its pairs at every replay; not in the state_dict.
            self.register_buffer("expert_load",
                                 torch.zeros(num_experts, dtype=torch.int64, device=device),
                                 persistent=False)
        else:
            self.selection_bias = None
            self.expert_load: Optional[Tensor] = None
        self.mode, self.align = moe_dist.recipe_dispatch_mode(recipe)
        grad_mode = moe_dist.grad_payload_mode(recipe, quantize_grads)  # a clear error now
        self.quantize_grads = quantize_grads
        self.hidden, self.ffn, self.num_experts, self.top_k = hidden, ffn, num_experts, top_k
        self.recipe, self.ep_group, self.world = recipe, ep_group, world
        self.local_experts = num_experts // world
        self.capacity_factor, self.normalize_probs = capacity_factor, normalize_probs
        self.sync_checks = sync_checks
        self.router = router if router is not None else nn.Linear(hidden, num_experts, bias=False,
                                                                  device=device)
        self.experts = experts if experts is not None else _default_experts(
            self.local_experts, hidden, ffn, recipe, device, dtype)
        groups = getattr(self.experts, "num_groups", self.local_experts)
        if groups != self.local_experts:
            raise _C.InvalidArgumentError(
                f"tessera invalid argument: MoELayer: experts: the module holds {groups} experts "
                f"but num_experts {num_experts} over an EP world size of {world} needs "
                f"{self.local_experts} per rank")
        self.last_dropped: Optional[Tensor] = None
        self.last_dropped_total: Optional[Tensor] = None
        self.last_error: Optional[Tensor] = None
        self._config_verified = False  # every rank checks the configuration on its 1st forward
        takes = getattr(self.experts, "rowwise_input_mode", None)
        takes_codes = self.mode != "none" and takes is not None and takes() == self.mode
        if codes_to_experts and not takes_codes:
            raise _C.InvalidArgumentError(
                f"tessera invalid argument: MoELayer: codes_to_experts=True needs a quantized "
                f"payload (recipe {recipe!r} sends {self.mode!r}) and experts that read its "
                f"codes as their input (a tessera GroupedMLP of that recipe; got "
                f"{type(self.experts).__name__})")
        self.codes_to_experts = (takes_codes and self.mode == "rowwise"
                                 if codes_to_experts is None else bool(codes_to_experts))
        takes_grad = getattr(self.experts, "rowwise_grad_mode", None)
        if grad_codes_to_experts and (grad_mode == "none" or takes_grad is None
                                      or takes_grad() != grad_mode):
            raise _C.InvalidArgumentError(
                f"tessera invalid argument: MoELayer: grad_codes_to_experts=True needs a "
                f"quantized gradient payload (recipe {recipe!r}, quantize_grads="
                f"{quantize_grads!r} sends {grad_mode!r}) and experts that read its codes as "
                f"fc2's output gradient (a tessera GroupedMLP of that recipe; got "
                f"{type(self.experts).__name__})")
        self.grad_codes_to_experts = bool(grad_codes_to_experts)

    def capacity(self, num_tokens: int) -> Optional[int]:
        """Rows per (rank, expert) for a batch of num_tokens tokens (None: dropless): from
        capacity_tokens when given, else from the T the EP group agreed on at the first forward,
        else (one process, or before the first forward) from num_tokens."""
        if self.capacity_factor is None:
            return None
        tokens = next(t for t in (self.capacity_tokens, self._agreed_tokens, num_tokens)
                      if t is not None)
        return moe_dist.capacity_for(tokens, self.top_k, self.num_experts,
                                     self.capacity_factor, self.align)

    def forward(self, x: Tensor) -> Tensor:
        """x (..., hidden) -> (..., hidden): route each token to its top_k experts, run them
        (across the EP group when there is one), combine weighted by the routing probabilities."""
        if x.dim() == 0 or x.shape[-1] != self.hidden:
            raise _C.ShapeError(f"tessera shape mismatch: MoELayer: x: expected (..., hidden) "
                             f"with hidden={self.hidden}, got {tuple(x.shape)}")
        shape = x.shape
        x2 = x.reshape(-1, self.hidden)
        param = next(self.router.parameters(), None)
        router_in = x2 if param is None or not param.is_floating_point() else x2.to(param.dtype)
        probs, indices = route(self.router(router_in), self.top_k, self.normalize_probs,
                               expert_groups=self.expert_groups,
                               groups_per_token=self.groups_per_token, score=self.score,
                               selection_bias=self.selection_bias)
        if (self.capacity_factor is not None and self.capacity_tokens is None
                and self.world > 1 and self._agreed_tokens is None):
            self._agreed_tokens = moe_dist.max_over_group(self.ep_group, x2.shape[0])
        recv, state = moe_dist.dispatch(x2, indices, self.num_experts, self.ep_group,
                                        recipe=self.recipe, capacity=self.capacity(x2.shape[0]),
                                        sync_checks=self.sync_checks,
                                        verify_config=not self._config_verified,
                                        quantize_grads=self.quantize_grads,
                                        deliver_codes=self.codes_to_experts)
        self._config_verified = True
        if self.selection_bias is not None:
            flat = indices.reshape(-1)  # scatter_add_, not bincount: no host sync on CUDA
            self.expert_load.scatter_add_(0, flat, torch.ones_like(flat))
        kw = {}
        if self.codes_to_experts:
            kw["x_rowwise"] = state.extra.pop("codes")
        if self.grad_codes_to_experts and not torch.compiler.is_compiling():
            # combine's backward puts the gradient's codes here, the experts' backward takes them
            kw["grad_rowwise"] = state.extra["grad_rowwise"] = GradRowwise()
        y = self.experts(recv, state.offs, **kw)
        out = moe_dist.combine(y, probs, state)
        self.last_dropped, self.last_dropped_total = state.dropped, state.dropped_total
        self.last_error = state.error
        return out.reshape(shape)

    @torch.no_grad()
    def update_selection_bias_(self, rate: float, group=None) -> None:
        """DeepSeek-V3's auxiliary-loss-free balancing step: selection_bias[e] += rate *
        sign(mean load - load[e]), the load being expert_load (the pairs routed to each expert by
        the forwards since the last update) summed over `group` (default: the EP group; pass the
        group of every rank that routes through a replica of this router, e.g. the whole
        data- and expert-parallel world, so that the replicas' biases stay equal). The count
        then restarts (zeroed in place). No host sync; with no pair counted the bias stays as
        it is. Every rank of `group` must call it together (one all_reduce)."""
        if self.selection_bias is None:
            raise _C.InvalidArgumentError("tessera invalid argument: MoELayer: "
                                          "update_selection_bias_ needs a layer made with "
                                          "selection_bias=True")
        load = self.expert_load.float()
        group = self.ep_group if group is None else group
        if group is not None and torch.distributed.get_world_size(group) > 1:
            torch.distributed.all_reduce(load, group=group)
        self.selection_bias += rate * torch.sign(load.mean() - load)
        self.expert_load.zero_()

    def check_errors(self) -> None:
        """Raises (on every rank alike) if the last forward saw bad input anywhere in the group."""
        if self.last_error is not None:
            moe_dist._raise_errors(self.last_error.tolist(), "MoELayer")

    def extra_repr(self) -> str:
        return (f"hidden={self.hidden}, ffn={self.ffn}, num_experts={self.num_experts}, "
                f"top_k={self.top_k}, recipe={self.recipe!r}, world={self.world}, "
                f"capacity_factor={self.capacity_factor}, "
                f"capacity_tokens={self.capacity_tokens}, "
                f"expert_groups={self.expert_groups}, groups_per_token={self.groups_per_token}, "
                f"score={self.score!r}, selection_bias={self.selection_bias is not None}, "
                f"codes_to_experts={self.codes_to_experts}, "
                f"grad_codes_to_experts={self.grad_codes_to_experts}, "
                f"grads={moe_dist.grad_payload_mode(self.recipe, self.quantize_grads)!r}")


__all__ = ["MoELayer"]
