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

bool is_mxfp8(ScalingMode m) { return m == ScalingMode::kMXFP8 || m == ScalingMode::kMXFP8_32x32; }
bool is_nvfp4(ScalingMode m) { return m == ScalingMode::kNVFP4 || m == ScalingMode::kNVFP4_16x16; }

constexpr ScalingMode kAllModes[] = {
    ScalingMode::kNone,   ScalingMode::kTensor,      ScalingMode::kRowwise,
    ScalingMode::kBlock1x128, ScalingMode::kBlock128x128, ScalingMode::kMXFP8,
    ScalingMode::kMXFP8_32x32, ScalingMode::kNVFP4, ScalingMode::kNVFP4_16x16};

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
  switch (m) {
    case ScalingMode::kNone: return "none";
    case ScalingMode::kTensor: return "tensor";
    case ScalingMode::kRowwise: return "rowwise";
    case ScalingMode::kBlock1x128: return "block1x128";
    case ScalingMode::kBlock128x128: return "block128x128";
    case ScalingMode::kMXFP8: return "mxfp8";
    case ScalingMode::kMXFP8_32x32: return "mxfp8_32x32";
    case ScalingMode::kNVFP4: return "nvfp4";
    case ScalingMode::kNVFP4_16x16: return "nvfp4_16x16";
  }
  return "unknown";
}

ScalingMode scaling_mode_from_name(const char* name) {
  const std::string n = name == nullptr ? "" : name;
  for (ScalingMode m : kAllModes) {
    if (n == scaling_mode_name(m)) return m;
  }
  TESSERA_FAIL(Status::kInvalidArgument, "scaling mode: '", n, "' is not known; expected none, "
               "tensor, rowwise, block1x128, block128x128, mxfp8, mxfp8_32x32, nvfp4 or "
               "nvfp4_16x16");
}

bool has_amax(ScalingMode mode) { return mode == ScalingMode::kTensor || is_nvfp4(mode); }

QuantizerConfig make_config(ScalingMode mode, DType element) {
  QuantizerConfig c;
  c.mode = mode;
  c.element = is_nvfp4(mode) ? DType::kFloat4E2M1 : DType::kFloat8E4M3;
  if (element != DType::kFloat32) c.element = element;
  c.power_of_two_scales = mode == ScalingMode::kBlock1x128 || mode == ScalingMode::kBlock128x128;
  return c;
}

void validate_config(const QuantizerConfig& c) {
  TESSERA_CHECK(c.mode != ScalingMode::kNone, "config.mode: 'none' does not quantize; expected "
                "tensor, rowwise, block1x128, block128x128, mxfp8, mxfp8_32x32, nvfp4 or "
                "nvfp4_16x16");
  bool known = false;
  for (ScalingMode m : kAllModes) known = known || m == c.mode;
  TESSERA_CHECK(known, "config.mode: value ", static_cast<int>(c.mode), " is not a ScalingMode");
  if (is_nvfp4(c.mode)) {
    TESSERA_CHECK_STATUS(c.element == DType::kFloat4E2M1, Status::kDTypeMismatch,
                         "config.element: ", dtype_name(c.element), " is not allowed for ",
                         scaling_mode_name(c.mode), "; NVFP4 stores e2m1 elements");
  } else {
    TESSERA_CHECK_STATUS(c.element == DType::kFloat8E4M3 || c.element == DType::kFloat8E5M2,
                         Status::kDTypeMismatch, "config.element: ", dtype_name(c.element),
                         " is not allowed for ", scaling_mode_name(c.mode),
                         "; expected e4m3 or e5m2");
  }
  TESSERA_CHECK(c.scale_layout == ScaleLayout::kCompact || c.scale_layout == ScaleLayout::kSwizzled,
                "config.scale_layout: value ", static_cast<int>(c.scale_layout), " is not known");
  TESSERA_CHECK(c.scale_layout == ScaleLayout::kCompact || is_mxfp8(c.mode) || is_nvfp4(c.mode),
                "config.scale_layout: the swizzled layout exists for MXFP8 and NVFP4 only, not ",
                scaling_mode_name(c.mode));
  TESSERA_CHECK(!c.delayed || c.mode == ScalingMode::kTensor,
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
  TESSERA_CHECK(!c.random_hadamard || is_nvfp4(c.mode),
                "config.random_hadamard: the Hadamard transform exists for NVFP4 only, not ",
                scaling_mode_name(c.mode));
  TESSERA_CHECK(!c.stochastic_rounding || is_nvfp4(c.mode),
                "config.stochastic_rounding: exists for NVFP4 only, not ", scaling_mode_name(c.mode));
}

int64_t MatrixShape::bytes() const {
  if (dtype == DType::kFloat4E2M1) return checked_mul(rows, ceil_div(cols, 2), "(rows, cols) bytes");
  return checked_dtype_bytes(dtype, numel(), "(rows, cols) bytes");
}

MatrixShape data_shape(const QuantizerConfig& config, int64_t rows, int64_t cols, bool columnwise) {
  TESSERA_CHECK(rows >= 0 && cols >= 0, "shape: (", rows, ", ", cols, ") must be non-negative");
  TESSERA_CHECK(config.mode != ScalingMode::kNone, "config.mode: 'none' has no quantized data");
  const bool transposed = columnwise && !is_mxfp8(config.mode);
  return transposed ? MatrixShape{cols, rows, config.element} : MatrixShape{rows, cols, config.element};
}

MatrixShape scale_shape(const QuantizerConfig& config, int64_t rows, int64_t cols, bool columnwise) {
  TESSERA_CHECK(rows >= 0 && cols >= 0, "shape: (", rows, ", ", cols, ") must be non-negative");
  // (r, c): the shape of the copy being scaled (transposed for the columnwise copy of every mode
  // except MXFP8, whose columnwise scales are handled below).
  const int64_t r = columnwise ? cols : rows;
  const int64_t c = columnwise ? rows : cols;
  const bool swizzled = config.scale_layout == ScaleLayout::kSwizzled;
  switch (config.mode) {
    case ScalingMode::kTensor: return {1, 1, DType::kFloat32};
    case ScalingMode::kRowwise: return {r, 1, DType::kFloat32};
    case ScalingMode::kBlock1x128: return {round_up(r, 4), ceil_div(c, 128), DType::kFloat32};
    case ScalingMode::kBlock128x128:
      return {ceil_div(r, 128), round_up(ceil_div(c, 128), 4), DType::kFloat32};
    case ScalingMode::kMXFP8:
    case ScalingMode::kMXFP8_32x32:
      if (swizzled) return {round_up(r, 128), round_up(ceil_div(c, 32), 4), DType::kFloat8E8M0};
      if (columnwise) return {ceil_div(rows, 32), cols, DType::kFloat8E8M0};
      return {rows, ceil_div(cols, 32), DType::kFloat8E8M0};
    case ScalingMode::kNVFP4:
    case ScalingMode::kNVFP4_16x16:
      if (swizzled) return {round_up(r, 128), round_up(ceil_div(c, 16), 4), DType::kFloat8E4M3};
      return {r, ceil_div(c, 16), DType::kFloat8E4M3};
    default:
      TESSERA_FAIL(Status::kInvalidArgument, "config.mode: ", scaling_mode_name(config.mode),
                   " has no scales");
  }
}

int64_t swizzled_scale_offset(int64_t r, int64_t c, int64_t padded_cols) {
  const int64_t tile = (r / 128) * (padded_cols / 4) + c / 4;
  const int64_t rr = r % 128;
  return tile * 512 + (rr % 32) * 16 + (rr / 32) * 4 + c % 4;
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
