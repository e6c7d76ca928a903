// CPU MXFP8: E8M0 scale per 1x32 block (rowwise) or 32x1 block (columnwise, data kept in the
// (M, K) layout), or per 32x32 tile (weights: both usages share scales and bits). Scales compact
// or GEMM-swizzled (128x4 tiles); padding entries zero.
#include <algorithm>
#include <bit>

#include "quantize/cpu/cpu_kernels.h"
#include "tessera/core/dispatch.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cpu {
namespace {

constexpr int64_t kBlock = 32;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

uint8_t exponent_of(const QuantizerConfig& c, uint32_t amax_bits_value) {
  const float amax = scale_rules::amax_from_abs_bits(amax_bits_value);
  const bool e5 = c.element == DType::kFloat8E5M2;
  if (c.e8m0_rounding == E8M0Rounding::kFloor) return scale_rules::e8m0_floor(amax, e5 ? 15 : 8);
  return scale_rules::e8m0_round_up(amax, e5 ? 1.0f / 57344.0f : 1.0f / 448.0f);
}

// Scale writer for one usage: logical scale (r, c) → byte, compact or swizzled.
struct ScaleSink {
  uint8_t* base;
  int64_t compact_cols;
  int64_t padded_cols;  // 0 = compact
  void put(int64_t r, int64_t c, uint8_t e) const {
    base[padded_cols != 0 ? swizzled_scale_offset(r, c, padded_cols) : r * compact_cols + c] = e;
  }
};

ScaleSink sink_of(const QuantizerConfig& c, const TensorView& scale, int64_t logical_cols) {
  zero_view(scale);
  const bool sw = c.scale_layout == ScaleLayout::kSwizzled;
  return {scale.as<uint8_t>(), logical_cols, sw ? (logical_cols + 3) / 4 * 4 : 0};
}

// E8M0 codes e[i] and element multipliers 2^(127 - e[i]) of n block amaxes (abs bits, NaN any
// pattern above 0x7f800000). The round-up rule is scale_rules::e8m0_round_up and
// e8m0_multiplier written with selections only (one vectorized loop); the floor rule goes
// through scale_rules.
TESSERA_CPU_KERNEL void block_exponents(const QuantizerConfig& c, const uint32_t* bm, int64_t n,
                                        uint8_t* e, float* mult) {
  const bool e5 = c.element == DType::kFloat8E5M2;
  if (c.e8m0_rounding == E8M0Rounding::kFloor) {
    for (int64_t i = 0; i < n; ++i) {
      e[i] = exponent_of(c, bm[i]);
      mult[i] = scale_rules::e8m0_multiplier(e[i]);
    }
    return;
  }
  const float inv = e5 ? 1.0f / 57344.0f : 1.0f / 448.0f;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t m = bm[i] > 0x7f800000u ? scale_rules::kCanonicalNaN : bm[i];
    const uint32_t a = std::bit_cast<uint32_t>(std::bit_cast<float>(m) * inv) & 0x7fffffffu;
    const uint32_t ex = a >> 23, mant = a & 0x7fffffu;
    const uint32_t inc = static_cast<uint32_t>(mant != 0u) & static_cast<uint32_t>(ex != 0xfeu) &
                         ~static_cast<uint32_t>(ex == 0u && mant <= 0x400000u);
    uint32_t r = ex + (inc & 1u);
    r = a >= 0x7f800000u ? 0xffu : r;  // NaN or inf in the block: the NaN scale
    uint32_t mb = (254u - r) << 23;
    mb = r == 0xfeu ? 0x00400000u : mb;
    mb = r == 0xffu ? scale_rules::kCanonicalNaN : mb;
    e[i] = static_cast<uint8_t>(r);
    mult[i] = std::bit_cast<float>(mb);
  }
}

