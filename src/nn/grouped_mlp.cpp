// GroupedMLP: fc1 → SwiGLU (× routing probability) → fc2 on one padded group layout.
#include "tessera/nn/grouped_mlp.h"

#include "nn/operand.h"
#include "nn/recipe_binding.h"
#include "nn/row_ops.h"
#include "tessera/core/status.h"
#include "tessera/nn/token_padding.h"

namespace tessera::nn {
namespace detail {

struct MlpState {
  int64_t groups = 0, hidden = 0, ffn = 0;
  GroupedMLPOptions options;
  GroupedLinear fc1, fc2;
  OperandProducer activation;  // the saved SwiGLU input h (fc1's output)
};

// Invariants: h holds the SwiGLU input (Tp, 2·ffn) (rowwise); probs is (Tp) float32 or empty.
struct MlpSaved {
  GroupLayout layout;
  GroupedLinearContext fc1, fc2;
  OperandStorage h;
  Buffer probs;  // float32 (Tp), padded
};

}  // namespace detail

namespace {

// A zero-filled float32 buffer of `rows` x `cols` on `device` and its (rows, cols) view.
struct Scratch {
  Buffer buffer;
  TensorView view;
  Scratch() = default;
  Scratch(int64_t rows, int64_t cols, Device device)
      : buffer(static_cast<size_t>(rows * cols * 4), device) {
    buffer.fill_bytes(0);
    view = TensorView::contiguous(buffer.data(), DType::kFloat32, {rows, cols}, device);
  }
};

// x (T, cols) → (Tp, cols) in the padded layout (a plain copy when nothing is padded).
Scratch to_padded(const TensorView& x, const GroupLayout& layout, Stream stream) {
  Scratch out(layout.padded_rows, x.shape[1], x.device);
  if (layout.padded()) {
    pad_tokens(x, layout.offsets, layout.padded_offsets, out.view, stream);
  } else if (x.numel() > 0) {
    copy_bytes(out.view.data, out.view.device, x.data, x.device, static_cast<size_t>(x.nbytes()));
  }
  return out;
}

// (Tp, cols) padded → x (T, cols).
void from_padded(const TensorView& xp, const GroupLayout& layout, const TensorView& x,
                 Stream stream) {
  if (layout.padded()) return unpad_tokens(xp, layout.offsets, layout.padded_offsets, x, stream);
  if (x.numel() > 0) {
    copy_bytes(x.data, x.device, xp.data, xp.device, static_cast<size_t>(x.nbytes()));
  }
}

TensorView column(const TensorView& v) {  // (T) → (T, 1)
  return TensorView::contiguous(v.data, v.dtype, {v.numel(), 1}, v.device);
}

void check_matrix(const TensorView& v, const char* arg, int64_t rows, int64_t cols) {
  check_view(v, arg, {DType::kFloat32});
  TESSERA_CHECK_STATUS(v.ndim == 2 && v.shape[0] == rows && v.shape[1] == cols,
                       Status::kShapeMismatch, arg, " must be (", rows, ", ", cols, "), got ",
                       v.to_string());
}

GroupedLinearOptions layer_options(const GroupedMLPOptions& o, const char* layer) {
  GroupedLinearOptions l;
  l.name = o.name + "." + layer;
  l.save_original_input = o.save_original_input;
  l.device = o.device;
  return l;
}

}  // namespace

GroupedMLP::GroupedMLP(int64_t num_groups, int64_t hidden, int64_t ffn, const Recipe& recipe,
                       GroupedMLPOptions options) {
  // One RecipeState for fc1, fc2 and the saved SwiGLU input: one set of quantizers per role.
  const auto state = std::make_shared<RecipeState>(recipe, options.device);
  GroupedLinearOptions o1 = layer_options(options, "fc1"), o2 = layer_options(options, "fc2");
  o1.recipe_state = o2.recipe_state = state;
  s_ = std::make_unique<detail::MlpState>(detail::MlpState{
      num_groups, hidden, ffn, options,
      GroupedLinear(num_groups, hidden, 2 * ffn, recipe, options.bias, o1),
      GroupedLinear(num_groups, ffn, hidden, recipe, options.bias, o2),
      detail::make_producer(state, {detail::kGroupedMlpModule, TensorType::kOutput, o1.name})});
  reset_parameters(0);
}

GroupedMLP::~GroupedMLP() = default;
GroupedMLP::GroupedMLP(GroupedMLP&&) noexcept = default;
GroupedMLP& GroupedMLP::operator=(GroupedMLP&&) noexcept = default;

GroupedLinear& GroupedMLP::fc1() { return s_->fc1; }
GroupedLinear& GroupedMLP::fc2() { return s_->fc2; }
int64_t GroupedMLP::num_groups() const { return s_->groups; }
int64_t GroupedMLP::hidden() const { return s_->hidden; }
int64_t GroupedMLP::ffn() const { return s_->ffn; }

void GroupedMLP::reset_parameters(uint64_t seed) {
  s_->fc1.reset_parameters(2 * seed);
  s_->fc2.reset_parameters(2 * seed + 1);
}

GroupedMLPContext GroupedMLP::forward(const TensorView& x, const TensorView& splits,
                                      const TensorView& probs, const TensorView& y,
                                      ForwardMode mode, Stream stream) {
  detail::MlpState& s = *s_;
  check_view(x, "GroupedMLP forward: x", {DType::kFloat32});
  TESSERA_CHECK_STATUS(x.ndim == 2, Status::kShapeMismatch,
                       "GroupedMLP forward: x must be (T, hidden), got ", x.to_string());
  const int64_t t = x.shape[0];
  check_matrix(x, "GroupedMLP forward: x", t, s.hidden);
  check_matrix(y, "GroupedMLP forward: y", t, s.hidden);
  if (probs.data) {
    check_view(probs, "GroupedMLP forward: probs", {DType::kFloat32});
    TESSERA_CHECK_STATUS(probs.numel() == t, Status::kShapeMismatch,
                         "GroupedMLP forward: probs must hold T = ", t, " values, got ",
                         probs.to_string());
  }
  auto saved = std::make_shared<detail::MlpSaved>();
  saved->layout = make_group_layout(splits, t, s.fc1.token_alignment(), s.options.device,
                                    nullptr, stream);  // the one scan of this step
  const GroupLayout& layout = saved->layout;
  const int64_t tp = layout.padded_rows;
  Scratch xp = to_padded(x, layout, stream);                     // (Tp, hidden)
  Scratch hp(tp, 2 * s.ffn, x.device);                            // (Tp, 2·ffn)
  saved->fc1 = s.fc1.forward_padded(xp.view, layout, hp.view, mode, stream);
  Scratch pp;                                                     // (Tp, 1)
  if (probs.data) pp = to_padded(column(probs), layout, stream);
  Scratch ap(tp, s.ffn, x.device);                                // (Tp, ffn)
  const TensorView probs_padded = probs.data ? pp.view : TensorView{};
  detail::swiglu_forward(hp.view, probs_padded, layout, ap.view, stream);
  Scratch yp(tp, s.hidden, x.device);                             // (Tp, hidden)
  saved->fc2 = s.fc2.forward_padded(ap.view, layout, yp.view, mode, stream);
  from_padded(yp.view, layout, y, stream);
  GroupedMLPContext ctx;
  if (!mode.training) return ctx;
  saved->h = s.activation.make(tp, 2 * s.ffn, true, false, s.options.device);
  s.activation.produce(hp.view, saved->h, stream);
  saved->probs = std::move(pp.buffer);
  ctx.saved_ = std::move(saved);
  return ctx;
}

void GroupedMLP::backward(const GroupedMLPContext& ctx, const TensorView& dy,
                          const GroupedMLPGrads& grads, Stream stream) {
  detail::MlpState& s = *s_;
  TESSERA_CHECK(ctx.valid(), "GroupedMLP backward: the context is empty (was the forward run "
                "with training = true?)");
  const detail::MlpSaved& saved = *ctx.saved_;
  const GroupLayout& layout = saved.layout;
  const int64_t tp = layout.padded_rows;
  check_matrix(dy, "GroupedMLP backward: dy", layout.rows, s.hidden);
  if (grads.dx.data) check_matrix(grads.dx, "GroupedMLP backward: dx", layout.rows, s.hidden);
  const bool has_probs = !saved.probs.empty() || (tp == 0 && grads.dprobs.data);
  TESSERA_CHECK(!grads.dprobs.data || has_probs,
                "GroupedMLP backward: dprobs asked for but the forward had no probs");
  Scratch dyp = to_padded(dy, layout, stream);                    // (Tp, hidden)
  Scratch dap(tp, s.ffn, dy.device);                              // (Tp, ffn)
  s.fc2.backward_padded(saved.fc2, dyp.view,
                        {dap.view, grads.fc2_dw, grads.fc2_db, grads.accumulate}, stream);
  Scratch h(tp, 2 * s.ffn, dy.device);                            // (Tp, 2·ffn)
  if (tp > 0) saved.h.to_float(h.view, false, stream);
  const TensorView probs_padded =
      saved.probs.empty() ? TensorView{}
                          : TensorView::contiguous(saved.probs.data(), DType::kFloat32, {tp},
                                                   s.options.device);
  Scratch dhp(tp, 2 * s.ffn, dy.device);                          // (Tp, 2·ffn)
  Scratch dpp(tp, 1, dy.device);                                  // (Tp, 1)
  detail::swiglu_backward(h.view, probs_padded, dap.view, layout, dhp.view,
                          grads.dprobs.data && tp > 0 ? dpp.view : TensorView{}, stream);
  Scratch dxp(tp, s.hidden, dy.device);                           // (Tp, hidden)
  s.fc1.backward_padded(saved.fc1, dhp.view,
                        {grads.dx.data ? dxp.view : TensorView{}, grads.fc1_dw, grads.fc1_db,
                         grads.accumulate},
                        stream);
  if (grads.dx.data) from_padded(dxp.view, layout, grads.dx, stream);
  if (grads.dprobs.data) from_padded(dpp.view, layout, column(grads.dprobs), stream);
}

int64_t GroupedMLPContext::saved_bytes() const {
  if (!saved_) return 0;
  return saved_->fc1.saved_bytes() + saved_->fc2.saved_bytes() + saved_->h.bytes() +
         static_cast<int64_t>(saved_->probs.bytes());
}

const GroupLayout& GroupedMLPContext::layout() const {
  TESSERA_CHECK(saved_ != nullptr, "GroupedMLPContext: empty context");
  return saved_->layout;
}
const GroupedLinearContext& GroupedMLPContext::fc1() const {
  TESSERA_CHECK(saved_ != nullptr, "GroupedMLPContext: empty context");
  return saved_->fc1;
}
const GroupedLinearContext& GroupedMLPContext::fc2() const {
  TESSERA_CHECK(saved_ != nullptr, "GroupedMLPContext: empty context");
  return saved_->fc2;
}

}  // namespace tessera::nn
