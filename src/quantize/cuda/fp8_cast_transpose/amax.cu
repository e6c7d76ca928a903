// Per-tensor amax (FP8 current scaling, NVFP4 global amax): a grid-stride reduction with 16-byte
// loads, one atomic max per block on the float bits of |x| (NaN propagates: its bits are the
// largest). No host synchronization; the caller zeroes the target first (a memset node).
// Grouped variant: one amax per member, tiles of 16 vectors per thread of one member's
// contiguous elements (generic driver of grouped_tiles.cuh).
#include <algorithm>
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/grouped_tiles.cuh"
#include "quantize/cuda/launchers.h"
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
  m = block_max<kThreads>(m, scratch);
  if (threadIdx.x == 0) atomic_amax(amax, m);
}

// Grouped: a tile is kAmaxTileVecs vectors (kThreads x kAmaxVecsPerThread) of one member's
// contiguous elements (rows x K, so a tile may span rows). A full tile issues all of a thread's
// loads before the first use; one block reduction and one atomic per tile and member.
constexpr int kAmaxVecsPerThread = 16;
constexpr int64_t kAmaxTileVecs = int64_t{kThreads} * kAmaxVecsPerThread;

struct AmaxTileCount {
  int64_t cols = 0;
  int64_t tile_elems = 1;  // kAmaxTileVecs * kVec
  __device__ int64_t operator()(int64_t rows) const {
    return ceil_div_device(rows * cols, tile_elems);
  }
};

// Max of |p[0, n)| over the block's threads (thread part only; the caller reduces).
template <class In, int kVec>
__device__ __forceinline__ uint32_t amax_tile_part(const In* __restrict__ p, int64_t n) {
  uint32_t m = 0;
  if (n == kAmaxTileVecs * kVec) {
    Vec<In, kVec> raw[kAmaxVecsPerThread];
#pragma unroll
    for (int j = 0; j < kAmaxVecsPerThread; ++j) {
      raw[j] = reinterpret_cast<const Vec<In, kVec>*>(p)[j * kThreads + threadIdx.x];
    }
#pragma unroll
    for (int j = 0; j < kAmaxVecsPerThread; ++j) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) m = max(m, abs_bits(load_float(raw[j].v[e])));
    }
    return m;
  }
  for (int64_t v = threadIdx.x; v < n / kVec; v += kThreads) {
    float a[kVec];
    load_vec<In, kVec>(p + v * kVec, a);
#pragma unroll
    for (int j = 0; j < kVec; ++j) m = max(m, abs_bits(a[j]));
  }
  for (int64_t e = n / kVec * kVec + threadIdx.x; e < n; e += kThreads) {
    m = max(m, abs_bits(load_float(p[e])));
  }
  return m;
}

template <class In, int kVec>
__global__ __launch_bounds__(kThreads) void tensor_amax_grouped_kernel(const In* __restrict__ x,
                                                                       GroupedMeta g,
                                                                       AmaxTileCount count,
                                                                       uint32_t* target,
                                                                       uint32_t* target2) {
  extern __shared__ int32_t table[];  // grouped_prefix_bytes(g)
  __shared__ uint32_t scratch[kThreads / 32];
  if (grouped_noop(g)) return;
  grouped_for_each_member_tile<kThreads>(g, count, table, [&](const GroupedTile& w) {
    const int64_t e0 = int64_t{w.local} * count.tile_elems;
    // Through a layout: the member's rows of x (its padding adds nothing).
    const GroupedSource src = grouped_member_source(g, w.member, w.rows);
    const int64_t n = min(src.rows * g.cols - e0, count.tile_elems);
    // kVec > 1: K % kVec == 0 and x aligned, so every member (offset rows * K) is aligned.
    uint32_t m = amax_tile_part<In, kVec>(x + src.x_off + e0, n);  // n <= 0: nothing read
    m = block_max<kThreads>(m, scratch);
    if (threadIdx.x == 0) {
      atomic_amax(target + w.member, m);
      if (target2 != nullptr) atomic_amax(target2 + w.member, m);
    }
  });
}

}  // namespace

void launch_tensor_amax_grouped(const void* x, DType in, const GroupedMeta& g, uint32_t* target,
                                uint32_t* target2, cudaStream_t stream) {
  if (g.n == 0 || g.cols == 0) return;
  const size_t smem = grouped_prefix_bytes(g);
  dispatch_float_input(in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    constexpr int kVec = kVec16<In>;
    const In* p = static_cast<const In*>(x);
    const bool vec = g.cols % kVec == 0 && aligned16(p);
    AmaxTileCount count;
    count.cols = g.cols;
    count.tile_elems = kAmaxTileVecs * (vec ? kVec : 1);
    // Σ ceil(rows_i K / tile) <= capacity K / tile + n.
    const int64_t bound = ceil_div(g.rows_bound * g.cols, count.tile_elems) + g.n;
    auto* kernel = vec ? tensor_amax_grouped_kernel<In, kVec> : tensor_amax_grouped_kernel<In, 1>;
    const unsigned grid = grouped_grid(g, bound, resident_blocks_per_sm(kernel, kThreads, smem));
    kernel<<<grid, kThreads, smem, stream>>>(p, g, count, target, target2);
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
