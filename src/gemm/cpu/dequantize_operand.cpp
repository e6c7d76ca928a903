// CPU dequantization of a quantized GEMM operand's live rows into FP32 (every recipe of §4),
// in the copy's STORED orientation: the rowwise copy (and MXFP8's columnwise copy) as logical
// (rows, cols); a transposed columnwise copy as (cols, rows), reading only the live columns of
// each stored row. Values are code × scale computed in FP32 exactly as the quantize layer's
// dequantize does (NVFP4: e2m1 × (e4m3(s_b) × (1/S_enc))). A DequantPlan holds what the rows
// share (decode table per element format, per-row factors, scale offsets) and runs any range of
// stored rows on its caller, the scale fetched once per block; dequantize_operand splits the
// stored rows over blocking threads (blocking_parallel.h).
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>

#include "gemm/cpu/blocking_parallel.h"
#include "gemm/cpu/operand_fp32.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cpu {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

using DecodeTable = std::array<float, 256>;

DecodeTable make_table(DType element) {
  DecodeTable t{};
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    t[c] = element == DType::kFloat8E5M2   ? formats::decode_e5m2(code)
           : element == DType::kFloat4E2M1 ? formats::decode_e2m1(static_cast<uint8_t>(c & 0xF))
                                           : formats::decode_e4m3(code);
  }
  return t;
}

// 1 / S_enc of a copy with this global amax (scale_rules: NaN when the amax is not finite).
float nvfp4_inv_s_enc(float global_amax) {
  return 1.0f / scale_rules::nvfp4_global_encode_scale(global_amax);
}

// What one stored copy looks like: (sr_full, sc_full) stored dims, live stored columns/rows.
struct StoredCopy {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;  // raw bytes (FP32 or E8M0/E4M3)
  int64_t sr_full = 0, sc_full = 0;  // stored matrix dims (capacity included)
  int64_t sr = 0, sc = 0;            // stored dims to produce (live)
  bool transposed = false;           // stored (cols, rows) of the logical matrix
  DType scale_dtype = DType::kFloat32;
  scale_rules::ScaleGeometry geometry;  // scale of stored (r, c): scale_index(geometry, r, c)
};

float f32_at(const uint8_t* p, int64_t i) {
  float f;
  std::memcpy(&f, p + i * 4, 4);
  return f;
}

// The block scale of stored element (r, c) for the FP32-block and E8M0 families (kTensor and
// NVFP4 take the per-group factor of the caller).
float block_scale(const StoredCopy& s, int64_t r, int64_t c) {
  const int64_t i = scale_rules::scale_index(s.geometry, r, c);
  return s.scale_dtype == DType::kFloat32 ? f32_at(s.scales, i) : formats::decode_e8m0(s.scales[i]);
}

// NVFP4 block-scale byte of stored element (r, c).
uint8_t nvfp4_scale_byte(const StoredCopy& s, int64_t r, int64_t c) {
  return s.scales[scale_rules::scale_index(s.geometry, r, c)];
}

// Undoes the 16-point Hadamard transform of a dequantized stored row (n values), block by block
// as the quantizer applied it (a partial last block is untouched): scale_rules::rht16_inverse
// with its ±1 entries tabulated, the 16 sums of a block side by side (same products, same
// order of summation, same bits).
void inverse_hadamard_row(float* row, int64_t n) {
  static const auto h = [] {
    std::array<std::array<float, 16>, 16> e{};
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) e[i][j] = scale_rules::hadamard_entry(i, j);
    return e;
  }();
  for (int64_t k = 0; k + 16 <= n; k += 16) {
    float* t = row + k;
    float acc[16] = {};
    for (int i = 0; i < 16; ++i) {
      const float ti = t[i];
#pragma omp simd
      for (int j = 0; j < 16; ++j) acc[j] = acc[j] + h[i][j] * ti;
    }
#pragma omp simd
    for (int j = 0; j < 16; ++j) t[j] = scale_rules::kRhtSigns[j] * (acc[j] * 0.25f);
  }
}