// Per-block scratch of one thread: block amaxes, codes and multipliers of up to kMaxBlocks blocks.
constexpr int64_t kChunk = 256;  // columns per piece of a stripe (8 blocks)
constexpr int64_t kMaxBlocks = kChunk;
struct BlockScratch {
  uint32_t bm[kMaxBlocks];
  uint8_t e[kMaxBlocks];
  float mult[kMaxBlocks];
};

// Rowwise 1x32 blocks of one row segment: seg (n) → out (n), scales of blocks b0.. of row r.
// n <= 32 * kMaxBlocks; the segment starts on a block boundary.
template <bool kE5M2, class In>
TESSERA_CPU_INLINE void row_segment_1x32(const QuantizerConfig& c, const In* seg, int64_t n, uint8_t* out,
                      const ScaleSink& sink, int64_t r, int64_t b0, BlockScratch& s) {
  const int64_t full = n / kBlock, nb = ceil_div(n, kBlock);
  for (int64_t b = 0; b < full; ++b) {
    const In* p = seg + b * kBlock;
    uint32_t m = 0;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < kBlock; ++j) {
      const uint32_t a = abs_bits(load_float(p[j]));
      m = a > m ? a : m;
    }
    s.bm[b] = m;
  }
  if (nb > full) s.bm[full] = amax_bits(seg + full * kBlock, n - full * kBlock);
  block_exponents(c, s.bm, nb, s.e, s.mult);
  for (int64_t b = 0; b < full; ++b) {
    const In* p = seg + b * kBlock;
    uint8_t* o = out + b * kBlock;
    const float mu = s.mult[b];
#pragma omp simd
    for (int64_t j = 0; j < kBlock; ++j) o[j] = fp8_element<kE5M2>(load_float(p[j]) * mu);
  }
  if (nb > full) encode_scaled<kE5M2>(seg + full * kBlock, n - full * kBlock, s.mult[full], out + full * kBlock);
  for (int64_t b = 0; b < nb; ++b) sink.put(r, b0 + b, s.e[b]);
}

// Rowwise 1x32: x (m, k) → data (m, k), scales (m, ceil(k/32)); pieces of up to 8192 columns.
template <bool kE5M2, class In>
TESSERA_CPU_KERNEL void rows_1x32(const QuantizerConfig& c, const In* x, int64_t m, int64_t k,
                                  uint8_t* out, const ScaleSink& sink) {
#pragma omp parallel for schedule(static) if (m * k >= kParallelWork)
  for (int64_t r = 0; r < m; ++r) {
    BlockScratch s;
    constexpr int64_t kPiece = kBlock * kMaxBlocks;  // whole rows up to 8192 columns
    for (int64_t c0 = 0; c0 < k; c0 += kPiece)
      row_segment_1x32<kE5M2>(c, x + r * k + c0, std::min(kPiece, k - c0), out + r * k + c0, sink,
                              r, c0 / kBlock, s);
  }
}

// Where a stripe pass writes: columnwise 32x1 blocks (col_*), optionally the rowwise 1x32 copy
// in the same pass (row_*); with tiles (32x32) both copies are identical and share the scales.
struct StripeTargets {
  uint8_t* col_data;          // (m, k) or null
  const ScaleSink* col_sink;  // (ceil(m/32), k) in its layout, or null
  bool col_swizzled;
  uint8_t* row_data;          // (m, k) or null
  const ScaleSink* row_sink;  // (m, ceil(k/32)) or null
};

