// The quantized weight copies of a linear step in one Allocation (linear_step.h WeightCopies):
// the rowwise copy of the (G·out, in) matrix, then its columnwise copy — kept as the rowwise
// layout of Wᵀ per group, (G·in, out), where the dgrad then reads W as a TN GEMM and transposes
// nothing per call:
// * MXFP8 with out % 32 == 0: the columnwise copy's bytes moved there, (G·in, out) codes and
//   (G·in, out/32) E8M0 scales;
// * the rowwise family (fp8_rowwise): row (g, k) of Wᵀ is column k of expert g's W_g, quantized
//   with one FP32 scale of its own (G·in scales; member_scaling.h) — every expert's columns are
//   scaled on their own, so one expert's weights never change another's dgrad (a whole-matrix
//   columnwise copy would share one scale per column across all experts).
// Other modes keep the columnwise copy of the (G·out, in) matrix; per-tensor current scaling
// scales each expert's W_g on its own (G scales, both copies; member_scaling.h).
#pragma once

#include "tessera/nn/linear_step.h"

namespace tessera::nn::detail {

// Whether the columnwise copy is kept as Wᵀ per group.
bool weight_columnwise_is_wt(const LinearSpec& s);
// Whether the copies include the BF16 image of the rowwise copy (WeightCopies::expanded; and of
// Wᵀ's, expanded_wt, for MXFP8 in the Wᵀ form): NVFP4 weights with in % 8 == 0, MXFP8 ones too
// while detail::mxfp8_weight_images() holds (read when the spec's layout is measured).
bool weight_has_image(const LinearSpec& s);
int64_t weight_layout_bytes(const LinearSpec& s);
// Points c.q (and c.wt) into `storage`.
void place_weight_layout(const LinearSpec& s, const Allocation& storage, Device device,
                         WeightCopies& c);
// Quantizes w (G, out, in) into c's views (both usages in one pass; through scratch and a
// per-group byte transpose for the Wᵀ form).
void quantize_weight_layout(const LinearSpec& s, const TensorView& w, const LinearState& state,
                            Allocator& alloc, WeightCopies& c, Stream stream);

// out[b] (cols, rows) = in[b] (rows, cols)ᵀ for b < batch, bytes, any sizes (CPU or CUDA).
void transpose_bytes(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
                     Device device, Stream stream);
namespace cuda {
void transpose_bytes(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
                     Stream stream);
// out (q.rows, q.cols) BF16 = the rowwise copy's values × block scales, exact (NVFP4: E2M1 ×
// E4M3, without 1/S_enc; MXFP8: FP8 × E8M0).
void expand_rowwise(const QuantizedTensorView& q, const TensorView& out, Stream stream);
}  // namespace cuda

}  // namespace tessera::nn::detail
