// Device side of the grouped quantize kernels (varying-first MoE activations, metadata on the
// device): the member table, the noop flag, and a persistent work loop over the tiles of all
// members. Every block scans the per-member tile counts into shared memory once, then takes
// tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... and finds each tile's member by binary
// search, so empty members own no tile and never end the loop; rows past the last offset
// (capacity) belong to no member and are never touched. Nothing here syncs with the host.
#pragma once

#include <cstdint>

#include "quantize/cuda/kernels.h"

namespace tessera::detail::cuda_quant {

inline constexpr int kMaxGroupedMembers = 4096;

// True when the launch must do nothing (noop flag set).
__device__ __forceinline__ bool grouped_noop(const GroupedMeta& g) {
  if (g.noop_f32 != nullptr) return *g.noop_f32 != 0.0f;
  if (g.noop_i32 != nullptr) return *g.noop_i32 != 0;
  return false;
}

// Rows of member i from its element offsets (varying first: (off[i+1] - off[i]) / K).
__device__ __forceinline__ int64_t member_rows(const GroupedMeta& g, int64_t i) {
  return (g.tensor_offsets[i + 1] - g.tensor_offsets[i]) / g.cols;
}

// prefix[i] = tiles of members < i (i <= n), tiles of member i = ceil(rows_i / tile_rows) *
// tiles_per_row_block. Block-wide: every thread of the block must call it.
template <int kThreads>
__device__ __forceinline__ void grouped_tile_prefix(const GroupedMeta& g, int64_t tile_rows,
                                                    int64_t tiles_per_row_block, int64_t* prefix) {
  __shared__ int64_t partial[kThreads];
  const int t = threadIdx.x;
  const int64_t chunk = (g.n + kThreads - 1) / kThreads;
  const int64_t begin = t * chunk, end = min(g.n, begin + chunk);
  int64_t sum = 0;
  for (int64_t i = begin; i < end; ++i) {
    sum += (member_rows(g, i) + tile_rows - 1) / tile_rows * tiles_per_row_block;
  }
  partial[t] = sum;
  __syncthreads();
  if (t == 0) {  // kThreads serial adds
    int64_t run = 0;
    for (int i = 0; i < kThreads; ++i) {
      const int64_t v = partial[i];
      partial[i] = run;
      run += v;
    }
    prefix[g.n] = run;
  }
  __syncthreads();
  int64_t run = partial[t];
  for (int64_t i = begin; i < end; ++i) {
    prefix[i] = run;
    run += (member_rows(g, i) + tile_rows - 1) / tile_rows * tiles_per_row_block;
  }
  __syncthreads();
}

// The member owning global tile `t`: the last i with prefix[i] <= t (members with no tile are
// skipped because their prefix equals the next one's).
__device__ __forceinline__ int64_t grouped_member_of(const int64_t* prefix, int64_t n, int64_t t) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace tessera::detail::cuda_quant
