// GroupedLinear: parameters, recipe state and contexts around the one training step
// (linear_step.h); the step does the work.
#include "tessera/nn/grouped_linear.h"

#include <cmath>
#include <string>

#include "nn/layer_holder.h"
#include "nn/member_scaling.h"
#include "nn/row_ops.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"
#include "tessera/formats/convert.h"
#include "tessera/nn/token_padding.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::nn {
namespace detail {

// A context: the forward's layout, what the step saved, the weight copies it read, x when the
// backward reads it, and (after a backward) dy's copies for inspection.
struct LinearContextState {
  const LinearParams* owner = nullptr;
  Allocation layout_memory;
  GroupLayout layout;
  LinearSaved saved;
  std::shared_ptr<const WeightCopies> weight;
  uint64_t weight_version = 0;  // the layer's master-weight version when `weight` aliases them
  Allocation x_memory;
  TensorView x;  // (T, in): dense recipes and save_original_input
  LinearGradOutput grad_output;  // quantized recipes, after a backward
  Allocation dy_memory;          // dense recipes, after a backward: dy in the compute dtype
  TensorView dy;
};

TensorView LinearParams::weight_view() const {
  return TensorView::contiguous(weight.data(), DType::kFloat32, {spec.groups, spec.out, spec.in},
                                options.device);
}

TensorView LinearParams::bias_view() const {
  if (!spec.bias) return {};
  return TensorView::contiguous(bias.data(), DType::kFloat32, {spec.groups, spec.out},
                                options.device);
}

LinearState LinearParams::state() const {
  return linear_state(*recipe_state, spec, options.name);
}

std::shared_ptr<const WeightCopies> LinearParams::refresh(bool requantize, Stream stream) {
  ++forwards;
  if (copies && !requantize) return copies;
  if (copies.use_count() == 1) copies.reset();  // its memory goes back to the pool first
  copies = std::make_shared<const WeightCopies>(
      quantize_weight(spec, weight_view(), state(), *pool, stream));
  return copies;
}

GroupLayout layout_from_splits(const TensorView& splits, int64_t groups, int64_t rows,
                               Device device, Allocator& alloc, Allocation& keep, Stream stream) {
  check_view(splits, "splits", {DType::kInt32, DType::kInt64});
  TESSERA_CHECK_STATUS(splits.ndim == 1 && splits.shape[0] == groups, Status::kShapeMismatch,
                       "splits: expected one size per group (", groups, " groups), got ",
                       splits.to_string());
  keep = alloc.allocate(2 * (groups + 1) * 8, device, stream);
  GroupLayout l;
  l.num_groups = groups;
  l.rows = l.padded_rows = rows;
  l.device = device;
  l.offsets = TensorView::contiguous(keep.data, DType::kInt64, {groups + 1}, device);
  l.padded_offsets = TensorView::contiguous(static_cast<int64_t*>(keep.data) + groups + 1,
                                            DType::kInt64, {groups + 1}, device);
  ScanOptions options;
  options.total_bound = rows;
  token_padding_offsets(splits, 1, l.offsets, l.padded_offsets, options, stream);
  return l;
}

LinearState linear_state(RecipeState& state, const LinearSpec& spec, const std::string& name) {
  LinearState s;
  if (!spec.quantized()) return s;
  // Only delayed roles have state, one per expert (asking the recipe state for a role makes its
  // quantizer, which would call a custom factory again).
  const auto of = [&](TensorType t, const RoleFormat& f) {
    if (!f.config.delayed) return DelayedScalingState{};
    return state.member_state({"grouped_linear", t, name}, spec.groups);
  };
  s.input = of(TensorType::kInput, spec.input);
  s.weight = of(TensorType::kWeight, spec.weight);
  s.grad_output = of(TensorType::kGradOutput, spec.grad_output);
  return s;
}

std::unique_ptr<LinearParams> make_linear_params(int64_t groups, int64_t in, int64_t out,
                                                 const Recipe& recipe, bool bias,
                                                 const GroupedLinearOptions& options) {
  auto p = std::make_unique<LinearParams>();
  p->options = options;
  p->recipe_state = options.recipe_state
                        ? options.recipe_state
                        : std::make_shared<RecipeState>(recipe, options.device);
  // The C++ layers compute dense recipes in the recipe's dtype on their FP32 master weights.
  p->spec = make_linear_spec(p->recipe_state->recipe(), options.name, groups, in, out, bias);
  const int64_t weight_bytes = checked_dtype_bytes(
      DType::kFloat32, checked_mul(checked_mul(groups, out, "num_groups * out_features"), in,
                                   "num_groups * out_features * in_features"),
      "GroupedLinear: weight bytes");
  p->weight = Buffer(static_cast<size_t>(weight_bytes), options.device);
  if (bias) p->bias = Buffer(static_cast<size_t>(groups * out * 4), options.device);
  p->pool = std::make_shared<PoolAllocator>();
  return p;
}

TensorView keep_copy(const TensorView& x, Allocator& alloc, Allocation& keep, Stream stream) {
  keep = alloc.allocate(x.nbytes(), x.device, stream);
  if (x.nbytes() > 0) {
    copy_bytes_async(keep.data, x.device, x.data, x.device, static_cast<size_t>(x.nbytes()),
                     stream);
  }
  return TensorView::contiguous(keep.data, x.dtype, {x.shape[0], x.shape[1]}, x.device);
}

}  // namespace detail

