// Validation of quantized GEMM operands against the data model of quantize/types.h, and of the
// recipe pairing of A and B.
#include "gemm/gemm_quantized_check.h"

#include "tessera/core/checked_math.h"

namespace tessera::detail {
namespace {

// The view has exactly `want`'s dtype and (rows, cols) (E2M1: cols rounded up to even, each row
// starting on a byte), is contiguous and lives on `dev`.
void check_buffer(const TensorView& v, const MatrixShape& want, Device dev, const char* name,
                  const char* field) {
  const int64_t cols = want.dtype == DType::kFloat4E2M1 ? checked_round_up(want.cols, 2, "cols")
                                                        : want.cols;
  TESSERA_CHECK_STATUS(v.dtype == want.dtype, Status::kDTypeMismatch, name, ".", field,
                       ": dtype ", dtype_name(v.dtype), ", expected ", dtype_name(want.dtype));
  TESSERA_CHECK_STATUS(v.ndim == 2 && v.shape[0] == want.rows && v.shape[1] == cols,
                       Status::kShapeMismatch, name, ".", field, ": expected (", want.rows, ", ",
                       cols, "), got ", v.to_string());
  TESSERA_CHECK(v.is_contiguous(), name, ".", field, ": must be contiguous");
  TESSERA_CHECK(v.device == dev, name, ".", field, ": is on ", to_string(v.device),
                " but the quantized tensor is on ", to_string(dev));
}

// A per-tensor FP32 value buffer (kTensor scale_inv, NVFP4 global amax): 1 or G values.
void check_per_group(const TensorView& v, int64_t groups, Device dev, const char* name,
                     const char* field) {
  TESSERA_CHECK(v.data != nullptr, name, ".", field, ": required by the recipe but absent");
  TESSERA_CHECK_STATUS(v.dtype == DType::kFloat32, Status::kDTypeMismatch, name, ".", field,
                       ": dtype ", dtype_name(v.dtype), ", expected float32");
  TESSERA_CHECK_STATUS(v.numel() == 1 || v.numel() == groups, Status::kShapeMismatch, name, ".",
                       field, ": ", v.numel(), " values; expected 1 (shared) or ", groups,
                       " (one per group)");
  TESSERA_CHECK(v.device == dev, name, ".", field, ": is on ", to_string(v.device),
                " but the quantized tensor is on ", to_string(dev));
}

}  // namespace

void check_quantized_operand(const GemmOperand& o, const char* name, int64_t num_groups,
                             GemmPath path) {
  const QuantizedTensorView& q = o.quantized;
  const QuantizerConfig& c = q.config;
  const ScalingModeInfo* info = find_scaling_mode(c.mode);
  TESSERA_CHECK(info != nullptr && info->family != ScaleFamily::kNone, name, ": scaling mode ",
                static_cast<int>(c.mode), " is not a quantized recipe; expected one of ",
                scaling_mode_names());
  const bool fp4 = info->fp4;
  TESSERA_CHECK_STATUS(fp4 ? c.element == DType::kFloat4E2M1
                           : (c.element == DType::kFloat8E4M3 || c.element == DType::kFloat8E5M2),
                       Status::kDTypeMismatch, name, ": element ", dtype_name(c.element),
                       " does not belong to recipe ", scaling_mode_name(c.mode));
  TESSERA_CHECK(q.rows >= 0 && q.cols >= 0, name, ": shape (", q.rows, ", ", q.cols,
                ") is negative");
  const bool cw = o.columnwise;
  TESSERA_CHECK(cw ? q.has_columnwise() : q.has_rowwise(), name, ": the GEMM reads the ",
                cw ? "columnwise" : "rowwise", " copy, which this quantized tensor does not have");
  TESSERA_CHECK_STATUS(path == GemmPath::kEmulated || !(fp4 && cw && c.random_hadamard),
                       Status::kUnsupported, name,
                       ": NVFP4 copies with the random Hadamard transform are not supported by "
                       "the fast grouped GEMM (the CPU's emulated path takes them)");
  const TensorView& data = cw ? q.columnwise_data : q.data;
  const TensorView& scale = cw ? q.columnwise_scale_inv : q.scale_inv;
  check_buffer(data, data_shape(c, q.rows, q.cols, cw), q.device, name, cw ? "columnwise_data" : "data");
  const char* scale_field = cw ? "columnwise_scale_inv" : "scale_inv";
  if (info->family == ScaleFamily::kTensor) {
    check_per_group(scale, num_groups, q.device, name, scale_field);
  } else if (info->family == ScaleFamily::kRowwise && cw && num_groups > 1 &&
             scale.numel() == num_groups * scale_shape(c, q.rows, q.cols, true).numel()) {
    // per-group column scales (the training step's member scaling): group g's at g·cols
    const MatrixShape one = scale_shape(c, q.rows, q.cols, true);
    check_buffer(scale, {num_groups * one.rows, one.cols, one.dtype}, q.device, name, scale_field);
  } else {
    check_buffer(scale, scale_shape(c, q.rows, q.cols, cw), q.device, name, scale_field);
  }
  if (info->family == ScaleFamily::kNVFP4) check_per_group(cw ? q.columnwise_amax : q.amax, num_groups, q.device, name,
                           cw ? "columnwise_amax" : "amax");
  if (o.expanded.data != nullptr) {  // the BF16 image of the rowwise copy (GemmOperand)
    const bool mx = info->family == ScaleFamily::kMXFP8;
    TESSERA_CHECK_STATUS((fp4 || mx) && q.has_rowwise(), Status::kInvalidArgument, name,
                         ".expanded: only an NVFP4 or MXFP8 tensor with its rowwise copy has a "
                         "BF16 image; got ", scaling_mode_name(c.mode),
                         q.has_rowwise() ? "" : " without a rowwise copy");
    check_buffer(o.expanded, {q.rows, q.cols, DType::kBFloat16}, q.device, name, "expanded");
    if (fp4) check_per_group(q.amax, num_groups, q.device, name, "amax");
    TESSERA_CHECK_STATUS(q.cols % 8 == 0 && reinterpret_cast<uintptr_t>(o.expanded.data) % 16 == 0,
                         Status::kMisaligned, name, ".expanded: rows of 16-byte multiples at a "
                         "16-byte aligned base are needed; got ", q.cols, " columns");
  }
}

void check_quantized_pair(const GemmOperand& a, const GemmOperand& b) {
  TESSERA_CHECK_STATUS(a.is_quantized == b.is_quantized, Status::kDTypeMismatch,
                       "A and B: one operand is quantized and the other is not; both must be "
                       "quantized (compatible recipes) or both FP32/BF16/FP16");
  if (!a.is_quantized) return;
  const ScalingMode ma = a.quantized.config.mode, mb = b.quantized.config.mode;
  TESSERA_CHECK_STATUS(scale_family(ma) == scale_family(mb), Status::kDTypeMismatch,
                       "A and B: recipes ", scaling_mode_name(ma), " and ", scaling_mode_name(mb),
                       " cannot meet in one GEMM; expected two modes of the same family "
                       "(formats/scaling_modes.h: e.g. block1x128 with block128x128)");
}

}  // namespace tessera::detail
