// GroupedMLP: the expert computation of an MoE layer, per group g (expert) of routed tokens:
//   h = x W1_gᵀ (+ b1_g)          fc1: hidden → 2·ffn, h = [gate | up]
//   a = silu(gate) ⊙ up ⊙ p       SwiGLU, optionally scaled by the per-token routing probability p
//   y = a W2_gᵀ (+ b2_g)          fc2: ffn → hidden
// with explicit forward / backward (docs/nn.md): a thin holder of two GroupedLinear layers' weights
// and state over the one MLP training step (mlp_step.h). The per-group offsets come from ONE scan
// of the splits and are kept in the context; the saved SwiGLU input h is kept in the activation
// dtype. One RecipeState serves fc1 and fc2 (roles "<name>.fc1" / "<name>.fc2").
// Memory and streams as in grouped_linear.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/nn/grouped_linear.h"

namespace tessera::nn {

namespace detail {
struct MlpContextState;
struct MlpHolder;
}  // namespace detail

struct GroupedMLPOptions {
  std::string name = "mlp";   // fc1 / fc2 roles are named "<name>.fc1" / "<name>.fc2"
  bool bias = false;
  bool save_original_input = false;
  Device device = Device::cpu();
};

// Gradients GroupedMLP::backward writes; an empty view skips that gradient.
struct GroupedMLPGrads {
  TensorView dx;      // (T, hidden), float32 / bfloat16 / float16
  TensorView dprobs;  // (T) float32 (needs probs in forward)
  TensorView fc1_dw, fc1_db;  // FP32 (G, 2·ffn, hidden), (G, 2·ffn)
  TensorView fc2_dw, fc2_db;  // FP32 (G, hidden, ffn), (G, hidden)
  bool accumulate = false;    // weight/bias grads accumulate (main grad, beta = 1)
};

class GroupedMLPContext {
 public:
  bool valid() const { return saved_ != nullptr; }
  // Bytes kept alive for backward: both layers' saved operands, the SwiGLU input h, p, x when
  // kept, the layout.
  int64_t saved_bytes() const;
  const GroupLayout& layout() const;
  std::shared_ptr<detail::MlpContextState> saved_;
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

  // x (T, hidden) float32 / bfloat16 / float16, splits (G) int32/int64, probs (T) float32 or
  // empty, y (T, hidden) like x.
  GroupedMLPContext forward(const TensorView& x, const TensorView& splits,
                            const TensorView& probs, const TensorView& y, ForwardMode mode = {},
                            Stream stream = {});
  // dy (T, hidden) like x.
  void backward(const GroupedMLPContext& ctx, const TensorView& dy, const GroupedMLPGrads& grads,
                Stream stream = {});

 private:
  std::unique_ptr<detail::MlpHolder> s_;
};

}  // namespace tessera::nn