namespace {

using detail::LinearContextState;
using detail::LinearParams;

std::vector<float> dequantized(const QuantizedTensorView& q, bool columnwise, Device device) {
  std::vector<float> host(static_cast<size_t>(q.rows * q.cols));
  if (host.empty()) return host;
  Buffer dev(host.size() * sizeof(float), device);
  dequantize(q, TensorView::contiguous(dev.data(), DType::kFloat32, {q.rows, q.cols}, device),
             columnwise);
  copy_bytes(host.data(), Device::cpu(), dev.data(), device, dev.bytes());
  return host;
}

// A copy the step scales per member (nn/member_scaling.h), dequantized member by member: the
// whole copy read under member g's scales, member g's rows kept (`starts`: G+1 row starts).
std::vector<float> dequantized(const QuantizedTensorView& q, bool columnwise, Device device,
                               const std::vector<int64_t>& starts) {
  const int64_t groups = static_cast<int64_t>(starts.size()) - 1;
  const TensorView& scales = columnwise ? q.columnwise_scale_inv : q.scale_inv;
  const TensorView& amax = columnwise ? q.columnwise_amax : q.amax;
  const bool member_scales = detail::member_scaled(q.config, columnwise);
  // NVFP4 keeps its block scales whole and one global amax per member.
  const bool member_amax = amax.data != nullptr && amax.numel() == groups;
  if (groups <= 1 || !(member_scales || member_amax)) return dequantized(q, columnwise, device);
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols), 0.0f);
  const int64_t per = scales.numel() / groups;
  for (int64_t g = 0; g < groups; ++g) {
    QuantizedTensorView member = q;
    if (member_scales) {
      TensorView& sv = columnwise ? member.columnwise_scale_inv : member.scale_inv;
      sv = TensorView::contiguous(static_cast<float*>(scales.data) + g * per, DType::kFloat32,
                                  {per, 1}, scales.device);
    }
    if (amax.data) {
      (columnwise ? member.columnwise_amax : member.amax) = TensorView::contiguous(
          static_cast<float*>(amax.data) + g, DType::kFloat32, {1}, amax.device);
    }
    const std::vector<float> all = dequantized(member, columnwise, device);
    std::copy(all.begin() + starts[g] * q.cols, all.begin() + starts[g + 1] * q.cols,
              out.begin() + starts[g] * q.cols);
  }
  return out;
}

std::vector<int64_t> host_int64(const TensorView& v) {
  std::vector<int64_t> host(static_cast<size_t>(v.numel()));
  if (!host.empty()) copy_bytes(host.data(), Device::cpu(), v.data, v.device, v.nbytes());
  return host;
}

std::vector<float> to_float(const TensorView& v) {
  std::vector<float> host(static_cast<size_t>(v.numel()));
  if (host.empty()) return host;
  Buffer dev(host.size() * sizeof(float), v.device);
  const TensorView out = TensorView::contiguous(dev.data(), DType::kFloat32, {v.numel()}, v.device);
  if (v.dtype == DType::kFloat32) {
    copy_bytes(dev.data(), v.device, v.data, v.device, dev.bytes());
  } else {
    decode(TensorView::contiguous(v.data, v.dtype, {v.numel()}, v.device), out);
  }
  copy_bytes(host.data(), Device::cpu(), dev.data(), v.device, dev.bytes());
  return host;
}

}  // namespace

