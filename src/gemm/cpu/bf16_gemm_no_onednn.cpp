// Stand-ins for a build without oneDNN: BF16 problems always take the FP32 path, and its GEMMs
// run on sgemm.
#include "gemm/cpu/bf16_gemm.h"

namespace tessera::detail::cpu {

bool built_with_onednn() { return false; }

Bf16Support probe_bf16_support() { return {false, "built without oneDNN"}; }

void grouped_gemm_bf16_onednn(const GroupedGemmProblem&, const GroupedGemmDims&,
                              const std::vector<int64_t>&, const std::vector<int64_t>&,
                              float*) {
  TESSERA_FAIL(Status::kInternal, "the native BF16 path ran in a build without oneDNN");
}

void grouped_gemm_fp32_onednn(const GroupedGemmProblem&, int64_t, std::vector<GroupBlock>,
                              float*, const GroupImagesB*) {
  TESSERA_FAIL(Status::kInternal, "the oneDNN FP32 path ran in a build without oneDNN");
}

}  // namespace tessera::detail::cpu
