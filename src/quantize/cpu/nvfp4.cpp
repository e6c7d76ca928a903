// CPU NVFP4: E2M1 elements, an E4M3 scale per 1x16 block (or per 16x16 tile for weights) and an
// FP32 global amax per copy. The columnwise usage is the quantization of xᵀ, optionally after the
// 16-point random Hadamard transform; optional stochastic rounding (Philox).
#include <algorithm>
#include <bit>
#include <vector>

#include "quantize/cpu/cpu_kernels.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/philox.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cpu {
namespace {

constexpr int64_t kBlock = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The 16-point transform of scale_rules::rht16_forward with its coefficients tabulated once
// (same products, same summation order, same bits).
TESSERA_CPU_KERNEL void hadamard_rows(float* a, int64_t rows, int64_t cols) {
  float coef[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      coef[i][j] = scale_rules::hadamard_entry(i, j) * scale_rules::kRhtSigns[j];
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k + kBlock <= cols; k += kBlock) {
      float* b = a + r * cols + k;
      float t[16];
      for (int i = 0; i < 16; ++i) {
        float acc = 0.0f;
        for (int j = 0; j < 16; ++j) acc = acc + coef[i][j] * b[j];
        t[i] = acc * 0.25f;
      }
      std::copy(t, t + 16, b);
    }
  }
}

struct Nvfp4Target {
  uint8_t* data;   // (rows, ceil(cols/2)) bytes
  uint8_t* scale;  // E4M3 bytes, compact (rows, nb) or swizzled
  int64_t padded_cols;  // 0 = compact
  // Where the copy's codes and scales land: element (r, c) at row row_at + r, column col_at + c
  // of a matrix `ld` codes wide (0: the copy's own width): a member written in place (the CUDA
  // kernels' Nvfp4Args::row_at / col_at / ld). Stochastic rounding keeps the copy's own elements.
  int64_t row_at = 0, col_at = 0, ld = 0;
};

// scale_rules::nvfp4_clamp with bit selections (vectorizes; a NaN passes unchanged).
TESSERA_CPU_INLINE float clamp6(float v) {
  const uint32_t gt = mask_if(v > 6.0f), lt = mask_if(v < -6.0f);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(v) & ~(gt | lt)) | (0x40c00000u & gt) |
                              (0xc0c00000u & lt));
}

// decode_e4m3 of every code, for the vectorized block-scale loop.
const float* e4m3_values() {
  static const auto table = [] {
    struct Table { float v[256]; } t{};
    for (int i = 0; i < 256; ++i) t.v[i] = formats::decode_e4m3(static_cast<uint8_t>(i));
    return t;
  }();
  return table.v;
}

// scale_rules::e2m1_stochastic(v, r) of a clamped v (|v| <= 6 or NaN) with bit selections
// (vectorizes): the grid step of |v| and the divisions by it are powers of two (exact), and the
// rounded magnitude lies on the E2M1 grid, whose code e2m1_element gives.
TESSERA_CPU_INLINE uint8_t e2m1_stochastic_element(float v, uint32_t r) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint32_t is_nan = mask_if((u & 0x7fffffffu) > 0x7f800000u);
  const float a = std::bit_cast<float>(u & 0x7fffffffu & ~is_nan);  // NaN: 0 (no float → int UB)
  const uint32_t lt2 = mask_if(a < 2.0f), lt4 = mask_if(a < 4.0f);
  const uint32_t mid = ~lt2 & lt4;
  const float step = std::bit_cast<float>((0x3f000000u & lt2) | (0x3f800000u & mid) |
                                          (0x40000000u & ~lt4));  // 0.5, 1, 2
  const float inv = std::bit_cast<float>((0x40000000u & lt2) | (0x3f800000u & mid) |
                                         (0x3f000000u & ~lt4));  // 1 / step
  const float lo = static_cast<float>(static_cast<int32_t>(a * inv)) * step;
  const float frac = (a - lo) * inv;
  const uint32_t up = mask_if(frac > static_cast<float>(r >> 8) * 5.9604644775390625e-08f);
  const float q = lo + std::bit_cast<float>(std::bit_cast<uint32_t>(step) & up);
  return static_cast<uint8_t>(((e2m1_element(q) | ((u >> 28) & 0x8u)) & ~is_nan) |
                              (0x7u & is_nan));
}

