// Device building blocks of the MXFP8 kernels (mxfp8.cu, mxfp8_rowwise.cu): the E8M0 scale of a
// block amax, 8-element input chunks kept packed in registers, reduce-scatter / gather over 4
// lanes, the 32 x 64 warp tile that produces both usages in one pass, and the zero padding of the
// GEMM-swizzled scale layout.
//
// Warp tile (32 rows x 64 columns, no shared memory, no block barrier): lane = sub * 8 + chunk
// (sub 0..3, chunk 0..7) holds rows sub, sub + 4, ..., sub + 28 of the tile at columns
// [8 chunk, 8 chunk + 8): one warp load covers 4 rows x 128 contiguous bytes (BF16), a lane keeps
// eight independent 16-byte loads in flight. A 32-column row block lives in 4 lanes (chunk xor
// 1, 2), a 32-row column block in 4 lanes (sub: lane xor 8, 16); both amaxes reduce by a
// reduce-scatter, so each lane computes 2 row and 2 column scales and gathers the rest.
// The data path needs K % 32 == 0 and 16-byte aligned x and codes (kAligned); the other path
// loads and stores element by element with bounds checks. Out-of-range elements count as 0 in
// every amax.
#pragma once

#include <cstdint>
#include <type_traits>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/launchers.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant::mx {

constexpr int kBlock = 32;      // MX block length
constexpr int kChunk = 8;       // elements per lane per row
constexpr int kTileRows = 32;   // rows of a warp tile (one column block)

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
  // Float abs bits of column i (0 or 1) of a lane's two reduced columns (one packed word or two
  // float words, see reduce_scatter4).
  static __device__ __forceinline__ uint32_t pair_bits(const uint32_t (&acc)[kAcc / 4], int i) {
    if constexpr (kPacked) {
      return widen((acc[0] >> (16 * i)) & 0xffffu);
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

// Reduce-scatter over the 4 lanes {l, l^a, l^b, l^a^b}: every lane holds v[N]; afterwards
// lane l holds out[N/4] = entries [q N/4, (q+1) N/4) of v combined (op) over the 4 lanes, with
// q = 2 (l & a ? 1 : 0) + (l & b ? 1 : 0). 3 (N = 4) or 6 (N = 8) shuffles instead of 2 N.
template <int N, class Op>
__device__ __forceinline__ void reduce_scatter4(const uint32_t (&v)[N], uint32_t (&out)[N / 4],
                                                int a, int b, Op op) {
  const int lane = threadIdx.x % 32;
  const bool hi = (lane & a) != 0, lo = (lane & b) != 0;
  uint32_t half[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const uint32_t send = hi ? v[i] : v[N / 2 + i], keep = hi ? v[N / 2 + i] : v[i];
    half[i] = op(keep, __shfl_xor_sync(0xffffffffu, send, a));
  }
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const uint32_t send = lo ? half[i] : half[N / 4 + i], keep = lo ? half[N / 4 + i] : half[i];
    out[i] = op(keep, __shfl_xor_sync(0xffffffffu, send, b));
  }
}

// The inverse gather: lane l gets all[e] = entry e of the group, held by the lane of quarter
// e / (N/4) (same a, b as reduce_scatter4) as its mine[e % (N/4)].
template <int N>
__device__ __forceinline__ void gather4(const float (&mine)[N / 4], float (&all)[N], int a, int b) {
  const int base = (threadIdx.x % 32) & ~(a | b);
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const int q = e / (N / 4);
    all[e] = __shfl_sync(0xffffffffu, mine[e % (N / 4)], base | (q & 2 ? a : 0) | (q & 1 ? b : 0));
  }
}

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
  LayoutRows layout;  // dst != nullptr: the rows of x read through it (MxArgs::layout)
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

// Warp tile geometry: kSubs row groups x kChunks column chunks of lanes; lane = sub * kChunks +
// chunk holds rows sub + kSubs j (j < kLaneRows) at columns [8 chunk, 8 chunk + 8). (A 32 x 32
// tile, 8 row groups of 4 rows, needs fewer registers but measured slower on the H200: 2.3-2.8
// vs 3.3-3.4 TB/s for both usages.)
constexpr int kSubs = 4;
constexpr int kChunks = 32 / kSubs;             // 8
constexpr int kLaneRows = kTileRows / kSubs;    // 8 rows per lane
constexpr int kTileCols = kChunks * kChunk;     // 64 tile columns

// The warp tile (tm, tk) of t: rows [32 tm, 32 tm + 32), columns [64 tk, 64 tk + 64). Every
// lane of the warp calls both halves (warp shuffles in mx_quantize_tile).
template <class In>
using TileRegs = Chunk<In>[kLaneRows];

template <class In, bool kAligned>
__device__ __forceinline__ void mx_load_tile(const MxTensor<In>& t, int64_t tm, int64_t tk,
                                             TileRegs<In>& raw) {
  const int lane = threadIdx.x % 32, sub = lane / kChunks, chunk = lane % kChunks;
  const int64_t K = t.K;
  const int64_t m0 = tm * kTileRows + sub;            // this lane's rows: m0 + kSubs j
  const int64_t k = tk * kTileCols + chunk * kChunk;   // this lane's first column
  const int64_t k_left = K - k;                       // columns of the chunk inside x (may be <= 0)
  // Row m0 + kSubs j of the matrix is row first + kSubs j of x while that is below `end`: x's
  // own rows, or through the layout one search for the tile's first row (the tile lies in one
  // group) — a padding row or one past the last group reads as zero.
  int64_t first = m0, end = t.M;
  if (t.layout.dst != nullptr) {
    const int64_t r0 = tm * kTileRows;
    const int64_t s0 = t.layout.source_row(r0, &end);
    first = s0 < 0 ? 0 : s0 + sub;
    if (s0 < 0) end = 0;
  }
  const In* xp = t.x + first * K + k;
#pragma unroll
  for (int j = 0; j < kLaneRows; ++j) {
    const bool row_in = m0 + kSubs * j < t.M && first + kSubs * j < end;
    if (kAligned) {
      if (row_in && k_left > 0) {
        raw[j].load(xp + kSubs * j * K);
      } else {
        raw[j].zero();
      }
    } else {
      raw[j].load_partial(xp + kSubs * j * K, row_in ? k_left : 0);
    }
  }
}

