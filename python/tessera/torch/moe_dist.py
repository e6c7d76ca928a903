"""Dispatch and combine of an expert-parallel MoE layer over torch.distributed (docs/moe.md).

Experts are sharded over the ranks of a ProcessGroup: rank d owns global experts
[d*L, (d+1)*L), L = num_experts / world. A step on every rank:

    routing (tessera.torch.moe.moe_routing) -> permute + quantize in one pass (moe_permute)
    -> header all-to-all: per (rank, local expert) row counts, error bits, dropped counts
    -> all_to_all_single of the payload (FP8 codes as uint8) and of its scales (FP32 as bytes,
       E8M0 as uint8), or of the BF16 rows -> regroup expert-major (in the dequantize's reads
       for a quantized payload)
    -> local experts (x (R, H), offs (L,) int32 cumulative end offsets)
    -> combine: regroup source-major -> all_to_all_single back -> unpermute weighted by probs.

Backward mirrors it: dispatch's backward sends the gradient rows back (reverse all-to-all, in the
activation dtype) and gather-adds them to the tokens (the quantization is straight-through);
combine's backward scatters the output gradient, returns the probabilities' gradient and sends the
expert outputs' gradient forward — in the activation dtype, or quantized in the forward
payload's mode (dispatch's quantize_grads; by default where that mode's scales are powers of two:
half the bytes of that all-to-all; the rows are quantized after the probabilities are applied and
dequantized in the regroup, as the forward's).

Modes.
* dropless (capacity=None): every pair is kept; over several ranks the (rank, expert) chunks
  travel unpadded and the receiver pads each local expert's rows to `align` in the regroup (one
  rank: the routing pads). all_to_all_single needs its split sizes on the host, so the header
  (counts received, plus the counts this rank sends) is copied device -> host ONCE per
  dispatch: that is the one host sync of this mode (torch's NVSHMEM all_to_all_vdev, which
  takes device splits, is not used: it needs symmetric-memory buffers and a CUDA-only build;
  see docs/moe.md). The same copy carries every rank's error bits, so bad input raises on
  EVERY rank, never hangs. One rank has no all-to-all and makes no copy: the experts read the
  whole permuted buffer (its host-known bound of rows; those past the last group are zero) and
  errors are recorded as in capacity mode: capturable in a CUDA graph.
* capacity (capacity=C, a multiple of align): each rank sends exactly C rows per expert (pairs
  past C dropped, lower token first; their count is in DispatchState.dropped / dropped_total),
  so every all-to-all is uniform and nothing syncs: capturable in a CUDA graph. Errors are then
  recorded in DispatchState.error (device); with sync_checks (default: on for CPU tensors) they
  are checked at once, on every rank alike.

A group of one rank (or group=None) runs the same code without communication or regrouping:
the received rows are the permuted rows themselves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from .. import _tessera as _C
from . import moe_ops as ops
from .fp8 import _mode_row
from .recipe import base_name

_ERR_INDEX = 1       # an expert index outside [0, E)
_ERR_COUNTS = 2      # per-expert counts that do not sum to the rows given
_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _recipe_dispatch_table() -> Dict[str, Tuple[str, int]]:
    """recipe name -> (payload mode of the dispatch, token alignment), from the C++ recipe table
    (tessera.recipe_table: activation_mode, token_alignment).

    The payload rule, stated here only: a recipe whose activation scaling mode the permute fuses
    (ops.QUANT_MODES: rowwise, block1x128, mxfp8 — scales per row or per 1xN block of a row, so
    a row's codes do not depend on the other tokens) sends its payload quantized in that mode;
    every other recipe (no scaling; per-tensor scaling, whose scale would depend on which tokens
    share a batch; nvfp4) sends the activation dtype and leaves quantization to the experts."""
    return {row["name"]: (row["activation_mode"] if row["activation_mode"] in ops.QUANT_MODES
                          else "none", row["token_alignment"])
            for row in _C.recipe_table}


_RECIPE_DISPATCH = _recipe_dispatch_table()   # read once, at import


def recipe_dispatch_mode(recipe: str) -> tuple[str, int]:
    """(payload quantization of the dispatch, token alignment) of a recipe text, from the C++
    recipe table (_recipe_dispatch_table). The recipe's name is the text before its options:
    before ':' ("fp8_block:e4m3") and before ';' ("fp8_delayed;amax_history_len=16")."""
    base = base_name(recipe)
    if base not in _RECIPE_DISPATCH:
        raise _C.InvalidArgumentError(f"tessera invalid argument: recipe: {recipe!r} is not one "
                                      f"of {sorted(_RECIPE_DISPATCH)}")
    return _RECIPE_DISPATCH[base]


@dataclass
class DispatchState:
    """What combine and the backward passes need from a dispatch (one MoE step)."""
    group: Optional[object]
    world: int
    num_experts: int
    local_experts: int
    num_tokens: int
    hidden: int
    capacity: int                     # -1: dropless
    slot_map: Tensor                  # (T, k) int64
    row_pair: Tensor                  # (rows,) int64
    rows: int                         # rows of the local permuted buffer
    send_rows: Optional[List[int]]    # dropless: rows sent to each rank (host)
    recv_chunks: Optional[List[List[int]]]  # dropless: [source][local expert] rows received
    offs: Tensor                      # (L,) int32 cumulative end offsets of the received groups
    dropped: Tensor                   # (1,) int64 pairs this rank dropped (capacity mode)
    dropped_total: Tensor             # (1,) int64 pairs dropped over the group
    error: Tensor                     # (1,) int64 OR of every rank's error bits (0 = fine)
    extra: dict = field(default_factory=dict)
    align: int = 1                    # the receiver pads each local expert's rows to this (dropless
                                      # over several ranks: the chunks travel unpadded)

    @property
    def live_rows(self) -> int:
        """Rows of this rank's permuted buffer that are sent (dropless over several ranks: the
        sum of the split sizes; capacity mode and one rank: all of them)."""
        return sum(self.send_rows) if self.send_rows is not None else self.rows


# ---- communication helpers ---------------------------------------------------------------------
def _world(group) -> int:
    return 1 if group is None else dist.get_world_size(group)


def _byte_rows(t: Tensor) -> Tensor:
    """A contiguous (n, ...) tensor as (n, bytes per row) uint8 (zero rows included)."""
    per = math.prod(t.shape[1:]) * t.element_size()
    return t.view(torch.uint8).reshape(t.shape[0], per)


def _a2a(out: Tensor, inp: Tensor, out_splits, in_splits, group) -> None:
    """all_to_all_single on raw bytes (every dtype travels as uint8 rows); a copy when the group
    has one rank (or there is none)."""
    if _world(group) == 1:
        out.copy_(inp)
        return
    dist.all_to_all_single(_byte_rows(out), _byte_rows(inp), out_splits, in_splits, group=group)


def check_config(group, **config) -> None:
    """Every rank must hold the same configuration: a fixed-size all_gather (one collective), so
    a rank-dependent configuration raises the same error on every rank instead of hanging in a
    mismatched all-to-all. Callers run it at the same points on every rank (dispatch: every call
    unless verify_config=False; MoELayer: its first forward)."""
    if group is None:
        return
    world = _world(group)
    names = sorted(config)
    mine = torch.tensor([world] + [int(config[n]) for n in names], dtype=torch.int64)
    dev = _comm_device(group)
    gathered = [torch.empty_like(mine, device=dev) for _ in range(world)]
    dist.all_gather(gathered, mine.to(dev), group=group)
    rows = [g.cpu().tolist() for g in gathered]
    for rank, row in enumerate(rows):
        if row != rows[0]:
            diff = {n: (rows[0][i + 1], row[i + 1]) for i, n in enumerate(names)
                    if rows[0][i + 1] != row[i + 1]}
            if row[0] != rows[0][0]:
                diff["world_size"] = (rows[0][0], row[0])
            raise _C.InvalidArgumentError(f"tessera.torch.moe: ranks disagree on the MoE configuration: rank 0 "
                             f"vs rank {rank}: {diff} (every rank of the EP group must build the "
                             f"same layer)")


def max_over_group(group, value: int) -> int:
    """The largest of every rank's `value` (one all_reduce and a host copy); every rank of the
    group calls it together. MoELayer agrees on capacity mode's T with it, once."""
    if _world(group) == 1:
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.int64, device=_comm_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return int(t.item())


