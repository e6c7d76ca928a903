// CUDA grouped GEMM entry points. STUB: reports kUnsupported until the CUDA kernels land
// (owned by the CUDA GEMM work; replace this file).
#include "gemm/gemm_backend.h"

namespace tessera::detail {

namespace {
constexpr const char* kNotYet = "CUDA grouped GEMM not yet implemented";
}

Status grouped_gemm_cuda_can_implement(const GroupedGemmProblem&, const GroupedGemmDims&,
                                       std::string* reason) {
  if (reason != nullptr) *reason = std::string("tessera unsupported: ") + kNotYet;
  return Status::kUnsupported;
}

int64_t grouped_gemm_cuda_workspace_size(const GroupedGemmProblem&, const GroupedGemmDims&) {
  TESSERA_FAIL(Status::kUnsupported, kNotYet);
}

GroupedGemmConfig grouped_gemm_cuda_select_config(const GroupedGemmProblem&,
                                                  const GroupedGemmDims&) {
  TESSERA_FAIL(Status::kUnsupported, kNotYet);
}

void grouped_gemm_cuda(const GroupedGemmProblem&, const GroupedGemmDims&, void*, int64_t,
                       Stream) {
  TESSERA_FAIL(Status::kUnsupported, kNotYet);
}

}  // namespace tessera::detail
