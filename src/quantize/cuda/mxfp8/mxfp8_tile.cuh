// Device building blocks of the MXFP8 kernels (mxfp8.cu, mxfp8_rowwise.cu): the E8M0 scale of a
// block amax, 8-element input chunks kept packed in registers, the 32 x 64 warp tile that
// produces both usages in one pass, and the zero padding of the GEMM-swizzled scale layout.
//
// Warp tile (32 rows x 64 columns, no shared memory, no block barrier): lane = sub * 8 + chunk
// (sub 0..3, chunk 0..7) holds rows sub, sub + 4, ..., sub + 28 of the tile at columns
// [8 chunk, 8 chunk + 8): one warp load covers 4 rows x 128 contiguous bytes (BF16), a lane keeps
// eight independent 16-byte loads in flight. A 32-column row block lives in 4 lanes (chunk xor
// 1, 2), a 32-row column block in 4 lanes (sub: lane xor 8, 16); both amaxes reduce by shuffles.
// The data path needs K % 32 == 0 and 16-byte aligned x and codes (kAligned); the other path
// loads and stores element by element with bounds checks. Out-of-range elements count as 0 in
// every amax.
#pragma once

#include <cstdint>
#include <type_traits>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/kernels.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant::mx {

constexpr int kBlock = 32;      // MX block length
constexpr int kChunk = 8;       // elements per lane per row
constexpr int kTileRows = 32;   // rows of a warp tile (one column block)
constexpr int kTileCols = 64;   // columns of a warp tile (two row blocks)
constexpr int kLaneRows = 8;    // rows per lane: sub + 4 j

// E8M0 scale byte of a block whose |x| maximum has float bits amax_bits (NaN: any pattern above
// +inf). Round-up or floor rule as scale_rules says.
template <DType DT>
__device__ __forceinline__ uint8_t mx_scale(uint32_t amax_bits, bool floor_rule) {
  constexpr float kMax = formats::FormatTraits<DT>::kMax;
  constexpr int kEmax = DT == DType::kFloat8E4M3 ? 8 : 15;
  const float amax = scale_rules::amax_from_abs_bits(amax_bits);
  return floor_rule ? scale_rules::e8m0_floor(amax, kEmax)
                    : scale_rules::e8m0_round_up(amax, 1.0f / kMax);
}

// Eight consecutive input elements as raw bits: four words of packed 16-bit pairs (BF16/FP16,
// element 2w in the low half of word w) or eight float words. Amaxes are taken on these bits:
// |x| of a 16-bit value is its bits & 0x7fff, ordered like the value (NaN above inf), so the
// 16-bit maximum converted to float equals the float maximum. Accumulators are words of the same
// packing (kAcc of them per chunk).
template <class In>
struct Chunk {
  static constexpr bool kPacked = sizeof(In) == 2;
  static constexpr int kWords = kPacked ? kChunk / 2 : kChunk;
  static constexpr int kAcc = kWords;
  uint32_t w[kWords];