template <class In, DType DT, bool kAligned>
__device__ __forceinline__ void mx_quantize_tile(const MxTensor<In>& t, const MxRule& rule,
                                                 int64_t tm, int64_t tk, const TileRegs<In>& raw) {
  using C = Chunk<In>;
  const int lane = threadIdx.x % 32, sub = lane / kChunks, chunk = lane % kChunks;
  const int64_t K = t.K;
  const int64_t m0 = tm * kTileRows + sub;
  const int64_t k = tk * kTileCols + chunk * kChunk;
  const int64_t k_left = K - k;
  const auto acc_max = [](uint32_t x, uint32_t y) { return C::acc_max(x, y); };
  // Column amaxes: this lane's 8 rows, then a reduce-scatter over the 4 lanes of the column
  // block (sub: lane xor 16, 8) leaves columns 2 sub, 2 sub + 1 with this lane, which computes
  // and stores their 2 scales; gather4 brings the 8 multipliers of the chunk's columns back.
  constexpr int kColA = 2 * kChunks, kColB = kChunks;
  const bool need_col = t.q_col != nullptr || rule.tile32x32;
  float cmult[kChunk];
  float tile_mult = 0.0f;
  uint8_t tile_e = 0;
  if (need_col) {
    uint32_t acc[C::kAcc] = {};
#pragma unroll
    for (int j = 0; j < kLaneRows; ++j) raw[j].max_into(acc);
    uint32_t mine[C::kAcc / 4];
    reduce_scatter4<C::kAcc>(acc, mine, kColA, kColB, acc_max);
    const uint32_t c0 = C::pair_bits(mine, 0), c1 = C::pair_bits(mine, 1);
    if (rule.tile32x32) {  // one scale per 32 x 32 tile: the max of its 32 column amaxes
      uint32_t m = max(c0, c1);
      m = max(m, __shfl_xor_sync(0xffffffffu, m, kColA));
      m = max(m, __shfl_xor_sync(0xffffffffu, m, kColB));
      m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
      tile_e = mx_scale<DT>(m, rule.floor_rule);
      tile_mult = scale_rules::e8m0_multiplier(tile_e);
    }
    const uint8_t e0 = rule.tile32x32 ? tile_e : mx_scale<DT>(c0, rule.floor_rule);
    const uint8_t e1 = rule.tile32x32 ? tile_e : mx_scale<DT>(c1, rule.floor_rule);
    if (t.q_col != nullptr) {
      const int64_t kc = k + 2 * sub;  // this lane's two columns
      if (kc < K) t.s_col[col_scale_offset(rule.swizzled, tm, kc, K, t.col_pad)] = e0;
      if (kc + 1 < K) t.s_col[col_scale_offset(rule.swizzled, tm, kc + 1, K, t.col_pad)] = e1;
      const float pair[2] = {scale_rules::e8m0_multiplier(e0), scale_rules::e8m0_multiplier(e1)};
      gather4<kChunk>(pair, cmult, kColA, kColB);
    }
  }
  // Row amaxes: a reduce-scatter over the 4 lanes of each row block (chunk xor 2, 1) leaves
  // rows [q kRows/4, (q+1) kRows/4) (q = chunk % 4) with this lane, which computes and stores
  // their scales (32x32: the tile's scale).
  constexpr int kMine = kLaneRows / 4;
  float rmult[kLaneRows];
  if (t.q_row != nullptr) {
    uint8_t e[kMine];
    if (rule.tile32x32) {
#pragma unroll
      for (int j = 0; j < kLaneRows; ++j) rmult[j] = tile_mult;
#pragma unroll
      for (int i = 0; i < kMine; ++i) e[i] = tile_e;
    } else {
      uint32_t part[kLaneRows], mine[kMine];
#pragma unroll
      for (int j = 0; j < kLaneRows; ++j) part[j] = raw[j].row_acc();
      reduce_scatter4<kLaneRows>(part, mine, 2, 1, acc_max);
      float mult[kMine];
#pragma unroll
      for (int i = 0; i < kMine; ++i) {
        e[i] = mx_scale<DT>(C::acc_word_bits(mine[i]), rule.floor_rule);
        mult[i] = scale_rules::e8m0_multiplier(e[i]);
      }
      gather4<kLaneRows>(mult, rmult, 2, 1);
    }
    const int q = chunk % 4;
    const int64_t kb = k / kBlock, nb = (K + kBlock - 1) / kBlock;
    if (k - q * kChunk < K) {  // the block exists
#pragma unroll
      for (int i = 0; i < kMine; ++i) {
        const int64_t m = m0 + kSubs * (q * kMine + i);
        if (m < t.M) t.s_row[row_scale_offset(rule.swizzled, m, kb, nb, t.row_pad)] = e[i];
      }
    }
  }
  if (k_left <= 0) return;
  int64_t at = m0 * K + k;  // code offset of row m0 + kSubs j, advanced per step
#pragma unroll
  for (int j = 0; j < kLaneRows; ++j, at += kSubs * K) {
    if (m0 + kSubs * j >= t.M) break;
    if (t.q_row != nullptr) store_codes<kAligned>(t.q_row + at, encode_chunk<DT>(raw[j], rmult[j]), k_left);
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
