// Device pieces of the tiled NVFP4 kernels (nvfp4_tiles.cu): E2M1 codes without branches, the
// Philox words of 8 consecutive elements, the 16-point Hadamard transform in the CPU's order of
// sums, and the 64x64 tile that yields the rowwise codes (from registers) and the transposed
// columnwise codes (from a shared-memory copy of the tile) out of one read of x.
//
// Tile contract: x is a row-major (rows, cols) matrix with cols % 16 == 0 and x 16-byte aligned,
// so every 8-element chunk is one or two 16-byte loads and a 16-element row block is two chunks
// held by two adjacent lanes. Rows may end anywhere: rows past `rows` read as zeros and the
// columnwise blocks they cut are partial (their valid elements only, as the CPU).
#pragma once

#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/launchers.h"
#include "tessera/quantize/philox.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant {

inline constexpr int kNvTile = 64;          // rows and columns of a tile
inline constexpr int kNvTileThreads = 256;  // 2 chunks of 8 elements per thread
inline constexpr int kNvBlock = 16;
inline constexpr uint8_t kNvNanScale = 0x7F;  // E4M3 NaN code (a poisoned scale)

// formats::encode_e2m1(scale_rules::nvfp4_clamp(y)) for every float y (checked on all 2^32
// inputs against the CPU codec): a = min(|y|, 6); below 1 the code is rint(2a) (RNE through the
// 1.5 * 2^23 magic number); from 1 on it is the float rounded to one mantissa bit (RNE on the
// bits) minus the exponent bias; NaN gives 0x7 without sign, -0 keeps its sign.
__device__ __forceinline__ uint32_t nvfp4_code(float y) {
  const uint32_t u = __float_as_uint(y);
  const float a = fminf(fabsf(y), 6.0f);
  const uint32_t b = __float_as_uint(a);
  const uint32_t lo = __float_as_uint(__fmaf_rn(a, 2.0f, 12582912.0f)) - 0x4B400000u;
  const uint32_t hi = (b + (0x1FFFFFu - (252u << 22)) + ((b >> 22) & 1u)) >> 22;
  const uint32_t code = a < 1.0f ? lo : hi;
  return y != y ? 0x7u : (code | ((u >> 28) & 0x8u));
}

// scale_rules::e2m1_stochastic(scale_rules::nvfp4_clamp(y), r) for every float y and word r:
// the same operations, with the divisions by the power-of-two step done as multiplications by
// its reciprocal (exact, so the same floats) and the final grid value coded by nvfp4_code.
__device__ __forceinline__ uint32_t nvfp4_sr_code(float y, uint32_t r) {
  const float a = fminf(fabsf(y), 6.0f);
  const float step = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
  const float inv = a < 2.0f ? 2.0f : (a < 4.0f ? 1.0f : 0.5f);
  const float lo = truncf(a * inv) * step;
  const float frac = (a - lo) * inv;
  const float u = static_cast<float>(r >> 8) * 5.9604644775390625e-08f;  // 2^-24
  const float q = frac > u ? lo + step : lo;
  return y != y ? 0x7u : (nvfp4_code(q) | ((__float_as_uint(y) >> 28) & 0x8u));
}

// Per-copy constants of the scale rules: s_enc, s_enc * fp32(1/6) and 1 / s_enc (the operands
// nvfp4_block_scale and nvfp4_encode_scale compute from s_enc).
struct Nvfp4Enc {
  float s_enc = 1.0f, s6 = scale_rules::kInv6, inv = 1.0f;
  __device__ static Nvfp4Enc of(float s_enc) {
    Nvfp4Enc e;
    e.s_enc = s_enc;
    e.s6 = s_enc * scale_rules::kInv6;
    e.inv = __frcp_rn(s_enc);  // 1.0f / s_enc: the IEEE reciprocal, without a division
    return e;
  }
};

// Block scale byte and element encode scale of a block with amax bits m: nvfp4_block_scale and
// nvfp4_encode_scale on the hardware E4M3 conversions (the encoder equals encode_e4m3 on every
// non-NaN float and gives 0x7F, as encode_e4m3 of a positive NaN; E4M3 -> half is exact).
__device__ __forceinline__ uint8_t nvfp4_scale_of(uint32_t m, const Nvfp4Enc& e, float& enc) {
  const float block_amax = scale_rules::amax_from_abs_bits(m);
  const uint8_t s_b = static_cast<uint8_t>(encode_fp8<DType::kFloat8E4M3>(block_amax * e.s6));
  const __half_raw h = __nv_cvt_fp8_to_halfraw(s_b, __NV_E4M3);
  float v = __frcp_rn(__half2float(__half(h)) * e.inv);  // 1.0f / (·), correctly rounded
  if (!(v <= scale_rules::kFloatMax)) v = scale_rules::kFloatMax;
  enc = v;
  return s_b;
}

