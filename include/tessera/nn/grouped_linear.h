// GroupedLinear: y_g = x_g W_gᵀ (+ b_g) for every group g of a grouped activation, with explicit
// forward / backward and a saved context (docs/nn.md).
//
// Parameters: FP32 master weights (G, out, in) in one contiguous buffer and an optional FP32 bias
// (G, out). Every step the weights are quantized IN PLACE into one persistent (G*out, in) operand
// with the recipe's weight quantizer; a usage the operand once had is never dropped, so an eval
// step (rowwise only needed) followed by a train step can never read a stale columnwise copy.
//
// Quantizers come from the recipe through roles {grouped_linear, kInput|kWeight|kGradOutput,
// name}, held by a RecipeState (one per layer, or shared through the options).
// Where the recipe needs it (token_alignment() > 1) every group is padded with zero rows to the
// alignment before quantization and the padding removed afterwards (token_padding.h).
//
// Context: a training forward saves what backward reads, QUANTIZED: x's columnwise copy (wgrad)
// and the weight operand's columnwise copy (dgrad) — not the high-precision x, unless
// options.save_original_input (then x is kept in high precision and quantized in backward).
// The context references the layer's weight operand: a forward that re-quantizes the weights
// (ForwardMode::requantize_weights) before this context's backward makes that backward fail with
// a clear error (pass requantize_weights = false for later micro-batches of the same step).
//
// Devices: every operation goes through device-dispatching APIs (quantize, grouped GEMM, token
// padding, the nn row ops), so the layer runs wherever its tensors live.
//
// Memory and streams (docs/nn.md): after the first step of a shape, a forward + backward
// allocates no memory for data and enqueues all its device work on `stream`. The layer keeps
// scratch (padded activations, GEMM workspace) that the next call reuses, and a pool of context
// slots: a forward takes a slot no context holds, and a context keeps its slot until destroyed.
// Buffers grow when a shape needs more bytes and never shrink. Reuse is ordered by the stream:
// calls of one layer on different streams must be ordered by the caller.
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
struct LinearSaved;
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
  bool requantize_weights = true;  // false: reuse this step's quantized weights (micro-batches)
};

// Gradients backward writes. An empty view (data == nullptr) skips that gradient.
struct GroupedLinearGrads {
  TensorView dx;               // (T, in) like x (padded API: (Tp, in)), float32
  TensorView dw;               // FP32 (G, out, in)
  TensorView db;               // FP32 (G, out)
  bool accumulate = false;  // dw += dW, db += db (main-grad accumulation: the GEMM's beta = 1)
};

// Which saved operand a test asks for (see GroupedLinearContext::operand_value).
enum class SavedOperand : int { kInput = 0, kWeight = 1, kGradOutput = 2 };

// What a training forward keeps for backward (a slot of the layer's storage, reused by a later
// forward only once no context holds it). Invariant: valid() iff produced by a training forward;
// backward consumes nothing, so it may be called again (e.g. with another dy).
class GroupedLinearContext {
 public:
  bool valid() const { return saved_ != nullptr; }
  // Bytes this context keeps for backward at its shape: the saved activation operand(s) and the
  // usage of the weight operand that dgrad reads (its slot's buffers may be larger).
  int64_t saved_bytes() const;
  const GroupLayout& layout() const;
  // float32 value (rows, cols) of an operand the last forward/backward used, as the GEMM saw it
  // (dequantized): kInput columnwise (T_padded, in), kWeight columnwise (G*out, in), kGradOutput
  // rowwise/columnwise (T_padded, out; after a backward). For tests and the demo.
  std::vector<float> operand_value(SavedOperand which, bool columnwise) const;
  std::shared_ptr<detail::LinearSaved> saved_;
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
  int64_t token_alignment() const;  // the recipe's; 1 = no padding
  const std::string& name() const;
  Device device() const;

  TensorView weight() const;  // FP32 (G, out, in) master weights (write them freely)
  TensorView bias() const;    // FP32 (G, out); empty view without bias
  // Deterministic init: U(-1/sqrt(in), 1/sqrt(in)) for weights and bias.
  void reset_parameters(uint64_t seed);

  // x (T, in) float32, splits (G) int32/int64 (host or device), y (T, out) float32 (written).
  GroupedLinearContext forward(const TensorView& x, const TensorView& splits, const TensorView& y,
                               ForwardMode mode = {}, Stream stream = {});
  // dy (T, out) float32.
  void backward(const GroupedLinearContext& ctx, const TensorView& dy,
                const GroupedLinearGrads& grads, Stream stream = {});

  // Padded forms for composite layers: x (layout.padded_rows, in) already grouped by
  // layout.padded_offsets with zero padding rows; y and dy (layout.padded_rows, out).
  GroupedLinearContext forward_padded(const TensorView& x, const GroupLayout& layout,
                                      const TensorView& y, ForwardMode mode = {},
                                      Stream stream = {});
  void backward_padded(const GroupedLinearContext& ctx, const TensorView& dy,
                       const GroupedLinearGrads& grads, Stream stream = {});

 private:
  std::unique_ptr<detail::LinearParams> p_;
};

}  // namespace tessera::nn
