// Tiled NVFP4 (1x16 blocks) for K % 16 == 0, x 16-byte aligned, codes 8-byte aligned: one
// 256-thread block per 64x64 tile of x (nvfp4_tile.cuh). Each thread loads two 8-element chunks
// with 16-byte loads, makes the rowwise codes of its half-blocks in registers (the block amax
// by one shuffle with the neighbour lane) and stores the raw chunk into shared memory; after one
// barrier each thread encodes one 16-row column block of the transposed copy from shared memory
// (with the Hadamard transform when asked) and stores its 8 bytes. So both copies come out of one
// read of x; the global amax (one FP32 per copy) comes from a pass before: the tensor amax, or
// with the Hadamard transform the tile amax kernel here, which gives amax(x) and the amax of the
// transformed transpose in one read. Grouped variants run the same tile on member-local tiles
// through grouped_for_each_member_tile, four tiles along a row per work item (one member setup
// for the four). Other shapes and 16x16 tiles take nvfp4.cu's kernels.
#include <cstdint>
#include <utility>

#include "quantize/cuda/grouped_tiles.cuh"
#include "quantize/cuda/launchers.h"
#include "quantize/cuda/launch_config.h"
#include "quantize/cuda/nvfp4/nvfp4_tile.cuh"
#include "tessera/core/dispatch.h"

