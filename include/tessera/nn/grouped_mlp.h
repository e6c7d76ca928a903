// GroupedMLP: the expert computation of an MoE layer, per group g (expert) of routed tokens:
//   h = x W1_gᵀ (+ b1_g)          fc1: hidden → 2·ffn, h = [gate | up]
//   a = silu(gate) ⊙ up ⊙ p       SwiGLU, optionally scaled by the per-token routing probability p
//   y = a W2_gᵀ (+ b2_g)          fc2: ffn → hidden
// with explicit forward / backward (docs/nn.md). The per-group metadata (unpadded and padded
// offsets) comes from ONE splits_to_offsets_multi call and is kept in the context; fc1, SwiGLU and
// fc2 all run on the padded layout (tokens padded once on entry, padding removed once on exit).
//
// Saved for backward: fc1's and fc2's quantized operands (see grouped_linear.h) and the SwiGLU
// input h (fc1's output), stored through the role {grouped_mlp, kOutput, "<name>.fc1"} —
// quantized rowwise in low-precision recipes, as DeepSeek-V3 caches SwiGLU inputs in FP8 — plus
// p. One RecipeState serves fc1, fc2 and that role.
// Memory and streams as in grouped_linear.h: after the first step of a shape nothing is
// allocated and every device operation is ordered on `stream`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/nn/grouped_linear.h"

namespace tessera::nn {

namespace detail {
struct MlpSaved;
struct MlpState;
}  // namespace detail

struct GroupedMLPOptions {
  std::string name = "mlp";   // fc1 / fc2 roles are named "<name>.fc1" / "<name>.fc2"
  bool bias = false;
  bool save_original_input = false;
  Device device = Device::cpu();
};

// Gradients GroupedMLP::backward writes; an empty view skips that gradient.
struct GroupedMLPGrads {
  TensorView dx;      // (T, hidden) float32
  TensorView dprobs;  // (T) float32 (needs probs in forward)
  TensorView fc1_dw, fc1_db;  // FP32 (G, 2·ffn, hidden), (G, 2·ffn)
  TensorView fc2_dw, fc2_db;  // FP32 (G, hidden, ffn), (G, hidden)
  bool accumulate = false;    // weight/bias grads accumulate (main grad, beta = 1)
};

class GroupedMLPContext {
 public:
  bool valid() const { return saved_ != nullptr; }
  // Bytes kept alive for backward: both layers' contexts, the saved SwiGLU input and p.
  int64_t saved_bytes() const;
  const GroupLayout& layout() const;
  const GroupedLinearContext& fc1() const;
  const GroupedLinearContext& fc2() const;
  std::shared_ptr<detail::MlpSaved> saved_;
};

class GroupedMLP {
 public:
  GroupedMLP(int64_t num_groups, int64_t hidden, int64_t ffn, const Recipe& recipe,
             GroupedMLPOptions options = {});
  ~GroupedMLP();
  GroupedMLP(GroupedMLP&&) noexcept;
  GroupedMLP& operator=(GroupedMLP&&) noexcept;

  GroupedLinear& fc1();
  GroupedLinear& fc2();
  int64_t num_groups() const;
  int64_t hidden() const;
  int64_t ffn() const;
  void reset_parameters(uint64_t seed);

  // x (T, hidden) float32, splits (G) int32/int64, probs (T) float32 or empty, y (T, hidden).
  GroupedMLPContext forward(const TensorView& x, const TensorView& splits,
                            const TensorView& probs, const TensorView& y, ForwardMode mode = {},
                            Stream stream = {});
  // dy (T, hidden) float32.
  void backward(const GroupedMLPContext& ctx, const TensorView& dy, const GroupedMLPGrads& grads,
                Stream stream = {});

 private:
  std::unique_ptr<detail::MlpState> s_;
};

}  // namespace tessera::nn
