// Internal state of GroupedLinear (parameters, producers, the persistent weight operand) and of
// its context (the saved operands), shared by grouped_linear.cpp and grouped_mlp.cpp.
#pragma once

#include <cstdint>
#include <memory>

#include "nn/operand.h"
#include "tessera/core/buffer.h"
#include "tessera/nn/grouped_linear.h"

namespace tessera::nn::detail {

// Invariants: weight holds G*out*in FP32, bias G*out FP32 (or is empty); weight_operand is the
// one (G*out, in) operand every forward quantizes into (its usages only ever grow);
// weight_version counts those quantizations.
struct LinearParams {
  int64_t groups = 0, in = 0, out = 0;
  bool has_bias = false;
  GroupedLinearOptions options;
  int64_t align = 1;
  Buffer weight;  // FP32 (G, out, in)
  Buffer bias;    // FP32 (G, out)
  OperandProducer input, weight_producer, grad_output;
  std::shared_ptr<OperandStorage> weight_operand;
  uint64_t weight_version = 0;
};

// Invariants: input holds x's columnwise copy (or, with input_is_original, a float32 copy of x)
// for layout.padded_rows rows; weight is the layer's weight operand at version weight_version.
struct LinearSaved {
  const LinearParams* owner = nullptr;
  GroupLayout layout;
  OperandStorage input;                 // (Tp, in)
  bool input_is_original = false;
  std::shared_ptr<OperandStorage> weight;  // (G*out, in), columnwise read by dgrad
  uint64_t weight_version = 0;
  OperandStorage grad_output;           // (Tp, out), set by backward (kept for inspection)
};

}  // namespace tessera::nn::detail