def _comm_device(group) -> torch.device:
    backend = dist.get_backend(group)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _raise_errors(errors: List[int], what: str) -> None:
    msgs = []
    for rank, bits in enumerate(errors):
        if bits & _ERR_INDEX:
            msgs.append(f"rank {rank}: an expert index is outside [0, num_experts) in indices")
        if bits & _ERR_COUNTS:
            msgs.append(f"rank {rank}: per-expert counts do not sum to the rows given (counts)")
    if msgs:
        raise _C.InvalidArgumentError(f"tessera.torch.moe.{what}: bad input on the EP group: "
                         + "; ".join(msgs))


def _header(send_wl: Tensor, error_bits: Tensor, dropped: Tensor, group) -> Tensor:
    """(W, L) rows per (destination, its local expert) + error bits + dropped -> the (W, L+2)
    header every rank receives from each source."""
    w, l = send_wl.shape
    mine = torch.cat([send_wl, error_bits.reshape(1, 1).expand(w, 1),
                      dropped.reshape(1, 1).expand(w, 1)], dim=1).contiguous()
    recv = torch.empty_like(mine)
    _a2a(recv, mine, None, None, group)
    return recv


# ---- regrouping between source-major (as received) and expert-major (what experts read) -------
def _regroup_index(state: DispatchState) -> Tuple[Tensor, Tensor]:
    """(idx, inv) with expert-major row r = source-major row idx[r] and source-major row
    q = expert-major row inv[q]. Source-major is what all_to_all_single received: source s's
    chunks in local-expert order (capacity mode: every chunk C rows). One compiled op per dispatch
    (moe_regroup_index), from the header's counts already on the device (a copy of recv_chunks
    to the device would wait for the stream, the all-to-all just enqueued, before returning);
    kept in state.extra. Each regrouping is then one gather (a vectorized row gather: twice the
    speed of copying a transposed view). A padding row's source is the received rows' count:
    _send_forward leaves a zero row there."""
    cached = state.extra.get("regroup_index")
    if cached is not None:
        return cached
    w, l = state.world, state.local_experts
    if state.capacity >= 0:
        counts = torch.full((w, l), state.capacity, device=state.offs.device)
        rows = w * l * state.capacity
    else:
        counts = state.extra["recv_counts"]
        rows = sum(sum(r) for r in state.recv_chunks)
    state.extra["regroup_index"] = ops.moe_regroup_index(counts, rows, state.align,
                                                         _padded_rows(state))
    return state.extra["regroup_index"]