  // Float abs bits of one 16-bit abs value / of accumulator element i.
  static __device__ __forceinline__ uint32_t widen(uint32_t h) {
    if constexpr (std::is_same_v<In, bf16>) {
      return h << 16;
    } else {
      return __float_as_uint(__half2float(__ushort_as_half(static_cast<unsigned short>(h))));
    }
  }
  __device__ __forceinline__ float value(int i) const {
    if constexpr (!kPacked) {
      return __uint_as_float(w[i]);
    } else if constexpr (std::is_same_v<In, bf16>) {
      return __uint_as_float(i % 2 == 0 ? w[i / 2] << 16 : w[i / 2] & 0xffff0000u);
    } else {
      return __half2float(__ushort_as_half(static_cast<unsigned short>(w[i / 2] >> (16 * (i % 2)))));
    }
  }
  // p: 16-byte aligned, 8 readable elements.
  __device__ __forceinline__ void load(const In* p) {
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = v.x;
      w[4 * i + 1] = v.y;
      w[4 * i + 2] = v.z;
      w[4 * i + 3] = v.w;
    }
  }
  // Elements [0, n) from p, the rest 0 (n <= 0: all 0).
  __device__ __forceinline__ void load_partial(const In* p, int64_t n) {
    zero();
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < n) {
        if constexpr (kPacked) {
          w[i / 2] |= static_cast<uint32_t>(p[i].bits) << (16 * (i % 2));
        } else {
          w[i] = __float_as_uint(p[i]);
        }
      }
    }
  }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = 0;
  }
  // Accumulator max (packed lanes for 16-bit inputs).
  static __device__ __forceinline__ uint32_t acc_max(uint32_t a, uint32_t b) {
    return kPacked ? max_u16x2(a, b) : max(a, b);
  }
  static __device__ __forceinline__ uint32_t abs_word(uint32_t x) {
    return x & (kPacked ? 0x7fff7fffu : 0x7fffffffu);
  }
  // acc[i] = max(acc[i], |word i|): column amaxes over rows.
  __device__ __forceinline__ void max_into(uint32_t (&acc)[kAcc]) const {
#pragma unroll
    for (int i = 0; i < kWords; ++i) acc[i] = acc_max(acc[i], abs_word(w[i]));
  }
  // Float abs bits of element i of an accumulator array.
  static __device__ __forceinline__ uint32_t acc_bits(const uint32_t (&acc)[kAcc], int i) {
    if constexpr (kPacked) {
      return widen((acc[i / 2] >> (16 * (i % 2))) & 0xffffu);
    } else {
      return acc[i];
    }
  }
  // Max |x| of the chunk as one accumulator word (combine across lanes with acc_max, then
  // acc_word_bits).
  __device__ __forceinline__ uint32_t row_acc() const {
    uint32_t m = abs_word(w[0]);
#pragma unroll
    for (int i = 1; i < kWords; ++i) m = acc_max(m, abs_word(w[i]));
    return m;
  }
  static __device__ __forceinline__ uint32_t acc_word_bits(uint32_t m) {
    if constexpr (kPacked) {
      return widen(max(m & 0xffffu, m >> 16));
    } else {
      return m;
    }
  }
};

// Eight codes of chunk c times `mult` (one multiplier, the rowwise scale).
template <DType DT, class In>
__device__ __forceinline__ Vec<uint8_t, kChunk> encode_chunk(const Chunk<In>& c, float mult) {
  float y[kChunk];
#pragma unroll
  for (int i = 0; i < kChunk; ++i) y[i] = c.value(i) * mult;
  Vec<uint8_t, kChunk> out;
  encode_fp8_products<DT, kChunk>(y, out);
  return out;
}

// Stores codes [0, n) at q (the whole vector when n == kChunk and kAligned).
template <bool kAligned>
__device__ __forceinline__ void store_codes(uint8_t* q, const Vec<uint8_t, kChunk>& c, int64_t n) {
  if (kAligned && n >= kChunk) {
    *reinterpret_cast<Vec<uint8_t, kChunk>*>(q) = c;
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < n) q[i] = c.v[i];
    }
  }
}

// One tensor (or one grouped member) as the tile code sees it. Invariants: x is (M, K) row-major;
// q_row / q_col are (M, K) or null; s_row is (M, ceil(K/32)) compact or swizzled with padded
// width row_pad; s_col is (ceil(M/32), K) compact or, swizzled, the transpose (K, ceil(M/32))
// with padded width col_pad.
template <class In>
struct MxTensor {
  const In* x;
  int64_t M, K;
  uint8_t *q_row, *s_row, *q_col, *s_col;
  int64_t row_pad, col_pad;
};

struct MxRule {
  bool tile32x32, floor_rule, swizzled;
};

