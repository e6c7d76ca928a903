// The training step of the grouped MLP (the expert computation of an MoE layer), written once
// over the linear step (linear_step.h): per group g (expert) of token rows
//   h = x W1_gᵀ (+ b1_g)          fc1: hidden → 2·ffn, h = [gate | up]
//   a = silu(gate) ⊙ up ⊙ p       SwiGLU, optionally × the per-token routing probability p
//   y = a W2_gᵀ (+ b2_g)          fc2: ffn → hidden
// and its backward. Activations (h, a, y, dx) are in x's dtype; the saved SwiGLU input h is kept
// in that dtype (exact for the SwiGLU backward). Same conventions as linear_step.h: caller's
// offsets, rows in no group give y = 0, dx = 0, dprobs = 0 and add to no gradient, T = 0 is a
// valid step, every byte from the caller's Allocator (bar the CPU GEMMs' workspace), nothing
// synchronizes.
#pragma once

#include <optional>
#include <string>

#include "tessera/nn/linear_step.h"

namespace tessera::nn {

struct MlpSpec {
  LinearSpec fc1, fc2;  // fc1 (G, 2·ffn, hidden), fc2 (G, hidden, ffn)
  int64_t groups() const { return fc1.groups; }
  int64_t hidden() const { return fc1.in; }
  int64_t ffn() const { return fc2.in; }
};

// The specs of fc1 and fc2, whose roles are named `prefix` + "fc1" / "fc2": one recipe for both,
// or one per layer (a framework's custom recipe resolved per layer name).
MlpSpec make_mlp_spec(const Recipe& recipe, const std::string& prefix, int64_t groups,
                      int64_t hidden, int64_t ffn, bool bias,
                      std::optional<DType> dense_dtype = std::nullopt);
MlpSpec make_mlp_spec(const Recipe& fc1_recipe, const Recipe& fc2_recipe,
                      const std::string& prefix, int64_t groups, int64_t hidden, int64_t ffn,
                      bool bias, std::optional<DType> dense_dtype = std::nullopt);

struct MlpWeights {
  WeightCopies fc1, fc2;
};
struct MlpState {
  LinearState fc1, fc2;
};

// What a training forward keeps: fc1's and fc2's saved contexts, the SwiGLU input h (T, 2·ffn)
// and, for a dense recipe, fc2's input a (T, ffn) (its weight gradient reads it). Each is one
// Allocation the caller keeps; mlp_saved_sizes gives their sizes (per_row · T + fixed).
struct MlpSaved {
  int64_t rows = 0;
  LinearSaved fc1, fc2;
  Allocation h, a;
  TensorView h_view, a_view;  // (T, 2·ffn), (T, ffn) in the activation dtype
};
struct MlpSavedSizes {
  SavedSize fc1, h, fc2, a;
};
MlpSavedSizes mlp_saved_sizes(const MlpSpec& spec, DType activation, bool need_wgrad);
// The MlpSaved over the caller's four Allocations (sizes as mlp_saved_sizes says at `rows`).
MlpSaved view_mlp_saved(const MlpSpec& spec, int64_t rows, DType activation, bool need_wgrad,
                        const Allocation& fc1, const Allocation& h, const Allocation& fc2,
                        const Allocation& a);

struct MlpForwardArgs {
  TensorView x;         // (T, hidden) float32 / bfloat16 / float16
  TensorView offsets;   // group offsets (linear_step.h)
  GroupOffsetsFormat offsets_format = GroupOffsetsFormat::kEndOffsets;
  TensorView probs;     // (T) or empty
  TensorView fc1_bias, fc2_bias;  // (G, 2·ffn), (G, hidden) or empty
  TensorView y;         // (T, hidden) like x
  bool need_wgrad = false;  // a backward will compute weight gradients (save the copies)
  // x given instead as its rowwise quantized copy (leave x empty): fc1's
  // LinearForwardArgs::x_rowwise; the activations (h, a, y) are then in y's dtype.
  QuantizedTensorView x_rowwise;
};

MlpSaved mlp_forward(const MlpSpec& spec, const MlpWeights& weights, const MlpForwardArgs& args,
                     const MlpState& state, Allocator& alloc, Stream stream = {});

struct MlpBackwardArgs {
  TensorView dy;        // (T, hidden)
  TensorView offsets;
  GroupOffsetsFormat offsets_format = GroupOffsetsFormat::kEndOffsets;
  TensorView x;         // the forward's x (dense recipes read it for fc1's weight gradient)
  TensorView probs;     // the forward's probs, or empty
  TensorView dx;        // (T, hidden) or empty
  TensorView dprobs;    // (T) or empty (needs probs)
  TensorView fc1_dw, fc1_db, fc2_dw, fc2_db;  // or empty
  bool accumulate = false;       // weight gradients accumulate (main grad)
  bool accumulate_bias = false;  // bias gradients accumulate
  // dy given instead as its rowwise quantized copy (leave dy empty): fc2's
  // LinearBackwardArgs::dy_rowwise; dx is then in y's dtype as saved (the activations' dtype).
  QuantizedTensorView dy_rowwise;
};

void mlp_backward(const MlpSpec& spec, const MlpWeights& weights, const MlpSaved& saved,
                  const MlpBackwardArgs& args, const MlpState& state, Allocator& alloc,
                  Stream stream = {});

}  // namespace tessera::nn
