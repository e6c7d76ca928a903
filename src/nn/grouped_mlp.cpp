// GroupedMLP: two GroupedLinear layers' parameters and state around the one MLP training step
// (mlp_step.h).
#include "tessera/nn/grouped_mlp.h"

#include <utility>

#include "nn/layer_holder.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"
#include "tessera/nn/mlp_step.h"

namespace tessera::nn {
namespace detail {

struct MlpHolder {
  MlpHolder(GroupedLinear l1, GroupedLinear l2, GroupedMLPOptions o)
      : fc1(std::move(l1)), fc2(std::move(l2)), options(std::move(o)) {}
  GroupedLinear fc1, fc2;
  GroupedMLPOptions options;
  MlpSpec spec() { return {fc1.state_internal().spec, fc2.state_internal().spec}; }
};

// A context: the layout, what the step saved, the weight copies it read, p (and x, when the
// backward reads it) copied out of the caller's buffers.
struct MlpContextState {
  const MlpHolder* owner = nullptr;
  Allocation layout_memory, probs_memory, x_memory;
  GroupLayout layout;
  MlpSaved saved;
  std::shared_ptr<const WeightCopies> fc1, fc2;
  TensorView probs, x;
};

}  // namespace detail

namespace {

GroupedLinearOptions layer_options(const GroupedMLPOptions& o, const char* layer,
                                   std::shared_ptr<RecipeState> state) {
  GroupedLinearOptions l;
  l.name = o.name + "." + layer;
  l.save_original_input = o.save_original_input;
  l.device = o.device;
  l.recipe_state = std::move(state);
  return l;
}

}  // namespace

int64_t GroupedMLPContext::saved_bytes() const {
  if (!saved_) return 0;
  const detail::MlpContextState& s = *saved_;
  int64_t bytes = s.saved.h_view.nbytes() + s.saved.a_view.nbytes() + s.probs.nbytes() +
                  s.x.nbytes() + s.layout.offsets.nbytes();
  for (const LinearSaved* l : {&s.saved.fc1, &s.saved.fc2}) {
    if (l->has_input) {
      bytes += l->input.columnwise_data.nbytes() + l->input.columnwise_scale_inv.nbytes() +
               l->input.columnwise_amax.nbytes();
    }
  }
  return bytes;
}

const GroupLayout& GroupedMLPContext::layout() const {
  TESSERA_CHECK(saved_ != nullptr, "GroupedMLPContext: empty context");
  return saved_->layout;
}

GroupedMLP::GroupedMLP(int64_t num_groups, int64_t hidden, int64_t ffn, const Recipe& recipe,
                       GroupedMLPOptions options) {
  // One RecipeState for fc1 and fc2: one set of quantizers per role.
  const auto state = std::make_shared<RecipeState>(recipe, options.device);
  GroupedLinear l1(num_groups, hidden, checked_mul(2, ffn, "GroupedMLP: 2 * ffn"), recipe,
                   options.bias, layer_options(options, "fc1", state));
  GroupedLinear l2(num_groups, ffn, hidden, recipe, options.bias,
                   layer_options(options, "fc2", state));
  // fc2 runs on fc1's pool: one pool per MLP step.
  l2.state_internal().pool = l1.state_internal().pool;
  s_ = std::make_unique<detail::MlpHolder>(std::move(l1), std::move(l2), std::move(options));
  reset_parameters(0);
}

GroupedMLP::~GroupedMLP() = default;
GroupedMLP::GroupedMLP(GroupedMLP&&) noexcept = default;
GroupedMLP& GroupedMLP::operator=(GroupedMLP&&) noexcept = default;

GroupedLinear& GroupedMLP::fc1() { return s_->fc1; }
GroupedLinear& GroupedMLP::fc2() { return s_->fc2; }
int64_t GroupedMLP::num_groups() const { return s_->fc1.num_groups(); }
int64_t GroupedMLP::hidden() const { return s_->fc1.in_features(); }
int64_t GroupedMLP::ffn() const { return s_->fc2.in_features(); }

void GroupedMLP::reset_parameters(uint64_t seed) {
  s_->fc1.reset_parameters(2 * seed);
  s_->fc2.reset_parameters(2 * seed + 1);
}

GroupedMLPContext GroupedMLP::forward(const TensorView& x, const TensorView& splits,
                                      const TensorView& probs, const TensorView& y,
                                      ForwardMode mode, Stream stream) {
  detail::MlpHolder& s = *s_;
  detail::LinearParams& p1 = s.fc1.state_internal();
  detail::LinearParams& p2 = s.fc2.state_internal();
  check_view(x, "GroupedMLP forward: x", {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  TESSERA_CHECK_STATUS(x.ndim == 2, Status::kShapeMismatch,
                       "GroupedMLP forward: x must be (T, hidden), got ", x.to_string());
  Allocator& pool = *p1.pool;
  auto ctx = std::make_shared<detail::MlpContextState>();
  ctx->owner = &s;
  const Device dev = s.options.device;
  ctx->layout = detail::layout_from_splits(splits, p1.spec.groups, x.shape[0], dev, pool,
                                           ctx->layout_memory, stream);
  ctx->fc1 = p1.refresh(mode.requantize_weights, stream);
  ctx->fc2 = p2.refresh(mode.requantize_weights, stream);
  MlpForwardArgs a{x, ctx->layout.offsets, GroupOffsetsFormat::kStartOffsets, probs,
                   p1.bias_view(), p2.bias_view(), y, mode.training, {}};
  const MlpState state{p1.state(), p2.state()};
  ctx->saved = mlp_forward(s.spec(), {*ctx->fc1, *ctx->fc2}, a, state, pool, stream);
  GroupedMLPContext out;
  if (!mode.training) return out;
  if (probs.data) {
    ctx->probs = detail::keep_copy(
        TensorView::contiguous(probs.data, probs.dtype, {probs.numel(), 1}, probs.device), pool,
        ctx->probs_memory, stream);
    ctx->probs = TensorView::contiguous(ctx->probs.data, probs.dtype, {probs.numel()}, dev);
  }
  if (!p1.spec.quantized()) ctx->x = detail::keep_copy(x, pool, ctx->x_memory, stream);
  out.saved_ = std::move(ctx);
  return out;
}

void GroupedMLP::backward(const GroupedMLPContext& ctx, const TensorView& dy,
                          const GroupedMLPGrads& grads, Stream stream) {
  detail::MlpHolder& s = *s_;
  TESSERA_CHECK(ctx.valid(), "GroupedMLP backward: the context is empty (was the forward run "
                "with training = true?)");
  const detail::MlpContextState& c = *ctx.saved_;
  TESSERA_CHECK(c.owner == &s, "GroupedMLP backward: the context belongs to another layer");
  detail::LinearParams& p1 = s.fc1.state_internal();
  detail::LinearParams& p2 = s.fc2.state_internal();
  MlpBackwardArgs a{dy,          c.layout.offsets, GroupOffsetsFormat::kStartOffsets,
                    c.x,         c.probs,          grads.dx,
                    grads.dprobs, grads.fc1_dw,    grads.fc1_db,
                    grads.fc2_dw, grads.fc2_db,    grads.accumulate,
                    grads.accumulate, {}};
  const MlpState state{p1.state(), p2.state()};
  mlp_backward(s.spec(), {*c.fc1, *c.fc2}, c.saved, a, state, *p1.pool, stream);
}

}  // namespace tessera::nn
