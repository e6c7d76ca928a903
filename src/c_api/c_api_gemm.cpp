// C API: grouped GEMM through an opaque problem handle (create, set_*, can_implement,
// workspace_size, run, destroy). No exception crosses the boundary (c_api::guard).
#include <memory>

#include "c_api/c_api_guard.h"
#include "tessera/c_api.h"
#include "tessera/core/checked_math.h"
#include "tessera/gemm/grouped_gemm.h"

struct tessera_grouped_gemm_problem_s {
  tessera::GroupedGemmProblem problem;
};

namespace tessera::c_api {
namespace {

DType gemm_dtype(int32_t v, const char* arg) {
  TESSERA_CHECK(v >= 0 && v < kNumDTypes, arg, ": dtype value ", v, " is not a tessera_dtype");
  return static_cast<DType>(v);
}

Device gemm_device(tessera_device d) {
  TESSERA_CHECK(d.device_type == 0 || d.device_type == 1, "device: device_type ", d.device_type,
                " must be 0 (CPU) or 1 (CUDA)");
  TESSERA_CHECK(d.device_index >= 0, "device: device_index ", d.device_index, " is negative");
  return d.device_type == 0 ? Device::cpu() : Device::cuda(d.device_index);
}

GroupedGemmProblem& problem_of(tessera_grouped_gemm_problem h) {
  TESSERA_CHECK(h != nullptr, "problem: NULL handle");
  return h->problem;
}

const char* tensor_name(int32_t which) {
  constexpr const char* kNames[] = {"A", "B", "D", "bias", "group_offsets", "group_alpha"};
  return which >= 0 && which < 6 ? kNames[which] : "tensor";
}

// `which` names the tensor in messages; a shape whose element count or byte size overflows
// int64 is kOutOfRange.
TensorView tensor_of(int32_t which, const void* data, int32_t dtype, int32_t ndim,
                     const int64_t* shape, tessera_device device) {
  if (data == nullptr) return TensorView{};
  const char* name = tensor_name(which);
  TESSERA_CHECK(ndim >= 0 && ndim <= kMaxDims, name, ": ndim ", ndim, " must be in [0, ",
                kMaxDims, "]");
  TESSERA_CHECK(shape != nullptr || ndim == 0, name, ": shape is NULL for a ", ndim, "-D tensor");
  for (int i = 0; i < ndim; ++i)
    TESSERA_CHECK(shape[i] >= 0, name, ": shape[", i, "] = ", shape[i], " is negative");
  const DType dt = gemm_dtype(dtype, "dtype");
  (void)checked_dtype_bytes(dt, checked_numel(shape, ndim, name), name);
  return TensorView::contiguous(const_cast<void*>(data), dt, shape, ndim, gemm_device(device));
}

}  // namespace
}  // namespace tessera::c_api

using tessera::c_api::guard;
using tessera::c_api::problem_of;