def _padded_rows(state: DispatchState) -> int:
    """The expert-major rows the experts read: each local expert's received rows padded to a
    multiple of state.align (only dropless mode over several ranks pads; the received rows
    otherwise). The dispatch's header copy brings it; else host arithmetic on the split sizes,
    once (kept in state.extra)."""
    if state.recv_chunks is None:
        return state.world * state.local_experts * state.capacity
    cached = state.extra.get("padded_rows")
    if cached is None:
        a = state.align
        cached = state.extra["padded_rows"] = sum(
            (sum(r[e] for r in state.recv_chunks) + a - 1) // a * a
            for e in range(state.local_experts))
    return cached


def _to_expert_major(x: Tensor, state: DispatchState) -> Tensor:
    if state.world == 1:  # one source: its order is the experts' order
        return x
    return x.index_select(0, _regroup_index(state)[0])


def _to_source_major(x: Tensor, state: DispatchState) -> Tensor:
    if state.world == 1:
        return x
    return x.index_select(0, _regroup_index(state)[1])


def _recv_splits(state: DispatchState) -> Optional[List[int]]:
    return None if state.recv_chunks is None else [sum(r) for r in state.recv_chunks]


def _send_back(x_source_major: Tensor, state: DispatchState) -> Tensor:
    """Rows received by dispatch -> their senders: (live_rows, H) in this rank's permuted order,
    returned inside a (rows, H) buffer (rows past the live end zero). One rank: the rows are
    already this rank's (no copy when nothing follows the live end)."""
    live_rows = state.live_rows
    if state.world == 1 and live_rows == state.rows and x_source_major.is_contiguous():
        return x_source_major
    out = x_source_major.new_empty((state.rows, x_source_major.shape[1]))
    out[live_rows:].zero_()
    _a2a(out[:live_rows], x_source_major.contiguous(), state.send_rows, _recv_splits(state),
         state.group)
    return out


