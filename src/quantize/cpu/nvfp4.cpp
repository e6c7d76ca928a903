// CPU NVFP4: E2M1 elements, an E4M3 scale per 1x16 block (or per 16x16 tile for weights) and an
// FP32 global amax per copy. The columnwise usage is the quantization of xᵀ, optionally after the
// 16-point random Hadamard transform; optional stochastic rounding (Philox).
#include <algorithm>
#include <vector>

#include "quantize/cpu/cpu_kernels.h"
#include "tessera/core/dispatch.h"
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
};

// a: the copy (rows, cols). Stripes of bh rows (1 or 16); each block of 16 columns of a stripe
// shares one scale byte.
template <class In>
TESSERA_CPU_KERNEL void quantize_copy(const QuantizerConfig& c, const In* a, int64_t rows, int64_t cols, float s_enc,
                   int64_t bh, const Nvfp4Target& t, uint64_t stream_base) {
  const int64_t nb = ceil_div(cols, kBlock), row_bytes = ceil_div(cols, 2);
  const int64_t ns = ceil_div(rows, bh);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t s = 0; s < ns; ++s) {
    const int64_t r0 = s * bh, r1 = std::min(rows, r0 + bh);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * kBlock, n = std::min(kBlock, cols - k0);
      uint32_t m = 0;
      for (int64_t r = r0; r < r1; ++r) m = std::max(m, amax_bits(a + r * cols + k0, n));
      const uint8_t s_b = scale_rules::nvfp4_block_scale(scale_rules::amax_from_abs_bits(m), s_enc);
      const float enc = scale_rules::nvfp4_encode_scale(s_b, s_enc);
      for (int64_t r = r0; r < r1; ++r) {
        uint8_t codes[kBlock + 1] = {};
        for (int64_t j = 0; j < n; ++j) {
          const float v = scale_rules::nvfp4_clamp(load_float(a[r * cols + k0 + j]) * enc);
          if (c.stochastic_rounding) {
            const uint64_t e = stream_base + static_cast<uint64_t>(r * cols + k0 + j);
            codes[j] = scale_rules::e2m1_stochastic(v, philox::random_bits(c.rng_seed, c.rng_offset, e));
          } else {
            codes[j] = e2m1_element(v);
          }
        }
        uint8_t* d = t.data + r * row_bytes + k0 / 2;
        for (int64_t j = 0; j < n; j += 2) d[j / 2] = static_cast<uint8_t>(codes[j] | (codes[j + 1] << 4));
        t.scale[t.padded_cols != 0 ? swizzled_scale_offset(r, b, t.padded_cols) : r * nb + b] = s_b;
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
  const int64_t bh = c.mode == ScalingMode::kNVFP4_16x16 ? kBlock : 1;
  const float amax = scale_rules::amax_from_abs_bits(tensor_amax_bits(x));
  if (req.rowwise) {
    const Nvfp4Target t = target_of(c, out.data, out.scale_inv, k);
    *out.amax.as<float>() = amax;
    dispatch_float_input(x.dtype, "x", [&](auto tag) {
      using In = typename decltype(tag)::type;
      quantize_copy(c, x.as<const In>(), m, k, scale_rules::nvfp4_global_encode_scale(amax), bh, t, 0);
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

}  // namespace tessera::detail::cpu
