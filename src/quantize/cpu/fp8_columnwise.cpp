// CPU FP8 columnwise copies with FP32 scales (families tensor, rowwise, and blocks of 1x128 /
// 128x128, see fp8_columnwise_tiles_fit):
// the quantization of xᵀ, stored transposed (k, m), made directly from x by cache-blocked
// 128x128 tiles — no transposed float copy. Each tile is read once: its column maxima (block
// modes), its codes into a small row-major byte tile, then the byte tile is written transposed.
#include <algorithm>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "quantize/cpu/cpu_kernels.h"
#include "tessera/core/dispatch.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cpu {
namespace {

constexpr int64_t kTile = 128;  // = the FP8 block length, so a tile row band is one 128-block


float current_scale_of(const QuantizerConfig& c, uint32_t amax_bits_value) {
  return scale_rules::current_scale(scale_rules::amax_from_abs_bits(amax_bits_value), fp8_max_finite(c.element),
                                    c.amax_epsilon, c.power_of_two_scales);
}

// cm[j] = max over rows of abs bits of column j of x (m, k); multithreaded over row bands.
template <class In>
TESSERA_CPU_KERNEL void column_amax_bits(const In* x, int64_t m, int64_t k, uint32_t* cm) {
  std::fill(cm, cm + k, 0u);
#pragma omp parallel if (m * k >= kParallelWork)
  {
    std::vector<uint32_t> local(static_cast<size_t>(k), 0u);
    uint32_t* lm = local.data();
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m; ++r) band_column_amax_bits(x, k, r, r + 1, 0, k, lm);
#pragma omp critical(tessera_column_amax)
    for (int64_t j = 0; j < k; ++j) cm[j] = std::max(cm[j], lm[j]);
  }
}

// dst (w, h) with row pitch dp = the transpose of src (h, w) with row pitch sp (bytes).
// SSE2 (every x86-64): full 16x16 blocks by four unpack stages; after stage s the register index
// bit s holds column bit 3-s, so output row c is register bitreverse4(c). Edges: plain loops.
TESSERA_CPU_INLINE void transpose_bytes(const uint8_t* src, int64_t sp, int64_t h, int64_t w,
                                        uint8_t* dst, int64_t dp) {
  int64_t h16 = 0, w16 = 0;
#if defined(__SSE2__)
  h16 = h / 16 * 16;
  w16 = w / 16 * 16;
  for (int64_t ib = 0; ib < h16; ib += 16) {
    for (int64_t jb = 0; jb < w16; jb += 16) {
      __m128i v[16];
      for (int i = 0; i < 16; ++i)
        v[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (ib + i) * sp + jb));
      for (int s = 0; s < 4; ++s) {
        __m128i t[16];
        for (int i = 0; i < 16; ++i) {
          if ((i >> s) & 1) continue;
          const __m128i a = v[i], b = v[i | (1 << s)];
          switch (s) {
            case 0: t[i] = _mm_unpacklo_epi8(a, b); t[i | 1] = _mm_unpackhi_epi8(a, b); break;
            case 1: t[i] = _mm_unpacklo_epi16(a, b); t[i | 2] = _mm_unpackhi_epi16(a, b); break;
            case 2: t[i] = _mm_unpacklo_epi32(a, b); t[i | 4] = _mm_unpackhi_epi32(a, b); break;
            default: t[i] = _mm_unpacklo_epi64(a, b); t[i | 8] = _mm_unpackhi_epi64(a, b); break;
          }
        }
        for (int i = 0; i < 16; ++i) v[i] = t[i];
      }
      for (int c = 0; c < 16; ++c) {
        const int rev = ((c & 1) << 3) | ((c & 2) << 1) | ((c & 4) >> 1) | ((c & 8) >> 3);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (jb + c) * dp + ib), v[rev]);
      }
    }
  }
#endif
  for (int64_t j = 0; j < w; ++j) {
    for (int64_t i = (j < w16 ? h16 : 0); i < h; ++i) dst[j * dp + i] = src[i * sp + j];
  }
}

// What scales the columnwise copy (k, m) of one call uses.
struct ColumnScales {
  ScaleFamily family;
  bool tile_blocks;            // block modes: one scale per kTile x kTile tile (else per column)
  float tensor_scale;          // kTensor
  const float* column_scale;   // kRowwise: (k) one per column of x
  float* scale_inv;            // block modes: the copy's scale_inv, written here
  int64_t scale_cols;          // block modes: row pitch of scale_inv
  uint8_t* rowwise_data;       // kTensor only, or null: the rowwise copy (m, k) = the same codes
};