// Per logical row: the group's kTensor scale_inv or NVFP4 1/S_enc (one value when shared).
std::vector<float> per_row_factor(const TensorView& values, bool nvfp4, int64_t rows,
                                  const std::vector<int64_t>& group_starts) {
  std::vector<float> f(static_cast<size_t>(rows));
  const float* v = values.as<float>();
  auto factor = [&](int64_t g) { return nvfp4 ? nvfp4_inv_s_enc(v[g]) : v[g]; };
  if (values.numel() == 1) {
    std::fill(f.begin(), f.end(), factor(0));
    return f;
  }
  for (size_t g = 0; g + 1 < group_starts.size(); ++g) {
    for (int64_t r = group_starts[g]; r < std::min(group_starts[g + 1], rows); ++r) {
      f[r] = factor(static_cast<int64_t>(g));
    }
  }
  return f;
}

// Stored columns [c0, c1) of stored row `r` of an FP8 copy into out[0, c1 - c0). `col_scale` (a
// rowwise columnwise copy scaled per group): the scale index of stored (r, c) is col_scale[c] + r.
void fp8_row(bool per_tensor, const StoredCopy& s, const DecodeTable& t, const float* row_factor,
             const int64_t* col_scale, int64_t r, int64_t c0, int64_t c1, float* out) {
  const uint8_t* codes = s.codes + r * s.sc_full + c0;  // codes[i]: stored column c0 + i
  const int64_t n = c1 - c0;
  if (per_tensor) {
    if (!s.transposed) {
      const float f = row_factor[r];
      for (int64_t i = 0; i < n; ++i) out[i] = t[codes[i]] * f;
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = t[codes[i]] * row_factor[c0 + i];
    }
    return;
  }
  if (col_scale != nullptr) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = t[codes[i]] * f32_at(s.scales, col_scale[c0 + i] + r);
    return;
  }
  // Scale constant along a run of `step` stored columns (block width; 0: the whole row), runs
  // starting at multiples of `step`.
  const int64_t step = s.geometry.block_cols > 0 ? s.geometry.block_cols : s.sc;
  for (int64_t b0 = c0; b0 < c1;) {
    const float scale = block_scale(s, r, b0);
    const int64_t b1 = std::min((b0 / step + 1) * step, c1);
    for (int64_t i = b0 - c0; i < b1 - c0; ++i) out[i] = t[codes[i]] * scale;
    b0 = b1;
  }
}

// Stored columns [c0, c1) of stored row `r` of an NVFP4 copy into out[0, c1 - c0): per run of
// stored columns sharing a scale byte (16-column blocks), dec = e4m3(s_b) × 1/S_enc once when
// the factor is the row's, else per column (a transposed copy: the factor of each stored
// column's logical row); each value e2m1 × dec.
void nvfp4_row(const StoredCopy& s, const DecodeTable& t, const DecodeTable& e4m3,
               const float* row_factor, int64_t r, int64_t c0, int64_t c1, float* out) {
  const uint8_t* bytes = s.codes + r * ceil_div(s.sc_full, 2);
  const int64_t step = s.geometry.block_cols > 0 ? s.geometry.block_cols : 16;
  for (int64_t b0 = c0; b0 < c1;) {
    const int64_t b1 = std::min((b0 / step + 1) * step, c1);
    const float sb = e4m3[nvfp4_scale_byte(s, r, b0)];
    if (!s.transposed) {
      const float dec = sb * row_factor[r];
      for (int64_t c = b0; c < b1; ++c) {
        const uint8_t byte = bytes[c / 2];
        out[c - c0] = t[c % 2 == 0 ? (byte & 0xF) : (byte >> 4)] * dec;
      }
    } else {
      for (int64_t c = b0; c < b1; ++c) {
        const uint8_t byte = bytes[c / 2];
        out[c - c0] = t[c % 2 == 0 ? (byte & 0xF) : (byte >> 4)] * (sb * row_factor[c]);
      }
    }
    b0 = b1;
  }
}

}  // namespace

struct DequantPlan::Impl {
  StoredCopy s;
  bool nvfp4 = false, per_tensor = false, rht = false;
  std::vector<float> factor;      // per logical row (kTensor scale_inv, NVFP4 1/S_enc)
  std::vector<int64_t> col_scale;  // a rowwise-family columnwise copy's scale offsets
  DecodeTable table{};
  DecodeTable scale_table{};  // NVFP4: the E4M3 block scales' values
};

