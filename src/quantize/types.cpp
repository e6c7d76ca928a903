// Shapes of quantized data and scales, config defaults and validation, QuantizedTensor storage.
#include "tessera/quantize/types.h"

#include <cmath>
#include <cstring>
#include <string>

#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"

namespace tessera {
namespace {

// Overflow-safe (core/checked_math.h): a padded extent past INT64_MAX throws kOutOfRange.
int64_t ceil_div(int64_t a, int64_t b) { return ceil_div_nonneg(a, b); }
int64_t round_up(int64_t a, int64_t b) { return checked_round_up(a, b, "(rows, cols) padded"); }

// E2M1 rows start on a byte: the view covers (rows, roundup(cols, 2)) codes.
TensorView view_2d(const Buffer& b, const MatrixShape& s) {
  if (b.empty()) return {};
  const int64_t cols = s.dtype == DType::kFloat4E2M1 ? round_up(s.cols, 2) : s.cols;
  return TensorView::contiguous(b.data(), s.dtype, {s.rows, cols}, b.device());
}

Buffer alloc_zeroed(int64_t bytes, Device device) {
  Buffer b(static_cast<std::size_t>(bytes > 0 ? bytes : 1), device);  // non-null even when empty
  b.fill_bytes(0);
  return b;
}

}  // namespace

const char* scaling_mode_name(ScalingMode m) noexcept {
  const ScalingModeInfo* r = find_scaling_mode(m);
  return r == nullptr ? "unknown" : r->name;
}

ScalingMode scaling_mode_from_name(const char* name) {
  const std::string_view n = name == nullptr ? "" : name;
  for (const ScalingModeInfo& r : kScalingModeTable) {
    if (n == r.name) return r.mode;
  }
  TESSERA_FAIL(Status::kInvalidArgument, "scaling mode: '", echo(n), "' is not known; expected ",
               scaling_mode_names(true));
}

bool has_amax(ScalingMode mode) {
  const ScalingModeInfo* r = find_scaling_mode(mode);
  return r != nullptr && r->has_amax;
}

QuantizerConfig make_config(ScalingMode mode, DType element) {
  const ScalingModeInfo* info = find_scaling_mode(mode);
  QuantizerConfig c;
  c.mode = mode;
  c.element = info != nullptr && info->fp4 ? DType::kFloat4E2M1 : DType::kFloat8E4M3;
  if (element != DType::kFloat32) c.element = element;
  c.power_of_two_scales = info != nullptr && info->power_of_two_default;
  return c;
}

void validate_config(const QuantizerConfig& c) {
  TESSERA_CHECK(c.mode != ScalingMode::kNone, "config.mode: 'none' does not quantize; expected ",
                scaling_mode_names());
  const ScalingModeInfo* info = find_scaling_mode(c.mode);
  TESSERA_CHECK(info != nullptr, "config.mode: value ", static_cast<int>(c.mode),
                " is not a ScalingMode");
  if (info->fp4) {
    TESSERA_CHECK_STATUS(c.element == DType::kFloat4E2M1, Status::kDTypeMismatch,
                         "config.element: ", dtype_name(c.element), " is not allowed for ",
                         scaling_mode_name(c.mode), "; it stores e2m1 elements");
  } else {
    TESSERA_CHECK_STATUS(c.element == DType::kFloat8E4M3 || c.element == DType::kFloat8E5M2,
                         Status::kDTypeMismatch, "config.element: ", dtype_name(c.element),
                         " is not allowed for ", scaling_mode_name(c.mode),
                         "; expected e4m3 or e5m2");
  }
  TESSERA_CHECK(c.scale_layout == ScaleLayout::kCompact || c.scale_layout == ScaleLayout::kSwizzled,
                "config.scale_layout: value ", static_cast<int>(c.scale_layout), " is not known");
  TESSERA_CHECK(c.scale_layout == ScaleLayout::kCompact || info->swizzle,
                "config.scale_layout: the swizzled layout exists for MXFP8 and NVFP4 only, not ",
                scaling_mode_name(c.mode));
  TESSERA_CHECK(!c.delayed || info->delayed,
                "config.delayed: delayed scaling exists for the 'tensor' mode only, not ",
                scaling_mode_name(c.mode));
  TESSERA_CHECK(c.amax_history_len >= 1, "config.amax_history_len: ", c.amax_history_len,
                " must be >= 1");
  TESSERA_CHECK(c.amax_algo == AmaxHistoryAlgo::kMax || c.amax_algo == AmaxHistoryAlgo::kMostRecent,
                "config.amax_algo: value ", static_cast<int>(c.amax_algo), " is not known");
  TESSERA_CHECK(c.margin >= -126 && c.margin <= 126, "config.margin: ", c.margin,
                " must lie in [-126, 126]");
  TESSERA_CHECK(std::isfinite(c.amax_epsilon) && c.amax_epsilon >= 0.0f,
                "config.amax_epsilon: ", c.amax_epsilon, " must be finite and >= 0");
  TESSERA_CHECK(c.e8m0_rounding == E8M0Rounding::kRoundUp || c.e8m0_rounding == E8M0Rounding::kFloor,
                "config.e8m0_rounding: value ", static_cast<int>(c.e8m0_rounding), " is not known");
  TESSERA_CHECK(!c.random_hadamard || info->fp4,
                "config.random_hadamard: the Hadamard transform exists for NVFP4 only, not ",
                scaling_mode_name(c.mode));
  TESSERA_CHECK(!c.stochastic_rounding || info->fp4,
                "config.stochastic_rounding: exists for NVFP4 only, not ", scaling_mode_name(c.mode));
}

int64_t MatrixShape::bytes() const {
  if (dtype == DType::kFloat4E2M1) return checked_mul(rows, ceil_div(cols, 2), "(rows, cols) bytes");
  return checked_dtype_bytes(dtype, numel(), "(rows, cols) bytes");
}

MatrixShape data_shape(const QuantizerConfig& config, int64_t rows, int64_t cols, bool columnwise) {
  TESSERA_CHECK(rows >= 0 && cols >= 0, "shape: (", rows, ", ", cols, ") must be non-negative");
  TESSERA_CHECK(config.mode != ScalingMode::kNone, "config.mode: 'none' has no quantized data");
  const bool transposed = columnwise && scaling_mode_info(config.mode).columnwise_transposed;
  return transposed ? MatrixShape{cols, rows, config.element} : MatrixShape{rows, cols, config.element};
}

namespace {

// The table row of a mode that has scales (not kNone).
const ScalingModeInfo& scaled_mode(const QuantizerConfig& config) {
  const ScalingModeInfo& info = scaling_mode_info(config.mode);
  TESSERA_CHECK(info.family != ScaleFamily::kNone, "config.mode: ", info.name, " has no scales");
  return info;
}

int64_t blocks(int64_t n, int64_t block) { return block == 0 ? 1 : ceil_div(n, block); }

}  // namespace

MatrixShape scale_shape(const QuantizerConfig& config, int64_t rows, int64_t cols, bool columnwise) {
  TESSERA_CHECK(rows >= 0 && cols >= 0, "shape: (", rows, ", ", cols, ") must be non-negative");
  const ScalingModeInfo& info = scaled_mode(config);
  // (r, c): the copy in its blocked orientation (xᵀ for every columnwise copy).
  const int64_t r = columnwise ? cols : rows;
  const int64_t c = columnwise ? rows : cols;
  const int64_t nr = blocks(r, info.scale_block_rows), nc = blocks(c, info.scale_block_cols);
  if (config.scale_layout == ScaleLayout::kSwizzled && info.swizzle) {
    return {round_up(nr, scale_rules::kSwizzleTileRows), round_up(nc, scale_rules::kSwizzleTileCols),
            info.scale_dtype};
  }
  const int64_t pr = round_up(nr, info.pad_rows), pc = round_up(nc, info.pad_cols);
  // A columnwise copy stored untransposed keeps its scales in the data's orientation.
  if (columnwise && !info.columnwise_transposed) return {pc, pr, info.scale_dtype};
  return {pr, pc, info.scale_dtype};
}

scale_rules::ScaleGeometry scale_geometry(const QuantizerConfig& config, int64_t rows,
                                          int64_t cols, bool columnwise) {
  const ScalingModeInfo& info = scaled_mode(config);
  const MatrixShape s = scale_shape(config, rows, cols, columnwise);
  scale_rules::ScaleGeometry g;
  g.swizzled = config.scale_layout == ScaleLayout::kSwizzled && info.swizzle;
  g.ld = s.cols;
  g.block_rows = info.scale_block_rows;
  g.block_cols = info.scale_block_cols;
  if (columnwise && !info.columnwise_transposed) {
    // Data (M, K) with scales per block_cols x block_rows: the blocks of xᵀ, transposed.
    g.block_rows = info.scale_block_cols;
    g.block_cols = info.scale_block_rows;
    g.swizzle_transposed = g.swizzled;
  }
  return g;
}

QuantizedTensor::QuantizedTensor(const QuantizerConfig& config, int64_t rows, int64_t cols,
                                 Device device) {
  validate_config(config);
  TESSERA_CHECK(rows >= 0 && cols >= 0, "shape: (", rows, ", ", cols, ") must be non-negative");
  view_.config = config;
  view_.config.rowwise = false;
  view_.config.columnwise = false;
  view_.rows = rows;
  view_.cols = cols;
  view_.device = device;
  ensure_usage(config.rowwise, config.columnwise);
}

void QuantizedTensor::ensure_usage(bool rowwise, bool columnwise) {
  QuantizerConfig& c = view_.config;
  const int64_t m = view_.rows, k = view_.cols;
  const Device dev = view_.device;
  if (rowwise && !view_.has_rowwise()) {
    const MatrixShape ds = data_shape(c, m, k, false), ss = scale_shape(c, m, k, false);
    data_ = alloc_zeroed(ds.bytes(), dev);
    scale_inv_ = alloc_zeroed(ss.bytes(), dev);
    view_.data = view_2d(data_, ds);
    view_.scale_inv = view_2d(scale_inv_, ss);
    if (has_amax(c.mode)) {
      amax_ = alloc_zeroed(4, dev);
      view_.amax = TensorView::contiguous(amax_.data(), DType::kFloat32, {1}, dev);
    }
    c.rowwise = true;
  }
  if (columnwise && !view_.has_columnwise()) {
    const MatrixShape ds = data_shape(c, m, k, true), ss = scale_shape(c, m, k, true);
    columnwise_data_ = alloc_zeroed(ds.bytes(), dev);
    columnwise_scale_inv_ = alloc_zeroed(ss.bytes(), dev);
    view_.columnwise_data = view_2d(columnwise_data_, ds);
    view_.columnwise_scale_inv = view_2d(columnwise_scale_inv_, ss);
    if (has_amax(c.mode)) {
      columnwise_amax_ = alloc_zeroed(4, dev);
      view_.columnwise_amax = TensorView::contiguous(columnwise_amax_.data(), DType::kFloat32, {1}, dev);
    }
    c.columnwise = true;
  }
}

}  // namespace tessera
