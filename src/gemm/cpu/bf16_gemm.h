// The CPU backend's native BF16 path: dense BF16 A and B multiplied by oneDNN's BF16 matmul
// (AVX512-BF16 / AMX kernels, FP32 accumulation) with no FP32 copies of the operands. Problems it
// does not take — any other operand dtype, a quantized operand, a build without oneDNN, a CPU
// without BF16 dot-product instructions, or TESSERA_CPU_BF16_GEMM=fp32 in the environment — run
// the FP32 path of grouped_gemm_cpu.cpp (convert + sgemm), whose results agree within the same
// tolerance (BF16 products are exact in FP32; only the FP32 summation order differs).
//
// Work split: D is cut into tasks of up to 1024 rows of one group (for a K-grouped problem, rows of
// D_g (M, N)); an OpenMP team takes them largest first from a shared counter, each task one
// single-threaded oneDNN matmul, so ragged groups still fill the cores and no barrier follows a
// group (torch's CPU _grouped_mm runs each group's matmul on all threads, one group after
// another). With one task, oneDNN threads it itself; a problem of little work runs on the caller.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemm/cpu/operand_fp32.h"
#include "gemm/gemm_backend.h"

namespace tessera::detail::cpu {

// Whether this build and CPU run BF16 natively, and what runs: "onednn 2.6.3
// brg:avx512_core_bf16", or why not ("built without oneDNN", "the CPU has no AVX512-BF16 or
// AMX-BF16", ...). Probed once per process.
struct Bf16Support {
  bool native = false;
  std::string description;
};
const Bf16Support& bf16_support();

// Test hook: false sends BF16 problems down the FP32 path, as TESSERA_CPU_BF16_GEMM=fp32 does.
// Returns the previous setting. Not for use while another thread runs a GEMM.
bool set_bf16_native_allowed(bool allowed);

// Whether `p` takes the native path: A and B dense BF16, support native and allowed.
bool bf16_native_applies(const GroupedGemmProblem& p);

// Workspace of the native path: an FP32 staging area of D's `d_elems` elements when the epilogue
// is ours (alpha ≠ 1, group_alpha, bias, or an FP16 D), else 0.
int64_t bf16_native_workspace_size(const GroupedGemmProblem& p, int64_t d_elems);

// Runs `p` (bf16_native_applies(p) holds). start: the G+1 row starts of the groups (kBatched:
// unused); a_start: those of A's groups (M-grouped: host_a_row_starts; else = start). d_elems:
// D's live elements (the staging area's size).
void grouped_gemm_bf16_native(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                              const std::vector<int64_t>& start,
                              const std::vector<int64_t>& a_start, int64_t d_elems,
                              WorkspaceCursor& ws);

// Defined by bf16_gemm_onednn.cpp, or by bf16_gemm_no_onednn.cpp in a build without oneDNN.
Bf16Support probe_bf16_support();
void grouped_gemm_bf16_onednn(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                              const std::vector<int64_t>& start,
                              const std::vector<int64_t>& a_start, float* staging);

}  // namespace tessera::detail::cpu
