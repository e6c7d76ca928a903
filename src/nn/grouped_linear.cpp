// GroupedLinear: parameters, weight re-quantization, forward (fprop) and backward (dgrad, wgrad,
// bias grad) through the device-dispatching grouped GEMM, padding per the recipe's alignment.
// A step allocates nothing once its shape has been seen: scratch, GEMM workspaces and context
// slots are reused (step_storage.h) and every fill and copy is ordered on the caller's stream.
#include "tessera/nn/grouped_linear.h"

#include <cmath>
#include <string>

#include "nn/linear_state.h"
#include "nn/recipe_binding.h"
#include "nn/row_ops.h"
#include "nn/step_storage.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/nn/token_padding.h"

namespace tessera::nn {
namespace {

using detail::LinearParams;
using detail::LinearSaved;
using detail::OperandStorage;

void check_matrix(const TensorView& v, const char* arg, int64_t rows, int64_t cols) {
  check_view(v, arg, {DType::kFloat32});
  TESSERA_CHECK_STATUS(v.ndim == 2 && v.shape[0] == rows && v.shape[1] == cols,
                       Status::kShapeMismatch, arg, " must be (", rows, ", ", cols, "), got ",
                       v.to_string());
}

// Re-quantizes the master weights into the persistent operand when asked, or when it lacks a
// usage this step needs. Usages only grow: a weight that once had a columnwise copy keeps
// getting it refreshed (no stale copy can survive an eval step).
void refresh_weights(LinearParams& p, const ForwardMode& mode, Stream stream) {
  const bool need_columnwise = mode.training;
  const bool missing = !p.weight_operand || !p.weight_operand->has_rowwise() ||
                       (need_columnwise && !p.weight_operand->has_columnwise());
  if (!mode.requantize_weights && !missing) return;
  if (!p.weight_operand) {
    p.weight_operand =
        std::make_shared<OperandStorage>(p.weight_producer.make_empty(p.options.device));
    p.weight_operand->reshape(p.groups * p.out, p.in, true, need_columnwise, stream);
  }
  p.weight_operand->ensure_usage(true, need_columnwise, stream);
  const TensorView w = TensorView::contiguous(p.weight.data(), DType::kFloat32,
                                              {p.groups * p.out, p.in}, p.options.device);
  p.weight_producer.produce(w, *p.weight_operand, stream);
  ++p.weight_version;
}

// y (Tp, out) = x (Tp, in) · W_gᵀ + b_g per group: M-grouped TN GEMM on rowwise operands.
void fprop(LinearParams& p, const OperandStorage& x, const GroupLayout& layout,
           const TensorView& y, Stream stream) {
  GroupedGemmProblem g;
  g.kind = GroupedGemmKind::kMGrouped;
  g.num_groups = p.groups;
  g.a = x.gemm_operand(false);
  g.b = p.weight_operand->gemm_operand(false, p.out);
  g.transpose_b = true;
  g.d = y;
  g.group_offsets = layout.padded_offsets;
  g.max_total_rows = layout.padded_rows;
  if (p.has_bias) {
    g.bias = TensorView::contiguous(p.bias.data(), DType::kFloat32, {p.groups, p.out},
                                    p.options.device);
  }
  detail::run_grouped_gemm(g, p.gemm_workspace, stream);
}

// dx (Tp, in) = dy (Tp, out) · W_g per group: M-grouped NN GEMM, dy rowwise × W columnwise.
void dgrad(LinearParams& p, const LinearSaved& s, const OperandStorage& dy,
           const TensorView& dx, Stream stream) {
  GroupedGemmProblem g;
  g.kind = GroupedGemmKind::kMGrouped;
  g.num_groups = p.groups;
  g.a = dy.gemm_operand(false);
  g.b = s.weight->gemm_operand(true, p.out);
  g.transpose_b = false;
  g.d = dx;
  g.group_offsets = s.layout.padded_offsets;
  g.max_total_rows = s.layout.padded_rows;
  detail::run_grouped_gemm(g, p.gemm_workspace, stream);
}

// dW_g (out, in) (+)= dy_gᵀ x_g: K-grouped NT GEMM on the columnwise copies.
void wgrad(LinearParams& p, const LinearSaved& s, const OperandStorage& x,
           const OperandStorage& dy, const TensorView& dw, bool accumulate, Stream stream) {
  GroupedGemmProblem g;
  g.kind = GroupedGemmKind::kKGrouped;
  g.num_groups = p.groups;
  g.a = dy.gemm_operand(true);
  g.b = x.gemm_operand(true);
  g.transpose_a = true;
  g.transpose_b = false;
  g.d = TensorView::contiguous(dw.data, DType::kFloat32, {p.groups, p.out, p.in}, dw.device);
  g.group_offsets = s.layout.padded_offsets;
  g.max_total_rows = s.layout.padded_rows;
  g.beta = accumulate ? 1.0f : 0.0f;
  detail::run_grouped_gemm(g, p.gemm_workspace, stream);
}

void check_grads(const LinearParams& p, const GroupedLinearGrads& grads, int64_t rows) {
  if (grads.dx.data) check_matrix(grads.dx, "GroupedLinear backward: dx", rows, p.in);
  if (grads.dw.data) {
    check_view(grads.dw, "GroupedLinear backward: dw", {DType::kFloat32});
    TESSERA_CHECK_STATUS(grads.dw.numel() == p.groups * p.out * p.in, Status::kShapeMismatch,
                         "GroupedLinear backward: dw must be (", p.groups, ", ", p.out, ", ",
                         p.in, "), got ", grads.dw.to_string());
  }
  if (grads.db.data) {
    TESSERA_CHECK(p.has_bias, "GroupedLinear backward: db given but the layer has no bias");
    check_matrix(grads.db, "GroupedLinear backward: db", p.groups, p.out);
  }
}

// Zeroes dw / db for a batch with no rows at all (nothing for the GEMMs to do).
void zero_grads_of_empty_batch(const GroupedLinearGrads& grads, Stream stream) {
  if (grads.accumulate) return;
  for (const TensorView* v : {&grads.dw, &grads.db}) {
    if (v->data == nullptr) continue;
    fill_bytes_async(v->data, v->device, 0, static_cast<size_t>(v->nbytes()), stream);
  }
}

void check_forward(const LinearParams& p, const GroupLayout& layout, const TensorView& x,
                   const TensorView& y) {
  TESSERA_CHECK_STATUS(layout.num_groups == p.groups && layout.align == p.align,
                       Status::kShapeMismatch, "GroupedLinear '", p.options.name,
                       "': layout has ", layout.num_groups, " groups aligned to ", layout.align,
                       ", the layer ", p.groups, " groups aligned to ", p.align);
  check_matrix(x, "GroupedLinear forward: x", layout.padded_rows, p.in);
  check_matrix(y, "GroupedLinear forward: y", layout.padded_rows, p.out);
}

// A slot no context holds (a new one when every slot is held), set up for p's formats.
std::shared_ptr<LinearSaved> acquire_context_slot(LinearParams& p) {
  std::shared_ptr<LinearSaved> slot = detail::acquire_slot(p.saved_pool);
  if (slot->owner == nullptr) {
    const Device dev = p.options.device;
    slot->owner = &p;
    slot->input_is_original = p.options.save_original_input;
    slot->input = slot->input_is_original
                      ? OperandStorage({false, DType::kFloat32, {}}, dev)
                      : p.input.make_empty(dev);
    slot->grad_output = p.grad_output.make_empty(dev);
  }
  return slot;
}

// x (Tp, in) → the operand fprop reads, in ONE quantization: a context that saves the quantized
// x gets its columnwise copy (wgrad) in its slot, the rowwise copy stays in layer scratch (so
// the context keeps only what backward reads). A dense copy serves both usages.
const OperandStorage& quantize_input(LinearParams& p, const TensorView& x, LinearSaved* slot,
                                     Stream stream) {
  const int64_t rows = x.shape[0];
  const bool save_q = slot != nullptr && !slot->input_is_original;
  if (save_q && !p.input.format().quantized) {
    slot->input.reshape(rows, p.in, true, true, stream);
    p.input.produce(x, slot->input, stream);
    return slot->input;
  }
  p.input_rowwise.reshape(rows, p.in, true, false, stream);
  if (!save_q) {
    p.input.produce(x, p.input_rowwise, stream);
  } else {
    slot->input.reshape(rows, p.in, false, true, stream);
    p.input.produce_split(x, p.input_rowwise, slot->input, stream);
  }
  return p.input_rowwise;
}

// The forward on x (Tp, in) in `layout`; a training forward fills `slot` (whose layout the caller
// has already set).
void forward_in_layout(LinearParams& p, const TensorView& x, const GroupLayout& layout,
                       const TensorView& y, const ForwardMode& mode, LinearSaved* slot,
                       Stream stream) {
  const int64_t rows = layout.padded_rows;
  refresh_weights(p, mode, stream);
  const OperandStorage& xq = quantize_input(p, x, slot, stream);
  if (rows > 0) fprop(p, xq, layout, y, stream);
  if (slot == nullptr) return;
  slot->weight = p.weight_operand;
  slot->weight_version = p.weight_version;
  if (slot->input_is_original) {
    slot->input.reshape(rows, p.in, true, true, stream);
    copy_bytes_async(slot->input.dense().data, p.options.device, x.data, x.device,
                     static_cast<size_t>(x.nbytes()), stream);
  }
}

GroupedLinearContext context_of(std::shared_ptr<LinearSaved> slot) {
  GroupedLinearContext ctx;
  ctx.saved_ = std::move(slot);
  return ctx;
}

}  // namespace

GroupedLinear::GroupedLinear(int64_t num_groups, int64_t in_features, int64_t out_features,
                             const Recipe& recipe, bool bias, GroupedLinearOptions options)
    : p_(std::make_unique<LinearParams>()) {
  TESSERA_CHECK(num_groups >= 1, "GroupedLinear: num_groups ", num_groups, " must be >= 1");
  TESSERA_CHECK(in_features >= 1 && out_features >= 1, "GroupedLinear: in_features ",
                in_features, " and out_features ", out_features, " must be >= 1");
  // Every later size (weights, operands, reset_parameters) is a product of these: checked once.
  const int64_t bias_elems = checked_mul(num_groups, out_features, "GroupedLinear: num_groups * "
                                         "out_features");
  const int64_t weight_bytes = checked_dtype_bytes(
      DType::kFloat32, checked_mul(bias_elems, in_features, "GroupedLinear: num_groups * "
                                   "out_features * in_features"), "GroupedLinear: weight bytes");
  LinearParams& p = *p_;
  p.groups = num_groups;
  p.in = in_features;
  p.out = out_features;
  p.has_bias = bias;
  p.options = options;
  const Device dev = options.device;
  p.weight = Buffer(static_cast<size_t>(weight_bytes), dev);
  if (bias) p.bias = Buffer(static_cast<size_t>(bias_elems * 4), dev);
  std::shared_ptr<RecipeState> state = options.recipe_state;
  if (!state) state = std::make_shared<RecipeState>(recipe, dev);
  p.align = detail::recipe_token_alignment(state->recipe());
  const std::string module = detail::kGroupedLinearModule;
  p.input = detail::make_producer(state, {module, TensorType::kInput, options.name});
  p.weight_producer = detail::make_producer(state, {module, TensorType::kWeight, options.name});
  p.grad_output = detail::make_producer(state, {module, TensorType::kGradOutput, options.name});
  p.input_rowwise = p.input.make_empty(dev);
  p.input_for_wgrad = p.input.make_empty(dev);
  reset_parameters(0);
}

GroupedLinear::~GroupedLinear() = default;
GroupedLinear::GroupedLinear(GroupedLinear&&) noexcept = default;
GroupedLinear& GroupedLinear::operator=(GroupedLinear&&) noexcept = default;

int64_t GroupedLinear::num_groups() const { return p_->groups; }
int64_t GroupedLinear::in_features() const { return p_->in; }
int64_t GroupedLinear::out_features() const { return p_->out; }
int64_t GroupedLinear::token_alignment() const { return p_->align; }
const std::string& GroupedLinear::name() const { return p_->options.name; }
Device GroupedLinear::device() const { return p_->options.device; }

TensorView GroupedLinear::weight() const {
  return TensorView::contiguous(p_->weight.data(), DType::kFloat32, {p_->groups, p_->out, p_->in},
                                p_->options.device);
}

TensorView GroupedLinear::bias() const {
  if (!p_->has_bias) return {};
  return TensorView::contiguous(p_->bias.data(), DType::kFloat32, {p_->groups, p_->out},
                                p_->options.device);
}

void GroupedLinear::reset_parameters(uint64_t seed) {
  // splitmix64 stream → U(-bound, bound); cheap enough for millions of parameters.
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  const float bound = 1.0f / std::sqrt(static_cast<float>(p_->in));
  const int64_t nw = p_->groups * p_->out * p_->in;
  std::vector<float> host(static_cast<size_t>(nw + (p_->has_bias ? p_->groups * p_->out : 0)));
  for (float& v : host) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    v = (2.0f * u - 1.0f) * bound;
  }
  copy_bytes(p_->weight.data(), p_->options.device, host.data(), Device::cpu(),
             static_cast<size_t>(nw * 4));
  if (p_->has_bias) {
    copy_bytes(p_->bias.data(), p_->options.device, host.data() + nw, Device::cpu(),
               p_->bias.bytes());
  }
}