extern "C" {

tessera_status tessera_grouped_gemm_create(tessera_grouped_gemm_problem* problem, int32_t kind,
                                           int64_t num_groups) {
  return guard([&] {
    TESSERA_CHECK(problem != nullptr, "problem: NULL output pointer");
    *problem = nullptr;
    TESSERA_CHECK(kind >= 0 && kind <= 2, "kind: value ", kind,
                  " is not a tessera_grouped_gemm_kind (0, 1 or 2)");
    auto h = std::make_unique<tessera_grouped_gemm_problem_s>();
    h->problem.kind = static_cast<tessera::GroupedGemmKind>(kind);
    h->problem.num_groups = num_groups;
    if (h->problem.kind == tessera::GroupedGemmKind::kKGrouped) {
      h->problem.transpose_a = true;
      h->problem.transpose_b = false;
    }
    *problem = h.release();
  });
}

tessera_status tessera_grouped_gemm_destroy(tessera_grouped_gemm_problem problem) {
  return guard([&] { delete problem; });
}

tessera_status tessera_grouped_gemm_set_tensor(tessera_grouped_gemm_problem problem, int32_t which,
                                               const void* data, int32_t dtype, int32_t ndim,
                                               const int64_t* shape, tessera_device device) {
  return guard([&] {
    tessera::GroupedGemmProblem& p = problem_of(problem);
    const tessera::TensorView v = tessera::c_api::tensor_of(which, data, dtype, ndim, shape, device);
    switch (which) {
      case TESSERA_GROUPED_GEMM_A: p.a = tessera::GemmOperand::from_dense(v); break;
      case TESSERA_GROUPED_GEMM_B: p.b = tessera::GemmOperand::from_dense(v); break;
      case TESSERA_GROUPED_GEMM_D: p.d = v; break;
      case TESSERA_GROUPED_GEMM_BIAS: p.bias = v; break;
      case TESSERA_GROUPED_GEMM_GROUP_OFFSETS: p.group_offsets = v; break;
      case TESSERA_GROUPED_GEMM_GROUP_ALPHA: p.group_alpha = v; break;
      default:
        TESSERA_FAIL(tessera::Status::kInvalidArgument, "which: value ", which,
                     " is not a tessera_grouped_gemm_tensor (0..5)");
    }
  });
}

tessera_status tessera_grouped_gemm_set_layout(tessera_grouped_gemm_problem problem,
                                               int32_t transpose_a, int32_t transpose_b) {
  return guard([&] {
    tessera::GroupedGemmProblem& p = problem_of(problem);
    p.transpose_a = transpose_a != 0;
    p.transpose_b = transpose_b != 0;
  });
}

tessera_status tessera_grouped_gemm_set_offsets_format(tessera_grouped_gemm_problem problem,
                                                       int32_t format, int64_t max_total_rows) {
  return guard([&] {
    tessera::GroupedGemmProblem& p = problem_of(problem);
    TESSERA_CHECK(format == TESSERA_GROUP_OFFSETS_START || format == TESSERA_GROUP_OFFSETS_END,
                  "format: value ", format, " is not a tessera_group_offsets_format (0 or 1)");
    p.offsets_format = static_cast<tessera::GroupOffsetsFormat>(format);
    p.max_total_rows = max_total_rows;
  });
}

tessera_status tessera_grouped_gemm_set_zero_unused_rows(tessera_grouped_gemm_problem problem,
                                                         int32_t zero_unused_rows) {
  return guard([&] { problem_of(problem).zero_unused_rows = zero_unused_rows != 0; });
}

tessera_status tessera_grouped_gemm_set_scalars(tessera_grouped_gemm_problem problem, float alpha,
                                                float beta) {
  return guard([&] {
    tessera::GroupedGemmProblem& p = problem_of(problem);
    p.alpha = alpha;
    p.beta = beta;
  });
}

tessera_status tessera_grouped_gemm_can_implement(tessera_grouped_gemm_problem problem) {
  return guard([&] {
    std::string reason;
    const tessera::Status s = tessera::can_implement(problem_of(problem), &reason);
    if (s != tessera::Status::kOk) throw tessera::Error(s, reason);
  });
}

tessera_status tessera_grouped_gemm_workspace_size(tessera_grouped_gemm_problem problem,
                                                   int64_t* bytes) {
  return guard([&] {
    TESSERA_CHECK(bytes != nullptr, "bytes: NULL output pointer");
    *bytes = tessera::workspace_size(problem_of(problem));
  });
}

tessera_status tessera_grouped_gemm_run(tessera_grouped_gemm_problem problem, void* workspace,
                                        int64_t workspace_bytes, void* stream) {
  return guard([&] {
    const tessera::GroupedGemmProblem& p = problem_of(problem);
    TESSERA_CHECK(workspace_bytes >= 0, "workspace_bytes: ", workspace_bytes, " is negative");
    TESSERA_CHECK(workspace != nullptr || workspace_bytes == 0, "workspace: NULL with ",
                  workspace_bytes, " bytes");
    const tessera::TensorView ws =
        workspace == nullptr ? tessera::TensorView{}
                             : tessera::TensorView::contiguous(workspace, tessera::DType::kUInt8,
                                                               {workspace_bytes}, p.a.device());
    tessera::run(p, ws, tessera::Stream{stream});
  });
}

}  // extern "C"