// Stripes of 32 rows cut into pieces of 32 x kChunk (in cache): column maxima, column codes,
// then (not tiles) the rowwise blocks of the same piece. One read of x from memory for both.
template <bool kE5M2, class In>
TESSERA_CPU_KERNEL void stripes(const QuantizerConfig& c, const In* x, int64_t m, int64_t k,
                                bool tiles, const StripeTargets& t) {
  const int64_t ns = ceil_div(m, kBlock);
#pragma omp parallel for schedule(static) if (m * k >= kParallelWork)
  for (int64_t s = 0; s < ns; ++s) {
    const int64_t r0 = s * kBlock, r1 = std::min(m, r0 + kBlock);
    BlockScratch cs, rs;
    for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
      const int64_t w = std::min(kChunk, k - c0);
      uint32_t* cm = cs.bm;
      std::fill(cm, cm + w, 0u);
      band_column_amax_bits(x, k, r0, r1, c0, w, cm);
      for (int64_t j0 = 0; j0 < w && tiles; j0 += kBlock) {
        const int64_t j1 = std::min(w, j0 + kBlock);
        const uint32_t tm = *std::max_element(cm + j0, cm + j1);
        std::fill(cm + j0, cm + j1, tm);
      }
      block_exponents(c, cm, w, cs.e, cs.mult);
      const float* mu = cs.mult;
      uint8_t* dst = t.col_data != nullptr ? t.col_data : t.row_data;
      for (int64_t r = r0; r < r1; ++r) {
        const In* row = x + r * k + c0;
        uint8_t* o = dst + r * k + c0;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) o[j] = fp8_element<kE5M2>(load_float(row[j]) * mu[j]);
        if (tiles && t.col_data != nullptr && t.row_data != nullptr) std::copy(o, o + w, t.row_data + r * k + c0);
        if (!tiles && t.row_data != nullptr)
          row_segment_1x32<kE5M2>(c, row, w, t.row_data + r * k + c0, *t.row_sink, r, c0 / kBlock, rs);
      }
      for (int64_t j = 0; j < w && t.col_sink != nullptr; ++j) {
        if (t.col_swizzled) {
          t.col_sink->put(c0 + j, s, cs.e[j]);
        } else {
          t.col_sink->put(s, c0 + j, cs.e[j]);
        }
      }
      for (int64_t r = r0; r < r1 && tiles && t.row_sink != nullptr; ++r)
        for (int64_t j = 0; j < w; j += kBlock) t.row_sink->put(r, (c0 + j) / kBlock, cs.e[j]);
    }
  }
}

template <bool kE5M2, class In>
void run(const QuantizerConfig& c, const In* x, int64_t m, int64_t k,
         const QuantizedTensorView& out, const QuantizeRequest& req) {
  const bool tiles = scaling_mode_info(c.mode).block_rows == kBlock;  // 32x32 tiles
  const bool sw = c.scale_layout == ScaleLayout::kSwizzled;
  ScaleSink row_sink{}, col_sink{};
  if (req.rowwise) row_sink = sink_of(c, out.scale_inv, ceil_div(k, kBlock));
  // Columnwise scales: compact (ceil(m/32), k); swizzled: the transpose (k, ceil(m/32)).
  if (req.columnwise) col_sink = sink_of(c, out.columnwise_scale_inv, sw ? ceil_div(m, kBlock) : k);
  uint8_t* row_data = req.rowwise ? out.data.as<uint8_t>() : nullptr;
  uint8_t* col_data = req.columnwise ? out.columnwise_data.as<uint8_t>() : nullptr;
  const ScaleSink* rs = req.rowwise ? &row_sink : nullptr;
  const ScaleSink* cs = req.columnwise ? &col_sink : nullptr;
  if (tiles || req.columnwise) {
    stripes<kE5M2>(c, x, m, k, tiles, StripeTargets{col_data, cs, sw, row_data, rs});
  } else if (req.rowwise) {
    rows_1x32<kE5M2>(c, x, m, k, row_data, row_sink);
  }
}

}  // namespace

void quantize_mxfp8(const QuantizerConfig& c, const TensorView& x, const QuantizedTensorView& out,
                    const QuantizeRequest& req) {
  dispatch_float_input(x.dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    dispatch_fp8_element(c.element, "config.element", [&](auto is_e5m2) {
      run<decltype(is_e5m2)::value>(c, x.as<const In>(), x.shape[0], x.shape[1], out, req);
    });
  });
}

}  // namespace tessera::detail::cpu