// bits[j] = the random bits of element e0 + j of the stream (seed, offset), j < n
// (philox::random_bits): each Philox block made once for its 4 elements, 64 blocks at a time
// with the counters' words as arrays, so that the rounds vectorize.
TESSERA_CPU_INLINE void stream_bits(uint64_t seed, uint64_t offset, uint64_t e0, int64_t n,
                                    uint32_t* bits) {
  if (n <= 0) return;
  const uint64_t g0 = e0 >> 2, g1 = (e0 + static_cast<uint64_t>(n) + 3) >> 2;
  constexpr int64_t kChunk = 64;
  uint32_t w[4][kChunk];
  for (uint64_t g = g0; g < g1; g += kChunk) {
    const int64_t nb = static_cast<int64_t>(std::min<uint64_t>(kChunk, g1 - g));
    for (int64_t i = 0; i < nb; ++i) {
      const uint64_t c = g + static_cast<uint64_t>(i);
      w[0][i] = static_cast<uint32_t>(c);
      w[1][i] = static_cast<uint32_t>(c >> 32);
      w[2][i] = static_cast<uint32_t>(offset);
      w[3][i] = static_cast<uint32_t>(offset >> 32);
    }
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
#pragma omp simd
      for (int64_t i = 0; i < nb; ++i) philox::philox_round(w[0][i], w[1][i], w[2][i], w[3][i], k0, k1);
      k0 += philox::kWeyl0;
      k1 += philox::kWeyl1;
    }
    for (int64_t i = 0; i < nb; ++i)
      for (uint64_t q = 0; q < 4; ++q) {
        const uint64_t e = 4 * (g + static_cast<uint64_t>(i)) + q;
        if (e >= e0 && e < e0 + static_cast<uint64_t>(n)) bits[e - e0] = w[q][i];
      }
  }
}