def _send_forward(x_perm: Tensor, state: DispatchState) -> Tensor:
    """Rows of this rank's permuted buffer -> the owners of their experts (source-major), then
    one zero row where the experts' rows are padded (the padding rows' source, _regroup_index)."""
    recv_rows = sum(_recv_splits(state)) if state.recv_chunks is not None else state.rows
    if state.world == 1:  # this rank's own live rows (a prefix: no copy)
        return x_perm[:recv_rows]
    zero_row = 1 if _padded_rows(state) > recv_rows else 0
    out = x_perm.new_empty((recv_rows + zero_row, x_perm.shape[1]))
    if zero_row:
        out[recv_rows:].zero_()
    _a2a(out[:recv_rows], x_perm[:state.live_rows].contiguous(), _recv_splits(state),
         state.send_rows, state.group)
    return out


def _exchange_layout(group, num_experts: int, group_rows: Tensor, error_bits: Tensor,
                     dropped: Tensor, capacity: int, sync_checks: bool, what: str,
                     align: int = 1) -> dict:
    """Header exchange: the received chunk sizes, offsets (each local expert's rows padded to a
    multiple of align), error bits and drop totals."""
    world = _world(group)
    local = num_experts // world
    send_wl = group_rows.reshape(world, local)
    hdr = _header(send_wl, error_bits.reshape(()).to(torch.int64), dropped.reshape(()), group)
    per_expert = hdr[:, :local].sum(0)
    if align > 1:
        per_expert = (per_expert + (align - 1)).div(align, rounding_mode="floor") * align
    ends = per_expert.cumsum(0)
    out = dict(offs=ends.to(torch.int32), send_rows=None,
               recv_chunks=None, error=hdr[:, local].clone(),
               dropped_total=hdr[:, local + 1].sum().reshape(1), recv_counts=hdr[:, :local])
    if capacity < 0:
        # The one device -> host copy of dropless mode: split sizes for all_to_all_single, every
        # rank's error bits (so that all ranks raise together) and the padded rows' total.
        # (dispatch on one rank does not come here: _prepare.)
        host = torch.cat([send_wl.reshape(-1), hdr.reshape(-1), ends[-1:]]).tolist()
        out["padded_rows"] = host.pop()
        send, rows = host[:world * local], host[world * local:]
        table = [rows[s * (local + 2):(s + 1) * (local + 2)] for s in range(world)]
        _raise_errors([row[local] for row in table], what)
        out["send_rows"] = [sum(send[d * local:(d + 1) * local]) for d in range(world)]
        out["recv_chunks"] = [row[:local] for row in table]
    elif sync_checks:
        _raise_errors(out["error"].tolist(), what)
    return out