// Scale byte offsets: rowwise (m, kb) of the (M, nb) matrix, columnwise (mb, k).
__device__ __forceinline__ int64_t row_scale_offset(bool swizzled, int64_t m, int64_t kb,
                                                    int64_t nb, int64_t pad) {
  return swizzled ? swizzled_offset(m, kb, pad) : m * nb + kb;
}
__device__ __forceinline__ int64_t col_scale_offset(bool swizzled, int64_t mb, int64_t k,
                                                    int64_t K, int64_t pad) {
  return swizzled ? swizzled_offset(k, mb, pad) : mb * K + k;
}

// The warp tile (tm, tk) of t: rows [32 tm, 32 tm + 32), columns [64 tk, 64 tk + 64). Loading
// (mx_load_tile) and quantizing (mx_quantize_tile) are separate so that a caller may keep the
// next tile's loads in flight. Every lane of the warp calls both (shuffles over the full warp).
template <class In>
using TileRegs = Chunk<In>[kLaneRows];

template <class In, bool kAligned>
__device__ __forceinline__ void mx_load_tile(const MxTensor<In>& t, int64_t tm, int64_t tk,
                                             TileRegs<In>& raw) {
  const int lane = threadIdx.x % 32, sub = lane / 8, chunk = lane % 8;
  const int64_t K = t.K;
  const int64_t m0 = tm * kTileRows + sub;           // this lane's rows: m0 + 4 j
  const int64_t k = tk * kTileCols + chunk * kChunk;  // this lane's first column
  const int64_t k_left = K - k;                       // columns of the chunk inside x (may be <= 0)
  const In* xp = t.x + m0 * K + k;
#pragma unroll
  for (int j = 0; j < kLaneRows; ++j) {
    const bool row_in = m0 + 4 * j < t.M;
    if (kAligned) {
      if (row_in && k_left > 0) {
        raw[j].load(xp + 4 * j * K);
      } else {
        raw[j].zero();
      }
    } else {
      raw[j].load_partial(xp + 4 * j * K, row_in ? k_left : 0);
    }
  }
}

template <class In, DType DT, bool kAligned>
__device__ __forceinline__ void mx_quantize_tile(const MxTensor<In>& t, const MxRule& rule,
                                                 int64_t tm, int64_t tk, const TileRegs<In>& raw) {
  const int lane = threadIdx.x % 32, sub = lane / 8, chunk = lane % 8;
  const int64_t K = t.K;
  const int64_t m0 = tm * kTileRows + sub;
  const int64_t k = tk * kTileCols + chunk * kChunk;
  const int64_t k_left = K - k;
  // Column amaxes first (this lane's 8 rows, then the 4 lanes of the column block): their
  // scales are needed by every row below; row amaxes come one row at a time.
  const bool need_col = t.q_col != nullptr || rule.tile32x32;
  float cmult[kChunk];
  uint8_t tile_e = 0;
  if (need_col) {
    using C = Chunk<In>;
    uint32_t acc[C::kAcc] = {};
#pragma unroll
    for (int j = 0; j < kLaneRows; ++j) raw[j].max_into(acc);
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) {
      acc[i] = C::acc_max(acc[i], __shfl_xor_sync(0xffffffffu, acc[i], 8));
      acc[i] = C::acc_max(acc[i], __shfl_xor_sync(0xffffffffu, acc[i], 16));
    }
    uint32_t cmax[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) cmax[i] = C::acc_bits(acc, i);
    if (rule.tile32x32) {  // one scale per 32 x 32 tile: the max of its 32 column amaxes
      uint32_t m = 0;
#pragma unroll
      for (int i = 0; i < kChunk; ++i) m = max(m, cmax[i]);
      m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
      tile_e = mx_scale<DT>(m, rule.floor_rule);
    }
    const bool store = t.q_col != nullptr && sub == 0;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const uint8_t e = rule.tile32x32 ? tile_e : mx_scale<DT>(cmax[i], rule.floor_rule);
      cmult[i] = scale_rules::e8m0_multiplier(e);
      if (store && i < k_left) t.s_col[col_scale_offset(rule.swizzled, tm, k + i, K, t.col_pad)] = e;
    }
  }
  const int64_t nb = (K + kBlock - 1) / kBlock, kb = k / kBlock;
  int64_t at = m0 * K + k;  // code offset of row m0 + 4 j, advanced by 4 rows per step