// Scales sc[0..w) of the columns c0.. of the tile at rows [r0, r1) (kTile-aligned band).
template <class In>
TESSERA_CPU_INLINE void tile_scales(const QuantizerConfig& c, const ColumnScales& s, const In* x,
                                    int64_t k, int64_t r0, int64_t r1, int64_t c0, int64_t w,
                                    float* sc) {
  if (s.family == ScaleFamily::kTensor) {
    std::fill(sc, sc + w, s.tensor_scale);
    return;
  }
  if (s.family == ScaleFamily::kRowwise) {
    std::copy(s.column_scale + c0, s.column_scale + c0 + w, sc);
    return;
  }
  uint32_t cm[kTile] = {};
  band_column_amax_bits(x, k, r0, r1, c0, w, cm);
  const int64_t band = r0 / kTile;
  if (!s.tile_blocks) {
    // 1x128: copy block (row c of xᵀ, 128 values along m): scale_inv[c][band].
    for (int64_t j = 0; j < w; ++j) {
      sc[j] = current_scale_of(c, cm[j]);
      s.scale_inv[(c0 + j) * s.scale_cols + band] = scale_rules::reciprocal(sc[j]);
    }
  } else {
    // 128x128: one scale per tile, scale_inv[c0 / 128][band].
    const float t = current_scale_of(c, *std::max_element(cm, cm + w));
    std::fill(sc, sc + w, t);
    s.scale_inv[(c0 / kTile) * s.scale_cols + band] = scale_rules::reciprocal(t);
  }
}

// x (m, k) → out (k, m) = fp8(x[r][c] * scale(r, c)) transposed, by kTile x kTile tiles.
template <bool kE5M2, class In>
TESSERA_CPU_KERNEL void encode_transposed(const QuantizerConfig& c, const ColumnScales& s,
                                          const In* x, int64_t m, int64_t k, uint8_t* out) {
  const int64_t nrt = (m + kTile - 1) / kTile, nct = (k + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(static) if (m * k >= kParallelWork)
  for (int64_t tr = 0; tr < nrt; ++tr) {
    for (int64_t tc = 0; tc < nct; ++tc) {
      const int64_t r0 = tr * kTile, r1 = std::min(m, r0 + kTile), h = r1 - r0;
      const int64_t c0 = tc * kTile, w = std::min(k, c0 + kTile) - c0;
      alignas(64) float sc[kTile];
      alignas(64) uint8_t codes[kTile][kTile];  // (h, w) row-major
      tile_scales(c, s, x, k, r0, r1, c0, w, sc);
      for (int64_t i = 0; i < h; ++i) {
        const In* row = x + (r0 + i) * k + c0;
        uint8_t* o = codes[i];
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) o[j] = fp8_element<kE5M2>(load_float(row[j]) * sc[j]);
        if (s.rowwise_data != nullptr) std::copy(o, o + w, s.rowwise_data + (r0 + i) * k + c0);
      }
      transpose_bytes(&codes[0][0], kTile, h, w, out + c0 * m + r0, m);
    }
  }
}

template <bool kE5M2, class In>
void run(const QuantizerConfig& c, const In* x, int64_t m, int64_t k, float tensor_scale,
         const TensorView& data, const TensorView& scale_inv, uint8_t* rowwise_data) {
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  ColumnScales s{info.family, info.block_rows == kTile, tensor_scale, nullptr, nullptr, 0,
                 rowwise_data};
  std::vector<float> col_scale;
  if (info.family == ScaleFamily::kRowwise) {
    std::vector<uint32_t> cm(static_cast<size_t>(k));
    column_amax_bits(x, m, k, cm.data());
    col_scale.resize(static_cast<size_t>(k));
    float* si = scale_inv.as<float>();  // (k, 1)
    for (int64_t j = 0; j < k; ++j) {
      col_scale[static_cast<size_t>(j)] = current_scale_of(c, cm[static_cast<size_t>(j)]);
      si[j] = scale_rules::reciprocal(col_scale[static_cast<size_t>(j)]);
    }
    s.column_scale = col_scale.data();
  } else if (info.family == ScaleFamily::kTensor) {
    scale_inv.as<float>()[0] = scale_rules::reciprocal(tensor_scale);
  } else {
    zero_view(scale_inv);
    s.scale_inv = scale_inv.as<float>();
    s.scale_cols = scale_inv.shape[1];
  }
  encode_transposed<kE5M2>(c, s, x, m, k, data.as<uint8_t>());
}

}  // namespace

bool fp8_columnwise_tiles_fit(const ScalingModeInfo& info) {
  return info.family != ScaleFamily::kBlock ||
         (info.block_cols == kTile && (info.block_rows == 1 || info.block_rows == kTile));
}

void quantize_fp8_columnwise(const QuantizerConfig& c, const TensorView& x, float tensor_scale,
                             const TensorView& data, const TensorView& scale_inv,
                             uint8_t* rowwise_data) {
  TESSERA_CHECK(fp8_columnwise_tiles_fit(scaling_mode_info(c.mode)), "quantize: block shape of ",
                scaling_mode_name(c.mode), " does not fit the 128x128 columnwise tiles");
  TESSERA_CHECK(rowwise_data == nullptr || is_family(c.mode, ScaleFamily::kTensor),
                "rowwise_data: only per-tensor scaling shares its codes between the two copies");
  dispatch_float_input(x.dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    dispatch_fp8_element(c.element, "config.element", [&](auto is_e5m2) {
      run<decltype(is_e5m2)::value>(c, x.as<const In>(), x.shape[0], x.shape[1], tensor_scale,
                                    data, scale_inv, rowwise_data);
    });
  });
}

}  // namespace tessera::detail::cpu
