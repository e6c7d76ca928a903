// Per-tensor amax (FP8 current scaling, NVFP4 global amax): a grid-stride reduction with 16-byte
// loads, one atomic max per block on the float bits of |x| (NaN propagates: its bits are the
// largest). No host synchronization; the caller zeroes the target first (a memset node).
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/kernels.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/core/dispatch.h"

namespace tessera::detail::cuda_quant {
namespace {

constexpr int kThreads = 256;

template <class In, int kVec>
__global__ __launch_bounds__(kThreads) void tensor_amax_kernel(const In* __restrict__ x,
                                                               int64_t n,
                                                               uint32_t* __restrict__ amax) {
  __shared__ uint32_t scratch[kThreads / 32];
  uint32_t m = 0;
  const int64_t nvec = n / kVec;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  // Two vectors in flight per iteration.
  for (; i + stride < nvec; i += 2 * stride) {
    float a[kVec], b[kVec];
    load_vec<In, kVec>(x + i * kVec, a);
    load_vec<In, kVec>(x + (i + stride) * kVec, b);
#pragma unroll
    for (int j = 0; j < kVec; ++j) m = max(m, max(abs_bits(a[j]), abs_bits(b[j])));
  }
  for (; i < nvec; i += stride) {
    float a[kVec];
    load_vec<In, kVec>(x + i * kVec, a);
#pragma unroll
    for (int j = 0; j < kVec; ++j) m = max(m, abs_bits(a[j]));
  }
  // Scalar tail (n not a multiple of kVec).
  for (int64_t t = nvec * kVec + blockIdx.x * int64_t{kThreads} + threadIdx.x; t < n; t += stride) {
    m = max(m, abs_bits(load_float(x[t])));
  }
  m = canonical_amax(block_max<kThreads>(m, scratch));
  if (threadIdx.x == 0 && m != 0) atomicMax(amax, m);
}

}  // namespace

void launch_tensor_amax(const void* x, int64_t n, DType in, uint32_t* amax_bits,
                        cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float_input(in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    const In* p = static_cast<const In*>(x);
    if (aligned16(p)) {
      constexpr int kVec = kVec16<In>;
      const unsigned grid = grid_stride_blocks(n / kVec, 2 * kThreads);
      tensor_amax_kernel<In, kVec><<<grid, kThreads, 0, stream>>>(p, n, amax_bits);
    } else {
      const unsigned grid = grid_stride_blocks(n, 2 * kThreads);
      tensor_amax_kernel<In, 1><<<grid, kThreads, 0, stream>>>(p, n, amax_bits);
    }
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