DequantPlan::DequantPlan(const GemmOperand& o, int64_t rows,
                         const std::vector<int64_t>& group_starts) {
  auto made = std::make_shared<Impl>();
  Impl& p = *made;
  const QuantizedTensorView& q = o.quantized;
  const QuantizerConfig& cfg = q.config;
  const bool cw = o.columnwise;
  const ScalingModeInfo& info = scaling_mode_info(cfg.mode);
  p.nvfp4 = info.family == ScaleFamily::kNVFP4;
  p.per_tensor = info.family == ScaleFamily::kTensor;
  // Emulated path only (the fast rules refuse it): a transposed NVFP4 copy quantized after the
  // 16-point Hadamard transform of its stored rows; `rows` is then the whole copy.
  p.rht = p.nvfp4 && cw && cfg.random_hadamard;
  StoredCopy& s = p.s;
  s.codes = (cw ? q.columnwise_data : q.data).as<const uint8_t>();
  s.scales = (cw ? q.columnwise_scale_inv : q.scale_inv).as<const uint8_t>();
  s.transposed = cw && info.columnwise_transposed;
  s.scale_dtype = info.scale_dtype;
  if (!p.per_tensor) s.geometry = scale_geometry(cfg, q.rows, q.cols, cw);
  s.sr_full = s.transposed ? q.cols : q.rows;
  s.sc_full = s.transposed ? q.rows : q.cols;
  s.sr = s.transposed ? q.cols : rows;
  s.sc = s.transposed ? rows : q.cols;
  if (p.per_tensor || p.nvfp4) {
    const TensorView& v = p.nvfp4 ? (cw ? q.columnwise_amax : q.amax)
                                  : (cw ? q.columnwise_scale_inv : q.scale_inv);
    p.factor = per_row_factor(v, p.nvfp4, rows, group_starts);
  }
  // A rowwise-family columnwise copy with one scale per (group, stored row): group g's at g·n.
  const int64_t groups = static_cast<int64_t>(group_starts.size()) - 1;
  if (info.family == ScaleFamily::kRowwise && s.transposed && groups > 1) {
    const int64_t n = scale_shape(cfg, q.rows, q.cols, true).numel();
    if ((cw ? q.columnwise_scale_inv : q.scale_inv).numel() == groups * n) {
      p.col_scale.assign(static_cast<size_t>(s.sc), 0);
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t c = std::max<int64_t>(group_starts[g], 0);
             c < std::min(group_starts[g + 1], s.sc); ++c) {
          p.col_scale[c] = g * n;
        }
      }
    }
  }
  p.table = make_table(cfg.element);
  if (p.nvfp4) p.scale_table = make_table(DType::kFloat8E4M3);
  impl_ = std::move(made);
}

int64_t DequantPlan::stored_rows() const { return impl_->s.sr; }
int64_t DequantPlan::stored_cols() const { return impl_->s.sc; }
bool DequantPlan::transposed() const { return impl_->s.transposed; }

void DequantPlan::rows(int64_t r0, int64_t r1, float* out) const {
  block(r0, r1, 0, impl_->s.sc, out);
  const int64_t sc = impl_->s.sc;
  if (impl_->rht)
    for (int64_t r = r0; r < r1; ++r) inverse_hadamard_row(out + (r - r0) * sc, sc);
}

void DequantPlan::block(int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* out) const {
  const Impl& p = *impl_;
  const int64_t* cs = p.col_scale.empty() ? nullptr : p.col_scale.data();
  for (int64_t r = r0; r < r1; ++r) {
    float* row = out + (r - r0) * (c1 - c0);
    if (p.nvfp4) {
      nvfp4_row(p.s, p.table, p.scale_table, p.factor.data(), r, c0, c1, row);
    } else {
      fp8_row(p.per_tensor, p.s, p.table, p.factor.data(), cs, r, c0, c1, row);
    }
  }
}

Fp32Image dequantize_operand(const GemmOperand& o, int64_t rows,
                             const std::vector<int64_t>& group_starts, float* out) {
  const DequantPlan plan(o, rows, group_starts);
  const int64_t sc = plan.stored_cols();
  const int64_t min_rows = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, sc));
  parallel_ranges(plan.stored_rows(), min_rows,
                  [&](int64_t r0, int64_t r1) { plan.rows(r0, r1, out + r0 * sc); });
  return {out, sc, plan.transposed()};
}

}  // namespace tessera::detail::cpu
