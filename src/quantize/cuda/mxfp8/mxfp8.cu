// MXFP8 quantization, rowwise (1x32 blocks) and columnwise (32x1 blocks) in ONE pass over x;
// kMXFP8_32x32 (one scale per 32x32 tile, stored expanded in both scale matrices) too. Compact
// or GEMM-swizzled scales, the swizzle padding written as zeros by the kernel itself.
//
// One kernel serves a single tensor and a grouped (varying-first) tensor with device metadata:
// every warp takes 32 x 64 warp tiles (mxfp8_tile.cuh) t = global warp, + total warps, ...; a
// single tensor numbers its tiles row-major over (ceil(M/32), ceil(K/64)), a grouped launch
// scans the members' tile counts first (grouped_tiles.cuh). No shared memory or barrier inside
// the tile loop. The rowwise usage alone on aligned input goes to mxfp8_rowwise.cu instead.
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "quantize/cuda/grouped_tiles.cuh"
#include "quantize/cuda/kernels.h"
#include "quantize/cuda/launch_config.h"
#include "quantize/cuda/mxfp8/mxfp8_launch.h"
#include "quantize/cuda/mxfp8/mxfp8_tile.cuh"
#include "tessera/core/dispatch.h"

namespace tessera::detail::cuda_quant {
namespace {

using mx::MxRule;
using mx::MxTensor;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kDefaultMinBlocks = 5;  // register cap 102: 20 warps per multiprocessor

template <class In>
__device__ __forceinline__ MxTensor<In> whole_tensor(const MxArgs& a) {
  return {static_cast<const In*>(a.x), a.rows, a.cols, a.q_row, a.s_row, a.q_col, a.s_col,
          a.s_row_padded_cols, a.s_col_padded_cols};
}

// Member i of a grouped launch: rows [off_i / K, off_{i+1} / K) of the buffers in `a`.
template <class In>
__device__ __forceinline__ MxTensor<In> member_tensor(const MxArgs& a, const GroupedMeta& g,
                                                      int64_t i) {
  const int64_t off = g.tensor_offsets[i], rows = member_rows(g, i);
  MxTensor<In> t = whole_tensor<In>(a);
  t.x += off;
  t.M = rows;
  t.K = g.cols;
  if (a.q_row != nullptr) {
    t.q_row += off;
    t.s_row += g.scale_offsets[i];
  }
  if (a.q_col != nullptr) {
    t.q_col += off;
    t.s_col += g.col_scale_offsets[i];
  }
  t.col_pad = ((rows + mx::kBlock - 1) / mx::kBlock + 3) / 4 * 4;
  return t;
}

// Single tensor, tiles w = warp0, + warps, ...; kPipelined keeps the next tile's loads in
// flight while the current one is quantized (two register tiles).
template <class In, DType DT, int kSubs, bool kAligned, bool kPipelined>
__device__ __forceinline__ void single_tensor_tiles(const MxTensor<In>& t, const MxRule& rule,
                                                    DivMod31 tiles_k, uint32_t warp0,
                                                    uint32_t warps) {
  const uint32_t tiles =
      static_cast<uint32_t>((t.M + mx::kTileRows - 1) / mx::kTileRows) * tiles_k.d;
  auto load = [&](uint32_t w, mx::TileRegs<In, kSubs>& r) {
    const uint32_t tm = tiles_k.div(w);
    mx::mx_load_tile<In, kSubs, kAligned>(t, tm, w - tm * tiles_k.d, r);
  };
  auto quantize = [&](uint32_t w, const mx::TileRegs<In, kSubs>& r) {
    const uint32_t tm = tiles_k.div(w);
    mx::mx_quantize_tile<In, DT, kSubs, kAligned>(t, rule, tm, w - tm * tiles_k.d, r);
  };
  if constexpr (kPipelined) {
    mx::TileRegs<In, kSubs> a, b;
    uint32_t w = warp0;
    if (w < tiles) load(w, a);
    while (w < tiles) {
      const uint32_t n = w + warps;
      if (n < tiles) load(n, b);
      quantize(w, a);
      if (n >= tiles) break;
      const uint32_t n2 = n + warps;
      if (n2 < tiles) load(n2, a);
      quantize(n, b);
      w = n2;
    }
  } else {
    for (uint32_t w = warp0; w < tiles; w += warps) {
      mx::TileRegs<In, kSubs> raw;
      load(w, raw);
      quantize(w, raw);
    }
  }
}

// grouped: g.tensor_offsets != null (device member table, noop flag); else the tensor of `a`.
// tiles_k = ceil(K / tile columns) as a divider; single-tensor tile counts are < 2^31 (host
// check).
template <class In, DType DT, int kSubs, bool kAligned, int kMinBlocks, bool kPipelined>
__global__ __launch_bounds__(kThreads, kMinBlocks) void mxfp8_tile_kernel(MxArgs a, GroupedMeta g,
                                                                          DivMod31 tiles_k) {
  extern __shared__ int64_t prefix[];  // grouped: (n + 1) tile prefix sums
  const MxRule rule{a.tile32x32, a.floor_rule, a.swizzled};
  const int lane = threadIdx.x % 32;
  const int64_t warp0 = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  const int64_t warps = int64_t{gridDim.x} * kWarps;
  if (g.tensor_offsets == nullptr) {
    const MxTensor<In> t = whole_tensor<In>(a);
    single_tensor_tiles<In, DT, kSubs, kAligned, kPipelined>(
        t, rule, tiles_k, static_cast<uint32_t>(warp0), static_cast<uint32_t>(warps));
    mx::zero_tensor_padding(t, rule, warp0 * 32 + lane, warps * 32);
    return;
  }
  if (grouped_noop(g)) return;
  grouped_tile_prefix<kThreads>(g, mx::kTileRows, tiles_k.d, prefix);
  for (int64_t w = warp0; w < prefix[g.n]; w += warps) {
    const int64_t i = grouped_member_of(prefix, g.n, w);
    const uint32_t local = static_cast<uint32_t>(w - prefix[i]);
    const uint32_t tm = tiles_k.div(local);
    const MxTensor<In> t = member_tensor<In>(a, g, i);
    mx::TileRegs<In, kSubs> raw;
    mx::mx_load_tile<In, kSubs, kAligned>(t, tm, local - tm * tiles_k.d, raw);
    mx::mx_quantize_tile<In, DT, kSubs, kAligned>(t, rule, tm, local - tm * tiles_k.d, raw);
  }
  if (a.swizzled) {
    for (int64_t i = warp0; i < g.n; i += warps) {
      mx::zero_tensor_padding(member_tensor<In>(a, g, i), rule, lane, 32);
    }
  }
}

// Blocks per multiprocessor a launch may fill (TESSERA_MXFP8_GRID overrides: 0 = one tile per
// warp, no grid-stride loop).
int64_t grid_cap_blocks() {
  static const int cap = [] {
    const char* s = std::getenv("TESSERA_MXFP8_GRID");
    return s != nullptr ? std::atoi(s) : 0;
  }();
  return cap <= 0 ? int64_t{1} << 40 : int64_t{cap} * sm_count();
}

int tile_variant() {
  static const int v = [] {
    const char* s = std::getenv("TESSERA_MXFP8_TILE");
    return s != nullptr ? std::atoi(s) : 0;
  }();
  return v;
}

// row_tiles: 32-row tiles of the launch (grouped: a bound); persistent: cap the grid at 16
// blocks per multiprocessor (grouped launches loop over device-counted tiles).
template <class In, DType DT, int kSubs, bool kAligned, int kMinBlocks, bool kPipelined>
void launch_variant(const MxArgs& a, const GroupedMeta& g, int64_t row_tiles, bool persistent,
                    size_t smem, cudaStream_t stream) {
  const int64_t K = g.tensor_offsets != nullptr ? g.cols : a.cols;
  const int64_t tiles_k = ceil_div(K, mx::TileGeom<kSubs>::kCols);
  int64_t blocks = ceil_div(row_tiles * tiles_k, kWarps);
  const int64_t cap = persistent ? int64_t{16} * sm_count() : grid_cap_blocks();
  blocks = blocks > cap ? cap : blocks;
  const unsigned grid = static_cast<unsigned>(blocks < 1 ? 1 : blocks);
  mxfp8_tile_kernel<In, DT, kSubs, kAligned, kMinBlocks, kPipelined>
      <<<grid, kThreads, smem, stream>>>(a, g, DivMod31::make(static_cast<uint32_t>(tiles_k)));
}

template <class In, DType DT, bool kAligned>
void launch_tiles(const MxArgs& a, const GroupedMeta& g, int64_t row_tiles, bool persistent,
                  size_t smem, cudaStream_t stream) {
  if constexpr (kAligned && std::is_same_v<In, bf16> && DT == DType::kFloat8E4M3) {
    switch (tile_variant()) {  // exploration variants (BF16 -> E4M3 only)
      case 1:
        return launch_variant<In, DT, 4, kAligned, 6, false>(a, g, row_tiles, persistent, smem, stream);
      case 3:
        return launch_variant<In, DT, 4, kAligned, 4, true>(a, g, row_tiles, persistent, smem, stream);
      case 4:
        return launch_variant<In, DT, 8, kAligned, 8, false>(a, g, row_tiles, persistent, smem, stream);
      case 5:
        return launch_variant<In, DT, 8, kAligned, 6, false>(a, g, row_tiles, persistent, smem, stream);
      case 6:
        return launch_variant<In, DT, 8, kAligned, 6, true>(a, g, row_tiles, persistent, smem, stream);
      default:
        break;
    }
  }
  // FP32 input holds twice the raw registers: cap 128 instead of spilling.
  constexpr int kMinBlocks = std::is_same_v<In, float> ? 4 : kDefaultMinBlocks;
  launch_variant<In, DT, 4, kAligned, kMinBlocks, false>(a, g, row_tiles, persistent, smem, stream);
}

// Routes one launch to the (input, element, aligned) instantiation.
void launch_any(const MxArgs& a, const GroupedMeta& g, bool aligned, int64_t row_tiles,
                bool persistent, size_t smem, cudaStream_t stream) {
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    auto go = [&](auto dt) {
      constexpr DType DT = decltype(dt)::value;
      if (aligned) {
        launch_tiles<In, DT, true>(a, g, row_tiles, persistent, smem, stream);
      } else {
        launch_tiles<In, DT, false>(a, g, row_tiles, persistent, smem, stream);
      }
    };
    if (a.element == DType::kFloat8E4M3) {
      go(std::integral_constant<DType, DType::kFloat8E4M3>{});
    } else {
      go(std::integral_constant<DType, DType::kFloat8E5M2>{});
    }
  });
}

}  // namespace