// Stochastic-rounding stream of one quantize (philox.h).
struct Nvfp4Rng {
  bool on = false;
  uint64_t seed = 0, offset = 0;
};

// Codes of f[j] * enc (j < 8) in one word, element j in nibble j; stochastic rounding draws
// elements e0 .. e0 + 7 of the stream: one Philox block per 4 elements when e0 % 4 == 0 (each
// made just before its 4 codes, so only 4 words are live), else one block per element (the
// CPU's word e % 4 of block e / 4 either way).
__device__ __forceinline__ uint32_t nvfp4_encode8(const float* f, float enc, const Nvfp4Rng& rng,
                                                  uint64_t e0) {
  uint32_t w = 0;
  if (rng.on) {
    if ((e0 & 3u) == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const philox::Block b = philox::stream_block(rng.seed, rng.offset, (e0 >> 2) + h);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          w |= nvfp4_sr_code(f[4 * h + j] * enc, b.w[j]) << (4 * (4 * h + j));
      }
    } else {
      for (int j = 0; j < 8; ++j) {
        const uint32_t r = philox::random_bits(rng.seed, rng.offset, e0 + j);
        w |= nvfp4_sr_code(f[j] * enc, r) << (4 * j);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) w |= nvfp4_code(f[j] * enc) << (4 * j);
  }
  return w;
}

// t = (1/4) H16 diag(s) b with scale_rules::rht16_forward's products and summation order.
__device__ __forceinline__ void rht16(float (&b)[kNvBlock]) {
  float t[kNvBlock];
#pragma unroll
  for (int i = 0; i < kNvBlock; ++i) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kNvBlock; ++j) {
      const float coef = scale_rules::hadamard_entry(i, j) * rht_sign(j);
      acc = __fadd_rn(acc, coef * b[j]);  // coef = ±1: the product is exact
    }
    t[i] = acc * 0.25f;
  }
#pragma unroll
  for (int i = 0; i < kNvBlock; ++i) b[i] = t[i];
}

// One copy as the tile writes it. data == nullptr and !poison: the copy is not produced.
struct Nvfp4TileCopy {
  uint8_t* data = nullptr;   // (copy rows, ceil(copy cols / 2))
  uint8_t* scale = nullptr;  // compact (copy rows, ceil(copy cols / 16)) or swizzled
  int64_t padded_cols = 0;   // swizzled scale width; 0 = compact
  Nvfp4Enc enc;              // global encode scale of the copy and its derived operands
  uint64_t stream_base = 0;  // first element of the copy's stochastic-rounding stream
  bool poison = false;       // columnwise member outside the storage contract: NaN scales only
  // Where the copy's codes and scales land (Nvfp4Args::row_at / col_at / ld).
  int64_t row_at = 0, col_at = 0, ld = 0;
  __device__ bool active() const { return data != nullptr || poison; }
};

// Member i of a grouped launch written in place (Nvfp4Args::in_place): x row at = off / cols of
// the whole x (g.rows_bound rows); its rowwise copy is rows [at, at + rows) of the whole rowwise
// copy, its columnwise copy columns [at, at + rows) of the whole xᵀ copy (codes and scales,
// compact or swizzled at the whole copy's width). m.data / m.scale stay the whole copies'. Its
// stochastic rounding is a member alone's: its own elements (stream_base, as a grouped member),
// its own offset (the launch's + i).
__device__ __forceinline__ void nvfp4_place_member(Nvfp4Args& m, const GroupedMeta& g,
                                                   int64_t i, int64_t off, int64_t rows) {
  const int64_t at = off / g.cols;
  m.row_at = m.columnwise ? 0 : at;
  m.col_at = m.columnwise ? at : 0;
  m.ld = m.columnwise ? g.rows_bound : g.cols;
  m.stream_base = m.columnwise ? static_cast<uint64_t>(rows * g.cols) : 0;
  m.offset += static_cast<uint64_t>(i);
  if (m.padded_cols != 0) m.padded_cols = (ceil_div_device(m.ld, kNvBlock) + 3) / 4 * 4;
}

// Raw chunk of 8 inputs (16 or 32 bytes) and its float values.
template <class In>
struct Nvfp4Chunk {
  static constexpr int kWords = 8 * static_cast<int>(sizeof(In)) / 16;  // 16-byte words
  uint4 w[kWords];
};
template <class In>
__device__ __forceinline__ void chunk_floats(const Nvfp4Chunk<In>& c, float (&f)[8]) {
  In e[8];
  memcpy(e, c.w, sizeof(e));
#pragma unroll
  for (int j = 0; j < 8; ++j) f[j] = load_float(e[j]);
}