def _prepare(x: Tensor, indices: Tensor, num_experts: int, group, mode: str, align: int,
             capacity: Optional[int], sync_checks: Optional[bool], verify_config: bool,
             e8m0_floor: bool = False, grad_mode: str = "none") -> DispatchState:
    if x.dim() != 2 or indices.dim() != 2 or indices.shape[0] != x.shape[0]:
        raise _C.ShapeError(f"dispatch: x must be (T, H) and indices (T, k) with one T, got "
                         f"{tuple(x.shape)} and {tuple(indices.shape)}")
    if x.dtype not in _FLOAT_DTYPES:
        raise _C.DTypeError(f"dispatch: x must be float32, bfloat16 or float16, got {x.dtype}")
    world = _world(group)
    if num_experts < 1 or num_experts % world != 0:
        raise _C.InvalidArgumentError(f"dispatch: num_experts {num_experts} is not a positive multiple of the "
                         f"EP world size {world}")
    cap = -1 if capacity is None else int(capacity)
    if cap >= 0 and cap % align != 0:
        raise _C.InvalidArgumentError(f"dispatch: capacity {cap} must be a multiple of the alignment {align}")
    t, k = indices.shape
    # Dropless over several ranks: the chunks travel unpadded (the routing's align 1) and the
    # receiver pads each local expert's rows to `align` in the regroup; one rank (no wire) and
    # capacity mode (C a multiple of align) keep the routing's padding.
    wire_align, recv_align = (1, align) if world > 1 and cap < 0 else (align, 1)
    if verify_config:
        check_config(group, num_experts=num_experts, top_k=k, hidden=x.shape[1], capacity=cap,
                     align=align, mode=ops.QUANT_MODES.index(mode),
                     grad_mode=ops.QUANT_MODES.index(grad_mode),
                     dtype=_FLOAT_DTYPES.index(x.dtype))
    if sync_checks is None:
        sync_checks = x.device.type == "cpu"
    if indices.device.type == "cuda":
        # The CUDA routing drops a pair whose expert is out of range and records it in its flag
        # (bit 1 = _ERR_INDEX), which the header carries to every rank.
        counts, offsets, slot_map, row_pair, dropped, flag = ops.moe_routing(indices, num_experts,
                                                                             wire_align, cap)
        error_bits = flag.to(torch.int64)
    else:  # the CPU routing raises at once, on this rank only: test here, raise on every rank
        bad = (indices < 0) | (indices >= num_experts)
        error_bits = bad.any().to(torch.int64) * _ERR_INDEX
        safe = torch.where(bad, torch.zeros_like(indices), indices)
        counts, offsets, slot_map, row_pair, dropped, _ = ops.moe_routing(safe, num_experts,
                                                                          wire_align, cap)
    # The permute (+ quantize) needs only the routing: enqueued before the header exchange, whose
    # host copy (dropless) then waits for it too, instead of the device idling after that copy
    # while the host enqueues it. Its gradient is _DispatchFn's (x is used detached here).
    payload = ops.moe_permute(x.detach(), row_pair, k, mode, "e4m3", e8m0_floor,
                              slot_map=slot_map)
    if world == 1:
        # Nothing to exchange: the experts' layout is the routing's (its padding included), the
        # error bits and drops this rank's.
        lay = dict(offs=offsets[1:].to(torch.int32), send_rows=None, recv_chunks=None,
                   error=error_bits.reshape(1), dropped_total=dropped, recv_counts=None)
        if sync_checks:
            _raise_errors(lay["error"].tolist(), "dispatch")
    else:
        lay = _exchange_layout(group, num_experts, offsets[1:] - offsets[:-1], error_bits,
                               dropped, cap, sync_checks, "dispatch", recv_align)
    return DispatchState(group=group, world=world, num_experts=num_experts,
                         local_experts=num_experts // world, num_tokens=t, hidden=x.shape[1],
                         capacity=cap, slot_map=slot_map, row_pair=row_pair,
                         rows=row_pair.shape[0], send_rows=lay["send_rows"],
                         recv_chunks=lay["recv_chunks"], offs=lay["offs"], dropped=dropped,
                         dropped_total=lay["dropped_total"], error=lay["error"],
                         extra=dict(counts=counts, padded_offsets=offsets,
                                    recv_counts=lay["recv_counts"], payload=payload,
                                    padded_rows=lay.get("padded_rows"),
                                    grad_mode=grad_mode, e8m0_floor=e8m0_floor),
                         align=recv_align)


