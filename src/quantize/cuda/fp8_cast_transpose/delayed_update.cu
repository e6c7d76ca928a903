// Delayed scaling update on the device (no host sync): one block reads the amax history, takes
// its max (or the most recent entry), computes the next scale with the same arithmetic as the CPU
// (scale_rules::delayed_scale) and rolls the history by -1 with slot 0 cleared (TE's convention).
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/launchers.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant {
namespace {

constexpr int kThreads = 1024;

__global__ __launch_bounds__(kThreads) void delayed_update_kernel(float* scale, float* history,
                                                                  int len, bool most_recent,
                                                                  float fp8_max, int margin) {
  extern __shared__ float s_hist[];  // (len)
  __shared__ uint32_t scratch[kThreads / 32];
  uint32_t m = 0;
  for (int i = threadIdx.x; i < len; i += kThreads) {
    s_hist[i] = history[i];
    m = max(m, abs_bits(s_hist[i]));
  }
  m = block_max<kThreads>(m, scratch);  // contains __syncthreads: s_hist complete after it
  const float amax = most_recent ? s_hist[0] : scale_rules::amax_from_abs_bits(m);
  if (threadIdx.x == 0) scale[0] = scale_rules::delayed_scale(amax, scale[0], fp8_max, margin);
  for (int i = threadIdx.x; i < len; i += kThreads) {
    history[i] = i == 0 ? 0.0f : s_hist[(i + 1) % len];
  }
}

}  // namespace

void launch_delayed_update(float* scale, float* history, int len, bool most_recent, float fp8_max,
                           int margin, cudaStream_t stream) {
  TESSERA_CHECK(len > 0 && len <= 12288, "update: amax history length ", len,
                " is outside [1, 12288]");
  delayed_update_kernel<<<1, kThreads, sizeof(float) * len, stream>>>(scale, history, len,
                                                                      most_recent, fp8_max, margin);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