// The 16 values of column c, rows 16q .. 16q + 15 of the shared tile, as floats.
template <class In>
__device__ __forceinline__ void tile_column(const In* tile, int c, int q, float (&f)[kNvBlock]) {
#pragma unroll
  for (int j = 0; j < kNvBlock; ++j) f[j] = load_float(tile[(q * kNvBlock + j) * kNvTile + c]);
}

__device__ __forceinline__ uint32_t max_abs_bits(const float* f, int n) {
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < n; ++j) m = max(m, abs_bits(f[j]));
  return m;
}

// Loads the thread's two chunks of tile (tr, tc) (zeros outside x) and, when `to_smem`, stores
// them raw into the shared tile (kNvTile x kNvTile In). Chunk i: tile row (t + 256 i) / 8,
// columns 8 ((t + 256 i) % 8) .. + 7.
template <class In>
__device__ __forceinline__ void nvfp4_load_tile(const In* x, int64_t rows, int64_t cols,
                                                int64_t tr, int64_t tc, bool to_smem, In* tile,
                                                Nvfp4Chunk<In> (&ch)[2]) {
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int q = t + i * kNvTileThreads, rr = q / 8, cc = q % 8;
    const int64_t r = tr * kNvTile + rr, k0 = tc * kNvTile + cc * 8;
#pragma unroll
    for (int w = 0; w < Nvfp4Chunk<In>::kWords; ++w) ch[i].w[w] = make_uint4(0, 0, 0, 0);
    if (r < rows && k0 < cols) {
      const uint4* p = reinterpret_cast<const uint4*>(x + r * cols + k0);
#pragma unroll
      for (int w = 0; w < Nvfp4Chunk<In>::kWords; ++w) ch[i].w[w] = p[w];
    }
  }
  if (to_smem) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int q = t + i * kNvTileThreads, rr = q / 8, cc = q % 8;
      uint4* s = reinterpret_cast<uint4*>(tile + rr * kNvTile + cc * 8);
#pragma unroll
      for (int w = 0; w < Nvfp4Chunk<In>::kWords; ++w) s[w] = ch[i].w[w];
    }
  }
}

// Rowwise codes and scales of the thread's two chunks (half a 16-element block each; the other
// half sits in lane ^ 1). Every lane of the warp must call it (shuffles).
template <class In>
__device__ __forceinline__ void nvfp4_tile_rows(const Nvfp4Chunk<In> (&ch)[2], int64_t rows,
                                                int64_t cols, int64_t tr, int64_t tc,
                                                const Nvfp4TileCopy& row, const Nvfp4Rng& rng) {
  const int t = threadIdx.x;
  float f[2][8];
  uint32_t m[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    chunk_floats<In>(ch[i], f[i]);
    m[i] = max_abs_bits(f[i], 8);
    m[i] = max(m[i], __shfl_xor_sync(0xffffffffu, m[i], 1));
  }
  // Lane pair (2j, 2j + 1) shares both blocks: the even lane computes chunk 0's block scale,
  // the odd lane chunk 1's, then they swap.
  const int odd = t & 1;
  float enc_mine;
  const uint32_t sb_mine = nvfp4_scale_of(odd ? m[1] : m[0], row.enc, enc_mine);
  const float enc_other = __shfl_xor_sync(0xffffffffu, enc_mine, 1);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int q = t + i * kNvTileThreads, rr = q / 8, cc = q % 8;
    const int64_t r = tr * kNvTile + rr, k0 = tc * kNvTile + cc * 8;
    if (r >= rows || k0 >= cols) continue;
    const float enc = (i == odd) ? enc_mine : enc_other;
    const int64_t width = row.ld != 0 ? row.ld : cols;  // cols % 16 == 0 (tile contract)
    const int64_t gr = row.row_at + r, gk = row.col_at + k0;
    const uint32_t w =
        nvfp4_encode8(f[i], enc, rng, row.stream_base + static_cast<uint64_t>(r * cols + k0));
    *reinterpret_cast<uint32_t*>(row.data + gr * (width / 2) + gk / 2) = w;
    if (i == odd) {  // the block's scale, by the lane that computed it
      const int64_t b = gk / kNvBlock;
      row.scale[row.padded_cols != 0 ? swizzled_offset(gr, b, row.padded_cols)
                                     : gr * (width / kNvBlock) + b] = static_cast<uint8_t>(sb_mine);
    }
  }
}

