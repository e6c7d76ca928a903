// Validation of quantized GEMM operands. Until the quantize layer lands, quantized operands are
// reported as unsupported.
#include "gemm/gemm_quantized_check.h"

namespace tessera::detail {

void check_quantized_operand(const GemmOperand& o, const char* name, int64_t num_groups) {
  (void)num_groups;
  TESSERA_FAIL(Status::kUnsupported, name, ": quantized operands (scaling mode ",
               static_cast<int>(o.quantized.config.mode),
               ") are not supported by grouped GEMM yet");
}

void check_quantized_pair(const GemmOperand& a, const GemmOperand& b) {
  TESSERA_CHECK_STATUS(a.is_quantized == b.is_quantized, Status::kDTypeMismatch,
                       "A and B: one operand is quantized and the other is not; both must be "
                       "quantized (compatible recipes) or both FP32/BF16/FP16");
}

}  // namespace tessera::detail
