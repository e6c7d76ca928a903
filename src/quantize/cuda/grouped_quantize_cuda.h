// Grouped CUDA quantization of one contiguous varying-first / all-same input (the MoE
// activation case) into grouped storage whose metadata lives on the device (internal; the
// grouped layer's grouped_quantize_cuda routes here). Asynchronous, no host sync, capturable in
// a CUDA graph.
#pragma once

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/grouped/grouped_tensor.h"
#include "tessera/quantize/types.h"

namespace tessera::detail {

// Delayed scaling (config.delayed): the quantizer's device state. `scale` (1 FP32) is applied
// to every member; slot 0 of `amax_history` receives the LAST member's amax, as quantizing the
// members one after the other with the same Quantizer leaves it (each quantize sets slot 0).
struct GroupedDelayedState {
  const float* scale = nullptr;
  float* amax_history = nullptr;
};

// x: (out.logical_rows, K) contiguous float32/bfloat16/float16 on the device; member g is rows
// [tensor_offsets[g] / K, tensor_offsets[g+1] / K) and comes out byte-identical to quantizing it
// alone with `config` (usages config.rowwise / config.columnwise): data, scales (padding
// included), per-member amax. Rows past the last offset, scale entries past a member's scale
// matrix and past the last member are neither read nor written. `noop`: empty, or a float32 /
// int32 (1) device scalar; nonzero turns every launch into a no-op.
// Modes: every FP8 recipe (per-tensor current and delayed, rowwise, block 1x128 / 128x128, both
// usages), MXFP8 / MXFP8 32x32 with compact scales, NVFP4 / NVFP4 16x16 (compact or swizzled,
// RHT, stochastic rounding). Refused (kUnsupported): MXFP8 swizzled, K = 0 (except MXFP8).
// Outside the storage contract (not detected on the device): NVFP4 columnwise members with an
// odd row count are skipped; with the Hadamard transform member rows must be multiples of 16.
void grouped_quantize_contiguous_cuda(const QuantizerConfig& config, const TensorView& x,
                                      const GroupedTensorView& out, const TensorView& noop,
                                      Stream stream, const GroupedDelayedState& delayed = {});

}  // namespace tessera::detail
