// Internal entry points of the quantize backends (reference/, cpu/, cuda/) behind the dispatcher
// in quantizer.cpp. Arguments are validated by the dispatcher: x is a contiguous (M, K) float32 /
// bfloat16 / float16 view on the backend's device; `out` has every buffer of the usages to
// produce (`rowwise` / `columnwise`), with the shapes of types.h, on that device.
#pragma once

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/quantize/types.h"

namespace tessera::detail {

// Which usages to produce and, for delayed scaling, the quantizer's state (device pointers):
// the scale to apply (read) and the amax history whose slot 0 receives the tensor amax.
struct QuantizeRequest {
  bool rowwise = false;
  bool columnwise = false;
  const float* delayed_scale = nullptr;  // config.delayed only: one FP32 on x's device
  float* amax_history = nullptr;         // config.delayed only: amax_history_len FP32
};

// Spec-faithful loops (src/quantize/reference): the oracle. Host memory only.
void quantize_reference(const QuantizerConfig& config, const TensorView& x,
                        const QuantizedTensorView& out, const QuantizeRequest& req);
void dequantize_reference(const QuantizedTensorView& q, const TensorView& out, bool columnwise);

// The CPU backend (src/quantize/cpu): OpenMP, vectorizable, the same bits as the reference.
void quantize_cpu(const QuantizerConfig& config, const TensorView& x,
                  const QuantizedTensorView& out, const QuantizeRequest& req);
void dequantize_cpu(const QuantizedTensorView& q, const TensorView& out, bool columnwise);

// An input without elements (M == 0 or K == 0) in host memory, instead of a host backend
// (quantize_empty.cpp): the same bits as the reference and the CPU backend give, with work
// proportional to the output (a (2^40, 0) input returns at once).
void quantize_empty_host(const QuantizerConfig& config, const QuantizedTensorView& out,
                         const QuantizeRequest& req);

// The CUDA backend (src/quantize/cuda, owned by the CUDA engineer); quantize_no_cuda.cpp throws
// kNoDevice in builds without CUDA. Asynchronous on `stream`; no host synchronization.
void quantize_cuda(const QuantizerConfig& config, const TensorView& x,
                   const QuantizedTensorView& out, const QuantizeRequest& req, Stream stream);
void dequantize_cuda(const QuantizedTensorView& q, const TensorView& out, bool columnwise,
                     Stream stream);
// Delayed scaling update on the device: amax = reduce(history) (max or slot 0), scale =
// scale_rules::delayed_scale(amax, scale, fp8_max, margin), then the roll (see quantizer.cpp).
void delayed_update_cuda(const QuantizerConfig& config, float* scale, float* amax_history,
                         Stream stream);

}  // namespace tessera::detail
