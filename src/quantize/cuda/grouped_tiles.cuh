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

#include "quantize/cuda/launchers.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/core/cuda_check.h"
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

// Shared-memory member table of the generic driver (grouped_prefix_bytes(g) bytes of dynamic
// shared memory, int32): prefix[i] = Σ_{j<i} tiles_of(rows_j) (i <= n), then row0[i] = first
// row of member i (i <= n; row0[n] = live rows). Row counts fit int32 (grouped_grid checks
// rows_bound).
struct GroupedTable {
  int32_t* prefix;
  int32_t* row0;
};
__device__ __forceinline__ GroupedTable grouped_table(const GroupedMeta& g, int32_t* smem) {
  return {smem, smem + g.n + 1};
}

// Exclusive scan of one int64 per thread over the block (every thread gets its own prefix and,
// in *total, the sum). Block-wide; `warp_sums` holds kThreads / 32 entries. Two __syncthreads.
template <int kThreads>
__device__ __forceinline__ int64_t block_exclusive_scan(int64_t v, int64_t* warp_sums,
                                                        int64_t* total) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t u = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += u;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int64_t before = 0, sum = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const int64_t x = warp_sums[w];
    before += w < warp ? x : 0;
    sum += x;
  }
  __syncthreads();  // warp_sums may be reused
  *total = sum;
  return before + incl - v;
}

// Fills the member table: prefix from tiles_of (a device functor int64_t(int64_t rows)), row0
// from the element offsets. Block-wide: every thread of the block must call it. One round of
// global loads (each thread its chunk of members) and a parallel scan.
template <int kThreads, class TileCount>
__device__ __forceinline__ void grouped_prefix_of(const GroupedMeta& g, const TileCount& tiles_of,
                                                  int32_t* smem) {
  __shared__ int64_t warp_sums[kThreads / 32];
  const GroupedTable tab = grouped_table(g, smem);
  const int t = threadIdx.x;
  const int64_t chunk = (g.n + kThreads - 1) / kThreads;
  const int64_t begin = min(g.n, t * chunk), end = min(g.n, begin + chunk);
  int64_t tiles = 0;
  for (int64_t i = begin; i < end; ++i) tiles += tiles_of(member_rows(g, i));
  int64_t total_tiles = 0;
  int64_t run = block_exclusive_scan<kThreads>(tiles, warp_sums, &total_tiles);
  int64_t row = 0;
  if (begin < end) row = g.tensor_offsets[begin] / g.cols;
  for (int64_t i = begin; i < end; ++i) {
    tab.prefix[i] = static_cast<int32_t>(min(run, kMaxGroupedTiles));
    tab.row0[i] = static_cast<int32_t>(row);
    const int64_t r = member_rows(g, i);
    run += tiles_of(r);
    row += r;
  }
  if (t == 0) {
    tab.prefix[g.n] = static_cast<int32_t>(min(total_tiles, kMaxGroupedTiles));
    tab.row0[g.n] = static_cast<int32_t>(g.tensor_offsets[g.n] / g.cols);
  }
  __syncthreads();
}

