// Per-tensor amax (FP8 current scaling, NVFP4 global amax): a grid-stride reduction with 16-byte
// loads, one atomic max per block on the float bits of |x| (NaN propagates: its bits are the
// largest). No host synchronization; the caller zeroes the target first (a memset node).
// Grouped variant: one amax per member, tiles of whole rows of one member (generic driver of
// grouped_tiles.cuh).
#include <algorithm>
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/grouped_tiles.cuh"
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

// Grouped: a tile is rows_per_tile whole rows of one member (a contiguous element range).
struct AmaxTileCount {
  int64_t rows_per_tile = 1;
  __device__ int64_t operator()(int64_t rows) const {
    return ceil_div_device(rows, rows_per_tile);
  }
};

template <class In, int kVec>
__global__ __launch_bounds__(kThreads) void tensor_amax_grouped_kernel(const In* __restrict__ x,
                                                                       GroupedMeta g,
                                                                       AmaxTileCount count,
                                                                       uint32_t* target,
                                                                       uint32_t* target2) {
  extern __shared__ int32_t prefix[];  // (n + 1)
  __shared__ uint32_t scratch[kThreads / 32];
  if (grouped_noop(g)) return;
  grouped_for_each_tile<kThreads>(g, count, prefix, [&](int64_t i, int64_t rows, int64_t local) {
    const int64_t r0 = local * count.rows_per_tile;
    const int64_t n = (min(rows, r0 + count.rows_per_tile) - r0) * g.cols;
    const In* p = x + g.tensor_offsets[i] + r0 * g.cols;  // kVec > 1: K % kVec == 0, aligned
    uint32_t m = 0;
    for (int64_t v = threadIdx.x; v < n / kVec; v += kThreads) {
      float a[kVec];
      load_vec<In, kVec>(p + v * kVec, a);
#pragma unroll
      for (int j = 0; j < kVec; ++j) m = max(m, abs_bits(a[j]));
    }
    for (int64_t e = n / kVec * kVec + threadIdx.x; e < n; e += kThreads) {
      m = max(m, abs_bits(load_float(p[e])));
    }
    m = canonical_amax(block_max<kThreads>(m, scratch));
    if (threadIdx.x == 0 && m != 0) {
      atomicMax(target + i, m);
      if (target2 != nullptr) atomicMax(target2 + i, m);
    }
  });
}

}  // namespace

void launch_tensor_amax_grouped(const void* x, DType in, const GroupedMeta& g, uint32_t* target,
                                uint32_t* target2, cudaStream_t stream) {
  if (g.n == 0 || g.cols == 0) return;
  AmaxTileCount count;
  count.rows_per_tile = std::max<int64_t>(1, 8192 / g.cols);
  const unsigned grid = grouped_grid(g, ceil_div(g.rows_bound, count.rows_per_tile) + g.n);
  const size_t smem = grouped_prefix_bytes(g);
  dispatch_float_input(in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    constexpr int kVec = kVec16<In>;
    const In* p = static_cast<const In*>(x);
    if (g.cols % kVec == 0 && aligned16(p)) {
      tensor_amax_grouped_kernel<In, kVec>
          <<<grid, kThreads, smem, stream>>>(p, g, count, target, target2);
    } else {
      tensor_amax_grouped_kernel<In, 1>
          <<<grid, kThreads, smem, stream>>>(p, g, count, target, target2);
    }
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

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
