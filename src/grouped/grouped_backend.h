// Internal entry points of the grouped layer that live in device code.
//
// grouped_quantize_cuda (grouped_quantize_cuda.cpp) chooses between the grouped CUDA kernels
// and member-by-member quantization; it calls down into quantize/quantize_backend.h. Without
// CUDA it throws kNoDevice.
#pragma once

#include <cstdint>
#include <span>

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/grouped/grouped_tensor.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::detail {

// Quantizes into the grouped storage `out` (on a CUDA device) on `stream`, without syncing.
// Arguments are already checked by grouped_quantize_list / grouped_quantize_contiguous:
//   - inputs.size() == out.num_tensors: member g's high-precision input is inputs[g]
//     (rows_g, cols_g) — host metadata of `out` is known;
//   - inputs.size() == 1: one contiguous (out.logical_rows, out.logical_cols) input of a
//     kAllSame / kVaryingFirst tensor; member g is rows [tensor_offsets[g] / K,
//     tensor_offsets[g+1] / K), read from the DEVICE metadata (out.tensor_offsets,
//     out.first_dims, out.scale_offsets, ...); rows past the last offset are neither read nor
//     written (capacity buffers).
// Every member must come out byte-identical to quantizer.quantize(input_g, member view g), with
// the usages out.config.rowwise / out.config.columnwise (the union of the quantizer's and those
// already present). `noop`: empty, or a float32 (1) device scalar; nonzero → write nothing
// (graph replays that skip a weight re-quantization).
void grouped_quantize_cuda(Quantizer& quantizer, std::span<const TensorView> inputs,
                           const GroupedTensorView& out, const TensorView& noop, Stream stream);

// first_dims[g] = splits[g] as int64 (g < N), and for each k < num_arange:
// arange_out[k][g] = g × arange_step[k] (g <= N). All on the device of `splits`; async.
// Implemented in src/grouped/cuda/grouped_metadata.cu (stand-in without CUDA).
void grouped_fill_metadata_cuda(const TensorView& splits, int64_t* first_dims,
                                std::span<int64_t* const> arange_out,
                                std::span<const int64_t> arange_step, Stream stream);

}  // namespace tessera::detail