GroupedLinearContext GroupedLinear::forward_padded(const TensorView& x, const GroupLayout& layout,
                                                   const TensorView& y, ForwardMode mode,
                                                   Stream stream) {
  LinearParams& p = *p_;
  check_forward(p, layout, x, y);
  std::shared_ptr<LinearSaved> slot;
  if (mode.training) {
    slot = acquire_context_slot(p);
    detail::copy_group_layout(layout, slot->layout, stream);  // the context owns its offsets
  }
  forward_in_layout(p, x, layout, y, mode, slot.get(), stream);
  return context_of(std::move(slot));
}

void GroupedLinear::backward_padded(const GroupedLinearContext& ctx, const TensorView& dy,
                                    const GroupedLinearGrads& grads, Stream stream) {
  LinearParams& p = *p_;
  TESSERA_CHECK(ctx.valid(), "GroupedLinear backward: the context is empty (was the forward "
                "run with training = true?)");
  LinearSaved& s = *ctx.saved_;
  TESSERA_CHECK(s.owner == &p, "GroupedLinear backward: the context belongs to another layer");
  TESSERA_CHECK(s.weight_version == p.weight_version, "GroupedLinear '", p.options.name,
                "' backward: the weights were re-quantized after this context's forward (pass "
                "ForwardMode::requantize_weights = false to later forwards of the same step)");
  const int64_t rows = s.layout.padded_rows;
  check_matrix(dy, "GroupedLinear backward: dy", rows, p.out);
  check_grads(p, grads, rows);
  if (rows == 0) return zero_grads_of_empty_batch(grads, stream);
  const bool need_wgrad = grads.dw.data != nullptr;
  s.grad_output.reshape(rows, p.out, true, need_wgrad, stream);
  p.grad_output.produce(dy, s.grad_output, stream);
  if (grads.dx.data) dgrad(p, s, s.grad_output, grads.dx, stream);
  if (need_wgrad) {
    if (s.input_is_original) {
      p.input_for_wgrad.reshape(rows, p.in, false, true, stream);
      p.input.produce(s.input.dense(), p.input_for_wgrad, stream);
      wgrad(p, s, p.input_for_wgrad, s.grad_output, grads.dw, grads.accumulate, stream);
    } else {
      wgrad(p, s, s.input, s.grad_output, grads.dw, grads.accumulate, stream);
    }
  }
  if (grads.db.data) detail::grouped_row_sum(dy, s.layout, grads.db, grads.accumulate, stream);
}

