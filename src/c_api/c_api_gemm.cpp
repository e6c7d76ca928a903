// C API: grouped GEMM through an opaque problem handle (create, set_*, can_implement,
// workspace_size, run, destroy). No exception crosses the boundary (c_api::guard); every handle
// is checked live (c_api_handle.h), every flag and enum in range (c_api_args.h).
#include <memory>

#include "c_api/c_api_args.h"
#include "c_api/c_api_guard.h"
#include "c_api/c_api_handle.h"
#include "tessera/c_api.h"
#include "tessera/core/checked_math.h"
#include "tessera/gemm/grouped_gemm.h"

struct tessera_grouped_gemm_problem_s : tessera::c_api::Handle<tessera::GroupedGemmProblem> {
  static constexpr uint64_t kMagic = tessera::c_api::magic_word("tsr:gemm");
  static constexpr const char* kTypeName = "tessera_grouped_gemm_problem";
};

namespace tessera::c_api {
namespace {

GroupedGemmProblem& problem_of(tessera_grouped_gemm_problem h) {
  return handle_object(h, "problem");
}

constexpr const char* kTensorNames[] = {"A", "B", "D", "bias", "group_offsets", "group_alpha"};

// The tensor `which` names (its name for messages).
const char* tensor_name(int32_t which) {
  TESSERA_CHECK(which >= TESSERA_GROUPED_GEMM_A && which <= TESSERA_GROUPED_GEMM_GROUP_ALPHA,
                "which: value ", which, " is not a tessera_grouped_gemm_tensor (0 to 5)");
  return kTensorNames[which];
}

// The view of one set_tensor call; data NULL gives the empty view (dtype and device are still
// checked: only valid enum values are taken). A shape whose element count or byte size
// overflows int64 is kOutOfRange naming the tensor.
TensorView tensor_of(const char* name, const void* data, int32_t dtype, int32_t ndim,
                     const int64_t* shape, tessera_device device) {
  const DType dt = dtype_arg(dtype, "dtype");
  const Device dev = device_arg(device);
  TESSERA_CHECK(ndim >= 0 && ndim <= kMaxDims, name, ": ndim ", ndim, " must be in [0, ",
                kMaxDims, "]");
  if (data == nullptr) return TensorView{};
  TESSERA_CHECK(shape != nullptr || ndim == 0, name, ": shape is NULL for a ", ndim, "-D tensor");
  for (int i = 0; i < ndim; ++i)
    TESSERA_CHECK(shape[i] >= 0, name, ": shape[", i, "] = ", shape[i], " is negative");
  (void)checked_dtype_bytes(dt, checked_numel(shape, ndim, name), name);
  return TensorView::contiguous(const_cast<void*>(data), dt, shape, ndim, dev);
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
    auto p = std::make_unique<tessera::GroupedGemmProblem>();
    p->kind = static_cast<tessera::GroupedGemmKind>(kind);
    p->num_groups = tessera::c_api::count_arg(num_groups, "num_groups");
    if (p->kind == tessera::GroupedGemmKind::kKGrouped) {
      p->transpose_a = true;
      p->transpose_b = false;
    }
    *problem = tessera::c_api::create_handle<tessera_grouped_gemm_problem_s>(std::move(p));
  });
}

tessera_status tessera_grouped_gemm_destroy(tessera_grouped_gemm_problem problem) {
  return guard([&] { tessera::c_api::destroy_handle(problem, "problem"); });
}

tessera_status tessera_grouped_gemm_set_tensor(tessera_grouped_gemm_problem problem, int32_t which,
                                               const void* data, int32_t dtype, int32_t ndim,
                                               const int64_t* shape, tessera_device device) {
  return guard([&] {
    using namespace tessera::c_api;
    tessera::GroupedGemmProblem& p = problem_of(problem);
    const tessera::TensorView v =
        tensor_of(tensor_name(which), data, dtype, ndim, shape, device);
    switch (which) {  // in range: tensor_name checked it
      case TESSERA_GROUPED_GEMM_A: p.a = tessera::GemmOperand::from_dense(v); break;
      case TESSERA_GROUPED_GEMM_B: p.b = tessera::GemmOperand::from_dense(v); break;
      case TESSERA_GROUPED_GEMM_D: p.d = v; break;
      case TESSERA_GROUPED_GEMM_BIAS: p.bias = v; break;
      case TESSERA_GROUPED_GEMM_GROUP_OFFSETS: p.group_offsets = v; break;
      case TESSERA_GROUPED_GEMM_GROUP_ALPHA: p.group_alpha = v; break;
    }
  });
}

tessera_status tessera_grouped_gemm_set_layout(tessera_grouped_gemm_problem problem,
                                               int32_t transpose_a, int32_t transpose_b) {
  return guard([&] {
    tessera::GroupedGemmProblem& p = problem_of(problem);
    p.transpose_a = tessera::c_api::flag_arg(transpose_a, "transpose_a");
    p.transpose_b = tessera::c_api::flag_arg(transpose_b, "transpose_b");
  });
}

tessera_status tessera_grouped_gemm_set_offsets_format(tessera_grouped_gemm_problem problem,
                                                       int32_t format, int64_t max_total_rows) {
  return guard([&] {
    tessera::GroupedGemmProblem& p = problem_of(problem);
    TESSERA_CHECK(format == TESSERA_GROUP_OFFSETS_START || format == TESSERA_GROUP_OFFSETS_END,
                  "format: value ", format, " is not a tessera_group_offsets_format (0 or 1)");
    TESSERA_CHECK(max_total_rows >= -1, "max_total_rows: ", max_total_rows,
                  " must be -1 (the rows of A) or a row count >= 0");
    p.offsets_format = static_cast<tessera::GroupOffsetsFormat>(format);
    p.max_total_rows = max_total_rows;
  });
}

tessera_status tessera_grouped_gemm_set_zero_unused_rows(tessera_grouped_gemm_problem problem,
                                                         int32_t zero_unused_rows) {
  return guard([&] {
    tessera::GroupedGemmProblem& p = problem_of(problem);
    p.zero_unused_rows = tessera::c_api::flag_arg(zero_unused_rows, "zero_unused_rows");
  });
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
    tessera::c_api::count_arg(workspace_bytes, "workspace_bytes");
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