namespace tessera::detail::cuda_quant {
namespace {

// Shared tile of kNvTile x kNvTile inputs, 16-byte aligned.
template <class In>
struct alignas(16) Nvfp4SharedTile {
  In v[kNvTile * kNvTile];
};

__device__ __forceinline__ float global_encode_scale(const uint32_t* amax) {
  return scale_rules::nvfp4_global_encode_scale(scale_rules::amax_from_abs_bits(*amax));
}

__device__ __forceinline__ Nvfp4TileCopy tile_copy(uint8_t* data, uint8_t* scale,
                                                   int64_t padded_cols, const uint32_t* amax,
                                                   uint64_t stream_base) {
  Nvfp4TileCopy c;
  if (data == nullptr) return c;
  c.data = data;
  c.scale = scale;
  c.padded_cols = padded_cols;
  c.enc = Nvfp4Enc::of(global_encode_scale(amax));
  c.stream_base = stream_base;
  return c;
}

// kPlain: no Hadamard transform, no stochastic rounding (compiled without those paths, which
// hold many more registers).
template <class In, bool kPlain>
__global__ __launch_bounds__(kNvTileThreads) void nvfp4_tiles_kernel(Nvfp4TileArgs a,
                                                                      int64_t tiles_c) {
  __shared__ Nvfp4SharedTile<In> tile;
  const uint32_t tcols = static_cast<uint32_t>(tiles_c);  // tiles <= 2^31 - 1 (launcher)
  const int64_t tr = blockIdx.x / tcols, tc = blockIdx.x % tcols;
  const Nvfp4TileCopy row = tile_copy(a.row_data, a.row_scale, a.row_padded_cols, a.row_amax, 0);
  const Nvfp4TileCopy col = tile_copy(a.col_data, a.col_scale, a.col_padded_cols, a.col_amax,
                                      static_cast<uint64_t>(a.rows * a.cols));
  const Nvfp4Rng rng{!kPlain && a.stochastic, a.seed, a.offset};
  nvfp4_tile<In>(static_cast<const In*>(a.x), a.rows, a.rows, a.cols, tr, tc, row, col,
                 !kPlain && a.rht, rng, tile.v);
}

// amax(x) into *x_amax (may be null) and the amax of the transformed xᵀ into *rht_amax.
template <class In>
__global__ __launch_bounds__(kNvTileThreads) void nvfp4_tile_amax_kernel(Nvfp4TileArgs a,
                                                                          int64_t tiles_c,
                                                                          uint32_t* x_amax,
                                                                          uint32_t* rht_amax) {
  __shared__ Nvfp4SharedTile<In> tile;
  __shared__ uint32_t scratch[kNvTileThreads / 32];
  const uint32_t tcols = static_cast<uint32_t>(tiles_c);  // tiles <= 2^31 - 1 (launcher)
  const int64_t tr = blockIdx.x / tcols, tc = blockIdx.x % tcols;
  uint32_t mx, mr;
  nvfp4_tile_amax<In>(static_cast<const In*>(a.x), a.rows, a.rows, a.cols, tr, tc, tile.v, mx,
                      mr);
  mr = block_max<kNvTileThreads>(mr, scratch);
  if (x_amax != nullptr) mx = block_max<kNvTileThreads>(mx, scratch);
  if (threadIdx.x == 0) {
    atomic_amax(rht_amax, mr);
    if (x_amax != nullptr) atomic_amax(x_amax, mx);
  }
}

// ---- grouped ---------------------------------------------------------------------------------

// The grouped kernels' work item: kNvSpan consecutive 64x64 tiles of a member (64 rows x 256
// columns), which share the member's setup (pointers, global scales: a few hundred instructions
// per thread, as much as encoding a tile's 16 elements a thread takes) and are encoded one
// after the other through the one shared tile. tiles_c: items per row of tiles.
inline constexpr int kNvSpan = 4;
struct Nvfp4TileCount {
  int64_t tiles_c = 0;
  __device__ int64_t operator()(int64_t rows) const {
    return ceil_div_device(rows, kNvTile) * tiles_c;
  }
};

// Item `local` of a member: its row of tiles and its first column of tiles (32-bit: items and
// tiles fit int32, grouped_grid).
__device__ __forceinline__ void nvfp4_item_tiles(int32_t local, int64_t tiles_c, int64_t& tr,
                                                 int64_t& tc0) {
  const int32_t per_row = static_cast<int32_t>(tiles_c);
  tr = local / per_row;
  tc0 = int64_t{local % per_row} * kNvSpan;
}

// Member i's copy (see launch_nvfp4_grouped): data at tensor_offsets[i] / 2, its scales, its
// own amax, its own stream, its own swizzled width — or, in place, its rows / columns of the whole
// copy (nvfp4_place_member); poisoned when it breaks the contract.
__device__ __forceinline__ Nvfp4TileCopy member_tile_copy(const Nvfp4Args& a, const GroupedMeta& g,
                                                          int64_t i, int64_t rows) {
  if (a.data == nullptr) return Nvfp4TileCopy{};  // copy not produced
  const int64_t off = g.tensor_offsets[i];
  Nvfp4TileCopy c;
  if (a.in_place) {
    Nvfp4Args m = a;
    nvfp4_place_member(m, g, i, off, rows);
    c = tile_copy(a.data, a.scale, m.padded_cols, a.amax + i, m.stream_base);
    c.row_at = m.row_at;
    c.col_at = m.col_at;
    c.ld = m.ld;
  } else {
    const int64_t padded =
        a.padded_cols != 0
            ? (ceil_div_device(a.columnwise ? rows : g.cols, kNvBlock) + 3) / 4 * 4
            : 0;
    c = tile_copy(a.data + off / 2,
                  a.scale + (a.columnwise ? g.col_scale_offsets[i] : g.scale_offsets[i]), padded,
                  a.amax + i, a.columnwise ? static_cast<uint64_t>(rows * g.cols) : 0);
  }
  if (a.columnwise && (rows % 2 != 0 || (a.rht && rows % kNvBlock != 0))) {
    c.data = nullptr;  // nvfp4_member_breaks_contract (nvfp4.cu): NaN scales, no data
    c.poison = true;
  }
  return c;
}

// The grouped tile kernel's compiled forms: the paths each leaves out hold registers the others
// need. kPlain: neither the Hadamard transform nor stochastic rounding; kHadamard: the transform
// without stochastic rounding (x's copies of the nvfp4 recipe); kFull: both (dy's).
enum class Nvfp4TileForm { kPlain, kHadamard, kFull };

// Resident blocks per multiprocessor the form is compiled for. With the work item's setup in
// shared memory (Nvfp4Item) ptxas fits kPlain and kHadamard in 64 registers (four blocks) and
// kFull in 80 (three), none spilling. Held in registers, the setup kept kFull at two blocks
// (128 registers) and the others at three (80, spilling 36-52 bytes). On DSv3 fc1 (H200) x's
// kHadamard form took 425 µs at four blocks, 454 at three; dy's kFull 502 at three, 546 at two
// (bench/results/2026-12-02-session27-h200.md).
constexpr int nvfp4_tile_blocks(Nvfp4TileForm f) { return f == Nvfp4TileForm::kFull ? 3 : 4; }

// A work item's member setup, made once by thread 0 and read by the whole block from shared
// memory: held in registers it stays live across the item's four tiles (about 40 registers),
// which is what kept kFull at two blocks per multiprocessor.
template <class In>
struct Nvfp4Item {
  Nvfp4TileCopy row, col;  // the member's copies (member_tile_copy)
  Nvfp4Rng rng;            // its stochastic-rounding stream
  const In* x;             // its first row (through a layout: g.sources)
  int64_t load_rows;       // rows of x it holds; the rest up to the member's rows are padding
};

// Member i's item (thread 0 alone; not inlined, so that its 64-bit arithmetic does not add to
// the tile loop's registers).
template <class In>
__device__ __noinline__ void nvfp4_item_setup(const Nvfp4Args& row, const Nvfp4Args& col,
                                              const GroupedMeta& g, int64_t i, int64_t rows,
                                              Nvfp4Item<In>& item) {
  item.row = member_tile_copy(row, g, i, rows);
  item.col = member_tile_copy(col, g, i, rows);
  // Through a layout (g.sources): the member's rows past src.rows are padding.
  const GroupedSource src = grouped_member_source(g, i, rows);
  item.x = static_cast<const In*>(row.x) + src.x_off;
  item.load_rows = src.rows;
  item.rng = Nvfp4Rng{row.stochastic, row.seed, row.offset};
  if (row.in_place) item.rng.offset += static_cast<uint64_t>(i);  // member i's own offset
}

// row / col: the rowwise and the columnwise copy (data == nullptr: not produced); both carry the
// same input, seed and offset. Both copies come from one read of each member tile.
template <class In, Nvfp4TileForm kForm>
__global__ __launch_bounds__(kNvTileThreads, nvfp4_tile_blocks(kForm)) void
nvfp4_tiles_grouped_kernel(const __grid_constant__ Nvfp4Args row,
                           const __grid_constant__ Nvfp4Args col,
                           const __grid_constant__ GroupedMeta g, Nvfp4TileCount count) {
  extern __shared__ int32_t prefix[];  // (n + 1)
  __shared__ Nvfp4SharedTile<In> tile;
  // Raw storage: a __shared__ variable takes no initializer (Nvfp4TileCopy has defaults).
  __shared__ alignas(Nvfp4Item<In>) unsigned char item_storage[sizeof(Nvfp4Item<In>)];
  auto& item = *reinterpret_cast<Nvfp4Item<In>*>(item_storage);
  if (grouped_noop(g)) return;
  const bool rht = kForm != Nvfp4TileForm::kPlain && col.rht;
  grouped_for_each_member_tile<kNvTileThreads>(g, count, prefix, [&](const GroupedTile& w) {
    const int64_t rows = w.rows;
    // Read by all after the barrier; rewritten after the loop's barrier.
    if (threadIdx.x == 0) nvfp4_item_setup(row, col, g, w.member, rows, item);
    __syncthreads();
    int64_t tr, tc0;
    nvfp4_item_tiles(w.local, count.tiles_c, tr, tc0);
    // The form decides at compile time whether stochastic rounding can be on.
    const Nvfp4Rng rng{kForm == Nvfp4TileForm::kFull && item.rng.on, item.rng.seed,
                       item.rng.offset};
    for (int64_t tc = tc0; tc < tc0 + kNvSpan && tc * kNvTile < g.cols; ++tc) {
      if (tc > tc0) __syncthreads();  // the shared tile of the tile before was read
      nvfp4_tile<In>(item.x, rows, item.load_rows, g.cols, tr, tc, item.row, item.col, rht, rng,
                     tile.v);
    }
  });
}

// Per member: the amax of its Hadamard-transformed transpose into amax[i] and, when x_amax is
// given, the amax of its rows into x_amax[i], both from the one read of each tile.
template <class In>
__global__ __launch_bounds__(kNvTileThreads) void nvfp4_tile_amax_grouped_kernel(
    Nvfp4Args a, GroupedMeta g, Nvfp4TileCount count, uint32_t* amax, uint32_t* x_amax) {
  extern __shared__ int32_t prefix[];  // (n + 1)
  __shared__ Nvfp4SharedTile<In> tile;
  __shared__ uint32_t scratch[kNvTileThreads / 32];
  if (grouped_noop(g)) return;
  grouped_for_each_member_tile<kNvTileThreads>(g, count, prefix, [&](const GroupedTile& w) {
    // Through a layout (g.sources): the member's rows past src.rows are padding.
    const GroupedSource src = grouped_member_source(g, w.member, w.rows);
    const In* x = static_cast<const In*>(a.x) + src.x_off;
    int64_t tr, tc0;
    nvfp4_item_tiles(w.local, count.tiles_c, tr, tc0);
    uint32_t m = 0, mx_all = 0;
    for (int64_t tc = tc0; tc < tc0 + kNvSpan && tc * kNvTile < g.cols; ++tc) {
      if (tc > tc0) __syncthreads();  // the shared tile of the tile before was read
      uint32_t mx, mr;
      nvfp4_tile_amax<In>(x, w.rows, src.rows, g.cols, tr, tc, tile.v, mx, mr);
      m = max(m, mr);
      mx_all = max(mx_all, mx);
    }
    m = block_max<kNvTileThreads>(m, scratch);
    if (x_amax != nullptr) mx_all = block_max<kNvTileThreads>(mx_all, scratch);  // uniform
    if (threadIdx.x == 0) {
      atomic_amax(amax + w.member, m);
      if (x_amax != nullptr) atomic_amax(x_amax + w.member, mx_all);
    }
  });
}

// Items per row of tiles of the grouped kernels.
int64_t grouped_tiles_c(const GroupedMeta& g) {
  return ceil_div(g.cols, int64_t{kNvTile} * kNvSpan);
}

unsigned grouped_tiles_grid(const GroupedMeta& g) {
  return grouped_grid(g, (ceil_div(g.rows_bound, kNvTile) + g.n) * grouped_tiles_c(g));
}

// (64x64 tiles of x, tiles per row of tiles); the kernels index tiles with 32 bits.
std::pair<int64_t, int64_t> tile_grid(const Nvfp4TileArgs& a) {
  const int64_t tiles_c = ceil_div(a.cols, kNvTile);
  const int64_t tiles = ceil_div(a.rows, kNvTile) * tiles_c;
  TESSERA_CHECK_STATUS(tiles <= 0x7fffffff, Status::kOutOfRange, "quantize: NVFP4 input of ",
                       a.rows, " x ", a.cols, " has more than 2^31 - 1 64x64 tiles");
  return {tiles, tiles_c};
}

}  // namespace

bool nvfp4_tiles_eligible(const void* x, int64_t cols, const uint8_t* data0,
                          const uint8_t* data1) {
  auto aligned8 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; };
  return cols > 0 && cols % kNvBlock == 0 && aligned16(x) && aligned8(data0) && aligned8(data1);
}