int64_t GroupedLinearContext::saved_bytes() const {
  if (!saved_) return 0;
  const LinearContextState& s = *saved_;
  int64_t bytes = s.x.nbytes() + s.layout.offsets.nbytes();
  if (s.saved.has_input) {
    const QuantizedTensorView& q = s.saved.input;
    bytes += q.columnwise_data.nbytes() + q.columnwise_scale_inv.nbytes() +
             q.columnwise_amax.nbytes();
  }
  const WeightCopies& w = *s.weight;
  bytes += w.expanded.nbytes() + w.expanded_wt.nbytes();
  if (!w.quantized()) {
    bytes += w.dense.nbytes();
  } else if (w.columnwise_is_wt()) {
    bytes += w.wt.data.nbytes() + w.wt.scale_inv.nbytes();
  } else {
    bytes += w.q.columnwise_data.nbytes() + w.q.columnwise_scale_inv.nbytes() +
             w.q.columnwise_amax.nbytes();
  }
  return bytes;
}

const GroupLayout& GroupedLinearContext::layout() const {
  TESSERA_CHECK(saved_ != nullptr, "GroupedLinearContext: empty context");
  return saved_->layout;
}

std::vector<float> GroupedLinearContext::operand_value(SavedOperand which, bool columnwise) const {
  TESSERA_CHECK(saved_ != nullptr, "GroupedLinearContext: empty context");
  const LinearContextState& s = *saved_;
  const Device dev = s.owner->options.device;
  const LinearSpec& spec = s.owner->spec;
  switch (which) {
    case SavedOperand::kInput:
      if (s.saved.has_input) {
        return dequantized(s.saved.input, true, dev, host_int64(s.saved.padded_starts));
      }
      TESSERA_CHECK(s.x.data != nullptr, "operand_value: the forward kept no copy of x");
      return to_float(s.x);
    case SavedOperand::kWeight: {
      const WeightCopies& w = *s.weight;
      if (!w.quantized()) return to_float(w.dense);
      if (!(columnwise && w.columnwise_is_wt())) {
        std::vector<int64_t> experts(static_cast<size_t>(spec.groups + 1));
        for (int64_t g = 0; g <= spec.groups; ++g) experts[g] = g * spec.out;
        return dequantized(w.q, columnwise, dev, experts);
      }
      // Wᵀ per group (G·in, out) → W (G·out, in).
      const std::vector<float> t = dequantized(w.wt, false, dev);
      std::vector<float> out(t.size());
      for (int64_t g = 0; g < spec.groups; ++g)
        for (int64_t k = 0; k < spec.in; ++k)
          for (int64_t n = 0; n < spec.out; ++n)
            out[(g * spec.out + n) * spec.in + k] = t[(g * spec.in + k) * spec.out + n];
      return out;
    }
    case SavedOperand::kGradOutput:
      if (!spec.quantized()) {
        TESSERA_CHECK(s.dy.data != nullptr || s.saved.rows == 0,
                      "operand_value: grad_output exists after a backward");
        return to_float(s.dy);
      }
      TESSERA_CHECK(s.grad_output.storage.owner != nullptr || s.saved.rows == 0,
                    "operand_value: grad_output exists after a backward");
      return dequantized(columnwise ? s.grad_output.columnwise : s.grad_output.rowwise,
                         columnwise, dev, host_int64(s.saved.padded_starts));
  }
  TESSERA_FAIL(Status::kInvalidArgument, "operand_value: unknown operand ",
               static_cast<int>(which));
}

GroupedLinear::GroupedLinear(int64_t num_groups, int64_t in_features, int64_t out_features,
                             const Recipe& recipe, bool bias, GroupedLinearOptions options)
    : p_(detail::make_linear_params(num_groups, in_features, out_features, recipe, bias,
                                    options)) {
  reset_parameters(0);
}

GroupedLinear::~GroupedLinear() = default;
GroupedLinear::GroupedLinear(GroupedLinear&&) noexcept = default;
GroupedLinear& GroupedLinear::operator=(GroupedLinear&&) noexcept = default;

int64_t GroupedLinear::num_groups() const { return p_->spec.groups; }
int64_t GroupedLinear::in_features() const { return p_->spec.in; }
int64_t GroupedLinear::out_features() const { return p_->spec.out; }
int64_t GroupedLinear::token_alignment() const {
  return p_->recipe_state->recipe().token_alignment;
}
const std::string& GroupedLinear::name() const { return p_->options.name; }
Device GroupedLinear::device() const { return p_->options.device; }
TensorView GroupedLinear::weight() const { return p_->weight_view(); }
TensorView GroupedLinear::bias() const { return p_->bias_view(); }

