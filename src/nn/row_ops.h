// Row-wise operations of the training step on grouped activations (any float dtype in and out,
// FP32 arithmetic): per-group bias gradient, SwiGLU forward / backward with optional per-token
// routing probabilities, and dtype casts. Dispatched on the device of the tensors (CPU here,
// CUDA in row_ops.cu). Rows in no group (group_rows.h) are written as zero and read by nothing.
#pragma once

#include "nn/group_rows.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/gemm/grouped_gemm.h"

namespace tessera::nn::detail {

// The row ops' view of caller offsets (int32/int64, either format) for a buffer of `rows` rows.
GroupOffsets group_offsets_of(const TensorView& offsets, GroupOffsetsFormat format,
                              int64_t groups, int64_t rows);

// db (G, N) (+)= Σ over group g's rows of dy (T, N). db float32 when accumulating, else any
// float dtype (summed in FP32/FP64, rounded once).
void grouped_row_sum(const TensorView& dy, const GroupOffsets& groups, const TensorView& db,
                     bool accumulate, Stream stream = {});

// h (T, 2F) = [gate | up] → a (T, F) = silu(gate) * up * p (p = probs[r], or 1 when probs is
// empty; probs float32/bfloat16/float16 (T)).
void swiglu_forward(const TensorView& h, const TensorView& probs, const GroupOffsets& groups,
                    const TensorView& a, Stream stream = {});

// Gradients of swiglu_forward: dh (T, 2F) and, when given, dprobs (T) (float32 or probs'
// dtype).
void swiglu_backward(const TensorView& h, const TensorView& probs, const TensorView& da,
                     const GroupOffsets& groups, const TensorView& dh, const TensorView& dprobs,
                     Stream stream = {});

// dst = src element by element (float32 / bfloat16 / float16 both ways; same numel).
void cast(const TensorView& src, const TensorView& dst, Stream stream = {});

namespace cuda {
void grouped_row_sum(const TensorView& dy, const GroupOffsets& groups, const TensorView& db,
                     bool accumulate, Stream stream);
void swiglu_forward(const TensorView& h, const TensorView& probs, const GroupOffsets& groups,
                    const TensorView& a, Stream stream);
void swiglu_backward(const TensorView& h, const TensorView& probs, const TensorView& da,
                     const GroupOffsets& groups, const TensorView& dh, const TensorView& dprobs,
                     Stream stream);
}  // namespace cuda

}  // namespace tessera::nn::detail
