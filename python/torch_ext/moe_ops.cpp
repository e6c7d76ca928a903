// torch.ops.tessera.moe_*: the single-device MoE ops of tessera.torch (tessera/nn/moe_routing.h)
// as compiled torch ops — routing metadata, permute (+ fused quantization), unpermute, their
// backwards, the dequantize of a permuted payload and the regrouping index of a dispatch. Each
// converts its tensors once and runs the C++ op on torch's current stream; outputs come from
// torch's allocator. Fakes (meta) and autograd live in tessera/torch/moe_ops.py. The nanobind
// `_moe_*_into` functions stay for array callers without torch.
#include <cstdint>
#include <string>
#include <tuple>

#include "step_common.h"
#include "tessera/core/status.h"
#include "tessera/nn/moe_routing.h"
#include "tessera/quantize/types.h"

namespace tessera::torch_ext {
namespace {

namespace sh = torch::headeronly;

Tensor contiguous_of(const Tensor& t) {
  return t.is_contiguous() ? t : torch::stable::contiguous(t);
}

OptTensor contiguous_of(const OptTensor& t) {
  return t.has_value() ? OptTensor(contiguous_of(*t)) : std::nullopt;
}

// A 2-D view of `t` named `arg` for `op`.
TensorView matrix_view(const Tensor& t, const char* op, const char* arg, const char* shape) {
  const TensorView v = view_of(t, arg);
  TESSERA_CHECK_STATUS(v.ndim == 2, Status::kShapeMismatch, op, ": ", arg, " must be ", shape,
                       ", got ", v.to_string());
  return v;
}

using RoutingOut = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;

// counts (E), padded_offsets (E+1), slot_map (T, k), row_pair (rows), dropped (1) int64 and the
// error flag (1) int32 (CUDA: bits of bad indices; the CPU raises instead).
RoutingOut moe_routing_op(Tensor indices, int64_t num_experts, int64_t align, int64_t capacity) {
  return guarded([&]() -> RoutingOut {
    const CallScope scope(indices);
    const Device dev = scope.device();
    const Tensor idx = contiguous_of(indices);
    const TensorView iv = matrix_view(idx, "moe_routing", "indices", "(T, k)");
    MoeRoutingOptions o;
    o.num_experts = num_experts;
    o.align = align;
    o.capacity = capacity;
    const int64_t t = iv.shape[0], k = iv.shape[1];
    const int64_t rows = moe_permuted_rows(t, k, o);
    Tensor counts = new_tensor({num_experts}, DType::kInt64, dev);
    Tensor offsets = new_tensor({num_experts + 1}, DType::kInt64, dev);
    Tensor slot_map = new_tensor({t, k}, DType::kInt64, dev);
    Tensor row_pair = new_tensor({rows}, DType::kInt64, dev);
    Tensor dropped = new_tensor({1}, DType::kInt64, dev);
    Tensor flag = new_tensor({1}, DType::kInt32, dev);
    torch::stable::zero_(flag);
    Tensor workspace = empty_like_none(dev);
    if (dev.is_cuda()) {
      workspace = new_tensor({moe_routing_workspace_bytes(t, k, o, dev)}, DType::kUInt8, dev);
      o.error_flag = static_cast<int32_t*>(flag.data_ptr());
    }
    const MoeRouting out{view_of(counts, "counts"), view_of(offsets, "padded_offsets"),
                         view_of(slot_map, "slot_map"), view_of(row_pair, "row_pair"),
                         view_of(dropped, "dropped")};
    moe_routing(iv, o, out, dev.is_cuda() ? view_of(workspace, "workspace") : TensorView{},
                scope.stream());
    return {counts, offsets, slot_map, row_pair, dropped, flag};
  });
}

// The quantizer config of a permute payload mode ("rowwise", "block1x128", "mxfp8").
QuantizerConfig payload_config(const std::string& mode, const std::string& element,
                               bool e8m0_floor) {
  QuantizerConfig c = make_config(scaling_mode_from_name(mode.c_str()), parse_dtype(element));
  if (e8m0_floor) c.e8m0_rounding = E8M0Rounding::kFloor;
  return c;
}

using PairOut = std::tuple<Tensor, Tensor>;

// (data (rows, H), scale_inv): mode "none" -> x's dtype and a (0,) FP32; else FP8 codes and the
// compact scales of the mode — one per row as (rows,) FP32, or (rows', n) FP32 / E8M0 bytes.
// weights (T, k) FP32 (quantized modes): rows of weights[p] · x[t] (moe_permute_quantize).
// slot_map (T, k): the routing's, so that CUDA reads each token's row once (the same bits).
PairOut moe_permute_op(Tensor x, Tensor row_pair, int64_t top_k, std::string mode,
                       std::string element, bool e8m0_floor, OptTensor weights,
                       OptTensor slot_map) {
  return guarded([&]() -> PairOut {
    const CallScope scope(x);
    const Device dev = scope.device();
    const Tensor xc = contiguous_of(x), rp = contiguous_of(row_pair);
    const OptTensor wc = contiguous_of(weights), sc = contiguous_of(slot_map);
    const TensorView sv = view_of(sc, "slot_map");
    const TensorView xv = matrix_view(xc, "moe_permute", "x", "(T, H)");
    const TensorView rv = view_of(rp, "row_pair");
    TESSERA_CHECK_STATUS(rv.ndim == 1, Status::kShapeMismatch,
                         "moe_permute: row_pair must be (rows,), got ", rv.to_string());
    const int64_t rows = rv.shape[0], cols = xv.shape[1];
    if (mode == "none") {
      TESSERA_CHECK_STATUS(!weights.has_value(), Status::kInvalidArgument,
                           "moe_permute: weights need a quantized mode (got mode \"none\")");
      Tensor data = new_tensor({rows, cols}, xv.dtype, dev);
      moe_permute(xv, rv, sv, top_k, view_of(data, "out"), scope.stream());
      return {data, new_tensor({0}, DType::kFloat32, dev)};
    }
    QuantizedTensorView q;
    q.config = payload_config(mode, element, e8m0_floor);
    q.rows = rows;
    q.cols = cols;
    q.device = dev;
    const MatrixShape ss = scale_shape(q.config, rows, cols, false);
    Tensor data = new_tensor({rows, cols}, q.config.element, dev);
    const DType sdtype = ss.dtype == DType::kFloat8E8M0 ? DType::kUInt8 : ss.dtype;
    Tensor sinv = q.config.mode == ScalingMode::kRowwise  // one scale per row: (rows,)
                      ? new_tensor({ss.rows}, sdtype, dev)
                      : new_tensor({ss.rows, ss.cols}, sdtype, dev);
    q.data = TensorView::contiguous(data.data_ptr(), q.config.element, {rows, cols}, dev);
    q.scale_inv = TensorView::contiguous(sinv.data_ptr(), ss.dtype, {ss.rows, ss.cols}, dev);
    moe_permute_quantize(xv, rv, sv, top_k, view_of(wc, "weights"), q, scope.stream());
    return {data, sinv};
  });
}

// dx (T, H) in d_permuted's dtype.
Tensor moe_permute_backward_op(Tensor d_permuted, Tensor slot_map, int64_t num_tokens) {
  return guarded([&]() -> Tensor {
    const CallScope scope(d_permuted);
    const Tensor d = contiguous_of(d_permuted), s = contiguous_of(slot_map);
    const TensorView dv = matrix_view(d, "moe_permute_backward", "d_permuted", "(rows, H)");
    Tensor dx = new_tensor({num_tokens, dv.shape[1]}, dv.dtype, scope.device());
    moe_permute_backward(dv, view_of(s, "slot_map"), view_of(dx, "dx"), scope.stream());
    return dx;
  });
}

// out (T, H) in y's dtype.
Tensor moe_unpermute_op(Tensor y, Tensor slot_map, Tensor row_pair, OptTensor probs) {
  (void)row_pair;  // in the schema for the autograd's saved inputs; the forward reads slot_map
  return guarded([&]() -> Tensor {
    const CallScope scope(y);
    const Tensor yc = contiguous_of(y), s = contiguous_of(slot_map);
    const OptTensor p = contiguous_of(probs);
    const TensorView yv = matrix_view(yc, "moe_unpermute", "y", "(rows, H)");
    const TensorView sv = matrix_view(s, "moe_unpermute", "slot_map", "(T, k)");
    Tensor out = new_tensor({sv.shape[0], yv.shape[1]}, yv.dtype, scope.device());
    moe_unpermute(yv, sv, view_of(p, "probs"), view_of(out, "out"), scope.stream());
    return out;
  });
}

// (dy (rows, H) in y's dtype — (0,) when need_dy is false —, dprobs (T, k) FP32; (0,) without
// probs).
PairOut moe_unpermute_backward_op(Tensor dout, Tensor y, Tensor slot_map, Tensor row_pair,
                                  OptTensor probs, bool need_dy) {
  return guarded([&]() -> PairOut {
    const CallScope scope(y);
    const Device dev = scope.device();
    const Tensor g = contiguous_of(dout), yc = contiguous_of(y), s = contiguous_of(slot_map),
                 r = contiguous_of(row_pair);
    const OptTensor p = contiguous_of(probs);
    const TensorView yv = matrix_view(yc, "moe_unpermute_backward", "y", "(rows, H)");
    const TensorView sv = matrix_view(s, "moe_unpermute_backward", "slot_map", "(T, k)");
    TESSERA_CHECK_STATUS(need_dy || p.has_value(), Status::kInvalidArgument,
                         "moe_unpermute_backward: need_dy=False without probs computes nothing");
    Tensor dy = need_dy ? new_tensor({yv.shape[0], yv.shape[1]}, yv.dtype, dev)
                        : new_tensor({0}, yv.dtype, dev);
    Tensor dprobs = p.has_value() ? new_tensor({sv.shape[0], sv.shape[1]}, DType::kFloat32, dev)
                                  : new_tensor({0}, DType::kFloat32, dev);
    moe_unpermute_backward(view_of(g, "dout"), yv, sv, view_of(r, "row_pair"),
                           view_of(p, "probs"), need_dy ? view_of(dy, "dy") : TensorView{},
                           p.has_value() ? view_of(dprobs, "dprobs") : TensorView{},
                           scope.stream());
    return {dy, dprobs};
  });
}

// E4M3 codes (R, H) (any 8-bit dtype) and their `mode` scales (E8M0 as any 8-bit dtype) ->
// (R, H) out_dtype, or (M, H): rows source_rows (M,) int64 of data.
Tensor moe_dequantize_rows_op(Tensor data, Tensor scale_inv, std::string mode,
                              sh::ScalarType out_dtype, OptTensor source_rows) {
  return guarded([&]() -> Tensor {
    const CallScope scope(data);
    const Tensor d = contiguous_of(data), s = contiguous_of(scale_inv);
    const OptTensor rows = contiguous_of(source_rows);
    TensorView dv = matrix_view(d, "moe_dequantize_rows", "data", "(R, H)");
    TESSERA_CHECK_STATUS(d.element_size() == 1, Status::kDTypeMismatch,
                         "moe_dequantize_rows: data must hold 8-bit E4M3 codes, got ",
                         dv.to_string());
    dv.dtype = DType::kFloat8E4M3;  // the codes, whatever 8-bit dtype carries them
    TensorView sv = view_of(s, "scale_inv");
    if (s.element_size() == 1) sv.dtype = DType::kUInt8;  // E8M0 bytes
    const TensorView rv = view_of(rows, "source_rows");
    TESSERA_CHECK_STATUS(!rows.has_value() || rv.ndim == 1, Status::kShapeMismatch,
                         "moe_dequantize_rows: source_rows must be (M,) int64 row indices, got ",
                         rv.to_string());
    const int64_t out_rows = rows.has_value() ? rv.shape[0] : dv.shape[0];
    Tensor out = new_tensor({out_rows, dv.shape[1]}, dtype_arg(out_dtype, "out_dtype"),
                            scope.device());
    if (out_rows > 0 && dv.shape[1] > 0) {
      moe_dequantize_rows(dv, sv, scaling_mode_from_name(mode.c_str()), rv, view_of(out, "out"),
                          scope.stream());
    }
    return out;
  });
}

// counts (W, L) int32/int64 (rows of any stride) -> (source_of (padded_rows,), expert_of (rows,))
// int64: the regrouping of a dispatch's received rows between source-major and expert-major
// order, each expert's rows padded to a multiple of align (padded_rows -1: rows, align 1).
std::tuple<Tensor, Tensor> moe_regroup_index_op(Tensor counts, int64_t rows, int64_t align,
                                                int64_t padded_rows) {
  return guarded([&]() -> std::tuple<Tensor, Tensor> {
    const CallScope scope(counts);
    TESSERA_CHECK(rows >= 0, "moe_regroup_index: rows ", rows, " must be >= 0");
    if (padded_rows < 0) padded_rows = rows;
    TESSERA_CHECK(padded_rows >= rows, "moe_regroup_index: padded_rows ", padded_rows,
                  " must be >= rows ", rows);
    Tensor source_of = new_tensor({padded_rows}, DType::kInt64, scope.device());
    Tensor expert_of = new_tensor({rows}, DType::kInt64, scope.device());
    moe_regroup_index(view_of(counts, "counts"), rows, padded_rows, align,
                      view_of(source_of, "source_of"), view_of(expert_of, "expert_of"),
                      scope.stream());
    return {source_of, expert_of};
  });
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(tessera, m) {
  m.def("moe_routing(Tensor indices, int num_experts, int align=1, int capacity=-1) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("moe_permute(Tensor x, Tensor row_pair, int top_k, str mode=\"none\", "
        "str element=\"e4m3\", bool e8m0_floor=False, Tensor? weights=None, "
        "Tensor? slot_map=None) -> (Tensor, Tensor)");
  m.def("moe_permute_backward(Tensor d_permuted, Tensor slot_map, int num_tokens) -> Tensor");
  m.def("moe_unpermute(Tensor y, Tensor slot_map, Tensor row_pair, Tensor? probs=None) -> "
        "Tensor");
  m.def("moe_unpermute_backward(Tensor dout, Tensor y, Tensor slot_map, Tensor row_pair, "
        "Tensor? probs=None, bool need_dy=True) -> (Tensor, Tensor)");
  m.def("moe_dequantize_rows(Tensor data, Tensor scale_inv, str mode, ScalarType out_dtype, "
        "Tensor? source_rows=None) -> Tensor");
  m.def("moe_regroup_index(Tensor counts, int rows, int align=1, int padded_rows=-1) -> "
        "(Tensor, Tensor)");
}

STABLE_TORCH_LIBRARY_IMPL(tessera, CompositeExplicitAutograd, m) {
  m.impl("moe_routing", TORCH_BOX(&moe_routing_op));
  m.impl("moe_permute", TORCH_BOX(&moe_permute_op));
  m.impl("moe_permute_backward", TORCH_BOX(&moe_permute_backward_op));
  m.impl("moe_unpermute", TORCH_BOX(&moe_unpermute_op));
  m.impl("moe_unpermute_backward", TORCH_BOX(&moe_unpermute_backward_op));
  m.impl("moe_dequantize_rows", TORCH_BOX(&moe_dequantize_rows_op));
  m.impl("moe_regroup_index", TORCH_BOX(&moe_regroup_index_op));
}

}  // namespace tessera::torch_ext