void GroupedLinear::reset_parameters(uint64_t seed) {
  // splitmix64 stream → U(-bound, bound); cheap enough for millions of parameters.
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  const LinearSpec& s = p_->spec;
  const float bound = 1.0f / std::sqrt(static_cast<float>(s.in));
  const int64_t nw = s.groups * s.out * s.in;
  std::vector<float> host(static_cast<size_t>(nw + (s.bias ? s.groups * s.out : 0)));
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
  if (s.bias) {
    copy_bytes(p_->bias.data(), p_->options.device, host.data() + nw, Device::cpu(),
               p_->bias.bytes());
  }
}

GroupedLinearContext GroupedLinear::forward(const TensorView& x, const TensorView& splits,
                                            const TensorView& y, ForwardMode mode,
                                            Stream stream) {
  LinearParams& p = *p_;
  check_view(x, "GroupedLinear forward: x", {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  TESSERA_CHECK_STATUS(x.ndim == 2, Status::kShapeMismatch,
                       "GroupedLinear forward: x must be (T, in), got ", x.to_string());
  auto ctx = std::make_shared<LinearContextState>();
  ctx->owner = &p;
  const Device dev = p.options.device;
  ctx->layout = detail::layout_from_splits(splits, p.spec.groups, x.shape[0], dev, *p.pool,
                                           ctx->layout_memory, stream);
  ctx->weight = p.refresh(mode.requantize_weights, stream);
  ctx->weight_version = p.forwards;
  const bool keep_x = mode.training && (!p.spec.quantized() || p.options.save_original_input);
  LinearForwardArgs a{x, ctx->layout.offsets, GroupOffsetsFormat::kStartOffsets, p.bias_view(),
                      y, mode.training && !keep_x, {}};
  ctx->saved = linear_forward(p.spec, *ctx->weight, a, p.state(), *p.pool, stream);
  if (ctx->saved.has_input) {  // the wgrad's padded layout
    ctx->layout.padded_offsets = ctx->saved.padded_starts;
    ctx->layout.padded_rows = ctx->saved.padded_rows;
    ctx->layout.align = p.spec.wgrad_align;
  }
  GroupedLinearContext out;
  if (!mode.training) return out;
  if (keep_x) {  // what backward reads: dense recipes' compute dtype, else x as given
    const DType dt = p.spec.quantized() ? x.dtype : p.spec.input.dense_dtype;
    ctx->x_memory = p.pool->allocate(dtype_bytes(dt, x.numel()), x.device, stream);
    ctx->x = TensorView::contiguous(ctx->x_memory.data, dt, {x.shape[0], x.shape[1]}, x.device);
    detail::cast(x, ctx->x, stream);
  }
  out.saved_ = std::move(ctx);
  return out;
}

void GroupedLinear::backward(const GroupedLinearContext& ctx, const TensorView& dy,
                             const GroupedLinearGrads& grads, Stream stream) {
  LinearParams& p = *p_;
  TESSERA_CHECK(ctx.valid(), "GroupedLinear backward: the context is empty (was the forward "
                "run with training = true?)");
  LinearContextState& s = *ctx.saved_;
  TESSERA_CHECK(s.owner == &p, "GroupedLinear backward: the context belongs to another layer");
  TESSERA_CHECK(s.weight->dense.data != p.weight.data() || s.weight_version == p.forwards,
                "GroupedLinear '", echo(p.options.name), "' backward: the ",
                echo(p.recipe_state->recipe().name),
                " recipe computes on the master weights themselves, and a later forward may have "
                "changed them (run the backward of a context before the next forward, or use a "
                "recipe that makes a compute copy)");
  LinearBackwardArgs a{dy,        s.layout.offsets, GroupOffsetsFormat::kStartOffsets, s.x,
                       grads.dx,  grads.dw,         grads.db,         grads.accumulate,
                       grads.accumulate, nullptr, {}};
  if (p.spec.quantized()) a.keep_grad_output = &s.grad_output;
  linear_backward(p.spec, *s.weight, s.saved, a, p.state(), *p.pool, stream);
  if (!p.spec.quantized() && dy.numel() > 0) {  // kept for inspection (operand_value)
    const DType dt = p.spec.grad_output.dense_dtype;
    s.dy_memory = p.pool->allocate(dtype_bytes(dt, dy.numel()), dy.device, stream);
    s.dy = TensorView::contiguous(s.dy_memory.data, dt, {dy.shape[0], dy.shape[1]}, dy.device);
    detail::cast(dy, s.dy, stream);
  }
}

}  // namespace tessera::nn