def _scale_rows(sinv: Tensor, mode: str, rows: int) -> Tensor:
    """The per-row scales of a permuted payload as a (rows, n) matrix (FP32 or E8M0 bytes)."""
    if mode == "rowwise":
        return sinv.reshape(rows, 1)
    return sinv[:rows]


def _deliver(data: Tensor, sinv: Optional[Tensor], mode: str, dtype: torch.dtype,
             state: DispatchState, codes: bool = False):
    """Rows of this rank's permuted buffer (mode "none": in `dtype`; else `mode` codes and their
    scales) -> the owners of their experts, expert-major, in `dtype`. A quantized payload is
    dequantized reading the received rows in expert-major order (the regrouping and the
    dequantize in one pass); with `codes`, it is left as (codes, scales), regrouped, for the
    experts' first GEMM to read as x's rowwise copy."""
    recv = _send_forward(data, state)
    if mode == "none":
        return _to_expert_major(recv, state)
    recv_scale = _send_forward(_scale_rows(sinv, mode, state.rows), state)
    if codes:
        return _to_expert_major(recv, state), _to_expert_major(recv_scale, state)
    rows = None if state.world == 1 else _regroup_index(state)[0]
    return ops.dequantize_rows(recv, recv_scale, mode, dtype, rows)


class _DispatchFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, state: DispatchState, mode: str, codes: bool) -> Tensor:
        data, sinv = state.extra.pop("payload")  # permuted (+ quantized) by _prepare
        ctx.state = state
        if codes:
            # The rows stay codes (state.extra["codes"]); the output only carries their shape,
            # dtype and the way back for their gradient: an expanded scalar, no memory.
            state.extra["codes"] = _deliver(data, sinv, mode, x.dtype, state, codes=True)
            return x.new_empty(()).expand(state.extra["codes"][0].shape[0], state.hidden)
        return _deliver(data, sinv, mode, x.dtype, state)

    @staticmethod
    def backward(ctx, grad: Tensor):
        state = ctx.state
        d_perm = _send_back(_to_source_major(grad.contiguous(), state), state)
        return ops.moe_permute_backward(d_perm, state.slot_map, state.num_tokens), None, None, None


class _CombineFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y: Tensor, probs: Optional[Tensor], state: DispatchState) -> Tensor:
        y_perm = _send_back(_to_source_major(y.contiguous(), state), state)
        out = ops.moe_unpermute(y_perm, state.slot_map, state.row_pair, probs)
        ctx.state = state
        ctx.y_meta = (y.shape, y.dtype)
        ctx.save_for_backward(y_perm, probs)
        return out

    @staticmethod
    def backward(ctx, dout: Tensor):
        state = ctx.state
        y_perm, probs = ctx.saved_tensors
        dout = dout.contiguous()
        need_p = probs is not None and ctx.needs_input_grad[1]
        mode = state.extra["grad_mode"]
        if mode == "none":
            dy_perm, dprobs = ops.moe_unpermute_backward(dout, y_perm, state.slot_map,
                                                         state.row_pair, probs)
            dy = _deliver(dy_perm, None, mode, dy_perm.dtype, state)
        else:
            # The experts' output gradient travels quantized as the forward payload did: its
            # rows (probs[p] * dout[t] rounded to dout's dtype — the unpermute backward's dy,
            # whose dtype is y's, as dout's) quantized in one pass over dout; dprobs on its own.
            dprobs = (ops.moe_unpermute_backward(dout, y_perm, state.slot_map, state.row_pair,
                                                 probs, need_dy=False)[1] if need_p else None)
            codes, sinv = ops.moe_permute(dout, state.row_pair, state.slot_map.shape[1], mode,
                                          "e4m3", state.extra["e8m0_floor"], weights=probs,
                                          slot_map=state.slot_map)
            holder = state.extra.get("grad_rowwise")
            if holder is not None:
                # The experts read the gradient as codes (GroupedMLP's grad_rowwise): regrouped
                # expert-major, handed over through the holder; y's gradient is an expanded
                # zero that only carries the shape and dtype (no memory).
                holder.put(_deliver(codes, sinv, mode, dout.dtype, state, codes=True))
                shape, dtype = ctx.y_meta
                dy = torch.zeros((), dtype=dtype, device=dout.device).expand(shape)
            else:
                dy = _deliver(codes, sinv, mode, dout.dtype, state)
        return dy, (dprobs if need_p else None), None


