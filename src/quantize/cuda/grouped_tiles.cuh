// Device side of the grouped quantize kernels (varying-first MoE activations, metadata on the
// device): the member table, the noop flag, and a persistent work loop over the tiles of all
// members. Every block scans the per-member tile counts into shared memory once, then takes
// tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... and finds each tile's member by binary
// search, so empty members own no tile and never end the loop; rows past the last offset
// (capacity) belong to no member and are never touched. Nothing here syncs with the host.
// grouped_for_each_tile is the generic form every grouped kernel but MXFP8's uses: a per-mode
// tile-count functor (tiles of a member as a function of its rows) and a body called with
// (member, rows, member-local tile), which runs the per-tensor kernels' tile functions on the
// member's own pointers. A mode may give an empty member a tile (per-tensor / per-column
// scales exist for an empty tensor too).
#pragma once

#include <cstdint>

#include "quantize/cuda/kernels.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/core/status.h"

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


// ---- generic driver (every grouped kernel except MXFP8's uses it) ----------------------------

// Upper bound of the total tile count a launcher may pass to the generic driver: the prefix is
// kept in int32 so that kMaxGroupedMembers entries fit beside a kernel's own shared memory.
inline constexpr int64_t kMaxGroupedTiles = 0x7fffffff;

// prefix[i] = Σ_{j<i} tiles_of(rows_j) (i <= n) in int32; tiles_of is a device functor
// int64_t(int64_t rows). Block-wide: every thread of the block must call it.
template <int kThreads, class TileCount>
__device__ __forceinline__ void grouped_prefix_of(const GroupedMeta& g, const TileCount& tiles_of,
                                                  int32_t* prefix) {
  __shared__ int64_t partial[kThreads];
  const int t = threadIdx.x;
  const int64_t chunk = (g.n + kThreads - 1) / kThreads;
  const int64_t begin = t * chunk, end = min(g.n, begin + chunk);
  int64_t sum = 0;
  for (int64_t i = begin; i < end; ++i) sum += tiles_of(member_rows(g, i));
  partial[t] = sum;
  __syncthreads();
  if (t == 0) {  // kThreads serial adds
    int64_t run = 0;
    for (int i = 0; i < kThreads; ++i) {
      const int64_t v = partial[i];
      partial[i] = run;
      run += v;
    }
    prefix[g.n] = static_cast<int32_t>(min(run, kMaxGroupedTiles));
  }
  __syncthreads();
  int64_t run = partial[t];
  for (int64_t i = begin; i < end; ++i) {
    prefix[i] = static_cast<int32_t>(min(run, kMaxGroupedTiles));
    run += tiles_of(member_rows(g, i));
  }
  __syncthreads();
}

// The member owning global tile `t` (int32 prefix; see grouped_member_of).
__device__ __forceinline__ int64_t grouped_member_of32(const int32_t* prefix, int64_t n,
                                                       int64_t t) {
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

// The persistent work loop: body(i, rows_i, local_tile) for every tile of every member, tiles
// t = blockIdx.x, blockIdx.x + gridDim.x, ... of the concatenation of all members' tiles.
// `prefix`: n + 1 int32 of shared memory. Block-wide; the body may use __syncthreads (the loop
// bound is uniform over the block) and the loop syncs after each body, so a body may reuse its
// shared memory from one tile to the next.
template <int kThreads, class TileCount, class Body>
__device__ __forceinline__ void grouped_for_each_tile(const GroupedMeta& g,
                                                      const TileCount& tiles_of, int32_t* prefix,
                                                      Body&& body) {
  grouped_prefix_of<kThreads>(g, tiles_of, prefix);
  const int64_t total = prefix[g.n];
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const int64_t i = grouped_member_of32(prefix, g.n, t);
    body(i, member_rows(g, i), t - prefix[i]);
    __syncthreads();
  }
}

// Host: checks the member count and the tile bound of a generic grouped launch; returns its
// grid (persistent: at most 8 blocks per multiprocessor). Dynamic shared memory of the launch:
// grouped_prefix_bytes(g).
inline unsigned grouped_grid(const GroupedMeta& g, int64_t tiles_bound) {
  TESSERA_CHECK(g.n <= kMaxGroupedMembers, "grouped quantize: ", g.n,
                " members; the CUDA kernels take at most ", kMaxGroupedMembers);
  TESSERA_CHECK_STATUS(tiles_bound <= kMaxGroupedTiles, Status::kOutOfRange,
                       "grouped quantize: up to ", tiles_bound, " tiles; the grouped kernels "
                       "take at most 2^31 - 1 (fewer rows per launch)");
  return grid_stride_blocks(tiles_bound, 1, 8);
}
inline size_t grouped_prefix_bytes(const GroupedMeta& g) {
  return sizeof(int32_t) * static_cast<size_t>(g.n + 1);
}

}  // namespace tessera::detail::cuda_quant
