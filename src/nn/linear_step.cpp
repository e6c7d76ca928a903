// The grouped linear training step (linear_step.h; its spec: linear_spec.cpp): weight copies,
// forward (fprop) and backward (dgrad, wgrad, bias grad), every GEMM through the device-dispatching
// grouped GEMM on the caller's offsets, every byte from the caller's Allocator (bar the CPU
// GEMMs' workspace: step_memory.h run_gemm).
#include "tessera/nn/linear_step.h"

#include <algorithm>
#include <optional>
#include <string>

#include "nn/member_scaling.h"
#include "nn/row_ops.h"
#include "nn/step_layout.h"
#include "nn/step_memory.h"
#include "nn/weight_layout.h"
#include "tessera/core/status.h"
#include "tessera/formats/scaling_modes.h"
#include "tessera/nn/token_padding.h"

namespace tessera::nn {

using detail::Carver;
using detail::matrix;
using detail::StepArena;

namespace {

void check_float_matrix(const TensorView& v, const char* arg, int64_t rows, int64_t cols) {
  check_view(v, arg, {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  TESSERA_CHECK_STATUS(v.ndim == 2 && v.shape[0] == rows && v.shape[1] == cols,
                       Status::kShapeMismatch, arg, ": expected (", rows, ", ", cols, "), got ",
                       v.to_string());
}

// The (G, out, in) weight gradient or weight view, any float dtype.
void check_weight_like(const TensorView& v, const char* arg, const LinearSpec& s) {
  check_view(v, arg, {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  TESSERA_CHECK_STATUS(v.numel() == s.groups * s.out * s.in && v.ndim >= 2,
                       Status::kShapeMismatch, arg, ": expected (", s.groups, ", ", s.out, ", ",
                       s.in, "), got ", v.to_string());
}

DType dense_dtype(const LinearSpec& s) { return s.input.dense_dtype; }

// x in the dense compute dtype: x itself, or a cast into scratch.
TensorView dense_operand(const TensorView& x, DType dtype, StepArena& scratch, Stream stream) {
  if (x.dtype == dtype) return x;
  TensorView c = matrix(scratch.take(dtype_bytes(dtype, x.numel())), dtype, x.shape[0],
                        x.shape[1], x.device);
  detail::cast(x, c, stream);
  return c;
}

int64_t dense_cast_bytes(const TensorView& x, DType dtype) {
  return x.dtype == dtype ? 0 : dtype_bytes(dtype, x.numel());
}

// Bytes of the (rows, cols) quantized usages asked for, as carve_quantized places them.
int64_t quantized_bytes(const QuantizerConfig& c, int64_t rows, int64_t cols, bool rowwise,
                        bool columnwise, int64_t groups) {
  Carver measure;
  detail::carve_quantized(c, rows, cols, rowwise, columnwise, measure, Device::cpu(), groups);
  return measure.used();
}

// Carves the saved context of `rows` rows (see saved_context_size) from `carver`.
void carve_saved(const LinearSpec& s, int64_t rows, Carver& carver, Device device,
                 LinearSaved& saved) {
  const int64_t n1 = s.groups + 1;
  saved.padded_rows = detail::padded_rows_for(rows, s.groups, s.wgrad_align);
  saved.starts = TensorView::contiguous(carver.take(n1 * 8), DType::kInt64, {n1}, device);
  saved.padded_starts = TensorView::contiguous(carver.take(n1 * 8), DType::kInt64, {n1}, device);
  saved.input = detail::carve_quantized(s.input.config, saved.padded_rows, s.in, false, true,
                                        carver, device, s.groups);
  saved.has_input = true;
}

// Bytes of the starts and padded starts that place_layout carves.
int64_t layout_bytes(const LinearSpec& s) { return 2 * (s.groups + 1) * 8 + 256; }

// The starts and padded starts of a step without a saved context (an eval forward, or a
// backward whose forward saved none), carved from the step's scratch.
void place_layout(const LinearSpec& s, int64_t rows, Carver& carver, Device device,
                  LinearSaved& layout) {
  const int64_t n1 = s.groups + 1;
  layout.padded_rows = detail::padded_rows_for(rows, s.groups, s.wgrad_align);
  layout.starts = TensorView::contiguous(carver.take(n1 * 8), DType::kInt64, {n1}, device);
  layout.padded_starts = TensorView::contiguous(carver.take(n1 * 8), DType::kInt64, {n1}, device);
}

// x (T, cols) padded into `tmp` as the wgrad layout of `saved` (zero rows between groups and
// past the last), (padded_rows, cols).
TensorView padded_copy(const TensorView& x, const LinearSaved& saved, Carver& tmp, Stream stream) {
  const int64_t cols = x.shape[1];
  TensorView xp = matrix(tmp.take(dtype_bytes(x.dtype, saved.padded_rows * cols)), x.dtype,
                         saved.padded_rows, cols, x.device);
  pad_tokens(x, saved.starts, saved.padded_starts, xp, stream, /*zero_tail=*/true);
  return xp;
}

// The groups of the padded layout as the members the step scales on their own (their starts
// are multiples of wgrad_align >= 16 rows).
detail::Members members(const LinearSpec& s, const LinearSaved& layout) {
  detail::Members m{layout.padded_starts.as<const int64_t>(), s.groups, 0};
  m.aligned16 = s.wgrad_align % 16 == 0;
  m.align = s.wgrad_align;
  return m;
}

// Bytes of the padded copy of x (T, cols) a role's quantization needs in the layout: none where
// the member kernels read x through the layout (detail::reads_through_layout).
int64_t padded_copy_bytes(const RoleFormat& f, bool rowwise, bool columnwise, const TensorView& x,
                          int64_t padded_rows) {
  if (detail::reads_through_layout(f.config, rowwise, columnwise, x, padded_rows)) return 0;
  return dtype_bytes(x.dtype, padded_rows * x.shape[1]);
}

// x's usages of a role quantized in the layout: read through it where the member kernels can,
// else from a padded copy of x in `tmp`.
void quantize_in_layout(const LinearSpec& s, const RoleFormat& f, bool rowwise, bool columnwise,
                        const DelayedScalingState& state, const TensorView& x,
                        const LinearSaved& layout, QuantizedTensorView& out, Carver& tmp,
                        Allocator& alloc, Stream stream, const char* role) {
  detail::Members m = members(s, layout);
  if (detail::reads_through_layout(f.config, rowwise, columnwise, x, layout.padded_rows)) {
    m.sources = layout.starts.as<const int64_t>();
    detail::quantize_role_members(f, rowwise, columnwise, state, x, m, out, alloc, stream, role);
    return;
  }
  detail::quantize_role_members(f, rowwise, columnwise, state, padded_copy(x, layout, tmp, stream),
                                m, out, alloc, stream, role);
}

GroupedGemmProblem m_grouped(const LinearSpec& s, const TensorView& offsets,
                             GroupOffsetsFormat format, const TensorView& d) {
  GroupedGemmProblem g;
  g.kind = GroupedGemmKind::kMGrouped;
  g.num_groups = s.groups;
  g.d = d;
  g.group_offsets = offsets;
  g.offsets_format = format;
  g.zero_unused_rows = true;  // rows in no group: 0 (never the memory that was there)
  return g;
}

// The weight's quantized copy a forward (rowwise) or dgrad (columnwise) reads, with its BF16
// image where the copies keep one (WeightCopies::expanded).
GemmOperand weight_operand(const WeightCopies& w, bool columnwise) {
  GemmOperand o = GemmOperand::from_quantized(w.q, columnwise);
  o.expanded = w.expanded;
  return o;
}

}  // namespace

// ---- weight copies ----------------------------------------------------------------------------

int64_t weight_copies_bytes(const LinearSpec& s, DType weight_dtype) {
  if (!s.quantized()) {
    return weight_dtype == dense_dtype(s) ? 0
                                          : dtype_bytes(dense_dtype(s), s.groups * s.out * s.in);
  }
  return detail::weight_layout_bytes(s);
}

WeightCopies view_weight_copies(const LinearSpec& s, const TensorView& w,
                                const Allocation& storage) {
  check_weight_like(w, "weight", s);
  WeightCopies c;
  c.storage = storage;
  if (!s.quantized()) {
    const DType dt = dense_dtype(s);
    void* data = w.dtype == dt ? w.data : storage.data;
    TESSERA_CHECK_STATUS(w.dtype == dt || storage.bytes >= weight_copies_bytes(s, w.dtype),
                         Status::kBufferTooSmall, "weight copies: ", storage.bytes,
                         " bytes cannot hold the ", dtype_name(dt), " copy");
    c.dense = TensorView::contiguous(data, dt, {s.groups, s.out, s.in}, w.device);
    return c;
  }
  detail::place_weight_layout(s, storage, w.device, c);
  return c;
}

WeightCopies quantize_weight(const LinearSpec& s, const TensorView& w, const LinearState& state,
                             Allocator& alloc, Stream stream) {
  check_weight_like(w, "weight", s);
  const Device dev = w.device;
  Allocation storage = alloc.allocate(weight_copies_bytes(s, w.dtype), dev, stream);
  WeightCopies c = view_weight_copies(s, w, storage);
  if (!s.quantized()) {
    if (c.dense.data != w.data) detail::cast(w, c.dense, stream);
    return c;
  }
  detail::quantize_weight_layout(s, w, state, alloc, c, stream);
  return c;
}

// ---- forward ------------------------------------------------------------------------------------

LinearSaved view_linear_saved(const LinearSpec& s, int64_t rows, bool save_input,
                              const Allocation& storage) {
  LinearSaved saved;
  saved.storage = storage;
  saved.rows = rows;
  if (!s.quantized() || !save_input) return saved;
  TESSERA_CHECK_STATUS(storage.bytes >= saved_size(s, true).at(rows), Status::kBufferTooSmall,
                       "saved context: ", storage.bytes, " bytes, ",
                       saved_size(s, true).at(rows), " needed for ", rows, " rows");
  Carver carver(storage.data, storage.bytes);
  carve_saved(s, rows, carver, storage.device, saved);
  return saved;
}

namespace {

// A tensor given as its rowwise copy (LinearForwardArgs::x_rowwise "x", whose dense form is
// `dense`; LinearBackwardArgs::dy_rowwise "dy"): the checks, against the role that would have
// quantized it. rows < 0: any T (the forward's); else exactly that many (the backward's).
void check_rowwise_copy(const LinearSpec& s, const QuantizedTensorView& q, const TensorView& dense,
                        const RoleFormat& role, const char* name, int64_t cols, int64_t rows,
                        const char* source) {
  TESSERA_CHECK(dense.data == nullptr, name, " and ", name, "_rowwise: give one of them, not both");
  TESSERA_CHECK_STATUS(s.quantized(), Status::kDTypeMismatch, name, "_rowwise: the step's recipe "
                       "does not quantize ", name, " (a dense step takes ", name, ")");
  const ScalingMode m = q.config.mode;
  TESSERA_CHECK_STATUS(m == ScalingMode::kRowwise || m == ScalingMode::kBlock1x128 ||
                           m == ScalingMode::kMXFP8,
                       Status::kUnsupported, name, "_rowwise: a ", scaling_mode_name(m),
                       " copy; only rowwise, block1x128 and mxfp8 copies (scales local to a "
                       "row: ", source, ") are taken");
  TESSERA_CHECK_STATUS(m == role.config.mode && q.config.element == role.config.element,
                       Status::kDTypeMismatch, name, "_rowwise: a ", scaling_mode_name(m), " ",
                       dtype_name(q.config.element), " copy, but the recipe quantizes ", name,
                       " as ", scaling_mode_name(role.config.mode), " ",
                       dtype_name(role.config.element));
  const bool shape_ok = q.cols == cols && (rows < 0 ? q.rows >= 0 : q.rows == rows);
  TESSERA_CHECK_STATUS((q.has_rowwise() || q.rows == 0) && shape_ok, Status::kShapeMismatch,
                       name, "_rowwise: expected the rowwise copy of a (",
                       rows < 0 ? std::string("T") : std::to_string(rows), ", ", cols,
                       ") matrix, got (", q.rows, ", ", q.cols, ")",
                       q.has_rowwise() ? "" : " without its rowwise data");
}

// x̂ = dequantize(q) of a rowwise copy q (x_rowwise, dy_rowwise) as an FP32 (rows, cols) matrix,
// made at the first ask in its own scratch (with room for `role`'s quantization of it in a
// wgrad layout of `padded_rows` rows: a padded copy and its callees').
class RowwiseImage {
 public:
  RowwiseImage(const QuantizedTensorView& q, const RoleFormat& role, int64_t groups,
               int64_t padded_rows, Allocator& alloc, Stream stream)
      : q_(q), role_(role), groups_(groups), tp_(padded_rows), alloc_(alloc), stream_(stream) {}
  const TensorView& get() {
    if (image_.data != nullptr) return image_;
    const int64_t bytes = dtype_bytes(DType::kFloat32, q_.rows * q_.cols);
    const TensorView probe =
        TensorView::contiguous(nullptr, DType::kFloat32, {q_.rows, q_.cols}, q_.device);
    arena_.emplace(alloc_, bytes + 256 + padded_copy_bytes(role_, false, true, probe, tp_) +
                               detail::call_allowance(groups_, tp_, q_.cols),
                   q_.device, stream_);
    image_ = TensorView::contiguous(arena_->carver().take(bytes), DType::kFloat32,
                                    {q_.rows, q_.cols}, q_.device);
    dequantize(q_, image_, false, stream_);
    return image_;
  }
  StepArena& arena() { return *arena_; }

 private:
  const QuantizedTensorView& q_;
  const RoleFormat& role_;
  int64_t groups_, tp_;
  Allocator& alloc_;
  Stream stream_;
  std::optional<StepArena> arena_;
  TensorView image_;
};

// The columnwise copy `out` (in the wgrad layout of `layout`, whose starts are set) of x̂ =
// dequantize(q), q given as its rowwise copy at the caller's rows: `role`'s quantization of x̂,
// made from the codes where the kernels take them (CUDA, rowwise FP8), else from x̂'s image.
void columns_of_rowwise(const LinearSpec& s, const RoleFormat& role,
                        const DelayedScalingState& state, const QuantizedTensorView& q,
                        const LinearSaved& layout, QuantizedTensorView& out, RowwiseImage& image,
                        Allocator& alloc, Stream stream, const char* role_name) {
  detail::Members m = members(s, layout);
  m.sources = layout.starts.as<const int64_t>();  // x̂'s rows are the caller's, in the layout
  if (detail::quantize_columns_from_codes(role, q, m, out, alloc, stream)) return;
  const TensorView& img = image.get();
  quantize_in_layout(s, role, false, true, state, img, layout, out, image.arena().carver(),
                     image.arena(), stream, role_name);
}

// The forward of x given as its rowwise copy: the GEMM reads it at the caller's offsets; the
// saved columnwise copy is the input role's quantization of x̂ = dequantize(x_rowwise) in the
// wgrad layout (columns_of_rowwise).
void forward_from_rowwise(const LinearSpec& s, const LinearForwardArgs& a,
                          const detail::GroupOffsets& groups, const LinearState& state,
                          LinearSaved& saved, GroupedGemmProblem& g, const WeightCopies& weight,
                          Allocator& alloc, Stream stream) {
  const QuantizedTensorView& xr = a.x_rowwise;
  const Device dev = xr.device;
  const int64_t t = xr.rows;
  if (saved.has_input) {
    detail::group_starts(groups, s.wgrad_align, saved.starts.as<int64_t>(),
                         saved.padded_starts.as<int64_t>(), dev, stream);
    QuantizedTensorView out = saved.input;
    RowwiseImage image(xr, s.input, s.groups, saved.padded_rows, alloc, stream);
    columns_of_rowwise(s, s.input, state.input, xr, saved, out, image, alloc, stream, "input");
  }
  StepArena tmp(alloc, 256 + detail::call_allowance(s.groups, t, s.in), dev, stream);
  g.a = GemmOperand::from_quantized(xr, false);
  g.b = weight_operand(weight, false);
  detail::run_gemm(g, tmp, stream);
}

}  // namespace

LinearSaved linear_forward(const LinearSpec& s, const WeightCopies& weight,
                           const LinearForwardArgs& a, const LinearState& state, Allocator& alloc,
                           Stream stream) {
  const bool given_q = x_rowwise_given(a.x, a.x_rowwise);
  if (given_q) {
    check_rowwise_copy(s, a.x_rowwise, a.x, s.input, "x", s.in, -1, "an FP8 dispatch's payload");
  } else {
    check_view(a.x, "x", {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
    TESSERA_CHECK_STATUS(a.x.ndim == 2 && a.x.shape[1] == s.in, Status::kShapeMismatch,
                         "x: expected (T, ", s.in, "), got ", a.x.to_string());
  }
  const int64_t t = given_q ? a.x_rowwise.rows : a.x.shape[0];
  const Device dev = given_q ? a.x_rowwise.device : a.x.device;
  check_float_matrix(a.y, "y", t, s.out);
  const detail::GroupOffsets groups =
      detail::group_offsets_of(a.offsets, a.offsets_format, s.groups, t);
  if (a.bias.data) check_float_matrix(a.bias, "bias", s.groups, s.out);
  TESSERA_CHECK(!a.bias.data || s.bias, "bias: given, but the layer has none");
  const bool save_q = a.save_input && s.quantized();
  const SavedSize size = saved_size(s, save_q);
  LinearSaved saved = view_linear_saved(s, t, save_q, alloc.allocate(size.at(t), dev, stream));
  if (t == 0) return saved;

  GroupedGemmProblem g = m_grouped(s, a.offsets, a.offsets_format, a.y);
  g.transpose_b = true;
  g.bias = a.bias;
  if (!s.quantized()) {
    StepArena tmp(alloc, dense_cast_bytes(a.x, dense_dtype(s)) + 256 +
                             detail::call_allowance(s.groups, t, s.in), dev, stream);
    g.a = GemmOperand::from_dense(dense_operand(a.x, dense_dtype(s), tmp, stream));
    g.b = GemmOperand::from_dense(weight.dense);
    detail::run_gemm(g, tmp, stream);
    return saved;
  }
  if (given_q) {
    forward_from_rowwise(s, a, groups, state, saved, g, weight, alloc, stream);
    return saved;
  }
  // x in the padded layout (every group on an aligned row start, zeros between groups and past
  // the last), quantized once: the rowwise copy (scratch) feeds this GEMM, the columnwise copy
  // goes into the saved context. Rows outside the groups thus take part in no scale. The GEMM
  // reads A in the padded layout (a_row_starts) and writes y in the caller's (its offsets; rows
  // in no group: zero), so y needs no padded copy and no move.
  // One scratch block: the layout (eval step), x's rowwise copy, a padded copy of x, callees'.
  const int64_t tp = detail::padded_rows_for(t, s.groups, s.wgrad_align);
  StepArena tmp(alloc, (save_q ? 0 : layout_bytes(s)) +
                           quantized_bytes(s.input.config, tp, s.in, true, false, s.groups) +
                           padded_copy_bytes(s.input, true, save_q, a.x, tp) + 1024 +
                           detail::call_allowance(s.groups, tp, s.in),
                dev, stream);
  LinearSaved layout = saved;  // the layout (the saved context's, or scratch for an eval step)
  if (!save_q) place_layout(s, t, tmp.carver(), dev, layout);
  detail::group_starts(groups, s.wgrad_align, layout.starts.as<int64_t>(),
                       layout.padded_starts.as<int64_t>(), dev, stream);
  QuantizedTensorView xq =
      detail::carve_quantized(s.input.config, tp, s.in, true, false, tmp.carver(), dev, s.groups);
  if (save_q) {
    xq.columnwise_data = saved.input.columnwise_data;
    xq.columnwise_scale_inv = saved.input.columnwise_scale_inv;
    xq.columnwise_amax = saved.input.columnwise_amax;
    xq.config.columnwise = true;
  }
  quantize_in_layout(s, s.input, true, save_q, state.input, a.x, layout, xq, tmp.carver(), tmp,
                     stream, "input");
  g.a_row_starts = layout.padded_starts;  // g: y at the caller's offsets, bias, zeroed tail
  g.a = GemmOperand::from_quantized(xq, false);
  g.b = weight_operand(weight, false);
  detail::run_gemm(g, tmp, stream);
  return saved;
}

// ---- backward -----------------------------------------------------------------------------------

void linear_backward(const LinearSpec& s, const WeightCopies& weight, const LinearSaved& saved,
                     const LinearBackwardArgs& a, const LinearState& state, Allocator& alloc,
                     Stream stream) {
  const int64_t t = saved.rows;
  const bool given_q = dy_rowwise_given(a.dy, a.dy_rowwise);
  if (given_q) {
    check_rowwise_copy(s, a.dy_rowwise, a.dy, s.grad_output, "dy", s.out, t,
                       "a combine's quantized gradient");
  } else {
    check_float_matrix(a.dy, "dy", t, s.out);
  }
  const Device dev = given_q ? a.dy_rowwise.device : a.dy.device;
  if (a.dx.data) check_float_matrix(a.dx, "dx", t, s.in);
  if (a.dw.data) {
    check_weight_like(a.dw, "dw", s);
    TESSERA_CHECK_STATUS(!a.accumulate || a.dw.dtype == DType::kFloat32, Status::kDTypeMismatch,
                         "dw: main-grad accumulation needs float32, got ", dtype_name(a.dw.dtype));
  }
  if (a.db.data) {
    TESSERA_CHECK(s.bias, "db: given, but the layer has no bias");
    check_float_matrix(a.db, "db", s.groups, s.out);
  }
  const bool need_x = a.dw.data != nullptr;
  const detail::GroupOffsets groups =
      detail::group_offsets_of(a.offsets, a.offsets_format, s.groups, t);
  if (t == 0) {  // nothing to multiply: dW of no rows is 0 (a main grad stays as it is)
    for (const TensorView* v : {&a.dw, &a.db}) {
      if (v->data && !(v == &a.dw ? a.accumulate : a.accumulate_bias)) {
        fill_bytes_async(v->data, v->device, 0, static_cast<size_t>(v->nbytes()), stream);
      }
    }
    return;
  }
  TESSERA_CHECK(!need_x || saved.has_input || a.x.data != nullptr,
                "x: the weight gradient needs the forward's x (the forward saved no copy of it)");
  if (a.x.data && need_x) check_float_matrix(a.x, "x", t, s.in);
  const int64_t tp = detail::padded_rows_for(t, s.groups, s.wgrad_align);
  // dŷ (FP32), made where dy_rowwise needs it.
  RowwiseImage dy_image(a.dy_rowwise, s.grad_output, s.groups, tp, alloc, stream);
  if (a.db.data) {
    detail::grouped_row_sum(given_q ? dy_image.get() : a.dy, groups, a.db, a.accumulate_bias,
                            stream);
  }

  // K-grouped wgrad: dW_g (out, in) (+)= dy_gᵀ x_g.
  GroupedGemmProblem wg;
  wg.kind = GroupedGemmKind::kKGrouped;
  wg.num_groups = s.groups;
  wg.transpose_a = true;
  wg.transpose_b = false;
  wg.group_offsets = a.offsets;
  wg.offsets_format = a.offsets_format;
  wg.beta = a.accumulate ? 1.0f : 0.0f;
  if (a.dw.data) {
    wg.d = TensorView::contiguous(a.dw.data, a.dw.dtype, {s.groups, s.out, s.in}, dev);
  }

  if (!s.quantized()) {
    const DType dt = dense_dtype(s);
    StepArena tmp(alloc, dense_cast_bytes(a.dy, dt) + (need_x ? dense_cast_bytes(a.x, dt) : 0) +
                             512 + detail::call_allowance(s.groups, t, std::max(s.in, s.out)),
                  dev, stream);
    const TensorView dy = dense_operand(a.dy, dt, tmp, stream);
    if (a.dx.data) {
      GroupedGemmProblem dg = m_grouped(s, a.offsets, a.offsets_format, a.dx);
      dg.a = GemmOperand::from_dense(dy);
      dg.b = GemmOperand::from_dense(weight.dense);  // (G, out, in) read MN-major: NN
      dg.transpose_b = false;
      detail::run_gemm(dg, tmp, stream);
    }
    if (need_x) {
      wg.a = GemmOperand::from_dense(dy);
      wg.b = GemmOperand::from_dense(dense_operand(a.x, dt, tmp, stream));
      detail::run_gemm(wg, tmp, stream);
    }
    return;
  }

  // dy in the padded layout, quantized once: the rowwise copy feeds the dgrad (which reads it
  // through the padded starts and writes dx at the caller's offsets, rows in no group zero),
  // the columnwise copy the wgrad.
  const bool need_dx = a.dx.data != nullptr;
  if (!need_dx && !need_x) return;
  LinearSaved layout = saved;  // the forward's layout (made here when it saved none)
  const bool made_layout = !saved.has_input;
  // dy_rowwise: the dgrad reads it as it is; only the wgrad's columnwise copy is made here.
  const bool dy_rows = need_dx && !given_q;
  const int64_t dy_bytes =
      quantized_bytes(s.grad_output.config, tp, s.out, dy_rows, need_x, s.groups);
  const int64_t pad_bytes =
      (given_q ? 0 : padded_copy_bytes(s.grad_output, need_dx, need_x, a.dy, tp)) +
      (made_layout && need_x ? padded_copy_bytes(s.input, false, true, a.x, tp) +
                                   quantized_bytes(s.input.config, tp, s.in, false, true, s.groups)
                             : 0);
  // One scratch block: the layout (when the forward saved none), dy's copies (unless kept), the
  // padded copies, x's copy (save_original_input), callees'.
  // (x quantized here too: its member kernels' scratch beside dy's.)
  const int64_t quantizations = made_layout && need_x ? 2 : 1;
  StepArena tmp(alloc, (made_layout ? layout_bytes(s) : 0) +
                           (a.keep_grad_output ? 0 : dy_bytes) + pad_bytes + 1024 +
                           quantizations *
                               detail::call_allowance(s.groups, tp, std::max(s.in, s.out)),
                dev, stream);
  if (made_layout) {
    place_layout(s, t, tmp.carver(), dev, layout);
    detail::group_starts(groups, s.wgrad_align, layout.starts.as<int64_t>(),
                         layout.padded_starts.as<int64_t>(), dev, stream);
  }
  Carver* dy_carver = nullptr;
  Carver keep;
  if (a.keep_grad_output) {
    a.keep_grad_output->storage = alloc.allocate(dy_bytes + 256, dev, stream);
    keep = Carver(a.keep_grad_output->storage.data, a.keep_grad_output->storage.bytes);
    dy_carver = &keep;
  } else {
    dy_carver = &tmp.carver();
  }
  QuantizedTensorView dyq = detail::carve_quantized(s.grad_output.config, tp, s.out, dy_rows,
                                                    need_x, *dy_carver, dev, s.groups);
  if (a.keep_grad_output) {
    a.keep_grad_output->rowwise = given_q ? a.dy_rowwise : dyq;
    a.keep_grad_output->columnwise = dyq;
  }
  if (!given_q) {
    quantize_in_layout(s, s.grad_output, need_dx, need_x, state.grad_output, a.dy, layout, dyq,
                       tmp.carver(), tmp, stream, "grad_output");
  } else if (need_x) {  // the columnwise copy of dŷ in the layout
    columns_of_rowwise(s, s.grad_output, state.grad_output, a.dy_rowwise, layout, dyq, dy_image,
                       alloc, stream, "grad_output");
  }
  if (need_dx) {
    GroupedGemmProblem dg = m_grouped(s, a.offsets, a.offsets_format, a.dx);
    if (given_q) {
      dg.a = GemmOperand::from_quantized(a.dy_rowwise, false);  // at the caller's offsets
    } else {
      dg.a_row_starts = layout.padded_starts;  // dy's rows in the padded layout
      dg.a = GemmOperand::from_quantized(dyq, false);
    }
    if (weight.columnwise_is_wt()) {  // Wᵀ per group as a rowwise copy: the forward's TN form
      dg.b = GemmOperand::from_quantized(weight.wt, false);
      dg.b.expanded = weight.expanded_wt;  // its BF16 image, where kept
      dg.transpose_b = true;
    } else {
      dg.b = weight_operand(weight, true);
      dg.transpose_b = false;
    }
    detail::run_gemm(dg, tmp, stream);
  }
  if (need_x) {
    QuantizedTensorView xq = layout.input;
    if (made_layout) {  // save_original_input: x's copy in the wgrad layout, made now
      xq = detail::carve_quantized(s.input.config, tp, s.in, false, true, tmp.carver(), dev,
                                   s.groups);
      quantize_in_layout(s, s.input, false, true, state.input, a.x, layout, xq, tmp.carver(),
                         tmp, stream, "input");
    }
    wg.a = GemmOperand::from_quantized(dyq, true);
    wg.b = GemmOperand::from_quantized(xq, true);
    wg.group_offsets = layout.padded_starts;
    wg.offsets_format = GroupOffsetsFormat::kStartOffsets;
    wg.max_total_rows = tp;
    detail::run_gemm(wg, tmp, stream);
  }
}

}  // namespace tessera::nn
