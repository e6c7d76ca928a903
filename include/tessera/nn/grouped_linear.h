// GroupedLinear: y_g = x_g W_gᵀ (+ b_g) for every group g of a grouped activation, with explicit
// forward / backward and a saved context (docs/nn.md). A thin holder of weights and state over
// the one training step (linear_step.h): the C++, C and CLI front ends.
//
// Parameters: FP32 master weights (G, out, in) in one contiguous buffer and an optional FP32 bias
// (G, out). The quantized (or cast) weight copies are re-made by a forward that asks for it
// (ForwardMode::requantize_weights, the default) and kept otherwise (later micro-batches): both
// usages always together, so no usage can be stale after an eval step. A context keeps the
// copies its forward used alive, so re-quantizing never changes what an earlier context's
// backward reads.
//
// Quantizers come from the recipe through roles {grouped_linear, kInput|kWeight|kGradOutput,
// name}; delayed-scaling state lives in a RecipeState (one per layer, or shared through the
// options): a scale and amax history per role and expert (RecipeState::member_state).
//
// Activations: x, y, dy, dx float32, bfloat16 or float16 (y and dx take the caller's dtype).
// Rows in no group (a capacity tail past the last split) get y = 0, dx = 0 and add to no
// gradient.
//
// Memory and streams (docs/nn.md): every byte a step needs comes from the layer's pool
// (PoolAllocator; on the CPU the GEMMs' workspace from a block kept per thread): after the first step of a shape, a forward + backward allocates nothing and
// enqueues all its device work on `stream`. Calls of one layer on different streams must be
// ordered by the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/nn/group_layout.h"
#include "tessera/quantize/recipe.h"

namespace tessera::nn {

namespace detail {
struct LinearParams;
struct LinearContextState;
}  // namespace detail

struct GroupedLinearOptions {
  std::string name = "grouped_linear";  // role name ("fc1", "fc2", ...)
  bool save_original_input = false;     // keep x in high precision for backward
  Device device = Device::cpu();
  // Quantizers (and delayed-scaling state) shared with other layers; null = the layer makes its
  // own RecipeState from the recipe. When given, its recipe is the one used.
  std::shared_ptr<RecipeState> recipe_state;
};

struct ForwardMode {
  bool training = true;            // save a context for backward
  bool requantize_weights = true;  // false: reuse the last quantized weights (micro-batches)
};

// Gradients backward writes. An empty view (data == nullptr) skips that gradient.
struct GroupedLinearGrads {
  TensorView dx;               // (T, in), float32 / bfloat16 / float16
  TensorView dw;               // FP32 (G, out, in)
  TensorView db;               // FP32 (G, out)
  bool accumulate = false;  // dw += dW, db += db (main-grad accumulation: the GEMM's beta = 1)
};

// Which saved operand a test asks for (see GroupedLinearContext::operand_value).
enum class SavedOperand : int { kInput = 0, kWeight = 1, kGradOutput = 2 };

// What a training forward keeps for backward. Invariant: valid() iff produced by a training
// forward; backward consumes nothing, so it may be called again (e.g. with another dy).
class GroupedLinearContext {
 public:
  bool valid() const { return saved_ != nullptr; }
  // Bytes this context keeps for backward: the saved activation operand (or x), the layout and
  // the usage of the weight copies that dgrad reads.
  int64_t saved_bytes() const;
  // The group layout of the forward: start offsets, and the padded starts of the wgrad's
  // layout (quantized recipes: every group padded to the recipe's wgrad alignment; else the
  // same as offsets).
  const GroupLayout& layout() const;
  // float32 value (rows, cols) of an operand as the GEMM saw it (dequantized): kInput columnwise
  // (padded rows of layout(), in), kWeight rowwise/columnwise (G*out, in), kGradOutput rowwise
  // (T, out) / columnwise (padded rows, out) after a backward. For tests and the demo.
  std::vector<float> operand_value(SavedOperand which, bool columnwise) const;
  std::shared_ptr<detail::LinearContextState> saved_;
};

class GroupedLinear {
 public:
  GroupedLinear(int64_t num_groups, int64_t in_features, int64_t out_features,
                const Recipe& recipe, bool bias, GroupedLinearOptions options = {});
  ~GroupedLinear();
  GroupedLinear(GroupedLinear&&) noexcept;
  GroupedLinear& operator=(GroupedLinear&&) noexcept;

  int64_t num_groups() const;
  int64_t in_features() const;
  int64_t out_features() const;
  // The recipe's token alignment (what MoE dispatch pads each expert's rows to; the layer itself
  // takes any group sizes and pads nothing).
  int64_t token_alignment() const;
  const std::string& name() const;
  Device device() const;

  TensorView weight() const;  // FP32 (G, out, in) master weights (write them freely)
  TensorView bias() const;    // FP32 (G, out); empty view without bias
  // Deterministic init: U(-1/sqrt(in), 1/sqrt(in)) for weights and bias.
  void reset_parameters(uint64_t seed);

  // x (T, in), splits (G) int32/int64 (host or device), y (T, out) (written).
  GroupedLinearContext forward(const TensorView& x, const TensorView& splits, const TensorView& y,
                               ForwardMode mode = {}, Stream stream = {});
  // dy (T, out).
  void backward(const GroupedLinearContext& ctx, const TensorView& dy,
                const GroupedLinearGrads& grads, Stream stream = {});

  // The layer's state (parameters, recipe state, weight copies, pool): GroupedMLP runs its step
  // on the states of its two layers.
  detail::LinearParams& state_internal() { return *p_; }

 private:
  std::unique_ptr<detail::LinearParams> p_;
};

}  // namespace tessera::nn