def _power_of_two_scales(mode: str) -> bool:
    """Whether `mode`'s scales are powers of two by default (E8M0, or the scaling-mode table's
    power_of_two_default): then re-quantizing its dequantized rows in another scaling unit
    divides by powers of two only, exact outside E4M3's subnormal range."""
    row = _mode_row(mode)
    return row["scale_dtype"] == "e8m0" or row["power_of_two_default"]


def grad_payload_mode(recipe: str, quantize_grads: Optional[bool] = None) -> str:
    """The payload mode of the experts' output gradient in combine's backward: the forward
    payload's mode (recipe_dispatch_mode), or "none" (the activation dtype).
    quantize_grads True: the payload's mode (raises for a recipe whose payload is not
    quantized); False: "none"; None (default): the payload's mode where its scales are powers of
    two (fp8_block, mxfp8), "none" elsewhere (fp8_rowwise: FP32 scales, so the experts'
    columnwise copy would round the gradient a second time)."""
    mode = recipe_dispatch_mode(recipe)[0]
    if quantize_grads is None:
        return mode if mode != "none" and _power_of_two_scales(mode) else "none"
    if quantize_grads and mode == "none":
        quantized = sorted(r for r, (m, _) in _RECIPE_DISPATCH.items() if m != "none")
        raise _C.InvalidArgumentError(
            f"tessera invalid argument: quantize_grads: recipe {recipe!r} sends its payload "
            f"unquantized, so there is no quantization for the gradients to follow (pass None "
            f"or False, or a recipe from {quantized})")
    return mode if quantize_grads else "none"


def dispatch(x: Tensor, indices: Tensor, num_experts: int, group=None, *, recipe: str = "bf16",
             capacity: Optional[int] = None, sync_checks: Optional[bool] = None,
             e8m0_floor: bool = False, verify_config: bool = True,
             quantize_grads: Optional[bool] = None,
             deliver_codes: bool = False) -> tuple[Tensor, DispatchState]:
    """Sends each token x (T, H) to the ranks owning its top-k experts indices (T, k).

    Returns (recv (R, H) in x's dtype, expert-major for this rank's L local experts — feed it
    with state.offs (L,) int32 to the experts — and the DispatchState that combine needs).
    Differentiable in x (the payload quantization of `recipe` is straight-through).
    Dropless mode (capacity None) over several ranks copies the split sizes to the host once (see
    module doc); on one rank it does not: R is then the routing's host-known bound of the
    permuted rows (rows past state.offs[-1] are zero, in no expert's group), and bad indices are
    recorded in state.error as in capacity mode (sync_checks raises at once).
    verify_config: first check that every rank passes the same configuration (one small
    all_gather; MoELayer does it on its first forward only).
    quantize_grads: how combine's backward sends the experts' output gradient to them: True,
    quantized as this payload is (straight-through, as the forward's; half the bytes of BF16);
    False, in the activation dtype; None (default), quantized where the payload's scales are
    powers of two (fp8_block, mxfp8), else in the activation dtype (grad_payload_mode).
    deliver_codes: a quantized payload is not dequantized: state.extra["codes"] holds the received
    rows as (codes uint8 (R, H), scales), expert-major, for the experts to read as x's rowwise
    copy (GroupedMLP's x_rowwise), and recv is an expanded (R, H) tensor of x's dtype whose values
    are not to be read (it carries the rows' gradient back). Raises for a recipe whose payload is
    not quantized.
    """
    mode, align = recipe_dispatch_mode(recipe)
    grad_mode = grad_payload_mode(recipe, quantize_grads)
    if deliver_codes and mode == "none":
        raise _C.InvalidArgumentError(
            f"tessera invalid argument: deliver_codes: recipe {recipe!r} sends its payload "
            f"unquantized, so there are no codes to deliver")
    state = _prepare(x, indices, num_experts, group, mode, align, capacity, sync_checks,
                     verify_config, e8m0_floor, grad_mode)
    return _DispatchFn.apply(x, state, mode, deliver_codes), state


