// Stand-ins for a build without oneDNN: BF16 problems always take the FP32 path.
#include "gemm/cpu/bf16_gemm.h"

namespace tessera::detail::cpu {

Bf16Support probe_bf16_support() { return {false, "built without oneDNN"}; }

void grouped_gemm_bf16_onednn(const GroupedGemmProblem&, const GroupedGemmDims&,
                              const std::vector<int64_t>&, const std::vector<int64_t>&,
                              float*) {
  TESSERA_FAIL(Status::kInternal, "the native BF16 path ran in a build without oneDNN");
}

}  // namespace tessera::detail::cpu
