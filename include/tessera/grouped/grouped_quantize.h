// Grouped quantize and dequantize (docs/grouped.md): many members into / out of one GroupedTensor.
//
// Every member comes out byte-identical to quantizing it alone with the same Quantizer
// (`quantizer.quantize(input_g, member view g)`): same data, scales, padding and amax. Usages:
// the quantizer's config().rowwise/columnwise PLUS every usage the output already has (a
// re-quantized weight never drops a usage). The GroupedTensor& overloads first add missing
// buffers (ensure_usage); the view overloads require them.
//
// noop: empty, or a float32 (1) scalar on the output's device. Nonzero → nothing is written
// (inside a captured CUDA graph the kernel reads it; on the CPU it is read directly).
//
// Backends: CPU loops over members calling the Quantizer on member views (needs host metadata,
// which a CPU tensor always has). CUDA routes to the grouped quantize kernels
// (detail::grouped_quantize_cuda); the contiguous form reads the member offsets on the device,
// so it works for tensors made from device split sizes and never syncs.
#pragma once

#include <span>

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/grouped/grouped_tensor.h"
#include "tessera/quantize/quantizer.h"

namespace tessera {

// inputs[g]: (rows_g, cols_g) float32/bfloat16/float16 for each member g, on out's device.
// A weight update: the same grouped storage is rewritten every step.
void grouped_quantize_list(Quantizer& quantizer, std::span<const TensorView> inputs,
                           const GroupedTensorView& out, const TensorView& noop = {},
                           Stream stream = {});
void grouped_quantize_list(Quantizer& quantizer, std::span<const TensorView> inputs,
                           GroupedTensor& out, const TensorView& noop = {}, Stream stream = {});

// x: one contiguous (out.logical_rows, out.logical_cols) activation of a kAllSame or
// kVaryingFirst tensor; member g is its rows [tensor_offsets[g], tensor_offsets[g+1]) / K.
// Rows past the last offset (capacity) are neither read nor written.
void grouped_quantize_contiguous(Quantizer& quantizer, const TensorView& x,
                                 const GroupedTensorView& out, const TensorView& noop = {},
                                 Stream stream = {});
void grouped_quantize_contiguous(Quantizer& quantizer, const TensorView& x, GroupedTensor& out,
                                 const TensorView& noop = {}, Stream stream = {});

// Member-wise dequantize of one usage into float32 (always the logical (rows_g, cols_g)
// orientation). Unquantized tensors are converted to float32. Needs host metadata.
// outputs[g]: (rows_g, cols_g) float32.
void grouped_dequantize_list(const GroupedTensorView& t, std::span<const TensorView> outputs,
                             bool columnwise = false, Stream stream = {});
// out: float32 of (t.logical_rows, t.logical_cols) (kAllSame / kVaryingFirst) or a flat
// (logical_rows × logical_cols) buffer (any mode): member g written at tensor_offsets[g];
// elements past the last offset are left untouched.
void grouped_dequantize(const GroupedTensorView& t, const TensorView& out, bool columnwise = false,
                        Stream stream = {});

}  // namespace tessera
