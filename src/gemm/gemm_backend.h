// Internal interface between the grouped GEMM front end (grouped_gemm.cpp: validation, device
// dispatch) and its backends: the reference (plain loops, FP64), the CPU backend (CBLAS) and the
// CUDA backend (src/gemm/cuda/, or grouped_gemm_no_cuda.cpp in a build without nvcc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/gemm/grouped_gemm.h"

namespace tessera::detail {

// Sizes of a validated problem. D_g is (m_g, n) = op(A_g) (m_g, k_g) · op(B_g) (k_g, n):
//   kMGrouped: m_g = group rows (m = -1 here), k and n fixed;
//   kKGrouped: k_g = group rows (k = -1 here), m = A cols, n = B cols;
//   kBatched:  m, n, k fixed.
// capacity: rows of the token buffer that may hold live rows (max_total_rows resolved; with
// a_row_starts, D's rows); 0 for kBatched. a_rows: rows of A the problem may read — the
// capacity, or all of A's rows with a_row_starts (≥ capacity); 0 for kBatched.
// Invariant: groups ≥ 1, n ≥ 0, and m, k ≥ 0 where fixed.
struct GroupedGemmDims {
  int64_t groups = 0;
  int64_t m = -1, n = 0, k = -1;
  int64_t capacity = 0;
  int64_t a_rows = 0;
};

// Logical sizes of an operand: 2-D (rows, cols); a 3-D dense view (G, X, Y) or a quantized
// (G·X, Y) operand of a 3-D position is reported per group as (X, Y) by operand_group_dims.
int64_t operand_rows(const GemmOperand& o);  // dense: shape[0] (2-D) or shape[0]*shape[1] (3-D)
int64_t operand_cols(const GemmOperand& o);  // last dim

// Which operand formats a run accepts.
//   kFast: what the backends multiply directly — both operands dense, or both quantized with
//     modes of one scale family (formats/scaling_modes.h), no Hadamard-transformed copy.
//   kEmulated (CPU only): anything else a quantized operand can be — a quantized × dense pair,
//     two families, NVFP4 copies with the random Hadamard transform. Each operand is dequantized
//     to FP32 on its own (as the CPU backend does for every quantized operand; the Hadamard
//     transform undone) and the FP32 GEMM runs. The front end chooses it when the fast rules
//     refuse a pair on the CPU; on CUDA the refusal stands, saying so.
enum class GemmPath : int { kFast = 0, kEmulated = 1 };

// Validates everything but device-specific alignment; throws Error with the specific status.
// Reads host offsets (kOutOfRange past the capacity, kInvalidArgument when not non-decreasing).
GroupedGemmDims check_grouped_gemm(const GroupedGemmProblem& p, GemmPath path = GemmPath::kFast);

// Throws kInvalidArgument naming both when D shares a byte with an input the problem reads (A, B
// or the quantized copy of them read, bias, group_offsets, group_alpha); only the bytes the
// problem touches count (grouped operands and an M-grouped D: the capacity rows). Part of
// check_grouped_gemm (grouped_gemm_overlap.cpp).
void check_output_overlap(const GroupedGemmProblem& p, const GroupedGemmDims& dims);

// The G+1 start offsets of a problem whose offsets live in host memory (kBatched: g·0).
// Precondition: check_grouped_gemm(p) passed.
std::vector<int64_t> host_start_offsets(const GroupedGemmProblem& p);

// The G+1 row starts of A's groups in host memory: a_row_starts with the end of the last group's
// A rows appended (ascending: checked), or host_start_offsets(p) without a_row_starts. Rows of A
// in [s[g], s[g+1]) past group g's own are gaps (never used). Precondition: check_grouped_gemm
// passed.
std::vector<int64_t> host_a_row_starts(const GroupedGemmProblem& p);

// ---- CPU backend (src/gemm/cpu/) ------------------------------------------------------------
int64_t grouped_gemm_cpu_workspace_size(const GroupedGemmProblem& p, const GroupedGemmDims& dims);
void grouped_gemm_cpu(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                      void* workspace, int64_t workspace_bytes);

// ---- reference (src/gemm/reference/): plain loops, FP64 accumulation on dequantized operands.
// Host memory only; allocates what it needs. Used by tests, never by a fast path.
void grouped_gemm_reference(const GroupedGemmProblem& p);

// How the CUDA backend runs MXFP8 x MXFP8 pairs (docs/gemm_cuda.md, "MXFP8 through BF16"):
//   kNative: the MXFP8 kinds, with a promotion of the partial sums every 32 contraction
//     elements in the main loop;
//   kExpanded: as pairs with an NVFP4 copy: both copies expanded exactly into BF16 in the
//     workspace (or read from the caller's BF16 image of a rowwise copy, GemmOperand::expanded),
//     then the BF16 kind;
//   kAuto (the default): kExpanded where mxfp8_expands says the expansion pays, else kNative
//     (and kNative where the expanded mapping refuses the problem).
// Also whether nn keeps BF16 images of MXFP8 weights (weight_has_image: not under kNative, and
// in kAuto only with a CUDA device present; read when a layer's spec is made). The environment
// variable TESSERA_MXFP8_EXPANDED sets it at start-up: "1" kExpanded, "0" kNative, else kAuto.
// Switch before making layers, between GEMM calls (a problem is mapped when it is sized and
// again when it runs).
enum class Mxfp8Path : int { kNative = 0, kExpanded = 1, kAuto = 2 };
Mxfp8Path mxfp8_path();
void set_mxfp8_path(Mxfp8Path path);
// Whether nn keeps BF16 images of MXFP8 weights (above).
bool mxfp8_weight_images();

// Whether an MXFP8 x MXFP8 problem of these sizes runs expanded under mxfp8_path(). kAuto's
// rule, from H200 rates (docs/gemm_cuda.md): expanding an element costs about 3 bytes of HBM
// traffic (read the code, write BF16: ≈0.85 ps at ≈3.5 TB/s), and the BF16 kind saves about
// 1.6 fs per FLOP over the native kinds (≈650 against ≈320 TFLOP/s), so expand when the problem
// has at least kMxfp8FlopsPerExpandedElement (≈0.85 ps / 1.6 fs) FLOPs per element to expand
// (an operand with a BF16 image counts none). For the bench shapes: DSv3 expands every GEMM;
// Qwen3 (256 tokens per expert, 2048 and 1536 wide) expands the wgrad and, with the weight's
// image, the forward and dgrad.
inline constexpr int64_t kMxfp8FlopsPerExpandedElement = 512;
bool mxfp8_expands(GroupedGemmKind kind, const GroupedGemmDims& d, bool a_image, bool b_image);

// mxfp8_path() set for a scope, then restored (tests, A/B runs).
class ScopedMxfp8Path {
 public:
  explicit ScopedMxfp8Path(Mxfp8Path path) : was_(mxfp8_path()) { set_mxfp8_path(path); }
  ~ScopedMxfp8Path() { set_mxfp8_path(was_); }
  ScopedMxfp8Path(const ScopedMxfp8Path&) = delete;
  ScopedMxfp8Path& operator=(const ScopedMxfp8Path&) = delete;

 private:
  Mxfp8Path was_;
};

// ---- CUDA backend (src/gemm/cuda/; stand-ins in grouped_gemm_no_cuda.cpp) ----------------------
// Device-specific checks (alignment, formats, arch) after check_grouped_gemm passed. Never throws.
Status grouped_gemm_cuda_can_implement(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                                       std::string* reason);
int64_t grouped_gemm_cuda_workspace_size(const GroupedGemmProblem& p, const GroupedGemmDims& dims);
GroupedGemmConfig grouped_gemm_cuda_select_config(const GroupedGemmProblem& p,
                                                  const GroupedGemmDims& dims);
// Throws kUnsupported naming a field of an explicit problem.config the sm90 kernel does not take.
void grouped_gemm_cuda_check_config(const GroupedGemmProblem& p);
// Asynchronous on `stream`; workspace already checked for size and alignment. With
// p.zero_unused_rows, D's rows past the last group's end (read on the device) become zeros in
// the same launch.
void grouped_gemm_cuda(const GroupedGemmProblem& p, const GroupedGemmDims& dims, void* workspace,
                       int64_t workspace_bytes, Stream stream);

}  // namespace tessera::detail
