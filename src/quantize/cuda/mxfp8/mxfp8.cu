// MXFP8 quantization, rowwise (1x32 blocks) and columnwise (32x1 blocks) in ONE pass over x;
// kMXFP8_32x32 (one scale per 32x32 tile, stored expanded in both scale matrices) too.
//
// Tiling: a block of 8 warps owns 64 rows x 256 columns; warp w rows [8w, 8w+8), lane l columns
// [8l, 8l+8) (16-byte loads, 8-byte code stores: a warp touches 256 contiguous elements of a row
// per access). Row block amaxes reduce over 4 lanes by shuffles, column block amaxes over 4
// warps through shared memory. Both copies are (M, K). Edge tiles (K or M not multiples of 32, unaligned views) use a
// per-element path with bounds checks; out-of-range elements count as 0 in the amax.
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/grouped_tiles.cuh"
#include "quantize/cuda/kernels.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/core/dispatch.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlock = 32;

template <DType DT>
__device__ __forceinline__ uint8_t mx_scale(uint32_t amax_bits, bool floor_rule) {
  constexpr float kMax = formats::FormatTraits<DT>::kMax;
  constexpr int kEmax = DT == DType::kFloat8E4M3 ? 8 : 15;
  const float amax = scale_rules::amax_from_abs_bits(amax_bits);
  return floor_rule ? scale_rules::e8m0_floor(amax, kEmax)
                    : scale_rules::e8m0_round_up(amax, 1.0f / kMax);
}

constexpr int kTileRows = 64, kTileCols = 256;  // one tile per block iteration
constexpr int kRowsPerWarp = kTileRows / kWarps;   // 8
constexpr int kColsPerLane = kTileCols / 32;       // 8
constexpr int kHalves = kTileRows / kBlock;        // 2 column blocks of 32 rows per tile

// One 64 x 256 tile (tile_m, tile_k) of the tensor described by `a`. Warp w owns rows
// [8w, 8w+8) of the tile (column block w / 4), lane l columns [8l, 8l+8): every load and store
// of a warp covers 256 contiguous elements of one row, and a thread keeps 8 independent 16-byte
// loads in flight. The raw input stays in registers (packed for 16-bit inputs). Row blocks
// (32 columns = 4 lanes) reduce by shuffles; column blocks (32 rows = 4 warps) through shared
// memory.
template <class In, DType DT>
__device__ __forceinline__ void mxfp8_tile(const MxArgs& a, int64_t tile_m, int64_t tile_k,
                                           bool vec_ok) {
  constexpr int kVec = kVec16<In> < kColsPerLane ? kVec16<In> : kColsPerLane;
  constexpr int kVecs = kColsPerLane / kVec;
  using V = Vec<In, kVec>;
  __shared__ uint32_t s_colmax[kWarps][kTileCols];
  __shared__ __align__(16) float s_mult[kHalves][kTileCols];
  __shared__ uint8_t s_tile_e[kHalves][kTileCols / kBlock];
  const int t = threadIdx.x, warp = t / 32, lane = t % 32, half = warp / (kWarps / kHalves);
  const int64_t M = a.rows, K = a.cols;
  const int64_t m0 = tile_m * kTileRows + warp * kRowsPerWarp;
  const int64_t k = tile_k * kTileCols + lane * kColsPerLane;  // this lane's first column
  const In* x = static_cast<const In*>(a.x);
  const bool need_col = a.q_col != nullptr || a.tile32x32;
  V raw[kRowsPerWarp][kVecs];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t m = m0 + r;
    if (vec_ok && m < M && k < K) {  // vec_ok: K % 32 == 0 (whole 8-vectors) and aligned views
#pragma unroll
      for (int i = 0; i < kVecs; ++i) raw[r][i] = *reinterpret_cast<const V*>(x + m * K + k + i * kVec);
    } else {
#pragma unroll
      for (int c = 0; c < kColsPerLane; ++c) {
        raw[r][c / kVec].v[c % kVec] = (m < M && k + c < K) ? x[m * K + k + c] : In{};
      }
    }
  }
  auto value = [&](int r, int c) { return load_float(raw[r][c / kVec].v[c % kVec]); };
  uint32_t row_amax[kRowsPerWarp];
  uint32_t col_part[kColsPerLane] = {};
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    uint32_t mx = 0;
#pragma unroll
    for (int c = 0; c < kColsPerLane; ++c) {
      const uint32_t b = abs_bits(value(r, c));
      mx = max(mx, b);
      col_part[c] = max(col_part[c], b);
    }
    mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    row_amax[r] = max(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  }
  const int64_t k_first = tile_k * kTileCols;
  if (need_col) {
    __syncthreads();  // the previous tile's readers of the shared arrays are done
#pragma unroll
    for (int c = 0; c < kColsPerLane; ++c) s_colmax[warp][lane * kColsPerLane + c] = col_part[c];
    __syncthreads();
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      uint32_t cm = 0;  // column t of the tile over the 32 rows of column block h
#pragma unroll
      for (int w = 0; w < kWarps / kHalves; ++w) cm = max(cm, s_colmax[h * (kWarps / kHalves) + w][t]);
      const int64_t mb = tile_m * kHalves + h;  // column block index (32-row block)
      uint8_t e;
      if (a.tile32x32) {
        e = mx_scale<DT>(warp_max(cm), a.floor_rule);  // warp t/32 = the tile's 32 columns
        if (lane == 0) s_tile_e[h][warp] = e;
      } else {
        e = mx_scale<DT>(cm, a.floor_rule);
      }
      s_mult[h][t] = scale_rules::e8m0_multiplier(e);
      if (a.q_col != nullptr && k_first + t < K && mb * kBlock < M) {
        const int64_t off = a.swizzled ? swizzled_offset(k_first + t, mb, a.s_col_padded_cols)
                                       : mb * K + k_first + t;
        a.s_col[off] = e;
      }
    }
    __syncthreads();
  }
  const int64_t kb = k / kBlock;
  const int64_t row_blocks = ceil_div_device(K, kBlock);
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t m = m0 + r;
    const bool full = vec_ok && m < M && k < K;
    float f[kColsPerLane];