#pragma unroll
  for (int j = 0; j < kLaneRows; ++j, at += 4 * K) {
    const int64_t m = m0 + 4 * j;
    uint32_t rmax = 0;
    if (t.q_row != nullptr && !rule.tile32x32) {
      rmax = raw[j].row_acc();
      rmax = Chunk<In>::acc_max(rmax, __shfl_xor_sync(0xffffffffu, rmax, 1));
      rmax = Chunk<In>::acc_word_bits(Chunk<In>::acc_max(rmax, __shfl_xor_sync(0xffffffffu, rmax, 2)));
    }
    if (m >= t.M || k_left <= 0) continue;  // no shuffles below: lanes may leave
    if (t.q_row != nullptr) {
      const uint8_t e = rule.tile32x32 ? tile_e : mx_scale<DT>(rmax, rule.floor_rule);
      store_codes<kAligned>(t.q_row + at, encode_chunk<DT>(raw[j], scale_rules::e8m0_multiplier(e)), k_left);
      if (chunk % 4 == 0) t.s_row[row_scale_offset(rule.swizzled, m, kb, nb, t.row_pad)] = e;
    }
    if (t.q_col != nullptr) {
      float y[kChunk];
#pragma unroll
      for (int i = 0; i < kChunk; ++i) y[i] = raw[j].value(i) * cmult[i];
      Vec<uint8_t, kChunk> codes;
      encode_fp8_products<DT, kChunk>(y, codes);
      store_codes<kAligned>(t.q_col + at, codes, k_left);
    }
  }
}

// Writes 0 to every padding byte of a swizzled (rows, cols) scale matrix padded to
// (roundup(rows, 128), pad_cols): entries with r >= rows or c >= cols. Work item i of n_items
// taken by the caller's index `first`, stepping by `step`.
__device__ __forceinline__ void zero_swizzle_padding(uint8_t* s, int64_t rows, int64_t cols,
                                                     int64_t pad_cols, int64_t first,
                                                     int64_t step) {
  if (rows == 0) return;  // an empty matrix has no storage at all
  const int64_t pad_rows = (rows + 127) / 128 * 128;
  const int64_t below = (pad_rows - rows) * pad_cols;  // rows [rows, pad_rows), every column
  const int64_t right = rows * (pad_cols - cols);      // rows [0, rows), columns [cols, pad_cols)
  for (int64_t i = first; i < below + right; i += step) {
    int64_t r, c;
    if (i < below) {
      r = rows + i / pad_cols;
      c = i % pad_cols;
    } else {
      r = (i - below) / (pad_cols - cols);
      c = cols + (i - below) % (pad_cols - cols);
    }
    s[swizzled_offset(r, c, pad_cols)] = 0;
  }
}

// Both swizzled scale matrices of t padded with zeros (no-op for compact scales).
template <class In>
__device__ __forceinline__ void zero_tensor_padding(const MxTensor<In>& t, const MxRule& rule,
                                                    int64_t first, int64_t step) {
  if (!rule.swizzled) return;
  if (t.q_row != nullptr) {
    zero_swizzle_padding(t.s_row, t.M, (t.K + kBlock - 1) / kBlock, t.row_pad, first, step);
  }
  if (t.q_col != nullptr) {
    zero_swizzle_padding(t.s_col, t.K, (t.M + kBlock - 1) / kBlock, t.col_pad, first, step);
  }
}

}  // namespace tessera::detail::cuda_quant::mx
