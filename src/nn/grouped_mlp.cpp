// GroupedMLP: fc1 → SwiGLU (× routing probability) → fc2 on one padded group layout. Like
// GroupedLinear, a step allocates nothing once its shape has been seen: the padded activations
// live in growing per-role buffers, contexts in pooled slots (step_storage.h), and every fill and
// copy is ordered on the caller's stream.
#include "tessera/nn/grouped_mlp.h"

#include <utility>
#include <vector>

#include "nn/operand.h"
#include "nn/recipe_binding.h"
#include "nn/row_ops.h"
#include "nn/step_storage.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"
#include "tessera/nn/token_padding.h"

namespace tessera::nn {
namespace detail {

struct MlpSaved;

// Invariants: the scratch buffers below only grow; every slot of saved_pool has owner == this.
struct MlpState {
  MlpState(int64_t g, int64_t h, int64_t f, GroupedMLPOptions o, GroupedLinear l1,
           GroupedLinear l2, OperandProducer h_producer)
      : groups(g), hidden(h), ffn(f), options(std::move(o)), fc1(std::move(l1)),
        fc2(std::move(l2)), activation(std::move(h_producer)) {}

  int64_t groups = 0, hidden = 0, ffn = 0;
  GroupedMLPOptions options;
  GroupedLinear fc1, fc2;
  OperandProducer activation;  // the saved SwiGLU input h (fc1's output)
  // Reused by every call, float32 with Tp rows (dead when the call's work on its stream is done).
  GrowingBuffer tokens_in;     // (Tp, hidden): x padded (forward), dy padded (backward)
  GrowingBuffer tokens_out;    // (Tp, hidden): y padded (forward), dx padded (backward)
  GrowingBuffer gate_up;       // (Tp, 2·ffn): h (forward), h decoded from the context (backward)
  GrowingBuffer gate_up_grad;  // (Tp, 2·ffn): dh (backward)
  GrowingBuffer swiglu_out;    // (Tp, ffn): a (forward), da (backward)
  GrowingBuffer probs_scratch; // (Tp): p padded (forward without context), dp padded (backward)
  GroupLayout eval_layout;     // forward without a context: the layout of that call
  std::vector<std::shared_ptr<MlpSaved>> saved_pool;  // context slots
};

// One context slot, reused by the next forward that finds it free. Invariants: h holds the
// SwiGLU input (Tp, 2·ffn) (rowwise); probs_padded is (Tp, 1) float32 in `probs` when has_probs;
// layout's offsets live in this slot's own storage.
struct MlpSaved {
  const MlpState* owner = nullptr;
  GroupLayout layout;
  GroupedLinearContext fc1, fc2;
  OperandStorage h;
  bool has_probs = false;
  GrowingBuffer probs;
  TensorView probs_padded;  // (Tp, 1)
};

}  // namespace detail

namespace {

// x (T, cols) → xp (Tp, cols, zero-filled by the caller) in the padded layout (a plain copy
// when nothing is padded).
void pad_into(const TensorView& x, const GroupLayout& layout, const TensorView& xp,
              Stream stream) {
  if (layout.padded()) {
    pad_tokens(x, layout.offsets, layout.padded_offsets, xp, stream);
  } else if (x.numel() > 0) {
    copy_bytes_async(xp.data, xp.device, x.data, x.device, static_cast<size_t>(x.nbytes()),
                     stream);
  }
}

// x (T, cols) in the padded layout: x itself when nothing is padded (the layers only read it),
// else padded into `scratch`.
TensorView padded_input(const TensorView& x, const GroupLayout& layout,
                        detail::GrowingBuffer& scratch, Stream stream) {
  if (!layout.padded()) return x;
  const TensorView xp = scratch.zeroed_matrix(layout.padded_rows, x.shape[1], x.device, stream);
  pad_into(x, layout, xp, stream);
  return xp;
}

// (Tp, cols) padded → x (T, cols).
void from_padded(const TensorView& xp, const GroupLayout& layout, const TensorView& x,
                 Stream stream) {
  if (layout.padded()) return unpad_tokens(xp, layout.offsets, layout.padded_offsets, x, stream);
  if (x.numel() > 0) {
    copy_bytes_async(x.data, x.device, xp.data, xp.device, static_cast<size_t>(x.nbytes()),
                     stream);
  }
}

// A slot no context holds (a new one when every slot is held). Its old fc1 / fc2 contexts are
// dropped first, which frees their GroupedLinear slots for this step's forwards.
std::shared_ptr<detail::MlpSaved> acquire_context_slot(detail::MlpState& s) {
  std::shared_ptr<detail::MlpSaved> slot = detail::acquire_slot(s.saved_pool);
  slot->fc1 = GroupedLinearContext{};
  slot->fc2 = GroupedLinearContext{};
  if (slot->owner == nullptr) {
    slot->owner = &s;
    slot->h = s.activation.make_empty(s.options.device);
  }
  return slot;
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
  s_ = std::make_unique<detail::MlpState>(
      num_groups, hidden, ffn, options,
      GroupedLinear(num_groups, hidden, checked_mul(2, ffn, "GroupedMLP: 2 * ffn"), recipe,
                    options.bias, o1),
      GroupedLinear(num_groups, ffn, hidden, recipe, options.bias, o2),
      detail::make_producer(state, {detail::kGroupedMlpModule, TensorType::kOutput, o1.name}));
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
  std::shared_ptr<detail::MlpSaved> saved = mode.training ? acquire_context_slot(s) : nullptr;
  GroupLayout& layout = saved ? saved->layout : s.eval_layout;
  detail::make_group_layout_into(layout, splits, t, s.fc1.token_alignment(), s.options.device,
                                 nullptr, stream);  // the one scan of this step
  const int64_t tp = layout.padded_rows;
  const Device dev = x.device;
  const TensorView xp = padded_input(x, layout, s.tokens_in, stream);     // (Tp, hidden)
  const TensorView hp = s.gate_up.zeroed_matrix(tp, 2 * s.ffn, dev, stream);  // (Tp, 2·ffn)
  GroupedLinearContext fc1 = s.fc1.forward_padded(xp, layout, hp, mode, stream);
  TensorView pp;                                                          // (Tp, 1)
  if (probs.data) {
    detail::GrowingBuffer& store = saved ? saved->probs : s.probs_scratch;
    pp = store.zeroed_matrix(tp, 1, dev, stream);
    pad_into(column(probs), layout, pp, stream);
  }
  const TensorView ap = s.swiglu_out.zeroed_matrix(tp, s.ffn, dev, stream);      // (Tp, ffn)
  detail::swiglu_forward(hp, pp, layout, ap, stream);
  const TensorView yp = s.tokens_out.zeroed_matrix(tp, s.hidden, dev, stream);  // (Tp, hidden)
  GroupedLinearContext fc2 = s.fc2.forward_padded(ap, layout, yp, mode, stream);
  from_padded(yp, layout, y, stream);
  GroupedMLPContext ctx;
  if (!mode.training) return ctx;
  saved->fc1 = std::move(fc1);
  saved->fc2 = std::move(fc2);
  saved->h.reshape(tp, 2 * s.ffn, true, false, stream);
  s.activation.produce(hp, saved->h, stream);
  saved->has_probs = probs.data != nullptr;
  saved->probs_padded = pp;
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
  const bool has_probs = saved.has_probs || (tp == 0 && grads.dprobs.data);
  TESSERA_CHECK(!grads.dprobs.data || has_probs,
                "GroupedMLP backward: dprobs asked for but the forward had no probs");
  const Device dev = dy.device;
  const TensorView dyp = padded_input(dy, layout, s.tokens_in, stream);   // (Tp, hidden)
  const TensorView dap = s.swiglu_out.zeroed_matrix(tp, s.ffn, dev, stream);     // (Tp, ffn)
  s.fc2.backward_padded(saved.fc2, dyp, {dap, grads.fc2_dw, grads.fc2_db, grads.accumulate},
                        stream);
  const TensorView h = s.gate_up.zeroed_matrix(tp, 2 * s.ffn, dev, stream);  // (Tp, 2·ffn)
  if (tp > 0) saved.h.to_float(h, false, stream);
  const TensorView probs_padded =
      saved.has_probs ? TensorView::contiguous(saved.probs_padded.data, DType::kFloat32, {tp},
                                               saved.probs_padded.device)
                      : TensorView{};
  const TensorView dhp = s.gate_up_grad.zeroed_matrix(tp, 2 * s.ffn, dev, stream);  // (Tp, 2·ffn)
  const TensorView dpp = s.probs_scratch.zeroed_matrix(tp, 1, dev, stream);        // (Tp, 1)
  detail::swiglu_backward(h, probs_padded, dap, layout, dhp,
                          grads.dprobs.data && tp > 0 ? dpp : TensorView{}, stream);
  const TensorView dxp = s.tokens_out.zeroed_matrix(tp, s.hidden, dev, stream);    // (Tp, hidden)
  s.fc1.backward_padded(saved.fc1, dhp,
                        {grads.dx.data ? dxp : TensorView{}, grads.fc1_dw, grads.fc1_db,
                         grads.accumulate},
                        stream);
  if (grads.dx.data) from_padded(dxp, layout, grads.dx, stream);
  if (grads.dprobs.data) from_padded(dpp, layout, column(grads.dprobs), stream);
}

int64_t GroupedMLPContext::saved_bytes() const {
  if (!saved_) return 0;
  const int64_t probs_bytes = saved_->has_probs ? saved_->layout.padded_rows * 4 : 0;
  return saved_->fc1.saved_bytes() + saved_->fc2.saved_bytes() + saved_->h.bytes() + probs_bytes;
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