// Columnwise block of the thread: column c = t % 64 of the tile, rows 16 (t / 64) .. + 15, i.e.
// row k of the copy xᵀ, block m0 / 16. Reads the shared tile (after a barrier).
template <class In>
__device__ __forceinline__ void nvfp4_tile_column(const In* tile, int64_t rows, int64_t cols,
                                                  int64_t tr, int64_t tc, const Nvfp4TileCopy& col,
                                                  bool rht, const Nvfp4Rng& rng) {
  const int c = threadIdx.x % kNvTile, q = threadIdx.x / kNvTile;
  const int64_t k = tc * kNvTile + c, m0 = tr * kNvTile + q * kNvBlock;
  if (k >= cols || m0 >= rows) return;
  const int nv = rows - m0 < kNvBlock ? static_cast<int>(rows - m0) : kNvBlock;
  const int64_t width = col.ld != 0 ? col.ld : rows;  // of the copy (x rows)
  const int64_t gk = col.row_at + k, gm = col.col_at + m0, b = gm / kNvBlock;
  uint8_t* sdst = col.scale + (col.padded_cols != 0 ? swizzled_offset(gk, b, col.padded_cols)
                                                    : gk * ceil_div_device(width, kNvBlock) + b);
  if (col.poison) {
    *sdst = kNvNanScale;
    return;
  }
  float f[kNvBlock];
  tile_column<In>(tile, c, q, f);
  if (rht && nv == kNvBlock) rht16(f);
  float enc;
  const uint8_t s_b = nvfp4_scale_of(max_abs_bits(f, kNvBlock), col.enc, enc);
  const uint64_t e0 = col.stream_base + static_cast<uint64_t>(k * rows + m0);
  uint32_t w0 = nvfp4_encode8(f, enc, rng, e0);
  uint32_t w1 = nvfp4_encode8(f + 8, enc, rng, e0 + 8);
  uint8_t* d = col.data + gk * ((width + 1) / 2) + gm / 2;
  if (nv == kNvBlock && (reinterpret_cast<uintptr_t>(d) & 7u) == 0) {
    *reinterpret_cast<uint2*>(d) = make_uint2(w0, w1);
  } else {
    if (nv < 8) w0 &= (1u << (4 * nv)) - 1u;
    w1 = nv <= 8 ? 0u : (nv < 16 ? w1 & ((1u << (4 * (nv - 8))) - 1u) : w1);
    for (int j = 0; j < (nv + 1) / 2; ++j) {
      d[j] = static_cast<uint8_t>((j < 4 ? w0 : w1) >> (8 * (j % 4)));
    }
  }
  *sdst = s_b;
}

// The whole tile (tr, tc): both copies that are active, one read of x. Block-wide (barrier when
// the columnwise copy is active; the condition is uniform over the block). Rows from
// `load_rows` to `rows` are zero rows of the matrix (a member's padding read through a layout,
// GroupedMeta::sources), not read from x.
template <class In>
__device__ __forceinline__ void nvfp4_tile(const In* x, int64_t rows, int64_t load_rows,
                                           int64_t cols, int64_t tr, int64_t tc,
                                           const Nvfp4TileCopy& row, const Nvfp4TileCopy& col,
                                           bool rht, const Nvfp4Rng& rng, In* tile) {
  Nvfp4Chunk<In> ch[2];
  const bool with_col = col.active();
  nvfp4_load_tile<In>(x, load_rows, cols, tr, tc, with_col && !col.poison, tile, ch);
  if (row.active()) nvfp4_tile_rows<In>(ch, rows, cols, tr, tc, row, rng);
  if (with_col) {
    if (!col.poison) __syncthreads();
    nvfp4_tile_column<In>(tile, rows, cols, tr, tc, col, rht, rng);
  }
}

// amax bits of the tile: of x (*x_amax) and of the columnwise blocks after the Hadamard
// transform (full blocks; partial ones as they are) (*rht_amax). Block-wide. Rows from
// `load_rows` to `rows` are zero rows (as in nvfp4_tile).
template <class In>
__device__ __forceinline__ void nvfp4_tile_amax(const In* x, int64_t rows, int64_t load_rows,
                                                int64_t cols, int64_t tr, int64_t tc, In* tile,
                                                uint32_t& x_amax, uint32_t& rht_amax) {
  Nvfp4Chunk<In> ch[2];
  nvfp4_load_tile<In>(x, load_rows, cols, tr, tc, true, tile, ch);
  uint32_t mx = 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float f[8];
    chunk_floats<In>(ch[i], f);
    mx = max(mx, max_abs_bits(f, 8));
  }
  __syncthreads();
  const int c = threadIdx.x % kNvTile, q = threadIdx.x / kNvTile;
  const int64_t k = tc * kNvTile + c, m0 = tr * kNvTile + q * kNvBlock;
  uint32_t mr = 0;
  if (k < cols && m0 < rows) {
    float f[kNvBlock];
    tile_column<In>(tile, c, q, f);
    if (rows - m0 >= kNvBlock) rht16(f);
    mr = max_abs_bits(f, kNvBlock);
  }
  x_amax = mx;
  rht_amax = mr;
}

}  // namespace tessera::detail::cuda_quant
