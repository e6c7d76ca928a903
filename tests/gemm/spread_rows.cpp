// Spread A-row layouts for the a_row_starts tests (see spread_rows.h).
#include "gemm/spread_rows.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tessera/formats/scaling_modes.h"
#include "tessera/quantize/scale_rules.h"
#include "tessera/quantize/types.h"

namespace tessera::test {

SpreadLayout spread_layout(const std::vector<int64_t>& group_rows, int64_t align, int64_t max_gap,
                           int64_t tail, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> gap(0, max_gap);
  SpreadLayout s;
  int64_t end = 0;
  for (int64_t rows : group_rows) {
    const int64_t start = (end + gap(rng) + align - 1) / align * align;
    s.starts.push_back(start);
    end = start + rows;
  }
  s.rows = end + tail;
  s.live.assign(static_cast<size_t>(s.rows), false);
  for (size_t g = 0; g < group_rows.size(); ++g)
    for (int64_t r = 0; r < group_rows[g]; ++r) s.live[s.starts[g] + r] = true;
  return s;
}

Owned spread_dense(const Owned& a, const std::vector<int64_t>& group_rows, const SpreadLayout& s,
                   float gap) {
  const DType dt = a.view.dtype;
  const int64_t cols = a.view.shape[1];
  const int64_t row_bytes = dtype_bytes(dt, cols);
  Owned o;
  o.bytes.resize(static_cast<size_t>(s.rows * row_bytes));
  o.view = TensorView::contiguous(o.bytes.data(), dt, {s.rows, cols});
  // The gap value in the operand's dtype, from a one-row fixture-style store.
  std::vector<uint8_t> gap_row(static_cast<size_t>(row_bytes));
  for (int64_t c = 0; c < cols; ++c) {
    switch (dt) {
      case DType::kFloat32: reinterpret_cast<float*>(gap_row.data())[c] = gap; break;
      case DType::kBFloat16: reinterpret_cast<bf16*>(gap_row.data())[c] = bf16::from_float(gap); break;
      default: reinterpret_cast<fp16*>(gap_row.data())[c] = fp16::from_float(gap); break;
    }
  }
  for (int64_t r = 0; r < s.rows; ++r)
    std::memcpy(o.bytes.data() + r * row_bytes, gap_row.data(), static_cast<size_t>(row_bytes));
  int64_t src = 0;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    std::memcpy(o.bytes.data() + s.starts[g] * row_bytes, a.bytes.data() + src * row_bytes,
                static_cast<size_t>(group_rows[g] * row_bytes));
    src += group_rows[g];
  }
  return o;
}

Owned starts_view(const SpreadLayout& s, const std::vector<int64_t>& group_rows, bool with_end) {
  std::vector<int64_t> v = s.starts;
  if (with_end) v.push_back(s.starts.back() + group_rows.back());
  Owned o;
  o.bytes.resize(v.size() * 8);
  std::memcpy(o.bytes.data(), v.data(), o.bytes.size());
  o.view = TensorView::contiguous(o.bytes.data(), DType::kInt64, {static_cast<int64_t>(v.size())});
  return o;
}

void poison_gap_rows(const QuantizedTensorView& q, const SpreadLayout& s) {
  const ScalingModeInfo& info = scaling_mode_info(q.config.mode);
  auto* codes = static_cast<uint8_t*>(q.data.data);
  const int64_t row_bytes = info.fp4 ? (q.cols + 1) / 2 : q.cols;
  const scale_rules::ScaleGeometry geo = scale_geometry(q.config, q.rows, q.cols, false);
  auto* scales = static_cast<uint8_t*>(q.scale_inv.data);
  const bool own_scales = geo.block_rows == 1;  // rowwise or 1xN blocks: one scale row per row
  const int64_t step = geo.block_cols > 0 ? geo.block_cols : q.cols;
  for (int64_t r = 0; r < q.rows; ++r) {
    if (s.live[r]) continue;
    std::memset(codes + r * row_bytes, info.fp4 ? 0x77 : 0x7F, static_cast<size_t>(row_bytes));
    if (!own_scales) continue;
    for (int64_t c = 0; c < q.cols; c += step) {
      const int64_t i = scale_rules::scale_index(geo, r, c);
      if (info.scale_dtype == DType::kFloat32) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(scales + 4 * i, &nan, 4);
      } else {
        scales[i] = info.scale_dtype == DType::kFloat8E8M0 ? 0xFF : 0x7F;
      }
    }
  }
}

namespace {

QuantizedTensor quantize_matrix(const Owned& dense, const QuantizerConfig& cfg) {
  const TensorView& v = dense.view;
  const int64_t cols = v.shape[v.ndim - 1], rows = v.numel() / cols;
  QuantizedTensor q(cfg, rows, cols, Device::cpu());
  Quantizer(cfg).quantize(TensorView::contiguous(v.data, DType::kFloat32, {rows, cols}), q);
  return q;
}

void clear_nans(Owned& o) {
  float* p = o.view.as<float>();
  for (int64_t i = 0; i < o.view.numel(); ++i) p[i] = std::isnan(p[i]) ? 0.0f : p[i];
}

}  // namespace

SpreadCase::SpreadCase(const GemmCase& c, int64_t align, int64_t max_gap, bool with_end,
                       uint32_t seed)
    : compact(make_fixture(c)), spread(copy_of(compact)) {
  layout = spread_layout(c.group_rows, align, max_gap, /*tail=*/5, seed);
  a = spread_dense(compact.a, c.group_rows, layout, std::numeric_limits<float>::quiet_NaN());
  starts = starts_view(layout, c.group_rows, with_end);
  spread.problem.a = GemmOperand::from_dense(a.view);
  spread.problem.a_row_starts = starts.view;
}

QuantizedSpread::QuantizedSpread(const GemmCase& c, const QuantRecipe& r, int64_t align,
                                 int64_t max_gap)
    : s(c, align, max_gap, true, 5) {
  clear_nans(s.compact.a);
  clear_nans(s.compact.b);
  s.a = spread_dense(s.compact.a, c.group_rows, s.layout, 0.0f);
  qa = quantize_matrix(s.compact.a, r.a);
  qa_spread = quantize_matrix(s.a, r.a);
  poison_gap_rows(qa_spread.view(), s.layout);
  qb = quantize_matrix(s.compact.b, r.b);
  const bool b_columnwise = !c.transpose_b;
  s.compact.problem.a = GemmOperand::from_quantized(qa.view(), false);
  s.spread.problem.a = GemmOperand::from_quantized(qa_spread.view(), false);
  s.compact.problem.b = s.spread.problem.b = GemmOperand::from_quantized(qb.view(), b_columnwise);
  s.spread.problem.a_row_starts = s.starts.view;
}

}  // namespace tessera::test
