// The grouped GEMM front end: can_implement / workspace_size / run, the choice of the emulated
// path for operand formats the fast backends refuse (CPU only), and the device dispatch to the
// CPU backend (src/gemm/cpu/) or the CUDA backend (src/gemm/cuda/).
#include "tessera/gemm/grouped_gemm.h"

#include <atomic>
#include <new>
#include <string>

#include "core/env_flag.h"
#include "core/host_bytes.h"
#include "gemm/gemm_backend.h"
#include "tessera/core/device.h"

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

// How a validated problem runs: its sizes and whether it takes the emulated path.
struct Plan {
  detail::GroupedGemmDims dims;
  detail::GemmPath path = detail::GemmPath::kFast;
};

// A refusal of the fast format rules that the emulated path may lift: a format status with a
// quantized operand involved.
bool emulation_may_apply(const GroupedGemmProblem& p, Status s) {
  return (s == Status::kDTypeMismatch || s == Status::kUnsupported) &&
         (p.a.is_quantized || p.b.is_quantized);
}

// Validation plus the backend's own checks; throws Error with the status. A quantized pair the
// fast backends refuse runs on the emulated path on the CPU (gemm_backend.h, GemmPath).
Plan plan_for_backend(const GroupedGemmProblem& p) {
  TESSERA_CHECK(p.a.device().is_cuda() || p.config.is_default(), "config: the CPU backend has "
                "no tiles, so a set config would go unused; leave problem.config default on the "
                "CPU");
  Plan plan;
  try {
    plan.dims = detail::check_grouped_gemm(p);
  } catch (const Error& e) {
    if (!emulation_may_apply(p, e.status())) throw;
    try {
      plan.dims = detail::check_grouped_gemm(p, detail::GemmPath::kEmulated);
    } catch (const Error&) {
      throw e;  // not for the emulated path either: the first refusal is the one to report
    }
    plan.path = detail::GemmPath::kEmulated;
    if (!p.a.device().is_cuda()) return plan;
    // On CUDA the backend runs some of these pairs exactly (those with an NVFP4 copy: both
    // operands expanded to BF16, Hadamard-transformed wgrad copies included); the rest is a
    // capability the device lacks.
    std::string reason;
    if (detail::grouped_gemm_cuda_can_implement(p, plan.dims, &reason) != Status::kOk)
      throw Error(Status::kUnsupported,
                  std::string(e.what()) + " (on CUDA there is no emulated path: " + reason +
                      "; dequantize the operands or quantize both with modes of one family)");
    detail::grouped_gemm_cuda_check_config(p);
    return plan;
  }
  if (p.a.device().is_cuda()) {
    std::string reason;
    const Status s = detail::grouped_gemm_cuda_can_implement(p, plan.dims, &reason);
    if (s != Status::kOk) throw Error(s, reason);
    detail::grouped_gemm_cuda_check_config(p);
  }
  return plan;
}

int64_t backend_workspace_size(const GroupedGemmProblem& p, const Plan& plan) {
  return p.a.device().is_cuda() ? detail::grouped_gemm_cuda_workspace_size(p, plan.dims)
                                : detail::grouped_gemm_cpu_workspace_size(p, plan.dims);
}

// problem.zero_unused_rows on the CPU: D's rows past the last group's end set to zero (from the
// host offsets). CUDA: the GEMM kernel zeroes them (grouped_gemm_cuda).
void zero_unused_rows_host(const GroupedGemmProblem& p) {
  const int64_t end = detail::host_start_offsets(p).back();  // checked: within the capacity
  const int64_t row_bytes = p.d.nbytes() / p.d.shape[0];
  host_zero_bytes(static_cast<char*>(p.d.data) + end * row_bytes,
                  static_cast<size_t>((p.d.shape[0] - end) * row_bytes));
}

// run() after planning and sizing (need = backend_workspace_size): checks the workspace, then
// launches.
void run_planned(const GroupedGemmProblem& problem, const Plan& plan, int64_t need,
                 const TensorView& workspace, Stream stream) {
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
    detail::grouped_gemm_cuda(problem, plan.dims, workspace.data, have, stream);
  } else {
    // The CPU backend dequantizes every quantized operand on its own, so the emulated path is
    // the same code once its format rules have passed.
    detail::grouped_gemm_cpu(problem, plan.dims, workspace.data, have);
    if (problem.zero_unused_rows) zero_unused_rows_host(problem);
  }
}

}  // namespace

