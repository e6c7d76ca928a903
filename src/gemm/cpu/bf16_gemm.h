// The CPU backend's oneDNN matmul runs. The native BF16 path: dense BF16 A and B multiplied by
// oneDNN's BF16 matmul (AVX512-BF16 / AMX kernels, FP32 accumulation) with no FP32 copies of the
// operands. Problems it does not take — any other operand dtype, a quantized operand, a build
// without oneDNN, a CPU without BF16 dot-product instructions, or TESSERA_CPU_BF16_GEMM=fp32 in
// the environment — run the FP32 path of grouped_gemm_cpu.cpp (convert, then the GEMMs below),
// whose results agree within the same tolerance (BF16 products are exact in FP32; only the FP32
// summation order differs).
//
// The FP32 path's GEMMs (every other problem: the operands' FP32 images) run on oneDNN's FP32
// matmul the same way in a build with oneDNN (TESSERA_CPU_FP32_GEMM=sgemm in the environment
// asks for OpenBLAS's sgemm instead). Why not sgemm: OpenBLAS's pthread pool and the OpenMP
// workers torch (and oneDNN) leave spinning after their regions compete for the cores: on the
// 2-core machine one eager FP8 step of 8 experts x 16 rows x 256 x 256 in a torch process took
// 20 ms idle and about 200 ms beside another build, most of it in sched_yield (bench/results/
// 2026-11-29-cpu-fp32-gemm-onednn.md).
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

// One group's GEMM for oneDNN: op(A_g) (m, k) and op(B_g) (k, n) as strided matrices (BF16 or
// FP32 elements, as the run says), and where D_g starts.
struct GroupBlock {
  const void* a = nullptr;
  int64_t a_row = 0, a_col = 0;  // op(A_g)(i, kk) = a[i * a_row + kk * a_col]
  const void* b = nullptr;
  int64_t b_row = 0, b_col = 0;  // op(B_g)(kk, j) = b[kk * b_row + j * b_col]
  int64_t d_offset = 0;          // element index of D_g(0, 0); D's row stride is n
  int64_t m = 0, k = 0;
};

// B's FP32 image made per group inside the tasks instead of whole before them (the FP32 path,
// M-grouped, B quantized; the blocks' b is null): each task of group g dequantizes B's logical
// rows [g·rows, (g + 1)·rows) — stored rows, or stored columns of a transposed copy — into a
// buffer of its thread, which stays in cache for the matmul, and keeps it for the thread's next
// task of the same group and call.
struct GroupImagesB {
  DequantPlan plan;
  int64_t rows = 0;  // logical rows of B per group
};

// Whether `p`'s FP32 path runs its GEMMs on oneDNN: a build with it, not refused by
// TESSERA_CPU_FP32_GEMM=sgemm or the hook below, and not an FP32 D with an epilogue of ours
// (alpha, group_alpha, bias: those stay on sgemm, which needs no staging area for them). The
// workspace is the sgemm form's either way; a BF16/FP16 D is staged in its FP32 region.
bool fp32_onednn_applies(const GroupedGemmProblem& p);
// Whether the FP32 path takes oneDNN at all (built with it and not refused).
bool fp32_onednn_enabled();
// Test hook: false sends the FP32 path's GEMMs to sgemm. Returns the previous setting. Not for
// use while another thread plans or runs a GEMM (the workspace size depends on it).
bool set_fp32_onednn_allowed(bool allowed);

// Defined by bf16_gemm_onednn.cpp, or by bf16_gemm_no_onednn.cpp in a build without oneDNN.
bool built_with_onednn();
Bf16Support probe_bf16_support();
void grouped_gemm_bf16_onednn(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                              const std::vector<int64_t>& start,
                              const std::vector<int64_t>& a_start, float* staging);
// The FP32 path's GEMMs: `blocks` over FP32 images, D (or the staging area, when given) as above.
void grouped_gemm_fp32_onednn(const GroupedGemmProblem& p, int64_t n,
                              std::vector<GroupBlock> blocks, float* staging,
                              const GroupImagesB* b_images = nullptr);

}  // namespace tessera::detail::cpu
