// Grouped CUDA quantization of one contiguous varying-first input (the MoE activation case)
// into grouped storage whose metadata lives on the device (internal; the grouped layer's
// grouped_quantize_cuda routes here). Asynchronous, no host sync, capturable in a CUDA graph.
#pragma once

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/grouped/grouped_tensor.h"
#include "tessera/quantize/types.h"

namespace tessera::detail {

// x: (out.logical_rows, K) contiguous float32/bfloat16/float16 on the device; member g is rows
// [tensor_offsets[g] / K, tensor_offsets[g+1] / K) and comes out byte-identical to quantizing it
// alone with `config` (usages config.rowwise / config.columnwise). Rows past the last offset are
// neither read nor written. `noop`: empty, or a float32 / int32 (1) device scalar; nonzero turns
// the launch into a no-op. Modes: kRowwise (rowwise usage), kMXFP8 / kMXFP8_32x32 (compact
// scales); others throw kUnsupported.
void grouped_quantize_contiguous_cuda(const QuantizerConfig& config, const TensorView& x,
                                      const GroupedTensorView& out, const TensorView& noop,
                                      Stream stream);

}  // namespace tessera::detail