// The member owning global tile `t`: the last i with prefix[i] <= t (members with no tile are
// skipped because their prefix equals the next one's).
__device__ __forceinline__ int32_t grouped_member_of32(const int32_t* prefix, int32_t n,
                                                       int32_t t) {
  int32_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Where member i (of `rows` rows) is read in x: x_off its first element, rows how many of its
// rows come from x (the rest read as zero). Its own elements, or through the layout of
// GroupedMeta::sources.
struct GroupedSource {
  int64_t x_off, rows;
};
__device__ __forceinline__ GroupedSource grouped_member_source(const GroupedMeta& g, int64_t i,
                                                               int64_t rows) {
  if (g.sources == nullptr) return {g.tensor_offsets[i], rows};
  const int64_t first = g.sources[i];
  const int64_t stop = min(g.sources[i + 1], g.source_rows);
  return {first * g.cols, max(int64_t{0}, min(rows, stop - first))};
}

// One tile of the generic driver: member i (its rows and first row of x), member-local tile.
struct GroupedTile {
  int32_t member;
  int32_t rows;
  int32_t row0;
  int32_t local;
};

__device__ __forceinline__ GroupedTile grouped_tile_at(const GroupedTable& tab, int32_t n,
                                                       int64_t t) {
  const int32_t i = grouped_member_of32(tab.prefix, n, static_cast<int32_t>(t));
  const int32_t r0 = tab.row0[i];
  return GroupedTile{i, tab.row0[i + 1] - r0, r0, static_cast<int32_t>(t - tab.prefix[i])};
}

// The persistent work loop: body(tile) for every tile of every member, tiles
// t = blockIdx.x, blockIdx.x + gridDim.x, ... of the concatenation of all members' tiles.
// `smem`: grouped_prefix_bytes(g) bytes of dynamic shared memory. Block-wide; the body may use
// __syncthreads (the loop bound is uniform over the block) and the loop syncs after each body,
// so a body may reuse its shared memory from one tile to the next. Member lookups per tile read
// only shared memory.
template <int kThreads, class TileCount, class Body>
__device__ __forceinline__ void grouped_for_each_member_tile(const GroupedMeta& g,
                                                             const TileCount& tiles_of,
                                                             int32_t* smem, Body&& body) {
  grouped_prefix_of<kThreads>(g, tiles_of, smem);
  const GroupedTable tab = grouped_table(g, smem);
  const int32_t n = static_cast<int32_t>(g.n);
  const int32_t total = tab.prefix[n];
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const GroupedTile w = grouped_tile_at(tab, n, t);
    body(w);
    __syncthreads();
  }
}

// The same loop with body(i, rows_i, local_tile) (int64 arguments).
template <int kThreads, class TileCount, class Body>
__device__ __forceinline__ void grouped_for_each_tile(const GroupedMeta& g,
                                                      const TileCount& tiles_of, int32_t* prefix,
                                                      Body&& body) {
  grouped_for_each_member_tile<kThreads>(g, tiles_of, prefix, [&](const GroupedTile& w) {
    body(int64_t{w.member}, int64_t{w.rows}, int64_t{w.local});
  });
}

// Host: checks the member count, the row bound and the tile bound of a generic grouped launch;
// returns its grid (persistent: at most 8 blocks per multiprocessor). Dynamic shared memory of
// the launch: grouped_prefix_bytes(g).
inline unsigned grouped_grid(const GroupedMeta& g, int64_t tiles_bound, int blocks_per_sm = 8) {
  TESSERA_CHECK(g.n <= kMaxGroupedMembers, "grouped quantize: ", g.n,
                " members; the CUDA kernels take at most ", kMaxGroupedMembers);
  TESSERA_CHECK_STATUS(tiles_bound <= kMaxGroupedTiles && g.rows_bound <= kMaxGroupedTiles,
                       Status::kOutOfRange, "grouped quantize: ", g.rows_bound, " rows and up to ",
                       tiles_bound, " tiles; the grouped kernels take at most 2^31 - 1 of each "
                       "(fewer rows per launch)");
  return grid_stride_blocks(tiles_bound, 1, blocks_per_sm);
}
inline size_t grouped_prefix_bytes(const GroupedMeta& g) {
  return sizeof(int32_t) * static_cast<size_t>(2 * (g.n + 1));
}

// Host: blocks of `kernel` (kThreads threads, `smem` dynamic bytes) that fit on one
// multiprocessor at once (at least 1); queried once per kernel.
template <class Kernel>
int resident_blocks_per_sm(Kernel* kernel, int threads, size_t smem) {
  static thread_local const void* last = nullptr;
  static thread_local size_t last_smem = 0;
  static thread_local int last_blocks = 0;
  if (last != reinterpret_cast<const void*>(kernel) || last_smem != smem) {
    int b = 0;
    TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, threads, smem));
    last = reinterpret_cast<const void*>(kernel);
    last_smem = smem;
    last_blocks = b < 1 ? 1 : b;
  }
  return last_blocks;
}

}  // namespace tessera::detail::cuda_quant
