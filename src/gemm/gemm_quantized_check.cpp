// Validation of quantized GEMM operands. Until the quantize layer and the CPU dequantize land,
// the FP8 recipes the CUDA backend reads (kTensor, kRowwise; E4M3/E5M2) are validated here
// against the data model of quantize/types.h (without its sizing functions) on CUDA devices;
// everything else is reported as unsupported.
#include "gemm/gemm_quantized_check.h"

namespace tessera::detail {
namespace {

bool is_fp8_scaled(const QuantizerConfig& c) {
  return (c.mode == ScalingMode::kTensor || c.mode == ScalingMode::kRowwise) &&
         (c.element == DType::kFloat8E4M3 || c.element == DType::kFloat8E5M2);
}

void check_buffer_device(const TensorView& v, Device dev, const char* name, const char* field) {
  TESSERA_CHECK(v.device == dev, name, ".", field, ": is on ", to_string(v.device),
                " but the quantized tensor is on ", to_string(dev));
  TESSERA_CHECK(v.is_contiguous(), name, ".", field, ": must be contiguous");
}

}  // namespace

void check_quantized_operand(const GemmOperand& o, const char* name, int64_t num_groups) {
  const QuantizedTensorView& q = o.quantized;
  const QuantizerConfig& c = q.config;
  TESSERA_CHECK_STATUS(is_fp8_scaled(c), Status::kUnsupported, name,
                       ": quantized operands with scaling mode ", static_cast<int>(c.mode),
                       " and element ", dtype_name(c.element),
                       " are not supported by grouped GEMM yet (FP8 per-tensor and rowwise are)");
  TESSERA_CHECK_STATUS(q.device.is_cuda(), Status::kUnsupported, name,
                       ": quantized operands run on the CUDA backend only for now");
  TESSERA_CHECK(q.rows >= 0 && q.cols >= 0, name, ": shape (", q.rows, ", ", q.cols,
                ") is negative");
  const bool cw = o.columnwise;
  TESSERA_CHECK(cw ? q.has_columnwise() : q.has_rowwise(), name, ": the GEMM reads the ",
                cw ? "columnwise" : "rowwise", " copy, which this quantized tensor does not have");
  const TensorView& data = cw ? q.columnwise_data : q.data;
  const TensorView& scale = cw ? q.columnwise_scale_inv : q.scale_inv;
  const char* data_field = cw ? "columnwise_data" : "data";
  const char* scale_field = cw ? "columnwise_scale_inv" : "scale_inv";
  // kTensor / kRowwise store the columnwise copy transposed: (cols, rows).
  const int64_t rows = cw ? q.cols : q.rows, cols = cw ? q.rows : q.cols;
  TESSERA_CHECK_STATUS(data.dtype == c.element, Status::kDTypeMismatch, name, ".", data_field,
                       ": dtype ", dtype_name(data.dtype), ", expected ", dtype_name(c.element));
  TESSERA_CHECK_STATUS(data.ndim == 2 && data.shape[0] == rows && data.shape[1] == cols,
                       Status::kShapeMismatch, name, ".", data_field, ": expected (", rows, ", ",
                       cols, "), got ", data.to_string());
  check_buffer_device(data, q.device, name, data_field);
  TESSERA_CHECK(scale.data != nullptr, name, ".", scale_field, ": required but absent");
  TESSERA_CHECK_STATUS(scale.dtype == DType::kFloat32, Status::kDTypeMismatch, name, ".",
                       scale_field, ": dtype ", dtype_name(scale.dtype), ", expected float32");
  check_buffer_device(scale, q.device, name, scale_field);
  if (c.mode == ScalingMode::kTensor) {
    TESSERA_CHECK_STATUS(scale.numel() == 1 || scale.numel() == num_groups,
                         Status::kShapeMismatch, name, ".", scale_field, ": ", scale.numel(),
                         " values; expected 1 (shared) or ", num_groups, " (one per group)");
  } else {
    TESSERA_CHECK_STATUS(scale.numel() == rows, Status::kShapeMismatch, name, ".", scale_field,
                         ": ", scale.numel(), " values; expected one per stored row (", rows,
                         ")");
  }
}

void check_quantized_pair(const GemmOperand& a, const GemmOperand& b) {
  TESSERA_CHECK_STATUS(a.is_quantized == b.is_quantized, Status::kDTypeMismatch,
                       "A and B: one operand is quantized and the other is not; both must be "
                       "quantized (compatible recipes) or both FP32/BF16/FP16");
  if (!a.is_quantized) return;
  TESSERA_CHECK_STATUS(a.quantized.config.mode == b.quantized.config.mode,
                       Status::kDTypeMismatch, "A and B: scaling modes ",
                       static_cast<int>(a.quantized.config.mode), " and ",
                       static_cast<int>(b.quantized.config.mode),
                       " cannot meet in one GEMM; expected the same recipe family");
}

}  // namespace tessera::detail
