// The quantize dispatcher: argument checks, usage union, backend choice (reference / cpu / cuda)
// and the delayed-scaling state (scale, amax history, update()).
#include "tessera/quantize/quantizer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "core/env_flag.h"
#include "quantize/cpu/cpu_kernels.h"
#include "quantize/quantize_backend.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera {
namespace {

float fp8_max(DType element) {
  return element == DType::kFloat8E5M2 ? formats::FormatTraits<DType::kFloat8E5M2>::kMax
                                       : formats::FormatTraits<DType::kFloat8E4M3>::kMax;
}

// A present buffer must have the dtype and at least the bytes of `want`, on `device`.
void check_field(const TensorView& v, const MatrixShape& want, Device device, const char* name) {
  check_view(v, name);
  TESSERA_CHECK_STATUS(v.dtype == want.dtype, Status::kDTypeMismatch, name, ": dtype ",
                       dtype_name(v.dtype), " but this config stores ", dtype_name(want.dtype));
  TESSERA_CHECK_STATUS(v.nbytes() >= want.bytes(), Status::kBufferTooSmall, name, ": ",
                       v.nbytes(), " bytes but (", want.rows, ", ", want.cols, ") ",
                       dtype_name(want.dtype), " needs ", want.bytes());
  TESSERA_CHECK(v.device == device, name, ": on ", to_string(v.device), " but x is on ",
                to_string(device));
}

void check_usage_buffers(const QuantizedTensorView& out, bool columnwise, Device device) {
  const QuantizerConfig& c = out.config;
  const TensorView& data = columnwise ? out.columnwise_data : out.data;
  const TensorView& scale = columnwise ? out.columnwise_scale_inv : out.scale_inv;
  const TensorView& amax = columnwise ? out.columnwise_amax : out.amax;
  const char* which = columnwise ? "columnwise" : "rowwise";
  TESSERA_CHECK(data.data != nullptr, "out: has no ", which, " data buffer but the ", which,
                " usage is requested; add it with QuantizedTensor::ensure_usage");
  check_field(data, data_shape(c, out.rows, out.cols, columnwise), device,
              columnwise ? "out.columnwise_data" : "out.data");
  TESSERA_CHECK(scale.data != nullptr, "out: has no ", which, " scale_inv buffer");
  check_field(scale, scale_shape(c, out.rows, out.cols, columnwise), device,
              columnwise ? "out.columnwise_scale_inv" : "out.scale_inv");
  if (has_amax(c.mode)) {
    TESSERA_CHECK(amax.data != nullptr, "out: has no ", which, " amax buffer (", 
                  scaling_mode_name(c.mode), " stores one)");
    check_field(amax, MatrixShape{1, 1, DType::kFloat32}, device,
                columnwise ? "out.columnwise_amax" : "out.amax");
  }
}

void check_input(const TensorView& x, Device device) {
  check_view(x, "x", {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  TESSERA_CHECK_STATUS(x.ndim == 2, Status::kShapeMismatch, "x: must be 2-D (M, K), got ",
                       x.to_string());
  TESSERA_CHECK(x.device == device, "x: is on ", to_string(x.device), " but the quantizer is on ",
                to_string(device));
}

}  // namespace

Quantizer::Quantizer(const QuantizerConfig& config, Device device)
    : config_(config), device_(device) {
  validate_config(config_);
  if (config_.delayed) {
    const float one = 1.0f;
    std::vector<float> zeros(static_cast<size_t>(config_.amax_history_len), 0.0f);
    scale_ = Buffer(sizeof(float), device_);
    amax_history_ = Buffer(zeros.size() * sizeof(float), device_);
    copy_bytes(scale_.data(), device_, &one, Device::cpu(), sizeof(float));
    copy_bytes(amax_history_.data(), device_, zeros.data(), Device::cpu(), amax_history_.bytes());
    scale_ptr_ = scale_.as<float>();
    amax_history_ptr_ = amax_history_.as<float>();
  }
}

Quantizer::Quantizer(const QuantizerConfig& config, Device device, const DelayedScalingState& state)
    : config_(config), device_(device) {
  validate_config(config_);
  TESSERA_CHECK(config_.delayed, "state: caller-owned delayed-scaling state needs config.delayed");
  const auto check_state = [&](const TensorView& v, int64_t numel, const char* name) {
    check_field(v, MatrixShape{1, numel, DType::kFloat32}, device_, name);
    TESSERA_CHECK_STATUS(v.numel() == numel && v.is_contiguous(), Status::kShapeMismatch, name,
                         ": expected ", numel, " contiguous float32 elements, got ",
                         v.to_string());
  };
  check_state(state.scale, 1, "state.scale");
  check_state(state.amax_history, config_.amax_history_len, "state.amax_history");
  scale_ptr_ = static_cast<float*>(state.scale.data);
  amax_history_ptr_ = static_cast<float*>(state.amax_history.data);
}

void Quantizer::set_usage(bool rowwise, bool columnwise) {
  config_.rowwise = rowwise;
  config_.columnwise = columnwise;
}

QuantizedTensor Quantizer::allocate(int64_t rows, int64_t cols) const {
  TESSERA_CHECK(config_.rowwise || config_.columnwise,
                "quantizer: neither the rowwise nor the columnwise usage is set");
  return QuantizedTensor(config_, rows, cols, device_);
}

void Quantizer::quantize(const TensorView& x, QuantizedTensor& out, Stream stream) {
  out.ensure_usage(config_.rowwise, config_.columnwise);
  quantize(x, out.view(), stream);
}

void Quantizer::quantize(const TensorView& x, QuantizedTensorView& out, Stream stream) {
  quantize(x, out, backend_for(device_), stream);
}

void Quantizer::quantize(const TensorView& x, QuantizedTensorView& out, Backend backend,
                         Stream stream) {
  check_input(x, device_);
  const int64_t m = x.shape[0], k = x.shape[1];
  TESSERA_CHECK_STATUS(out.rows == m && out.cols == k, Status::kShapeMismatch, "out: holds (",
                       out.rows, ", ", out.cols, ") but x is (", m, ", ", k, ")");
  TESSERA_CHECK(out.config.mode == config_.mode && out.config.element == config_.element &&
                    out.config.scale_layout == config_.scale_layout,
                "out: was allocated for ", scaling_mode_name(out.config.mode), "/",
                dtype_name(out.config.element), " but the quantizer produces ",
                scaling_mode_name(config_.mode), "/", dtype_name(config_.element),
                " with the same scale layout");
  detail::QuantizeRequest req;
  req.rowwise = config_.rowwise || out.has_rowwise();
  req.columnwise = config_.columnwise || out.has_columnwise();
  TESSERA_CHECK(req.rowwise || req.columnwise,
                "quantizer: neither the rowwise nor the columnwise usage is set");
  if (req.rowwise) check_usage_buffers(out, false, device_);
  if (req.columnwise) check_usage_buffers(out, true, device_);
  TESSERA_CHECK_STATUS(!(req.columnwise && config_.random_hadamard) || m % 16 == 0,
                       Status::kShapeMismatch, "x: the Hadamard transform of the columnwise copy "
                       "needs M to be a multiple of 16, got M = ", m);
  if (config_.delayed) {
    req.delayed_scale = scale_ptr_;
    req.amax_history = amax_history_ptr_;
  }
  // No element: every backend takes the empty path (work proportional to the output).
  const bool empty = x.numel() == 0;
  switch (backend) {
    case Backend::kReference:
      TESSERA_CHECK(device_.is_cpu(), "backend: the reference runs on host memory only");
      empty ? detail::quantize_empty_host(config_, out, req)
            : detail::quantize_reference(config_, x, out, req);
      break;
    case Backend::kCPU:
      TESSERA_CHECK(device_.is_cpu(), "backend: cpu, but the data is on ", to_string(device_));
      empty ? detail::quantize_empty_host(config_, out, req)
            : detail::quantize_cpu(config_, x, out, req);
      break;
    case Backend::kCUDA:
      TESSERA_CHECK_STATUS(device_.is_cuda(), Status::kInvalidArgument,
                           "backend: cuda, but the data is on ", to_string(device_));
      empty ? detail::quantize_empty_cuda(config_, out, req, device_, stream)
            : detail::quantize_cuda(config_, x, out, req, stream);
      break;
    default:
      TESSERA_FAIL(Status::kInvalidArgument, "backend: value ", static_cast<int>(backend),
                   " is not known; expected reference, cpu or cuda");
  }
  const bool had_rowwise = req.rowwise, had_columnwise = req.columnwise;
  out.config = config_;
  out.config.rowwise = had_rowwise;
  out.config.columnwise = had_columnwise;
}

TensorView Quantizer::scale() const {
  if (!config_.delayed) return {};
  return TensorView::contiguous(scale_ptr_, DType::kFloat32, {1}, device_);
}

TensorView Quantizer::amax_history() const {
  if (!config_.delayed) return {};
  return TensorView::contiguous(amax_history_ptr_, DType::kFloat32,
                                {int64_t{config_.amax_history_len}}, device_);
}

// amax = max over the history (NaN wins) or slot 0; scale = delayed_scale(amax, scale); then the
// history rolls by one toward slot 0 (h'[i] = h[(i + 1) % len]) and slot 0 is cleared.
void Quantizer::update(Stream stream) {
  TESSERA_CHECK(config_.delayed, "update: applies to delayed scaling only (config.delayed)");
  if (device_.is_cuda()) {
    detail::delayed_update_cuda(config_, scale_ptr_, amax_history_ptr_, stream);
    return;
  }
  scale_rules::delayed_update(scale_ptr_, amax_history_ptr_, config_.amax_history_len, 1,
                              config_.amax_algo == AmaxHistoryAlgo::kMostRecent,
                              fp8_max(config_.element), config_.margin);
}

void dequantize(const QuantizedTensorView& q, const TensorView& out, bool columnwise,
                Stream stream) {
  dequantize(q, out, columnwise, backend_for(q.device), stream);
}

void dequantize(const QuantizedTensorView& q, const TensorView& out, bool columnwise,
                Backend backend, Stream stream) {
  validate_config(q.config);
  check_view(out, "out", {DType::kFloat32});
  TESSERA_CHECK_STATUS(out.ndim == 2 && out.shape[0] == q.rows && out.shape[1] == q.cols,
                       Status::kShapeMismatch, "out: must be float32 (", q.rows, ", ", q.cols,
                       "), got ", out.to_string());
  TESSERA_CHECK(out.device == q.device, "out: is on ", to_string(out.device),
                " but the quantized tensor is on ", to_string(q.device));
  TESSERA_CHECK(columnwise ? q.has_columnwise() : q.has_rowwise(), "q: has no ",
                columnwise ? "columnwise" : "rowwise", " copy to dequantize");
  check_usage_buffers(q, columnwise, q.device);
  const bool empty = out.numel() == 0;  // nothing to write, whatever the empty extent
  switch (backend) {
    case Backend::kReference:
      TESSERA_CHECK(q.device.is_cpu(), "backend: the reference runs on host memory only");
      if (!empty) detail::dequantize_reference(q, out, columnwise);
      return;
    case Backend::kCPU:
      TESSERA_CHECK(q.device.is_cpu(), "backend: cpu, but the data is on ", to_string(q.device));
      if (!empty) detail::dequantize_cpu(q, out, columnwise);
      return;
    case Backend::kCUDA:
      TESSERA_CHECK(q.device.is_cuda(), "backend: cuda, but the data is on ", to_string(q.device));
      if (!empty) detail::dequantize_cuda(q, out, columnwise, stream);
      return;
    default:
      TESSERA_FAIL(Status::kInvalidArgument, "backend: value ", static_cast<int>(backend),
                   " is not known; expected reference, cpu or cuda");
  }
}

namespace detail {

void quantize_nvfp4_members(const QuantizerConfig& config, const TensorView& x,
                            const TensorView& offsets, const QuantizedTensorView& out,
                            Stream stream, const TensorView& sources) {
  const int64_t groups = offsets.numel() - 1;
  TESSERA_CHECK(offsets.dtype == DType::kInt64 && groups >= 1 && offsets.device == x.device &&
                    offsets.is_contiguous(),
                "quantize_nvfp4_members: offsets must be >= 2 contiguous int64 on x's device, got ",
                offsets.to_string());
  for (const TensorView* a : {&out.amax, &out.columnwise_amax}) {
    const bool wanted = a == &out.amax ? config.rowwise : config.columnwise;
    TESSERA_CHECK(!wanted || (a->dtype == DType::kFloat32 && a->numel() == groups),
                  "quantize_nvfp4_members: the global amax of each copy asked for holds one "
                  "float32 per member (", groups, "), got ", a->to_string());
  }
  if (sources.data != nullptr) {
    TESSERA_CHECK(nvfp4_members_take_layout(config, x), "quantize_nvfp4_members: ",
                  scaling_mode_name(config.mode), " of x ", x.to_string(),
                  " does not read through a layout (nvfp4_members_take_layout)");
    TESSERA_CHECK(sources.dtype == DType::kInt64 && sources.numel() == groups + 1 &&
                      sources.device == x.device && sources.is_contiguous(),
                  "quantize_nvfp4_members: sources must be ", groups + 1,
                  " contiguous int64 on x's device, got ", sources.to_string());
    return quantize_nvfp4_members_cuda(config, x, offsets.as<const int64_t>(), groups, out,
                                       stream, sources.as<const int64_t>());
  }
  if (x.device.is_cuda()) {
    return quantize_nvfp4_members_cuda(config, x, offsets.as<const int64_t>(), groups, out, stream);
  }
  cpu::quantize_nvfp4_members(config, x, offsets.as<const int64_t>(), groups, out);
}

bool nvfp4_members_take_layout(const QuantizerConfig& config, const TensorView& x) {
  if (!layout_reads() || !x.device.is_cuda() || x.ndim != 2) return false;
  if (!is_family(config.mode, ScaleFamily::kNVFP4)) return false;
  if (scaling_mode_info(config.mode).block_rows != 1) return false;  // 1x16 (not the 16x16 tiles)
  return x.shape[1] % 16 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
}

namespace {
std::atomic<bool>& layout_reads_switch() {
  static std::atomic<bool> on{env_flag("TESSERA_LAYOUT_READS", true)};
  return on;
}
}  // namespace

bool layout_reads() { return layout_reads_switch().load(std::memory_order_relaxed); }
void set_layout_reads(bool on) { layout_reads_switch().store(on, std::memory_order_relaxed); }

bool takes_layout_rows(const QuantizerConfig& config, const TensorView& x) {
  if (!layout_reads() || !x.device.is_cuda() || config.delayed) return false;
  if (is_family(config.mode, ScaleFamily::kMXFP8)) return true;
  if (!is_family(config.mode, ScaleFamily::kBlock)) return false;
  const ScalingModeInfo& info = scaling_mode_info(config.mode);
  return info.block_cols == 128 && (info.block_rows == 1 || info.block_rows == 128);
}

int64_t layout_rows_align(const QuantizerConfig& config) {
  return is_family(config.mode, ScaleFamily::kMXFP8) ? 32 : 4;
}

void quantize_through_layout(const QuantizerConfig& config, const TensorView& x,
                             const LayoutRows& layout, const QuantizedTensorView& out,
                             Stream stream) {
  check_input(x, x.device);
  TESSERA_CHECK(takes_layout_rows(config, x), "quantize_through_layout: ",
                scaling_mode_name(config.mode), " on ", to_string(x.device),
                " does not read through a layout (takes_layout_rows)");
  TESSERA_CHECK_STATUS(out.cols == x.shape[1] && layout.x_rows == x.shape[0] &&
                           layout.groups >= 1 && layout.dst != nullptr && layout.src != nullptr,
                       Status::kShapeMismatch, "quantize_through_layout: x ", x.to_string(),
                       " read as ", layout.groups, " groups of ", layout.x_rows,
                       " rows into a copy of (", out.rows, ", ", out.cols, ")");
  const int64_t align = layout_rows_align(config);
  TESSERA_CHECK(layout.align > 0 && layout.align % align == 0, "quantize_through_layout: ",
                scaling_mode_name(config.mode), " reads a layout whose groups start on multiples "
                "of ", align, " rows; this one promises ", layout.align);
  TESSERA_CHECK(out.config.mode == config.mode && out.config.element == config.element,
                "quantize_through_layout: out was allocated for ",
                scaling_mode_name(out.config.mode), "/", dtype_name(out.config.element));
  QuantizeRequest req;
  req.rowwise = out.has_rowwise();
  req.columnwise = out.has_columnwise();
  TESSERA_CHECK(req.rowwise || req.columnwise, "quantize_through_layout: out has no usage");
  if (req.rowwise) check_usage_buffers(out, false, x.device);
  if (req.columnwise) check_usage_buffers(out, true, x.device);
  if (out.rows == 0 || out.cols == 0) return quantize_empty_cuda(config, out, req, x.device, stream);
  quantize_through_layout_cuda(config, x, layout, out, req, stream);
}

}  // namespace detail
}  // namespace tessera