def combine(y: Tensor, probs: Optional[Tensor], state: DispatchState) -> Tensor:
    """Expert outputs y (R, H) (dispatch's row order) -> (T, H): sent back to their tokens and
    combined, out[t] = sum_j probs[t, j] * y_row(t, j) in FP32 (dropped pairs contribute 0).
    Differentiable in y and probs (float32 (T, k), or None for weights 1)."""
    if probs is not None:
        probs = probs.float()
    return _CombineFn.apply(y, probs, state)


def all_to_all_expert_rows(rows: Tensor, counts: Tensor, num_experts: int, group=None,
                           sync_checks: Optional[bool] = None) -> tuple[Tensor, Tensor]:
    """The dropless exchange on its own: rows (N, H) grouped by global expert (counts (E,) rows
    each, summing to N) -> (rows received for this rank's local experts, expert-major; offs (L,)
    int32). Counts that do not sum to N raise on every rank."""
    world = _world(group)
    if num_experts % world != 0 or counts.shape != (num_experts,):
        raise _C.ShapeError(f"all_to_all_expert_rows: counts must be ({num_experts},) and "
                         f"num_experts a multiple of the world size {world}, got "
                         f"{tuple(counts.shape)}")
    counts = counts.to(torch.int64)
    bad = (counts.sum() != rows.shape[0]) | (counts < 0).any()
    error_bits = bad.to(torch.int64) * _ERR_COUNTS
    lay = _exchange_layout(group, num_experts, torch.where(bad, 0, counts), error_bits,
                           torch.zeros(1, dtype=torch.int64, device=counts.device), -1,
                           True if sync_checks is None else sync_checks,
                           "all_to_all_expert_rows")
    state = DispatchState(group=group, world=world, num_experts=num_experts,
                          local_experts=num_experts // world, num_tokens=0, hidden=rows.shape[1],
                          capacity=-1, slot_map=counts, row_pair=counts, rows=rows.shape[0],
                          send_rows=lay["send_rows"], recv_chunks=lay["recv_chunks"],
                          offs=lay["offs"], dropped=counts[:1], dropped_total=counts[:1],
                          error=lay["error"], extra=dict(recv_counts=lay["recv_counts"],
                                                         padded_rows=lay["padded_rows"]))
    return _to_expert_major(_send_forward(rows, state), state), lay["offs"]


def capacity_for(num_tokens: int, top_k: int, num_experts: int, capacity_factor: float,
                 align: int) -> int:
    """Per-(rank, expert) capacity: ceil(factor * T * k / E) rounded up to the alignment."""
    c = math.ceil(capacity_factor * num_tokens * top_k / num_experts)
    return max(align, (c + align - 1) // align * align)
