// CPU MXFP8: E8M0 scale per 1x32 block (rowwise) or 32x1 block (columnwise, data kept in the
// (M, K) layout), or per 32x32 tile (weights: both usages share scales and bits). Scales compact
// or GEMM-swizzled (128x4 tiles); padding entries zero.
#include <algorithm>
#include <vector>

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

// Rowwise 1x32: x (m, k) → data (m, k), scales (m, ceil(k/32)).
template <bool kE5M2, class In>
void rows_1x32(const QuantizerConfig& c, const In* x, int64_t m, int64_t k, uint8_t* out,
               const ScaleSink& sink) {
  const int64_t nb = ceil_div(k, kBlock);
#pragma omp parallel for schedule(static) if (m * k >= kParallelWork)
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * kBlock, n = std::min(kBlock, k - k0);
      const In* seg = x + r * k + k0;
      const uint8_t e = exponent_of(c, amax_bits(seg, n));
      encode_scaled<kE5M2>(seg, n, scale_rules::e8m0_multiplier(e), out + r * k + k0);
      sink.put(r, b, e);
    }
  }
}

// Stripes of 32 rows: columnwise 32x1 blocks, or 32x32 tiles (then rowwise and columnwise data
// are identical and both are written). Scales: `col_sink` (ceil(m/32), k) in its layout,
// `row_sink` (m, ceil(k/32)); either may be null.
template <bool kE5M2, class In>
void stripes(const QuantizerConfig& c, const In* x, int64_t m, int64_t k, bool tiles,
             uint8_t* out_a, uint8_t* out_b, const ScaleSink* col_sink, bool col_swizzled,
             const ScaleSink* row_sink) {
  const int64_t ns = ceil_div(m, kBlock), nb = ceil_div(k, kBlock);
#pragma omp parallel for schedule(static) if (m * k >= kParallelWork)
  for (int64_t s = 0; s < ns; ++s) {
    const int64_t r0 = s * kBlock, r1 = std::min(m, r0 + kBlock);
    std::vector<uint32_t> colmax(static_cast<size_t>(k), 0u);
    uint32_t* cm = colmax.data();
    for (int64_t r = r0; r < r1; ++r) {
      const In* row = x + r * k;
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t a = abs_bits(load_float(row[j]));
        cm[j] = a > cm[j] ? a : cm[j];
      }
    }
    std::vector<uint8_t> exps(static_cast<size_t>(k));
    std::vector<float> mult(static_cast<size_t>(k));
    for (int64_t b = 0; b < nb && tiles; ++b) {
      const int64_t j0 = b * kBlock, j1 = std::min(k, j0 + kBlock);
      const uint32_t tm = *std::max_element(cm + j0, cm + j1);
      for (int64_t j = j0; j < j1; ++j) cm[j] = tm;
    }
    for (int64_t j = 0; j < k; ++j) {
      exps[static_cast<size_t>(j)] = exponent_of(c, cm[j]);
      mult[static_cast<size_t>(j)] = scale_rules::e8m0_multiplier(exps[static_cast<size_t>(j)]);
    }
    const float* mu = mult.data();
    for (int64_t r = r0; r < r1; ++r) {
      const In* row = x + r * k;
      uint8_t* o = (out_a != nullptr ? out_a : out_b) + r * k;
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) o[j] = fp8_element<kE5M2>(load_float(row[j]) * mu[j]);
      if (out_a != nullptr && out_b != nullptr) std::copy(o, o + k, out_b + r * k);
    }
    for (int64_t j = 0; j < k && col_sink != nullptr; ++j) {
      if (col_swizzled) {
        col_sink->put(j, s, exps[static_cast<size_t>(j)]);
      } else {
        col_sink->put(s, j, exps[static_cast<size_t>(j)]);
      }
    }
    for (int64_t r = r0; r < r1 && row_sink != nullptr; ++r)
      for (int64_t b = 0; b < nb; ++b) row_sink->put(r, b, exps[static_cast<size_t>(b * kBlock)]);
  }
}

template <bool kE5M2, class In>
void run(const QuantizerConfig& c, const In* x, int64_t m, int64_t k,
         const QuantizedTensorView& out, const QuantizeRequest& req) {
  const bool tiles = c.mode == ScalingMode::kMXFP8_32x32;
  const bool sw = c.scale_layout == ScaleLayout::kSwizzled;
  ScaleSink row_sink{}, col_sink{};
  if (req.rowwise) row_sink = sink_of(c, out.scale_inv, ceil_div(k, kBlock));
  // Columnwise scales: compact (ceil(m/32), k); swizzled: the transpose (k, ceil(m/32)).
  if (req.columnwise) col_sink = sink_of(c, out.columnwise_scale_inv, sw ? ceil_div(m, kBlock) : k);
  uint8_t* row_data = req.rowwise ? out.data.as<uint8_t>() : nullptr;
  uint8_t* col_data = req.columnwise ? out.columnwise_data.as<uint8_t>() : nullptr;
  if (tiles) {
    stripes<kE5M2>(c, x, m, k, true, row_data, col_data, req.columnwise ? &col_sink : nullptr, sw,
                   req.rowwise ? &row_sink : nullptr);
    return;
  }
  if (req.rowwise) rows_1x32<kE5M2>(c, x, m, k, row_data, row_sink);
  if (req.columnwise) stripes<kE5M2>(c, x, m, k, false, nullptr, col_data, &col_sink, sw, nullptr);
}

}  // namespace

void quantize_mxfp8(const QuantizerConfig& c, const TensorView& x, const QuantizedTensorView& out,
                    const QuantizeRequest& req) {
  dispatch_float_input(x.dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    if (c.element == DType::kFloat8E5M2) {
      run<true>(c, x.as<const In>(), x.shape[0], x.shape[1], out, req);
    } else {
      run<false>(c, x.as<const In>(), x.shape[0], x.shape[1], out, req);
    }
  });
}

}  // namespace tessera::detail::cpu
