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
#include <type_traits>

#include "quantize/cuda/grouped_tiles.cuh"
#include "quantize/cuda/launchers.h"
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
// Register cap 102 (96 used, no spills): 20 warps per multiprocessor. Measured on the H200 (both
// usages, 16384 x 7168 BF16): cap 80 (24 warps, small spills) 3.2 TB/s, a persistent grid with
// the next tile's loads in flight (128 registers, 16 warps) 2.6 TB/s, this one 3.4 TB/s.
constexpr int kDefaultMinBlocks = 5;

template <class In>
__device__ __forceinline__ MxTensor<In> whole_tensor(const MxArgs& a) {
  return {static_cast<const In*>(a.x), a.rows, a.cols, a.q_row, a.s_row, a.q_col, a.s_col,
          a.s_row_padded_cols, a.s_col_padded_cols, a.layout};
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

// grouped: g.tensor_offsets != null (device member table, noop flag); else the tensor of `a`
// with one tile per warp (a grid-stride loop over more tiles than warps measured slower).
// tiles_k = ceil(K / 64) as a divider; tile counts are < 2^31 (host checks).
template <class In, DType DT, bool kAligned, int kMinBlocks>
__global__ __launch_bounds__(kThreads, kMinBlocks) void mxfp8_tile_kernel(MxArgs a, GroupedMeta g,
                                                                          DivMod31 tiles_k) {
  extern __shared__ int64_t prefix[];  // grouped: (n + 1) tile prefix sums
  const MxRule rule{a.tile32x32, a.floor_rule, a.swizzled};
  const int lane = threadIdx.x % 32;
  const int64_t warp0 = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  const int64_t warps = int64_t{gridDim.x} * kWarps;
  auto tile = [&](const MxTensor<In>& t, uint32_t local) {
    const uint32_t tm = tiles_k.div(local);
    mx::TileRegs<In> raw;
    mx::mx_load_tile<In, kAligned>(t, tm, local - tm * tiles_k.d, raw);
    mx::mx_quantize_tile<In, DT, kAligned>(t, rule, tm, local - tm * tiles_k.d, raw);
  };
  if (g.tensor_offsets == nullptr) {
    const MxTensor<In> t = whole_tensor<In>(a);
    const int64_t tiles = (t.M + mx::kTileRows - 1) / mx::kTileRows * tiles_k.d;
    for (int64_t w = warp0; w < tiles; w += warps) tile(t, static_cast<uint32_t>(w));
    mx::zero_tensor_padding(t, rule, warp0 * 32 + lane, warps * 32);
    return;
  }
  if (grouped_noop(g)) return;
  grouped_tile_prefix<kThreads>(g, mx::kTileRows, tiles_k.d, prefix);
  for (int64_t w = warp0; w < prefix[g.n]; w += warps) {
    const int64_t i = grouped_member_of(prefix, g.n, w);
    tile(member_tensor<In>(a, g, i), static_cast<uint32_t>(w - prefix[i]));
  }
  if (a.swizzled) {
    for (int64_t i = warp0; i < g.n; i += warps) {
      mx::zero_tensor_padding(member_tensor<In>(a, g, i), rule, lane, 32);
    }
  }
}

// row_tiles: 32-row tiles of the launch (grouped: a bound). A single tensor gets one warp per
// tile; a grouped launch (persistent) at most 16 blocks per multiprocessor.
template <class In, DType DT, bool kAligned>
void launch_tiles(const MxArgs& a, const GroupedMeta& g, int64_t row_tiles, bool persistent,
                  size_t smem, cudaStream_t stream) {
  const int64_t K = g.tensor_offsets != nullptr ? g.cols : a.cols;
  const int64_t tiles_k = ceil_div(K, mx::kTileCols);
  int64_t blocks = ceil_div(row_tiles * tiles_k, kWarps);
  const int64_t cap = int64_t{16} * sm_count();
  if (persistent && blocks > cap) blocks = cap;
  const unsigned grid = static_cast<unsigned>(blocks < 1 ? 1 : blocks);
  // FP32 input holds twice the raw registers: cap 128 instead of spilling.
  constexpr int kMinBlocks = std::is_same_v<In, float> ? 4 : kDefaultMinBlocks;
  mxfp8_tile_kernel<In, DT, kAligned, kMinBlocks>
      <<<grid, kThreads, smem, stream>>>(a, g, DivMod31::make(static_cast<uint32_t>(tiles_k)));
}

// Routes one launch to the (input, element, aligned) instantiation.
void launch_any(const MxArgs& a, const GroupedMeta& g, bool aligned, int64_t row_tiles,
                bool persistent, size_t smem, cudaStream_t stream) {
  dispatch_input_fp8(a.in, a.element, "quantize: x", [&](auto tag, auto dt) {
    using In = typename decltype(tag)::type;
    constexpr DType DT = decltype(dt)::value;
    if (aligned) {
      launch_tiles<In, DT, true>(a, g, row_tiles, persistent, smem, stream);
    } else {
      launch_tiles<In, DT, false>(a, g, row_tiles, persistent, smem, stream);
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
  if (aligned && a.q_col == nullptr && !a.tile32x32 && a.layout.dst == nullptr &&
      padded_scales < (int64_t{1} << 31)) {
    launch_mxfp8_rowwise_stream(a, stream);
    return;
  }
  launch_any(a, GroupedMeta{}, aligned, row_tiles, false, 0, stream);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