#pragma unroll
    for (int c = 0; c < kColsPerLane; ++c) f[c] = value(r, c);
    if (a.q_row != nullptr) {
      const uint8_t e =
          a.tile32x32 ? s_tile_e[half][lane / 4] : mx_scale<DT>(row_amax[r], a.floor_rule);
      Vec<uint8_t, kColsPerLane> codes;
      encode_fp8_vec<DT, kColsPerLane>(f, scale_rules::e8m0_multiplier(e), codes);
      if (full) {
        *reinterpret_cast<Vec<uint8_t, kColsPerLane>*>(a.q_row + m * K + k) = codes;
      } else if (m < M) {
#pragma unroll
        for (int c = 0; c < kColsPerLane; ++c) {
          if (k + c < K) a.q_row[m * K + k + c] = codes.v[c];
        }
      }
      if (lane % 4 == 0 && m < M && k < K) {
        const int64_t off = a.swizzled ? swizzled_offset(m, kb, a.s_row_padded_cols)
                                       : m * row_blocks + kb;
        a.s_row[off] = e;
      }
    }
    if (a.q_col != nullptr) {
      float y[kColsPerLane];
#pragma unroll
      for (int c = 0; c < kColsPerLane; ++c) y[c] = f[c] * s_mult[half][lane * kColsPerLane + c];
      Vec<uint8_t, kColsPerLane> codes;
      encode_fp8_products<DT, kColsPerLane>(y, codes);
      if (full) {
        *reinterpret_cast<Vec<uint8_t, kColsPerLane>*>(a.q_col + m * K + k) = codes;
      } else if (m < M) {
#pragma unroll
        for (int c = 0; c < kColsPerLane; ++c) {
          if (k + c < K) a.q_col[m * K + k + c] = codes.v[c];
        }
      }
    }
  }
}

template <class In, DType DT>
__global__ __launch_bounds__(kThreads) void mxfp8_kernel(MxArgs a, bool vec_ok) {
  mxfp8_tile<In, DT>(a, blockIdx.y, blockIdx.x, vec_ok);
}

