// The grouped GEMM front end: can_implement / workspace_size / run and the device dispatch to
// the CPU backend (src/gemm/cpu/) or the CUDA backend (src/gemm/cuda/).
#include "tessera/gemm/grouped_gemm.h"

#include <new>

#include "gemm/gemm_backend.h"

namespace tessera {

const char* grouped_gemm_kind_name(GroupedGemmKind k) noexcept {
  switch (k) {
    case GroupedGemmKind::kMGrouped: return "M-grouped";
    case GroupedGemmKind::kKGrouped: return "K-grouped";
    case GroupedGemmKind::kBatched: return "batched";
  }
  return "unknown";
}

namespace {

// Validation plus the backend's own checks; throws Error with the status.
detail::GroupedGemmDims check_for_backend(const GroupedGemmProblem& p) {
  const detail::GroupedGemmDims dims = detail::check_grouped_gemm(p);
  if (p.a.device().is_cuda()) {
    std::string reason;
    const Status s = detail::grouped_gemm_cuda_can_implement(p, dims, &reason);
    if (s != Status::kOk) throw Error(s, reason);
  }
  return dims;
}

int64_t backend_workspace_size(const GroupedGemmProblem& p, const detail::GroupedGemmDims& dims) {
  return p.a.device().is_cuda() ? detail::grouped_gemm_cuda_workspace_size(p, dims)
                                : detail::grouped_gemm_cpu_workspace_size(p, dims);
}

}  // namespace

Status can_implement(const GroupedGemmProblem& problem, std::string* reason) {
  try {
    check_for_backend(problem);
    if (reason != nullptr) reason->clear();
    return Status::kOk;
  } catch (const Error& e) {
    if (reason != nullptr) *reason = e.what();
    return e.status();
  } catch (const std::bad_alloc&) {
    if (reason != nullptr) *reason = "tessera out of memory: allocation failed";
    return Status::kOutOfMemory;
  } catch (const std::exception& e) {
    if (reason != nullptr) *reason = std::string("tessera internal error: ") + e.what();
    return Status::kInternal;
  }
}

int64_t workspace_size(const GroupedGemmProblem& problem) {
  return backend_workspace_size(problem, check_for_backend(problem));
}

void run(const GroupedGemmProblem& problem, const TensorView& workspace, Stream stream) {
  const detail::GroupedGemmDims dims = check_for_backend(problem);
  const int64_t need = backend_workspace_size(problem, dims);
  const int64_t have = workspace.data == nullptr ? 0 : workspace.nbytes();
  TESSERA_CHECK_STATUS(have >= need, Status::kBufferTooSmall, "workspace: ", have,
                       " bytes given, ", need, " needed (see workspace_size)");
  if (need > 0) {
    TESSERA_CHECK(workspace.device == problem.a.device(), "workspace: is on ",
                  to_string(workspace.device), " but the operands are on ",
                  to_string(problem.a.device()));
    TESSERA_CHECK_STATUS(reinterpret_cast<uintptr_t>(workspace.data) % kBufferAlignment == 0,
                         Status::kMisaligned, "workspace: must be ", kBufferAlignment,
                         "-byte aligned");
  }
  // No output element (e.g. 2^40 empty batches): nothing to compute, whatever the group count.
  if (problem.d.numel() == 0) return;
  if (problem.a.device().is_cuda()) {
    detail::grouped_gemm_cuda(problem, dims, workspace.data, have, stream);
  } else {
    detail::grouped_gemm_cpu(problem, dims, workspace.data, have);
  }
}

void grouped_gemm(const GroupedGemmProblem& problem, Stream stream) {
  const int64_t need = workspace_size(problem);
  Buffer ws(static_cast<size_t>(need), problem.a.device());
  run(problem, TensorView::contiguous(ws.data(), DType::kUInt8, {need}, problem.a.device()),
      stream);
}

GroupedGemmConfig select_grouped_gemm_config(const GroupedGemmProblem& problem) {
  const detail::GroupedGemmDims dims = check_for_backend(problem);
  if (!problem.config.is_default()) return problem.config;
  return detail::grouped_gemm_cuda_select_config(problem, dims);
}

}  // namespace tessera