Status can_implement(const GroupedGemmProblem& problem, std::string* reason) {
  try {
    plan_for_backend(problem);
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
  return backend_workspace_size(problem, plan_for_backend(problem));
}

void run(const GroupedGemmProblem& problem, const TensorView& workspace, Stream stream) {
  const Plan plan = plan_for_backend(problem);
  run_planned(problem, plan, backend_workspace_size(problem, plan), workspace, stream);
}

int64_t run_if_fits(const GroupedGemmProblem& problem, const TensorView& workspace,
                    Stream stream) {
  const Plan plan = plan_for_backend(problem);  // validated once
  const int64_t need = backend_workspace_size(problem, plan);
  if ((workspace.data == nullptr ? 0 : workspace.nbytes()) < need) return need;
  run_planned(problem, plan, need, workspace, stream);
  return 0;
}

void run_with_workspace(const GroupedGemmProblem& problem,
                        const std::function<TensorView(int64_t bytes)>& workspace,
                        Stream stream) {
  const Plan plan = plan_for_backend(problem);  // validated once
  const int64_t need = backend_workspace_size(problem, plan);
  run_planned(problem, plan, need, need > 0 ? workspace(need) : TensorView{}, stream);
}

void grouped_gemm(const GroupedGemmProblem& problem, Stream stream) {
  Buffer ws;
  run_with_workspace(problem, [&](int64_t need) {
    ws = Buffer(static_cast<size_t>(need), problem.a.device());
    return TensorView::contiguous(ws.data(), DType::kUInt8, {need}, problem.a.device());
  }, stream);
}

GroupedGemmConfig select_grouped_gemm_config(const GroupedGemmProblem& problem) {
  const Plan plan = plan_for_backend(problem);
  if (!problem.config.is_default()) return problem.config;
  return detail::grouped_gemm_cuda_select_config(problem, plan.dims);
}

namespace detail {
namespace {
std::atomic<int>& mxfp8_path_switch() {
  static std::atomic<int> path{
      env_switch("TESSERA_MXFP8_EXPANDED", static_cast<int>(Mxfp8Path::kAuto))};
  return path;
}
}  // namespace

Mxfp8Path mxfp8_path() {
  return static_cast<Mxfp8Path>(mxfp8_path_switch().load(std::memory_order_relaxed));
}
void set_mxfp8_path(Mxfp8Path path) {
  mxfp8_path_switch().store(static_cast<int>(path), std::memory_order_relaxed);
}

namespace {
// The answer of a forced path (kNative: no, kExpanded: yes), else kAuto's, automatic().
template <class F>
bool by_path(F automatic) {
  const Mxfp8Path path = mxfp8_path();
  return path == Mxfp8Path::kAuto ? automatic() : path == Mxfp8Path::kExpanded;
}

// kAuto's rule (gemm_backend.h, mxfp8_expands).
bool auto_expands(GroupedGemmKind kind, const GroupedGemmDims& d, bool a_image, bool b_image) {
  // M-grouped: A (capacity, K) x B (G, N, K); K-grouped: A (M, tokens) x B (N, tokens).
  const bool k_grouped = kind == GroupedGemmKind::kKGrouped;
  const double tokens = static_cast<double>(d.capacity);
  const double a = k_grouped ? static_cast<double>(d.m) * tokens : tokens * d.k;
  const double b = k_grouped ? static_cast<double>(d.n) * tokens
                             : static_cast<double>(d.groups) * d.n * d.k;
  const double flops = 2.0 * (k_grouped ? static_cast<double>(d.m) * d.n * tokens
                                        : tokens * d.n * d.k);
  const double elements = (a_image ? 0.0 : a) + (b_image ? 0.0 : b);
  return flops >= static_cast<double>(kMxfp8FlopsPerExpandedElement) * elements;
}
}  // namespace

bool mxfp8_weight_images() {
  return by_path([] {
    static const bool device = cuda_device_count() > 0;
    return device;
  });
}

bool mxfp8_expands(GroupedGemmKind kind, const GroupedGemmDims& d, bool a_image, bool b_image) {
  return by_path([&] { return auto_expands(kind, d, a_image, b_image); });
}
}  // namespace detail

}  // namespace tessera
