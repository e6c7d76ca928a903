// Internal state of GroupedLinear (parameters, producers, the persistent weight operand, the
// storage its steps reuse) and of its context (the saved operands), shared by grouped_linear.cpp
// and grouped_mlp.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/operand.h"
#include "nn/step_storage.h"
#include "tessera/core/buffer.h"
#include "tessera/nn/grouped_linear.h"

namespace tessera::nn::detail {

struct LinearParams;

// One context slot: what a training forward saves, in buffers reused by the next forward that
// finds the slot free (no context holds it). Invariants: input holds x's columnwise copy (or,
// with input_is_original, a float32 copy of x) for layout.padded_rows rows; weight is the
// layer's weight operand at version weight_version; layout's offsets live in this slot's own
// storage (never shared with another slot or the caller).
struct LinearSaved {
  const LinearParams* owner = nullptr;
  GroupLayout layout;
  OperandStorage input;                 // (Tp, in)
  bool input_is_original = false;
  std::shared_ptr<OperandStorage> weight;  // (G*out, in), columnwise read by dgrad
  uint64_t weight_version = 0;
  OperandStorage grad_output;           // (Tp, out), set by backward (kept for inspection)
};

// Invariants: weight holds G*out*in FP32, bias G*out FP32 (or is empty); weight_operand is the
// one (G*out, in) operand every forward quantizes into (its usages only ever grow);
// weight_version counts those quantizations. The step storage below only grows (step_storage.h);
// every slot in saved_pool has owner == this.
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

  // Reused by every call (scratch: dead when the call's work on its stream is done).
  OperandStorage input_rowwise;    // (Tp, in) the copy of x fprop reads, when not in the slot
  OperandStorage input_for_wgrad;  // (Tp, in) save_original_input: x's columnwise copy (backward)
  GrowingBuffer padded_in;         // (Tp, in) float32: x padded (forward), dx padded (backward)
  GrowingBuffer padded_out;        // (Tp, out) float32: y padded (forward), dy padded (backward)
  GrowingBuffer gemm_workspace;    // fprop, dgrad and wgrad in turn
  GroupLayout eval_layout;         // forward() without a context: the layout of that call
  std::vector<std::shared_ptr<LinearSaved>> saved_pool;  // context slots
};

}  // namespace tessera::nn::detail