void launch_mxfp8_grouped(const MxArgs& a, const GroupedMeta& g, cudaStream_t stream) {
  if (g.n == 0 || g.cols == 0 || g.rows_bound == 0) return;
  TESSERA_CHECK(g.n <= kMaxGroupedMembers, "grouped quantize: ", g.n,
                " members; the CUDA kernels take at most ", kMaxGroupedMembers);
  TESSERA_CHECK_STATUS(ceil_div(g.rows_bound, mx::kTileRows) * ceil_div(g.cols, mx::kBlock) <
                           (int64_t{1} << 31),
                       Status::kOutOfRange, "grouped quantize: (", g.rows_bound, ", ", g.cols,
                       ") has more MXFP8 tiles than the kernel supports (2^31)");
  MxArgs b = a;
  b.s_row_padded_cols = (ceil_div(g.cols, mx::kBlock) + 3) / 4 * 4;  // member column pads: device
  // Member offsets are multiples of K; with K % 32 == 0 every member row starts 16-byte aligned.
  const bool aligned = g.cols % mx::kBlock == 0 && aligned16(a.x) && aligned16(a.q_row) &&
                       aligned16(a.q_col);
  const int64_t row_tiles_bound = ceil_div(g.rows_bound, mx::kTileRows) + g.n;
  const size_t smem = sizeof(int64_t) * static_cast<size_t>(g.n + 1);
  launch_any(b, g, aligned, row_tiles_bound, true, smem, stream);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_mxfp8(const MxArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  const int64_t row_tiles = ceil_div(a.rows, mx::kTileRows);
  TESSERA_CHECK_STATUS(row_tiles * ceil_div(a.cols, mx::kBlock) < (int64_t{1} << 31),
                       Status::kOutOfRange, "quantize: x (", a.rows, ", ", a.cols,
                       ") has more MXFP8 tiles than the kernel supports (2^31)");
  const bool aligned = a.cols % mx::kBlock == 0 && aligned16(a.x) && aligned16(a.q_row) &&
                       aligned16(a.q_col);
  // The rowwise kernel indexes scales in 32 bits: the padded scale matrix must stay below 2^31.
  const int64_t padded_scales = ceil_div(a.rows, 128) * 128 * ceil_div(a.cols / mx::kBlock, 4) * 4;
  if (aligned && a.q_col == nullptr && !a.tile32x32 && padded_scales < (int64_t{1} << 31)) {
    launch_mxfp8_rowwise_stream(a, stream);
    return;
  }
  launch_any(a, GroupedMeta{}, aligned, row_tiles, false, 0, stream);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