// a: the copy (rows, cols), rows lda elements apart (0: cols). Stripes of bh rows (1 or 16);
// each block of 16 columns of a stripe shares one scale byte. Per stripe and piece of up to 256
// blocks: the blocks' amaxes over the stripe's rows, their scale bytes
// (scale_rules::nvfp4_block_scale) and encode scales (nvfp4_encode_scale) as loops over blocks,
// then each row's E2M1 codes (stochastic rounding: element r·cols + c of the stream from
// stream_base), two per byte.
template <class In>
TESSERA_CPU_KERNEL void quantize_copy(const QuantizerConfig& c, const In* a, int64_t rows, int64_t cols, float s_enc,
                   int64_t bh, const Nvfp4Target& t, uint64_t stream_base, int64_t lda = 0) {
  constexpr int64_t kPiece = 256;  // blocks per piece of a stripe
  if (lda == 0) lda = cols;
  const int64_t nb = ceil_div(cols, kBlock), full_blocks = cols / kBlock, ns = ceil_div(rows, bh);
  const int64_t width = t.ld != 0 ? t.ld : cols;
  const int64_t row_bytes = ceil_div(width, 2), gnb = ceil_div(width, kBlock);
  const float k1 = s_enc * scale_rules::kInv6, inv_s = 1.0f / s_enc;
  const float* dec_table = e4m3_values();
  const bool sr = c.stochastic_rounding;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t s = 0; s < ns; ++s) {
    const int64_t r0 = s * bh, r1 = std::min(rows, r0 + bh);
    for (int64_t b0 = 0; b0 < nb; b0 += kPiece) {
      const int64_t pb = std::min(kPiece, nb - b0), full = std::min(pb, full_blocks - b0);
      uint32_t bm[kPiece];
      uint8_t sb[kPiece];
      float enc[kPiece];
      std::fill(bm, bm + pb, 0u);
      for (int64_t r = r0; r < r1; ++r) {
        const In* row = a + r * lda + b0 * kBlock;
        for (int64_t b = 0; b < full; ++b) {
          const In* p = row + b * kBlock;
          uint32_t m = bm[b];
#pragma omp simd reduction(max : m)
          for (int64_t j = 0; j < kBlock; ++j) {
            const uint32_t v = abs_bits(load_float(p[j]));
            m = v > m ? v : m;
          }
          bm[b] = m;
        }
        if (pb > full) bm[full] = std::max(bm[full], amax_bits(row + full * kBlock, cols - (b0 + full) * kBlock));
      }
#pragma omp simd
      for (int64_t b = 0; b < pb; ++b) {
        const uint32_t m = bm[b] > 0x7f800000u ? scale_rules::kCanonicalNaN : bm[b];
        sb[b] = e4m3_element(std::bit_cast<float>(m) * k1);
        const float e = 1.0f / (dec_table[sb[b]] * inv_s);
        const uint32_t keep = mask_if(e <= scale_rules::kFloatMax);  // else +inf / NaN → FLT_MAX
        enc[b] = std::bit_cast<float>((std::bit_cast<uint32_t>(e) & keep) | (0x7f7fffffu & ~keep));
      }
      const int64_t gk0 = t.col_at + b0 * kBlock;  // even: members start on multiples of 16
      for (int64_t r = r0; r < r1; ++r) {
        const In* row = a + r * lda + b0 * kBlock;
        const int64_t gr = t.row_at + r;
        const uint64_t e0 = stream_base + static_cast<uint64_t>(r * cols + b0 * kBlock);
        uint8_t codes[kPiece * kBlock];  // the row's codes of the piece, then packed two per byte
        const int64_t n = std::min(pb * kBlock, cols - b0 * kBlock);  // the piece's elements
        if (sr) {
          uint32_t bits[kPiece * kBlock];
          stream_bits(c.rng_seed, c.rng_offset, e0, n, bits);
          for (int64_t b = 0; b * kBlock < n; ++b) {
            const int64_t j0 = b * kBlock, nj = std::min(kBlock, n - j0);
            const float en = enc[b];
#pragma omp simd
            for (int64_t j = j0; j < j0 + nj; ++j)
              codes[j] = e2m1_stochastic_element(clamp6(load_float(row[j]) * en), bits[j]);
          }
        } else {
          for (int64_t b = 0; b < full; ++b) {
            const In* p = row + b * kBlock;
            uint8_t* q = codes + b * kBlock;
            const float en = enc[b];
#pragma omp simd
            for (int64_t j = 0; j < kBlock; ++j) q[j] = e2m1_element(clamp6(load_float(p[j]) * en));
          }
          for (int64_t j = full * kBlock; j < n; ++j)  // a partial last block
            codes[j] = e2m1_element(clamp6(load_float(row[j]) * enc[full]));
        }
        uint8_t* o = t.data + gr * row_bytes + gk0 / 2;
#pragma omp simd
        for (int64_t j = 0; j < n / 2; ++j)
          o[j] = static_cast<uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
        if (n % 2 != 0) o[n / 2] = codes[n - 1];
        for (int64_t b = 0; b < pb; ++b) {
          const int64_t gb = gk0 / kBlock + b;
          t.scale[t.padded_cols != 0 ? swizzled_scale_offset(gr, gb, t.padded_cols) : gr * gnb + gb] = sb[b];
        }
      }
    }
  }
}

Nvfp4Target target_of(const QuantizerConfig& c, const TensorView& data, const TensorView& scale,
                      int64_t cols) {
  zero_view(scale);
  const int64_t nb = ceil_div(cols, kBlock);
  return {data.as<uint8_t>(), scale.as<uint8_t>(),
          c.scale_layout == ScaleLayout::kSwizzled ? (nb + 3) / 4 * 4 : 0};
}

}  // namespace