GroupedLinearContext GroupedLinear::forward(const TensorView& x, const TensorView& splits,
                                            const TensorView& y, ForwardMode mode,
                                            Stream stream) {
  LinearParams& p = *p_;
  check_view(x, "GroupedLinear forward: x", {DType::kFloat32});
  TESSERA_CHECK_STATUS(x.ndim == 2, Status::kShapeMismatch,
                       "GroupedLinear forward: x must be (T, in), got ", x.to_string());
  check_matrix(y, "GroupedLinear forward: y", x.shape[0], p.out);
  std::shared_ptr<LinearSaved> slot = mode.training ? acquire_context_slot(p) : nullptr;
  GroupLayout& layout = slot ? slot->layout : p.eval_layout;
  detail::make_group_layout_into(layout, splits, x.shape[0], p.align, p.options.device, nullptr,
                                 stream);
  if (!layout.padded()) {
    check_forward(p, layout, x, y);
    forward_in_layout(p, x, layout, y, mode, slot.get(), stream);
    return context_of(std::move(slot));
  }
  const TensorView xp =
      p.padded_in.zeroed_matrix(layout.padded_rows, p.in, x.device, stream);  // (Tp, in)
  const TensorView yp =
      p.padded_out.zeroed_matrix(layout.padded_rows, p.out, x.device, stream);  // (Tp, out)
  check_forward(p, layout, xp, yp);
  pad_tokens(x, layout.offsets, layout.padded_offsets, xp, stream);
  forward_in_layout(p, xp, layout, yp, mode, slot.get(), stream);
  unpad_tokens(yp, layout.offsets, layout.padded_offsets, y, stream);
  return context_of(std::move(slot));
}

