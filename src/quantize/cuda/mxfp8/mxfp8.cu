// MXFP8 quantization, rowwise (1x32 blocks) and columnwise (32x1 blocks) in ONE pass over x;
// kMXFP8_32x32 (one scale per 32x32 tile, stored expanded in both scale matrices) too.
//
// Tiling: a warp owns a 32 x 32 tile (lane = row, 32 consecutive elements per lane, 16-byte
// loads); a block of 8 warps owns 32 rows x 256 columns. The row block amax is thread-local; the
// 32 column amaxes are a reduce-scatter over the warp (31 shuffles, lane c ends with column c),
// and the column multipliers go back through shared memory. Codes are stored 16 bytes at a time
// (both copies are (M, K)). Edge tiles (K or M not multiples of 32, unaligned views) use a
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

// One halving step of the reduce-scatter: lanes with bit kHalf set keep the upper half of the
// live entries, the others the lower half; each takes the max with its partner's copy.
template <int kHalf>
__device__ __forceinline__ void scatter_step(uint32_t (&v)[kBlock], int lane) {
  const bool upper = (lane & kHalf) != 0;
#pragma unroll
  for (int j = 0; j < kHalf; ++j) {
    const uint32_t send = upper ? v[j] : v[j + kHalf];
    const uint32_t keep = upper ? v[j + kHalf] : v[j];
    v[j] = max(keep, __shfl_xor_sync(0xffffffffu, send, kHalf));
  }
}

// Reduce-scatter of max over the warp: returns, on lane c, the max over lanes of input v[c].
__device__ __forceinline__ uint32_t column_max_scatter(uint32_t (&v)[kBlock]) {
  const int lane = threadIdx.x % 32;
  scatter_step<16>(v, lane);
  scatter_step<8>(v, lane);
  scatter_step<4>(v, lane);
  scatter_step<2>(v, lane);
  scatter_step<1>(v, lane);
  return v[0];
}

// One 32 x 256 tile (tile_m, tile_k) of the tensor described by `a`.
template <class In, DType DT>
__device__ __forceinline__ void mxfp8_tile(const MxArgs& a, int64_t tile_m, int64_t tile_k,
                                           bool vec_ok) {
  __shared__ __align__(16) float s_mult[kWarps][kBlock];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t M = a.rows, K = a.cols;
  const int64_t m = tile_m * kBlock + lane;
  const int64_t k0 = (tile_k * kWarps + warp) * kBlock;
  const In* x = static_cast<const In*>(a.x);
  const bool fast = vec_ok && m < M && k0 < K;  // vec_ok: K % 32 == 0 and aligned views
  float v[kBlock];
  if (fast) {
    constexpr int kVec = kVec16<In>;
#pragma unroll
    for (int c = 0; c < kBlock; c += kVec) {
      float tmp[kVec];
      load_vec<In, kVec>(x + m * K + k0 + c, tmp);
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[c + j] = tmp[j];
    }
  } else {
#pragma unroll
    for (int c = 0; c < kBlock; ++c) {
      v[c] = (m < M && k0 + c < K) ? load_float(x[m * K + k0 + c]) : 0.0f;
    }
  }
  uint32_t bits[kBlock];
  uint32_t row_amax = 0;
#pragma unroll
  for (int c = 0; c < kBlock; ++c) {
    bits[c] = abs_bits(v[c]);
    row_amax = max(row_amax, bits[c]);
  }
  const bool need_col = a.q_col != nullptr || a.tile32x32;
  const uint32_t col_amax = need_col ? column_max_scatter(bits) : 0u;  // column k0 + lane
  uint8_t e_row = 0, e_col = 0;
  if (a.tile32x32) {
    e_row = e_col = mx_scale<DT>(warp_max(col_amax), a.floor_rule);
  } else {
    if (a.q_row != nullptr) e_row = mx_scale<DT>(row_amax, a.floor_rule);
    if (a.q_col != nullptr) e_col = mx_scale<DT>(col_amax, a.floor_rule);
  }
  const int64_t kb = k0 / kBlock, mb = tile_m;
  if (a.q_row != nullptr) {
    const float mult = scale_rules::e8m0_multiplier(e_row);
    Vec<uint8_t, 16> c0, c1;
    float lo[16], hi[16];
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      lo[c] = v[c];
      hi[c] = v[16 + c];
    }
    encode_fp8_vec<DT, 16>(lo, mult, c0);
    encode_fp8_vec<DT, 16>(hi, mult, c1);
    if (fast) {
      *reinterpret_cast<Vec<uint8_t, 16>*>(a.q_row + m * K + k0) = c0;
      *reinterpret_cast<Vec<uint8_t, 16>*>(a.q_row + m * K + k0 + 16) = c1;
    } else if (m < M) {
#pragma unroll
      for (int c = 0; c < kBlock; ++c) {
        if (k0 + c < K) a.q_row[m * K + k0 + c] = c < 16 ? c0.v[c] : c1.v[c - 16];
      }
    }
    if (m < M && k0 < K) {
      const int64_t off = a.swizzled ? swizzled_offset(m, kb, a.s_row_padded_cols)
                                     : m * ceil_div_device(K, kBlock) + kb;
      a.s_row[off] = e_row;
    }
  }
  if (a.q_col != nullptr) {
    __syncwarp();  // the previous tile's reads of s_mult are done
    s_mult[warp][lane] = scale_rules::e8m0_multiplier(e_col);
    if (k0 + lane < K) {
      const int64_t off = a.swizzled ? swizzled_offset(k0 + lane, mb, a.s_col_padded_cols)
                                     : mb * K + k0 + lane;
      a.s_col[off] = e_col;
    }
    __syncwarp();
    float lo[16], hi[16];  // products, columns [0, 16) and [16, 32)
#pragma unroll
    for (int c = 0; c < 16; c += 4) {
      const float4 ml = *reinterpret_cast<const float4*>(&s_mult[warp][c]);
      const float4 mh = *reinterpret_cast<const float4*>(&s_mult[warp][16 + c]);
      lo[c] = v[c] * ml.x;
      lo[c + 1] = v[c + 1] * ml.y;
      lo[c + 2] = v[c + 2] * ml.z;
      lo[c + 3] = v[c + 3] * ml.w;
      hi[c] = v[16 + c] * mh.x;
      hi[c + 1] = v[16 + c + 1] * mh.y;
      hi[c + 2] = v[16 + c + 2] * mh.z;
      hi[c + 3] = v[16 + c + 3] * mh.w;
    }
    Vec<uint8_t, 16> c0, c1;
    encode_fp8_products<DT, 16>(lo, c0);
    encode_fp8_products<DT, 16>(hi, c1);
    if (fast) {
      *reinterpret_cast<Vec<uint8_t, 16>*>(a.q_col + m * K + k0) = c0;
      *reinterpret_cast<Vec<uint8_t, 16>*>(a.q_col + m * K + k0 + 16) = c1;
    } else if (m < M) {
#pragma unroll
      for (int c = 0; c < kBlock; ++c) {
        if (k0 + c < K) a.q_col[m * K + k0 + c] = c < 16 ? c0.v[c] : c1.v[c - 16];
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
  const int64_t tiles_k = ceil_div_device(g.cols, kBlock * kWarps);
  grouped_tile_prefix<kThreads>(g, kBlock, tiles_k, prefix);
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
  const dim3 grid(static_cast<unsigned>(ceil_div(a.cols, kBlock * kWarps)),
                  static_cast<unsigned>(ceil_div(a.rows, kBlock)));
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
      (ceil_div(g.rows_bound, kBlock) + g.n) * ceil_div(g.cols, kBlock * kWarps);
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
