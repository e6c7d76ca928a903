// Stand-ins for the CUDA grouped GEMM entry points in a build without the CUDA backend.
#include "gemm/gemm_backend.h"

namespace tessera::detail {

Status grouped_gemm_cuda_can_implement(const GroupedGemmProblem& p, const GroupedGemmDims&,
                                       std::string* reason) {
  if (reason != nullptr) {
    *reason = "tessera no device: grouped GEMM operands are on " + to_string(p.a.device()) +
              " but tessera was built without CUDA";
  }
  return Status::kNoDevice;
}

int64_t grouped_gemm_cuda_workspace_size(const GroupedGemmProblem& p, const GroupedGemmDims&) {
  TESSERA_FAIL(Status::kNoDevice, "grouped GEMM: operands on ", to_string(p.a.device()),
               " but tessera was built without CUDA");
}

GroupedGemmConfig grouped_gemm_cuda_select_config(const GroupedGemmProblem&,
                                                  const GroupedGemmDims&) {
  TESSERA_FAIL(Status::kNoDevice, "grouped GEMM config heuristic: tessera was built without CUDA");
}

void grouped_gemm_cuda_check_config(const GroupedGemmProblem&) {
  TESSERA_FAIL(Status::kNoDevice, "grouped GEMM config: tessera was built without CUDA");
}

void grouped_gemm_cuda(const GroupedGemmProblem& p, const GroupedGemmDims&, void*, int64_t,
                       Stream) {
  TESSERA_FAIL(Status::kNoDevice, "grouped GEMM: operands on ", to_string(p.a.device()),
               " but tessera was built without CUDA");
}

}  // namespace tessera::detail