void GroupedLinear::backward(const GroupedLinearContext& ctx, const TensorView& dy,
                             const GroupedLinearGrads& grads, Stream stream) {
  LinearParams& p = *p_;
  TESSERA_CHECK(ctx.valid(), "GroupedLinear backward: the context is empty (was the forward "
                "run with training = true?)");
  const GroupLayout& layout = ctx.saved_->layout;
  check_matrix(dy, "GroupedLinear backward: dy", layout.rows, p.out);
  if (!layout.padded()) return backward_padded(ctx, dy, grads, stream);
  if (grads.dx.data) check_matrix(grads.dx, "GroupedLinear backward: dx", layout.rows, p.in);
  const TensorView dyp =
      p.padded_out.zeroed_matrix(layout.padded_rows, p.out, dy.device, stream);  // (Tp, out)
  pad_tokens(dy, layout.offsets, layout.padded_offsets, dyp, stream);
  GroupedLinearGrads padded = grads;
  if (grads.dx.data) {
    padded.dx =
        p.padded_in.zeroed_matrix(layout.padded_rows, p.in, dy.device, stream);  // (Tp, in)
  }
  backward_padded(ctx, dyp, padded, stream);
  if (grads.dx.data) {
    unpad_tokens(padded.dx, layout.offsets, layout.padded_offsets, grads.dx, stream);
  }
}

}  // namespace tessera::nn