void launch_nvfp4_tiles(const Nvfp4TileArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  const auto [tiles, tiles_c] = tile_grid(a);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    const unsigned grid = static_cast<unsigned>(tiles);
    if (a.rht || a.stochastic) {
      nvfp4_tiles_kernel<In, false><<<grid, kNvTileThreads, 0, stream>>>(a, tiles_c);
    } else {
      nvfp4_tiles_kernel<In, true><<<grid, kNvTileThreads, 0, stream>>>(a, tiles_c);
    }
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_nvfp4_tile_amax(const Nvfp4TileArgs& a, uint32_t* x_amax, uint32_t* rht_amax,
                            cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  const auto [tiles, tiles_c] = tile_grid(a);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    nvfp4_tile_amax_kernel<In><<<static_cast<unsigned>(tiles), kNvTileThreads, 0, stream>>>(
        a, tiles_c, x_amax, rht_amax);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

bool launch_nvfp4_tiles_grouped(const Nvfp4Args& row, const Nvfp4Args& col,
                                const GroupedMeta& g, cudaStream_t stream) {
  if (row.tile16 || !nvfp4_tiles_eligible(row.x, g.cols, row.data, col.data)) return false;
  if (g.n == 0) return true;
  Nvfp4TileCount count;
  count.tiles_c = grouped_tiles_c(g);
  const unsigned grid = grouped_tiles_grid(g);
  dispatch_float_input(row.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    const size_t smem = grouped_prefix_bytes(g);
    if (row.stochastic) {
      nvfp4_tiles_grouped_kernel<In, Nvfp4TileForm::kFull>
          <<<grid, kNvTileThreads, smem, stream>>>(row, col, g, count);
    } else if (col.data != nullptr && col.rht) {
      nvfp4_tiles_grouped_kernel<In, Nvfp4TileForm::kHadamard>
          <<<grid, kNvTileThreads, smem, stream>>>(row, col, g, count);
    } else {
      nvfp4_tiles_grouped_kernel<In, Nvfp4TileForm::kPlain>
          <<<grid, kNvTileThreads, smem, stream>>>(row, col, g, count);
    }
  });
  TESSERA_CUDA_CHECK_LAUNCH();
  return true;
}

bool launch_nvfp4_tile_amax_grouped(const Nvfp4Args& a, const GroupedMeta& g, uint32_t* amax,
                                    uint32_t* x_amax, cudaStream_t stream) {
  if (!nvfp4_tiles_eligible(a.x, g.cols, nullptr, nullptr)) return false;
  if (g.n == 0) return true;
  Nvfp4TileCount count;
  count.tiles_c = grouped_tiles_c(g);
  const unsigned grid = grouped_tiles_grid(g);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    nvfp4_tile_amax_grouped_kernel<In><<<grid, kNvTileThreads, grouped_prefix_bytes(g), stream>>>(
        a, g, count, amax, x_amax);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace tessera::detail::cuda_quant