// Grouped: all members' tiles in one persistent loop; member i is the (rows_i, K) tensor at its
// offsets, quantized exactly as alone.
template <class In, DType DT>
__global__ __launch_bounds__(kThreads) void mxfp8_grouped_kernel(MxArgs a, GroupedMeta g,
                                                                 bool vec_ok) {
  extern __shared__ int64_t prefix[];  // (n + 1)
  if (grouped_noop(g)) return;
  const int64_t tiles_k = ceil_div_device(g.cols, kTileCols);
  grouped_tile_prefix<kThreads>(g, kTileRows, tiles_k, prefix);
  const In* x = static_cast<const In*>(a.x);
  for (int64_t t = blockIdx.x; t < prefix[g.n]; t += gridDim.x) {
    const int64_t i = grouped_member_of(prefix, g.n, t);
    const int64_t local = t - prefix[i], off = g.tensor_offsets[i];
    MxArgs m = a;
    m.x = x + off;
    m.rows = member_rows(g, i);
    m.cols = g.cols;
    if (a.q_row != nullptr) {
      m.q_row = a.q_row + off;
      m.s_row = a.s_row + g.scale_offsets[i];
    }
    if (a.q_col != nullptr) {
      m.q_col = a.q_col + off;
      m.s_col = a.s_col + g.col_scale_offsets[i];
    }
    mxfp8_tile<In, DT>(m, local / tiles_k, local % tiles_k, vec_ok);
  }
}

template <class In, DType DT>
void launch_typed(const MxArgs& a, cudaStream_t stream) {
  const bool vec_ok = a.cols % kBlock == 0 && aligned16(a.x) && aligned16(a.q_row) &&
                      aligned16(a.q_col);
  const dim3 grid(static_cast<unsigned>(ceil_div(a.cols, kTileCols)),
                  static_cast<unsigned>(ceil_div(a.rows, kTileRows)));
  mxfp8_kernel<In, DT><<<grid, kThreads, 0, stream>>>(a, vec_ok);
}

}  // namespace

void launch_mxfp8_grouped(const MxArgs& a, const GroupedMeta& g, cudaStream_t stream) {
  if (g.n == 0 || g.cols == 0 || g.rows_bound == 0) return;
  TESSERA_CHECK(g.n <= kMaxGroupedMembers, "grouped quantize: ", g.n,
                " members; the CUDA kernels take at most ", kMaxGroupedMembers);
  TESSERA_CHECK_STATUS(!a.swizzled, Status::kUnsupported,
                       "grouped quantize: MXFP8 with swizzled scales has no grouped CUDA kernel "
                       "yet (compact scales only)");
  // Member offsets are multiples of K; with K % 32 == 0 every member row starts 16-byte aligned.
  const bool vec_ok = g.cols % kBlock == 0 && aligned16(a.x) && aligned16(a.q_row) &&
                      aligned16(a.q_col);
  const int64_t tiles_bound =
      (ceil_div(g.rows_bound, kTileRows) + g.n) * ceil_div(g.cols, kTileCols);
  const unsigned grid = grid_stride_blocks(tiles_bound, 1, 8);
  const size_t smem = sizeof(int64_t) * static_cast<size_t>(g.n + 1);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    if (a.element == DType::kFloat8E4M3) {
      mxfp8_grouped_kernel<In, DType::kFloat8E4M3><<<grid, kThreads, smem, stream>>>(a, g, vec_ok);
    } else {
      mxfp8_grouped_kernel<In, DType::kFloat8E5M2><<<grid, kThreads, smem, stream>>>(a, g, vec_ok);
    }
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_mxfp8(const MxArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  TESSERA_CHECK_STATUS(ceil_div(a.rows, kBlock) <= 65535, Status::kOutOfRange, "quantize: x has ",
                       a.rows, " rows; the MXFP8 kernel supports up to ", 65535 * kBlock);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    if (a.element == DType::kFloat8E4M3) {
      launch_typed<In, DType::kFloat8E4M3>(a, stream);
    } else {
      launch_typed<In, DType::kFloat8E5M2>(a, stream);
    }
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
