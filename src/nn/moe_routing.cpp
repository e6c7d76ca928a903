// Expert-parallel routing ops: argument checks (shapes, dtypes, devices, and on the CPU the index
// values) and dispatch to the CPU loops (moe_routing_cpu.cpp) or the CUDA kernels
// (moe_routing.cu). Contract: include/tessera/nn/moe_routing.h.
#include "tessera/nn/moe_routing.h"

#include <algorithm>
#include <tuple>

#include "nn/moe_kernels.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"
#include "tessera/nn/token_padding.h"

namespace tessera {

namespace {
constexpr ScalingMode kPermuteModes[] = {ScalingMode::kRowwise, ScalingMode::kBlock1x128,
                                         ScalingMode::kMXFP8};
}  // namespace

std::span<const ScalingMode> moe_permute_modes() { return kPermuteModes; }

namespace detail::moe {
RowQuant row_quant_of(const QuantizerConfig& c, int64_t hidden) {
  RowQuant q;
  switch (c.mode) {
    case ScalingMode::kRowwise: q.mode = RowQuantMode::kRowwise; q.block = hidden; break;
    case ScalingMode::kBlock1x128: q.mode = RowQuantMode::kBlock1x128; q.block = 128; break;
    case ScalingMode::kMXFP8: q.mode = RowQuantMode::kMXFP8; q.block = 32; break;
    default:
      TESSERA_FAIL(Status::kUnsupported, "moe_permute_quantize: mode ", scaling_mode_name(c.mode),
                   " is not fused into permute; expected one of ",
                   scaling_mode_names(kPermuteModes));
  }
  q.e5m2 = c.element == DType::kFloat8E5M2;
  q.fp8_max = fp8_max_finite(c.element);
  q.epsilon = c.amax_epsilon;
  q.power_of_two = c.power_of_two_scales;
  q.floor_rule = c.e8m0_rounding == E8M0Rounding::kFloor;
  q.scale_cols = q.mode == RowQuantMode::kRowwise ? 1 : (hidden + q.block - 1) / q.block;
  return q;
}
}  // namespace detail::moe

namespace {

using detail::moe::row_quant_of;
using detail::moe::RowQuant;
using detail::moe::RowQuantMode;

void check_options(const MoeRoutingOptions& o) {
  TESSERA_CHECK(o.num_experts >= 1, "moe routing: num_experts ", o.num_experts, " must be >= 1");
  TESSERA_CHECK(o.align >= 1, "moe routing: align ", o.align, " must be >= 1");
  TESSERA_CHECK(o.capacity >= -1, "moe routing: capacity ", o.capacity,
                " must be -1 (dropless) or a row count >= 0");
  TESSERA_CHECK(o.capacity < 0 || o.capacity % o.align == 0, "moe routing: capacity ",
                o.capacity, " must be a multiple of align ", o.align);
}

// T·k, the number of (token, choice) pairs, for T >= 0 and k >= 1; kOutOfRange naming both when
// it does not fit int64.
int64_t pair_count(int64_t num_tokens, int64_t top_k, const char* op) {
  TESSERA_CHECK(num_tokens >= 0 && top_k >= 1, op, ": num_tokens ", num_tokens, " and top_k ",
                top_k, " must be >= 0 and >= 1");
  int64_t pairs = 0;
  TESSERA_CHECK_STATUS(!__builtin_mul_overflow(num_tokens, top_k, &pairs), Status::kOutOfRange,
                       op, ": num_tokens ", num_tokens, " x top_k ", top_k,
                       " pairs overflow int64");
  return pairs;
}

void check_matrix(const TensorView& v, const char* arg, int64_t rows, int64_t cols) {
  TESSERA_CHECK_STATUS(v.ndim == 2 && v.shape[0] == rows && v.shape[1] == cols,
                       Status::kShapeMismatch, arg, ": expected (", rows, ", ", cols, "), got ",
                       v.to_string());
}

void check_vector(const TensorView& v, const char* arg, int64_t n) {
  TESSERA_CHECK_STATUS(v.ndim == 1 && v.shape[0] == n, Status::kShapeMismatch, arg,
                       ": expected (", n, "), got ", v.to_string());
}

void check_same_device(const TensorView& v, Device d, const char* arg) {
  TESSERA_CHECK(v.device == d, arg, ": must be on ", to_string(d), ", got ", to_string(v.device));
}

// CPU: every entry of an index map in [-1, bound).
template <class Map>
void check_map_values(const Map* m, int64_t n, int64_t bound, const char* arg) {
  for (int64_t i = 0; i < n; ++i) {
    TESSERA_CHECK_STATUS(m[i] >= -1 && m[i] < bound, Status::kOutOfRange, arg, "[", i, "] = ",
                         static_cast<int64_t>(m[i]), " is outside [-1, ", bound, ")");
  }
}

void check_map(const TensorView& m, const char* arg, int64_t bound) {
  check_view(m, arg, {DType::kInt32, DType::kInt64});
  if (!m.device.is_cpu()) return;
  dispatch_index_dtype(m.dtype, arg, [&](auto tag) {
    check_map_values(m.as<const typename decltype(tag)::type>(), m.numel(), bound, arg);
  });
}


detail::moe::PermuteArgs permute_args(const TensorView& x, const TensorView& row_pair,
                                      const TensorView& slot_map, int64_t top_k, const char* op) {
  check_view(x, "moe permute: x");
  TESSERA_CHECK_STATUS(is_floating_input(x.dtype) && x.ndim == 2, Status::kDTypeMismatch, op,
                       ": x must be a 2-D float32/bfloat16/float16 (T, H), got ", x.to_string());
  const int64_t pairs = pair_count(x.shape[0], top_k, op);
  TESSERA_CHECK_STATUS(row_pair.ndim == 1, Status::kShapeMismatch, op,
                       ": row_pair must be 1-D (rows), got ", row_pair.to_string());
  check_same_device(row_pair, x.device, "moe permute: row_pair");
  check_map(row_pair, "moe permute: row_pair", pairs);
  detail::moe::PermuteArgs a{};
  a.x = x.data;
  a.x_dtype = x.dtype;
  a.tokens = x.shape[0];
  a.hidden = x.shape[1];
  a.top_k = top_k;
  a.rows = row_pair.shape[0];
  a.row_pair = row_pair.data;
  a.map_dtype = row_pair.dtype;
  if (slot_map.data != nullptr || slot_map.ndim != 0) {  // given
    check_matrix(slot_map, "moe permute: slot_map", a.tokens, top_k);
    TESSERA_CHECK_STATUS(slot_map.dtype == row_pair.dtype, Status::kDTypeMismatch, op,
                         ": slot_map (", dtype_name(slot_map.dtype),
                         ") must have row_pair's dtype (", dtype_name(row_pair.dtype), ")");
    check_same_device(slot_map, x.device, "moe permute: slot_map");
    check_map(slot_map, "moe permute: slot_map", a.rows);
    a.slot_map = slot_map.data;
  }
  return a;
}

void run_permute(const detail::moe::PermuteArgs& a, Device device, Stream stream) {
  if (device.is_cuda()) return detail::moe::permute_cuda(a, device, stream);
  detail::moe::permute_cpu(a);
}

// Shapes shared by the gather-add ops: y (rows, H), slot_map (T, k), out (T, H).
detail::moe::GatherAddArgs gather_args(const TensorView& y, const TensorView& slot_map,
                                       const TensorView& out, const char* op) {
  check_view(y, "moe: y / d_permuted");
  check_view(out, "moe: out / dx");
  TESSERA_CHECK_STATUS(is_floating_input(y.dtype) && is_floating_input(out.dtype) &&
                           y.ndim == 2 && out.ndim == 2 && y.shape[1] == out.shape[1],
                       Status::kShapeMismatch, op, ": rows (rows, H) and out (T, H) must be 2-D "
                       "float32/bfloat16/float16 with one H, got ", y.to_string(), " and ",
                       out.to_string());
  TESSERA_CHECK_STATUS(slot_map.ndim == 2 && slot_map.shape[0] == out.shape[0] &&
                           slot_map.shape[1] >= 1,
                       Status::kShapeMismatch, op, ": slot_map must be (T, k) with T = ",
                       out.shape[0], ", got ", slot_map.to_string());
  check_same_device(y, out.device, "moe: y");
  check_same_device(slot_map, out.device, "moe: slot_map");
  check_map(slot_map, "moe: slot_map", y.shape[0]);
  detail::moe::GatherAddArgs a{};
  a.y = y.data;
  a.y_dtype = y.dtype;
  a.rows = y.shape[0];
  a.hidden = y.shape[1];
  a.tokens = out.shape[0];
  a.top_k = slot_map.shape[1];
  a.slot_map = slot_map.data;
  a.map_dtype = slot_map.dtype;
  a.out = out.data;
  a.out_dtype = out.dtype;
  return a;
}

void run_gather_add(const detail::moe::GatherAddArgs& a, Device device, Stream stream) {
  if (device.is_cuda()) return detail::moe::gather_add_cuda(a, device, stream);
  detail::moe::gather_add_cpu(a);
}

// Per-pair weights (T, k) float32 on `device` (unpermute's probs, permute's weights), or null
// for an empty view. view_arg: the argument as check_view names it; name: in the shape message.
const float* pair_weights_of(const TensorView& w, int64_t tokens, int64_t top_k, Device device,
                             const char* op, const char* name, const char* view_arg) {
  if (w.data == nullptr) return nullptr;
  check_view(w, view_arg, {DType::kFloat32});
  TESSERA_CHECK_STATUS(w.ndim == 2 && w.shape[0] == tokens && w.shape[1] == top_k,
                       Status::kShapeMismatch, op, ": ", name, " must be (T, k) = (", tokens, ", ",
                       top_k, ") float32, got ", w.to_string());
  check_same_device(w, device, view_arg);
  return w.as<const float>();
}

const float* probs_of(const TensorView& probs, const TensorView& slot_map, Device device,
                      const char* op) {
  return pair_weights_of(probs, slot_map.shape[0], slot_map.shape[1], device, op, "probs",
                         "moe: probs");
}

}  // namespace

int64_t moe_permuted_rows(int64_t num_tokens, int64_t top_k, const MoeRoutingOptions& options) {
  check_options(options);
  const int64_t pairs = pair_count(num_tokens, top_k, "moe routing");
  if (options.capacity >= 0) {
    return checked_mul(options.num_experts, options.capacity,
                       "moe routing: num_experts x capacity rows");
  }
  return padded_rows_bound(pairs, options.num_experts, options.align);
}

int64_t moe_routing_workspace_bytes(int64_t num_tokens, int64_t top_k,
                                    const MoeRoutingOptions& options, Device device) {
  check_options(options);
  const int64_t pairs = pair_count(num_tokens, top_k, "moe_routing_workspace_bytes");
  if (!device.is_cuda()) return 0;
  return detail::moe::routing_workspace_bytes_cuda(pairs, options.num_experts);
}

void moe_routing(const TensorView& indices, const MoeRoutingOptions& options,
                 const MoeRouting& out, const TensorView& workspace, Stream stream) {
  check_options(options);
  check_view(indices, "moe_routing: indices", {DType::kInt32, DType::kInt64});
  TESSERA_CHECK_STATUS(indices.ndim == 2 && indices.shape[1] >= 1, Status::kShapeMismatch,
                       "moe_routing: indices must be (T, k) with k >= 1, got ",
                       indices.to_string());
  const int64_t t = indices.shape[0], k = indices.shape[1], e = options.num_experts;
  const int64_t pairs = pair_count(t, k, "moe_routing: indices");
  const Device dev = indices.device;
  check_view(out.counts, "moe_routing: counts", {DType::kInt64});
  check_view(out.padded_offsets, "moe_routing: padded_offsets", {DType::kInt64});
  check_view(out.dropped, "moe_routing: dropped", {DType::kInt64});
  check_view(out.slot_map, "moe_routing: slot_map", {DType::kInt32, DType::kInt64});
  check_view(out.row_pair, "moe_routing: row_pair", {DType::kInt32, DType::kInt64});
  check_vector(out.counts, "moe_routing: counts", e);
  check_vector(out.padded_offsets, "moe_routing: padded_offsets",
               checked_add(e, 1, "moe_routing: num_experts + 1"));
  check_vector(out.dropped, "moe_routing: dropped", 1);
  check_matrix(out.slot_map, "moe_routing: slot_map", t, k);
  const int64_t rows = moe_permuted_rows(t, k, options);
  TESSERA_CHECK_STATUS(out.row_pair.ndim == 1 && out.row_pair.shape[0] >= rows,
                       Status::kBufferTooSmall, "moe_routing: row_pair needs at least ", rows,
                       " entries (moe_permuted_rows), got ", out.row_pair.to_string());
  TESSERA_CHECK_STATUS(out.row_pair.dtype == out.slot_map.dtype, Status::kDTypeMismatch,
                       "moe_routing: slot_map and row_pair must share one dtype");
  const int64_t map_max = out.slot_map.dtype == DType::kInt32 ? INT32_MAX : INT64_MAX;
  TESSERA_CHECK_STATUS(out.row_pair.shape[0] <= map_max && pairs <= map_max,
                       Status::kOutOfRange, "moe_routing: ", out.row_pair.shape[0], " rows / ",
                       pairs, " pairs do not fit int32 slot_map / row_pair; use int64");
  for (const TensorView* v : {&out.counts, &out.padded_offsets, &out.dropped, &out.slot_map,
                              &out.row_pair}) {
    check_same_device(*v, dev, "moe_routing: outputs");
  }
  detail::moe::RoutingArgs a{indices.data, indices.dtype, t, k, e, options.align,
                             options.capacity, out.row_pair.shape[0], out.counts.as<int64_t>(),
                             out.padded_offsets.as<int64_t>(), out.dropped.as<int64_t>(),
                             out.slot_map.data, out.row_pair.data, out.slot_map.dtype,
                             options.error_flag, workspace.data};
  if (!dev.is_cuda()) return detail::moe::routing_cpu(a);
  TESSERA_CHECK(options.error_flag != nullptr, "moe_routing: CUDA indices need "
                "options.error_flag (a device int32) to report expert indices out of range");
  const int64_t need = detail::moe::routing_workspace_bytes_cuda(pairs, e);
  TESSERA_CHECK_STATUS(workspace.nbytes() >= need && (need == 0 || workspace.device == dev),
                       Status::kBufferTooSmall, "moe_routing: workspace needs ", need,
                       " bytes on ", to_string(dev), ", got ", workspace.to_string());
  detail::moe::routing_cuda(a, dev, stream);
}

void moe_permute(const TensorView& x, const TensorView& row_pair, int64_t top_k,
                 const TensorView& out, Stream stream) {
  moe_permute(x, row_pair, TensorView{}, top_k, out, stream);
}

void moe_permute(const TensorView& x, const TensorView& row_pair, const TensorView& slot_map,
                 int64_t top_k, const TensorView& out, Stream stream) {
  detail::moe::PermuteArgs a = permute_args(x, row_pair, slot_map, top_k, "moe_permute");
  check_view(out, "moe_permute: out");
  TESSERA_CHECK_STATUS(out.dtype == x.dtype, Status::kDTypeMismatch, "moe_permute: out (",
                       dtype_name(out.dtype), ") must have the dtype of x (", dtype_name(x.dtype),
                       ")");
  check_matrix(out, "moe_permute: out", a.rows, a.hidden);
  check_same_device(out, x.device, "moe_permute: out");
  a.out = out.data;
  run_permute(a, x.device, stream);
}

void moe_permute_quantize(const TensorView& x, const TensorView& row_pair, int64_t top_k,
                          const QuantizedTensorView& out, Stream stream) {
  moe_permute_quantize(x, row_pair, TensorView{}, top_k, TensorView{}, out, stream);
}

void moe_permute_quantize(const TensorView& x, const TensorView& row_pair, int64_t top_k,
                          const TensorView& weights, const QuantizedTensorView& out,
                          Stream stream) {
  moe_permute_quantize(x, row_pair, TensorView{}, top_k, weights, out, stream);
}

void moe_permute_quantize(const TensorView& x, const TensorView& row_pair,
                          const TensorView& slot_map, int64_t top_k, const TensorView& weights,
                          const QuantizedTensorView& out, Stream stream) {
  detail::moe::PermuteArgs a =
      permute_args(x, row_pair, slot_map, top_k, "moe_permute_quantize");
  a.weights = pair_weights_of(weights, a.tokens, top_k, x.device, "moe_permute_quantize",
                              "weights", "moe_permute_quantize: weights");
  const QuantizerConfig& c = out.config;
  validate_config(c);
  a.quant = row_quant_of(c, a.hidden);
  TESSERA_CHECK(c.scale_layout == ScaleLayout::kCompact,
                "moe_permute_quantize: scales must be compact (swizzle them afterwards)");
  TESSERA_CHECK(out.has_rowwise() || a.rows == 0,
                "moe_permute_quantize: out needs the rowwise usage");
  TESSERA_CHECK_STATUS(out.rows == a.rows && out.cols == a.hidden, Status::kShapeMismatch,
                       "moe_permute_quantize: out is (", out.rows, ", ", out.cols,
                       ") but row_pair and x make (", a.rows, ", ", a.hidden, ")");
  const MatrixShape ds = data_shape(c, a.rows, a.hidden, false);
  const MatrixShape ss = scale_shape(c, a.rows, a.hidden, false);
  check_view(out.data, "moe_permute_quantize: out.data");
  check_view(out.scale_inv, "moe_permute_quantize: out.scale_inv");
  TESSERA_CHECK_STATUS(out.data.nbytes() >= ds.bytes() && dtype_bits(out.data.dtype) == 8,
                       Status::kBufferTooSmall, "moe_permute_quantize: out.data must hold ",
                       ds.rows, "x", ds.cols, " codes, got ", out.data.to_string());
  TESSERA_CHECK_STATUS(out.scale_inv.numel() == ss.numel() &&
                           dtype_bits(out.scale_inv.dtype) == dtype_bits(ss.dtype),
                       Status::kShapeMismatch, "moe_permute_quantize: out.scale_inv must be ",
                       ss.rows, "x", ss.cols, " ", dtype_name(ss.dtype), ", got ",
                       out.scale_inv.to_string());
  check_same_device(out.data, x.device, "moe_permute_quantize: out.data");
  check_same_device(out.scale_inv, x.device, "moe_permute_quantize: out.scale_inv");
  a.out = out.data.data;
  a.scale_inv = out.scale_inv.data;
  a.scale_rows = ss.rows;
  run_permute(a, x.device, stream);
}

void moe_permute_backward(const TensorView& d_permuted, const TensorView& slot_map,
                          const TensorView& dx, Stream stream) {
  const detail::moe::GatherAddArgs a =
      gather_args(d_permuted, slot_map, dx, "moe_permute_backward");
  run_gather_add(a, dx.device, stream);
}

void moe_unpermute(const TensorView& y, const TensorView& slot_map, const TensorView& probs,
                   const TensorView& out, Stream stream) {
  detail::moe::GatherAddArgs a = gather_args(y, slot_map, out, "moe_unpermute");
  a.probs = probs_of(probs, slot_map, out.device, "moe_unpermute");
  run_gather_add(a, out.device, stream);
}

void moe_unpermute_backward(const TensorView& dout, const TensorView& y,
                            const TensorView& slot_map, const TensorView& row_pair,
                            const TensorView& probs, const TensorView& dy,
                            const TensorView& dprobs, Stream stream) {
  const char* op = "moe_unpermute_backward";
  const detail::moe::GatherAddArgs g = gather_args(y, slot_map, dout, op);
  if (dy.data != nullptr) {  // empty: dprobs only (or, with no rows, nothing)
    check_view(dy, "moe_unpermute_backward: dy");
    TESSERA_CHECK_STATUS(is_floating_input(dy.dtype), Status::kDTypeMismatch, op,
                         ": dy must be float32/bfloat16/float16, got ", dy.to_string());
    check_matrix(dy, "moe_unpermute_backward: dy", g.rows, g.hidden);
    check_same_device(dy, dout.device, "moe_unpermute_backward: dy");
  }
  check_vector(row_pair, "moe_unpermute_backward: row_pair", g.rows);
  check_same_device(row_pair, dout.device, "moe_unpermute_backward: row_pair");
  TESSERA_CHECK_STATUS(row_pair.dtype == slot_map.dtype, Status::kDTypeMismatch, op,
                       ": slot_map and row_pair must share one dtype");
  check_map(row_pair, "moe_unpermute_backward: row_pair", pair_count(g.tokens, g.top_k, op));
  detail::moe::ScatterArgs a{};
  a.dout = dout.data;
  a.dout_dtype = dout.dtype;
  a.y = y.data;
  a.y_dtype = y.dtype;
  a.rows = g.rows;
  a.hidden = g.hidden;
  a.tokens = g.tokens;
  a.top_k = g.top_k;
  a.slot_map = slot_map.data;
  a.row_pair = row_pair.data;
  a.map_dtype = slot_map.dtype;
  a.probs = probs_of(probs, slot_map, dout.device, op);
  a.dy = dy.data;  // null: dprobs only
  a.dy_dtype = dy.data != nullptr ? dy.dtype : y.dtype;
  if (dprobs.data != nullptr) {
    check_view(dprobs, "moe_unpermute_backward: dprobs", {DType::kFloat32});
    TESSERA_CHECK_STATUS(dprobs.ndim == 2 && dprobs.shape == slot_map.shape,
                         Status::kShapeMismatch, op, ": dprobs must be (T, k), got ",
                         dprobs.to_string());
    check_same_device(dprobs, dout.device, "moe_unpermute_backward: dprobs");
    a.dprobs = dprobs.as<float>();
  }
  if (dout.device.is_cuda()) return detail::moe::scatter_cuda(a, dout.device, stream);
  detail::moe::scatter_cpu(a);
}

void moe_dequantize_rows(const TensorView& data, const TensorView& scale_inv, ScalingMode mode,
                         const TensorView& out, Stream stream) {
  moe_dequantize_rows(data, scale_inv, mode, TensorView{}, out, stream);
}

void moe_dequantize_rows(const TensorView& data, const TensorView& scale_inv, ScalingMode mode,
                         const TensorView& source_rows, const TensorView& out, Stream stream) {
  const char* op = "moe_dequantize_rows";
  check_view(data, "moe_dequantize_rows: data", {DType::kFloat8E4M3, DType::kFloat8E5M2});
  check_view(out, "moe_dequantize_rows: out");
  TESSERA_CHECK_STATUS(data.ndim == 2, Status::kShapeMismatch, op,
                       ": data must be (rows, H) FP8 codes, got ", data.to_string());
  const int64_t rows = data.shape[0], hidden = data.shape[1];
  TESSERA_CHECK_STATUS(is_floating_input(out.dtype), Status::kDTypeMismatch, op,
                       ": out must be float32/bfloat16/float16, got ", out.to_string());
  int64_t out_rows = rows;
  const bool gather = source_rows.ndim != 0 || source_rows.data != nullptr;  // given
  if (gather) {
    check_view(source_rows, "moe_dequantize_rows: source_rows", {DType::kInt64});
    TESSERA_CHECK_STATUS(source_rows.ndim == 1, Status::kShapeMismatch, op,
                         ": source_rows must be (m) int64 row indices of data, got ",
                         source_rows.to_string());
    check_same_device(source_rows, data.device, "moe_dequantize_rows: source_rows");
    out_rows = source_rows.shape[0];
  }
  check_matrix(out, "moe_dequantize_rows: out", out_rows, hidden);
  detail::moe::DequantizeArgs a{};
  switch (mode) {
    case ScalingMode::kRowwise: a.block = hidden; a.scale_cols = 1; break;
    case ScalingMode::kBlock1x128: a.block = 128; break;
    case ScalingMode::kMXFP8: a.block = 32; a.e8m0 = true; break;
    default:
      TESSERA_FAIL(Status::kUnsupported, op, ": mode ", scaling_mode_name(mode),
                   " is not a payload mode; expected one of ", scaling_mode_names(kPermuteModes));
  }
  if (mode != ScalingMode::kRowwise) a.scale_cols = (hidden + a.block - 1) / a.block;
  if (a.block < 1) a.block = 1;  // rowwise with H = 0: no element reads a scale
  check_view(scale_inv, "moe_dequantize_rows: scale_inv");
  const bool scale_dtype_ok =
      a.e8m0 ? scale_inv.dtype == DType::kUInt8 || scale_inv.dtype == DType::kFloat8E8M0
             : scale_inv.dtype == DType::kFloat32;
  TESSERA_CHECK_STATUS(scale_dtype_ok, Status::kDTypeMismatch, op, ": scale_inv of mode ",
                       scaling_mode_name(mode), " must be ",
                       a.e8m0 ? "E8M0 bytes (e8m0 or uint8)" : "float32", ", got ",
                       scale_inv.to_string());
  // Rowwise: (n) or (n, 1); blocks: (n, ceil(H / block)); n >= rows (block1x128 pads rows).
  const bool one_d = scale_inv.ndim == 1 && a.scale_cols == 1;
  TESSERA_CHECK_STATUS((one_d || (scale_inv.ndim == 2 && scale_inv.shape[1] == a.scale_cols)) &&
                           scale_inv.shape[0] >= rows,
                       Status::kShapeMismatch, op, ": scale_inv must be (>= ", rows, ", ",
                       a.scale_cols, ")", a.scale_cols == 1 ? " or (>= rows)" : "", " for ",
                       scaling_mode_name(mode), " data ", data.to_string(), ", got ",
                       scale_inv.to_string());
  check_same_device(scale_inv, data.device, "moe_dequantize_rows: scale_inv");
  check_same_device(out, data.device, "moe_dequantize_rows: out");
  a.data = data.as<const uint8_t>();
  a.e5m2 = data.dtype == DType::kFloat8E5M2;
  a.rows = out_rows;
  a.data_rows = rows;
  a.source_rows = gather ? source_rows.as<const int64_t>() : nullptr;
  a.hidden = hidden;
  a.scale_inv = scale_inv.data;
  a.out = out.data;
  a.out_dtype = out.dtype;
  if (data.device.is_cuda()) return detail::moe::dequantize_cuda(a, data.device, stream);
  detail::moe::dequantize_cpu(a);
}

void moe_regroup_index(const TensorView& counts, int64_t rows, int64_t padded_rows, int64_t align,
                       const TensorView& source_of, const TensorView& expert_of, Stream stream) {
  const char* op = "moe_regroup_index";
  // Not check_view: counts may be a column slice (rows strided), so only its dtype is checked.
  TESSERA_CHECK_STATUS(counts.dtype == DType::kInt32 || counts.dtype == DType::kInt64,
                       Status::kDTypeMismatch, op, ": counts: dtype ", dtype_name(counts.dtype),
                       " is not accepted; expected int32, int64");
  TESSERA_CHECK(counts.data != nullptr || counts.numel() == 0, op,
                ": counts: null data pointer for ", counts.to_string());
  TESSERA_CHECK_STATUS(counts.ndim == 2 && counts.strides[1] == 1 &&
                           (counts.shape[0] <= 1 || counts.strides[0] >= counts.shape[1]),
                       Status::kShapeMismatch, op,
                       ": counts must be (sources, local experts) with contiguous rows, got ",
                       counts.to_string());
  TESSERA_CHECK(align >= 1, op, ": align ", align, " must be >= 1");
  TESSERA_CHECK(rows >= 0 && padded_rows >= rows, op, ": rows ", rows, " and padded_rows ",
                padded_rows, " must satisfy 0 <= rows <= padded_rows");
  TESSERA_CHECK(align > 1 || padded_rows == rows, op, ": padded_rows ", padded_rows,
                " must equal rows ", rows, " when align is 1");
  const bool want_src = source_of.data != nullptr || source_of.ndim != 0;
  const bool want_exp = expert_of.data != nullptr || expert_of.ndim != 0;
  if (!want_src && !want_exp) return;
  for (const auto& [v, arg, want, n] :
       {std::tuple{&source_of, "moe_regroup_index: source_of", want_src, padded_rows},
        std::tuple{&expert_of, "moe_regroup_index: expert_of", want_exp, rows}}) {
    if (!want) continue;
    check_view(*v, arg, {DType::kInt64});
    TESSERA_CHECK_STATUS(v->ndim == 1, Status::kShapeMismatch, arg, ": must be (",
                         v == &source_of ? "padded_rows" : "rows", ") int64, got ",
                         v->to_string());
    check_vector(*v, arg, n);
    check_same_device(*v, counts.device, arg);
  }
  detail::moe::RegroupArgs a{};
  a.counts = counts.data;
  a.count_dtype = counts.dtype;
  a.sources = counts.shape[0];
  a.locals = counts.shape[1];
  a.stride = counts.shape[0] <= 1 ? counts.shape[1] : counts.strides[0];
  a.rows = rows;
  a.padded_rows = padded_rows;
  a.align = align;
  a.source_of = want_src ? source_of.as<int64_t>() : nullptr;
  a.expert_of = want_exp ? expert_of.as<int64_t>() : nullptr;
  if (counts.device.is_cuda()) return detail::moe::regroup_cuda(a, counts.device, stream);
  detail::moe::regroup_cpu(a);
}

void moe_regroup_index(const TensorView& counts, const TensorView& source_of,
                       const TensorView& expert_of, Stream stream) {
  const bool want_src = source_of.data != nullptr || source_of.ndim != 0;
  const bool want_exp = expert_of.data != nullptr || expert_of.ndim != 0;
  if (!want_src && !want_exp) return;
  const TensorView& any = want_src ? source_of : expert_of;
  TESSERA_CHECK_STATUS(any.ndim == 1, Status::kShapeMismatch,
                       "moe_regroup_index: source_of and expert_of must be (rows) int64, got ",
                       any.to_string());
  moe_regroup_index(counts, any.shape[0], any.shape[0], 1, source_of, expert_of, stream);
}

}  // namespace tessera