void quantize_nvfp4(const QuantizerConfig& c, const TensorView& x, const QuantizedTensorView& out,
                    const QuantizeRequest& req) {
  const int64_t m = x.shape[0], k = x.shape[1];
  const int64_t bh = scaling_mode_info(c.mode).block_rows;  // 1 or kBlock (16x16 tiles)
  const float amax = scale_rules::amax_from_abs_bits(tensor_amax_bits(x));
  if (req.rowwise) {
    const Nvfp4Target t = target_of(c, out.data, out.scale_inv, k);
    *out.amax.as<float>() = amax;
    dispatch_float_input(x.dtype, "x", [&](auto tag) {
      using In = typename decltype(tag)::type;
      const float s_enc = scale_rules::nvfp4_global_encode_scale(amax);
      quantize_copy(c, x.as<const In>(), m, k, s_enc, bh, t, 0);
    });
  }
  if (req.columnwise) {
    const Nvfp4Target t = target_of(c, out.columnwise_data, out.columnwise_scale_inv, m);
    Buffer xt = transpose_to_float(x);  // (k, m)
    float col_amax = amax;
    if (c.random_hadamard) {
      hadamard_rows(xt.as<float>(), k, m);
      col_amax = scale_rules::amax_from_abs_bits(
          tensor_amax_bits(TensorView::contiguous(xt.data(), DType::kFloat32, {k, m})));
    }
    *out.columnwise_amax.as<float>() = col_amax;
    quantize_copy(c, xt.as<const float>(), k, m, scale_rules::nvfp4_global_encode_scale(col_amax),
                  bh, t, static_cast<uint64_t>(m * k));
  }
}

void quantize_nvfp4_members(const QuantizerConfig& c, const TensorView& x, const int64_t* offsets,
                            int64_t groups, const QuantizedTensorView& out) {
  const int64_t m = x.shape[0], k = x.shape[1];
  const int64_t bh = scaling_mode_info(c.mode).block_rows;
  Nvfp4Target row{}, col{};
  if (c.rowwise) {
    zero_view(out.data);
    row = target_of(c, out.data, out.scale_inv, k);
  }
  if (c.columnwise) {
    zero_view(out.columnwise_data);
    col = target_of(c, out.columnwise_data, out.columnwise_scale_inv, m);
    col.ld = m;
  }
  // xᵀ of the whole x once (the standalone quantizer's one float buffer), after the transform
  // when configured: its 16-element blocks never span two members (both start on multiples of
  // 16), so this is each member's transformed xᵀ in its own columns.
  Buffer xt;
  if (c.columnwise) {
    xt = transpose_to_float(x);  // (k, m)
    if (c.random_hadamard) hadamard_rows(xt.as<float>(), k, m);
  }
  const auto* base = static_cast<const uint8_t*>(x.data);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r0 = offsets[g] / k, n = (offsets[g + 1] - offsets[g]) / k;
    TESSERA_CHECK(offsets[g] % k == 0 && offsets[g + 1] >= offsets[g] && r0 % kBlock == 0 &&
                      n % kBlock == 0 && r0 + n <= m,
                  "quantize_nvfp4_members: member ", g, " (element offsets ", offsets[g], ", ",
                  offsets[g + 1], ") must be whole rows of x, start on a multiple of 16 rows, "
                  "hold a multiple of 16 rows and end inside x's ", m, " rows");
    const TensorView xg = TensorView::contiguous(const_cast<uint8_t*>(base) +
                                                     dtype_bytes(x.dtype, r0 * k),
                                                 x.dtype, {n, k}, x.device);
    const float amax = scale_rules::amax_from_abs_bits(n == 0 ? 0u : tensor_amax_bits(xg));
    QuantizerConfig own = c;  // member g's stochastic-rounding offset
    own.rng_offset = c.rng_offset + static_cast<uint64_t>(g);
    if (c.rowwise) {
      out.amax.as<float>()[g] = amax;
      row.row_at = r0;
      dispatch_float_input(x.dtype, "x", [&](auto tag) {
        using In = typename decltype(tag)::type;
        quantize_copy(own, xg.as<const In>(), n, k, scale_rules::nvfp4_global_encode_scale(amax),
                      bh, row, 0);
      });
    }
    if (c.columnwise) {
      const float* xtg = xt.as<const float>() + r0;  // (k, n), rows m apart
      float col_amax = amax;
      if (c.random_hadamard) {
        uint32_t bits = 0;
        for (int64_t kk = 0; kk < k && n > 0; ++kk) bits = std::max(bits, amax_bits(xtg + kk * m, n));
        col_amax = scale_rules::amax_from_abs_bits(bits);
      }
      out.columnwise_amax.as<float>()[g] = col_amax;
      col.col_at = r0;
      quantize_copy(own, xtg, k, n, scale_rules::nvfp4_global_encode_scale(col_amax), bh, col,
                    static_cast<uint64_t>(n * k), m);
    }
  }
}

}  // namespace tessera::detail::cpu
