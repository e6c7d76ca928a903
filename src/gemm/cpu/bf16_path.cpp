// Which path a problem takes on the CPU (native BF16, FP32 on oneDNN or on sgemm), and the
// native path's workspace (see bf16_gemm.h).
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "gemm/cpu/bf16_gemm.h"

namespace tessera::detail::cpu {
namespace {

// TESSERA_CPU_BF16_GEMM=fp32 asks for the FP32 path; unset or anything else: native when it can.
bool allowed_by_environment() {
  const char* v = std::getenv("TESSERA_CPU_BF16_GEMM");
  return v == nullptr || std::strcmp(v, "fp32") != 0;
}

std::atomic<bool>& native_allowed() {
  static std::atomic<bool> allowed{allowed_by_environment()};
  return allowed;
}

// TESSERA_CPU_FP32_GEMM=sgemm asks for OpenBLAS's sgemm on the FP32 path.
std::atomic<bool>& fp32_onednn_allowed() {
  static std::atomic<bool> allowed{[] {
    const char* v = std::getenv("TESSERA_CPU_FP32_GEMM");
    return v == nullptr || std::strcmp(v, "sgemm") != 0;
  }()};
  return allowed;
}

// The epilogue is ours (oneDNN writes FP32 into the staging area) unless oneDNN can write D
// itself: alpha 1 for every group, no bias, D FP32 (beta = 1 as its sum post-op) or BF16.
bool staged_epilogue(const GroupedGemmProblem& p) {
  return p.alpha != 1.0f || p.group_alpha.data != nullptr || p.bias.data != nullptr ||
         p.d.dtype == DType::kFloat16;
}

}  // namespace

const Bf16Support& bf16_support() {
  static const Bf16Support support = probe_bf16_support();
  return support;
}

bool set_bf16_native_allowed(bool allowed) { return native_allowed().exchange(allowed); }

bool fp32_onednn_applies(const GroupedGemmProblem& p) {
  // An FP32 D with an epilogue of ours would need a staging area the sgemm form does not (its
  // workspace holds the operand images and, for a BF16/FP16 D, D's FP32 image only).
  const bool fp32_d_epilogue = p.d.dtype == DType::kFloat32 && staged_epilogue(p);
  return fp32_onednn_enabled() && !fp32_d_epilogue;
}

bool fp32_onednn_enabled() { return built_with_onednn() && fp32_onednn_allowed().load(); }

bool set_fp32_onednn_allowed(bool allowed) { return fp32_onednn_allowed().exchange(allowed); }

bool bf16_native_applies(const GroupedGemmProblem& p) {
  const auto dense_bf16 = [](const GemmOperand& o) {
    return !o.is_quantized && o.dense.dtype == DType::kBFloat16;
  };
  return dense_bf16(p.a) && dense_bf16(p.b) && native_allowed().load() && bf16_support().native;
}

int64_t bf16_native_workspace_size(const GroupedGemmProblem& p, int64_t d_elems) {
  return staged_epilogue(p) ? fp32_region_bytes(d_elems) : 0;
}

void grouped_gemm_bf16_native(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                              const std::vector<int64_t>& start,
                              const std::vector<int64_t>& a_start, int64_t d_elems,
                              WorkspaceCursor& ws) {
  float* staging = staged_epilogue(p) ? ws.take_floats(d_elems) : nullptr;
  grouped_gemm_bf16_onednn(p, dims, start, a_start, staging);
}

}  // namespace tessera::detail::cpu

namespace tessera {

std::string cpu_bf16_gemm_path() {
  const detail::cpu::Bf16Support& s = detail::cpu::bf16_support();
  const std::string fp32 =
      detail::cpu::fp32_onednn_enabled() ? "fp32 onednn matmul (" : "fp32 sgemm (";
  if (!s.native) return fp32 + s.description + ")";
  if (!detail::cpu::native_allowed().load()) {
    return fp32 + "TESSERA_CPU_BF16_GEMM=fp32; native: " + s.description + ")";
  }
  return s.description;
}

}  // namespace tessera
