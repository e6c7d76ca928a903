// Row-wise operations of the nn layers on grouped activations in the padded layout of a
// GroupLayout: per-group bias gradient, SwiGLU forward/backward with optional per-token routing
// probabilities. Dispatched on the device of the tensors (CPU here, CUDA in row_ops.cu).
// Live rows of group g: [padded_offsets[g], padded_offsets[g] + (offsets[g+1] - offsets[g]));
// every other row below padded_rows is padding and is written as zero.
#pragma once

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/nn/group_layout.h"

namespace tessera::nn::detail {

// db (G, N) (+)= Σ over group g's rows of dy (Tp, N); float32; groups by layout.padded_offsets.
void grouped_row_sum(const TensorView& dy, const GroupLayout& layout, const TensorView& db,
                     bool accumulate, Stream stream = {});

// h (Tp, 2F) = [gate | up] float32 → a (Tp, F) = silu(gate) * up * p (p = probs[r], or 1 when
// probs is empty). probs: float32 (Tp) or empty.
void swiglu_forward(const TensorView& h, const TensorView& probs, const GroupLayout& layout,
                    const TensorView& a, Stream stream = {});

// Gradients of swiglu_forward: dh (Tp, 2F) and, when probs is given, dprobs (Tp).
void swiglu_backward(const TensorView& h, const TensorView& probs, const TensorView& da,
                     const GroupLayout& layout, const TensorView& dh, const TensorView& dprobs,
                     Stream stream = {});

namespace cuda {
void grouped_row_sum(const TensorView& dy, const GroupLayout& layout, const TensorView& db,
                     bool accumulate, Stream stream);
void swiglu_forward(const TensorView& h, const TensorView& probs, const GroupLayout& layout,
                    const TensorView& a, Stream stream);
void swiglu_backward(const TensorView& h, const TensorView& probs, const TensorView& da,
                     const GroupLayout& layout, const TensorView& dh, const TensorView& dprobs,
                     Stream stream);
}  // namespace cuda

}  // namespace tessera::nn::detail
