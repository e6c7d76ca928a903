// The device writer of quantize_empty (quantize_empty.cpp): an input without elements on a CUDA
// device writes only its output — memsets on the stream and one fill of the per-tensor / per-row
// scale_inv (1 / the delayed scale is read on the device) — so a (2^40, 0) input launches no
// work over its rows. Asynchronous, no host synchronization, capturable in a CUDA graph.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "quantize/cuda/launch_config.h"
#include "quantize/quantize_backend.h"
#include "tessera/core/cuda_check.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail {
namespace {

constexpr int kThreads = 256;

__global__ __launch_bounds__(kThreads) void fill_scale_inv_kernel(float* dst, int64_t n,
                                                                  float scale,
                                                                  const float* delayed_scale) {
  const float v = scale_rules::reciprocal(delayed_scale != nullptr ? *delayed_scale : scale);
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += stride) dst[i] = v;
}

class DeviceEmptyWriter final : public EmptyWriter {
 public:
  explicit DeviceEmptyWriter(cudaStream_t s) : stream_(s) {}
  void zero(void* p, int64_t bytes) const override {
    if (bytes > 0) TESSERA_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream_));
  }
  void fill_scale_inv(float* dst, int64_t n, float scale,
                      const float* delayed_scale) const override {
    if (n == 0) return;
    const unsigned grid = cuda_quant::grid_stride_blocks(n, kThreads);
    fill_scale_inv_kernel<<<grid, kThreads, 0, stream_>>>(dst, n, scale, delayed_scale);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

 private:
  cudaStream_t stream_;
};

}  // namespace

void quantize_empty_cuda(const QuantizerConfig& config, const QuantizedTensorView& out,
                         const QuantizeRequest& req, Device device, Stream stream) {
  TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
  quantize_empty(config, out, req, DeviceEmptyWriter(stream.as<cudaStream_t>()));
}

}  // namespace tessera::detail
