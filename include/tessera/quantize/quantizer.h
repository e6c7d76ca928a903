// Quantizer: turns a high-precision (M, K) tensor into a QuantizedTensor per its config, on the
// backend of the input's device (cpu/ or cuda/), and owns delayed-scaling state. docs/numerics.md.
//
// Usage rule: quantize() produces the usages config().rowwise/columnwise asks for PLUS every usage
// the output already has (a re-quantized weight never drops a usage: no stale columnwise copy).
// Both copies come from the high-precision input in one pass, never one from the other.
#pragma once

#include <cstdint>

#include "tessera/core/buffer.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/quantize/types.h"

namespace tessera {

// Delayed-scaling state in caller-owned memory (a framework module's buffers): the FP32 scale
// (1 element) and the FP32 amax history (config.amax_history_len elements), each contiguous, on
// the quantizer's device. The caller initialises them (scale 1, history 0, as a Quantizer does
// for its own) and keeps them alive while the quantizer uses them.
struct DelayedScalingState {
  TensorView scale;
  TensorView amax_history;
};

class Quantizer {
 public:
  // Validates the config (element type allowed for the mode, history length > 0, ...); throws a
  // clear Error naming the field otherwise. Delayed scaling: allocates and initialises its own
  // scale and history (a synchronous copy to the device).
  explicit Quantizer(const QuantizerConfig& config, Device device = Device::cpu());
  // Delayed scaling (config.delayed must be set) on caller-owned `state`: quantize() and
  // update() read and write it; nothing is allocated or copied, so making one per call is cheap
  // and never synchronizes. Throws a clear Error naming the field of a mismatched state.
  Quantizer(const QuantizerConfig& config, Device device, const DelayedScalingState& state);

  const QuantizerConfig& config() const { return config_; }
  Device device() const { return device_; }
  void set_usage(bool rowwise, bool columnwise);

  // An output with the buffers this quantizer's usages need for a (rows, cols) input.
  QuantizedTensor allocate(int64_t rows, int64_t cols) const;

  // x: (M, K) float32/bfloat16/float16, contiguous, on device(). `out` must have been allocated
  // for (M, K) with this config's mode/element/layout (buffers of missing usages are added only
  // through QuantizedTensor::ensure_usage; a view lacking a needed buffer is an error).
  void quantize(const TensorView& x, QuantizedTensorView& out, Stream stream = {});
  void quantize(const TensorView& x, QuantizedTensor& out, Stream stream = {});
  // The same on an explicit backend: Backend::kReference runs the spec-faithful loops of
  // src/quantize/reference (host memory only; the oracle of the tests), kCPU / kCUDA must match
  // the data's device. Same bits from every backend.
  void quantize(const TensorView& x, QuantizedTensorView& out, Backend backend, Stream stream = {});

  // Delayed scaling (config().delayed): the FP32 scale used by the next quantize(), the amax
  // history (amax_history_len) whose slot 0 the quantize writes, and update(), which computes
  // the next scale from the history and rolls it (slot 0 cleared). Empty views otherwise. Views
  // of the caller's state when the quantizer was made on one.
  TensorView scale() const;
  TensorView amax_history() const;
  // Only for delayed scaling (kInvalidArgument otherwise).
  void update(Stream stream = {});

 private:
  QuantizerConfig config_;
  Device device_;
  Buffer scale_, amax_history_;       // owned delayed-scaling state (empty on caller state)
  float* scale_ptr_ = nullptr;        // delayed scaling: scale_ or the caller's scale
  float* amax_history_ptr_ = nullptr; // delayed scaling: amax_history_ or the caller's history
};

// Dequantizes one usage of `q` into `out`: float32 (M, K) (always the logical orientation, also
// for a transposed columnwise copy).
// Exact rule per mode: docs/numerics.md (x̂ = decode(q) * scale_inv; NVFP4: decode_e2m1(q) *
// (decode_e4m3(s_b) * (1 / S_enc)), then the inverse Hadamard transform when it was applied).
void dequantize(const QuantizedTensorView& q, const TensorView& out, bool columnwise = false,
                Stream stream = {});
void dequantize(const QuantizedTensorView& q, const TensorView& out, bool columnwise,
                Backend backend, Stream stream = {});

}  // namespace tessera
