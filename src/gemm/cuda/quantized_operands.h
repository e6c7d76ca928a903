// How the sm90 grouped GEMM reads FP8 operands of the public API (QuantizedTensorView,
// docs/numerics.md): which stored copy, as which K-major matrix, with which scale indexing
// (KernelParams' sa/sb convention: scale = scale[g·gs + i·rs]). Host-only, no CUDA types.
//
// Supported element pairs (A × B): E4M3 × E4M3, and E5M2 × E4M3 (the HYBRID recipes' backward:
// dgrad dy × W and wgrad dyᵀ × x with E5M2 gradients); kTensor with 1 or G scales, or kRowwise,
// the same mode on both operands:
//   M-grouped TN (forward):  A rowwise (T, K), scales per token row; B rowwise (G·N, K), scales per
//                            weight row (g·N + n).
//   M-grouped NN (dgrad):    A rowwise (T, K); B columnwise = the transposed copy (N, G·K) of the
//                            logical (G·K, N) weights, group g at contraction columns g·K, scales
//                            per output column n (shared by the groups).
//   K-grouped NT (wgrad):    A and B columnwise = transposed copies (M, T) and (N, T); group g at
//                            contraction columns [start_g, end_g); scales per output row / column.
// FP8 block modes (kBlock family, 1x128 or 128x128 blocks of the stored copy, compact FP32
// scales; A and B may be different block modes) use the same copies with the block-scaled kinds:
// each stage's scales are looked up at the copy's (row, contraction) coordinates (BlockScales),
// so any block row size of 1 or 128 works on either operand. Dgrad needs K % 128 == 0 (each
// group's contraction columns g·K start on a block); wgrad windows are 128-aligned over the
// whole token dim (group starts any multiple of 16).
// MXFP8 (mxfp8 1x32 and mxfp8_32x32, E8M0 scales, compact or swizzled; A and B any two MXFP8
// modes) runs the MXFP8 kinds (E8M0 scales per 32 contraction elements, promoted per wgmma k32).
// Rowwise copies are read in place; the columnwise copies keep x's (M, K) layout (32x1 blocks),
// which FP8 wgmma cannot read, so the dispatcher transposes them into the workspace first
// (Fp8OperandMap::transpose): dgrad's W (G·K, N) → (N, G·K') with each group's K columns padded
// with zeros to K' = roundup(K, 128) (whole stages; K % 32 == 0, so that no scale block of W
// straddles two experts — the exact product needs A's and B's blocks to coincide); wgrad's dy (T, M) → (M, T) and x (T, N) → (N, T) with the token dim padded to a
// multiple of 16, group starts multiples of 16 (the 32-token scale blocks may straddle groups,
// their scales then cover rows of two experts, as in the quantizer).
// NVFP4 (1x16 and 16x16 E4M3 scales, compact or swizzled, FP32 global amax; A × B = NVFP4 ×
// NVFP4 or one NVFP4 and one MXFP8 copy, the custom recipes' mix) has no FP4 kind: both copies
// are expanded exactly into BF16 in the workspace (expand_operand.h), read K-major as the FP8
// copies above (the MXFP8 columnwise copy transposed on the way), and the BF16 kind runs them
// with NVFP4's 1/S_enc factors as the epilogue scales. Hadamard-transformed NVFP4 copies
// multiply only with each other over the transformed token dim (the wgrad of the NVFP4 recipe:
// the orthogonal transforms cancel in the product), each group on whole 16-token blocks.
// Everything else is refused with a reason (status kUnsupported or kMisaligned).
#pragma once

#include <cstdint>
#include <string>

#include "gemm/cuda/expand_operand.h"
#include "gemm/cuda/grouped_gemm_sm90.h"
#include "gemm/gemm_backend.h"

namespace tessera::gemm_cuda {

// One operand as the kernel reads it. Invariant: matrix.ptr 16-byte aligned, matrix.ld·1 byte a
// multiple of 16; scale non-null.
struct Fp8OperandMap {
  KMajorMatrix matrix;  // with `transpose`: ptr is null (the workspace copy), ld its row stride
  // MXFP8 columnwise copies: the stored bytes at src, src_batch matrices of (src_rows,
  // src_cols), are transposed into a workspace copy (src_cols, ld) that `matrix` then describes:
  // matrix b at columns [b·rows_pad, (b + 1)·rows_pad), zeros past its src_rows (transpose_8bit).
  bool transpose = false;
  const void* src = nullptr;
  int64_t src_batch = 1, src_rows = 0, src_cols = 0, rows_pad = 0;
  const float* scale = nullptr;  // epilogue scales (kTensor / kRowwise); null for block modes
  int64_t scale_gs = 0, scale_rs = 0;  // scale of (group g, index i) = scale[g·gs + i·rs]
  gemm_sm90::BlockScales block;       // block modes: the per-stage scales
  // Pairs with an NVFP4 copy (Fp8ProblemMap::expanded): the stored copy `ex` is expanded into
  // the BF16 workspace matrix `matrix` (ptr null until placed; expand_operand.h), transposed on
  // the way when `expand_transposed` (MXFP8 columnwise copies). NVFP4: the copy's 1/S_enc
  // factors (from amax, 1 or G values) are the epilogue scale, computed into the workspace
  // (`scale` null until placed, scale_gs 0 or 1).
  bool expand = false, expand_transposed = false;
  ExpandSource ex;
  const float* amax = nullptr;
  int64_t amax_count = 0;
  // NVFP4 expanded in the kernel (Fp8ProblemMap::fp4): `matrix` is the stored copy's raw codes
  // (cols and ld in bytes), `fp4` its scales for the kernel's converter threads.
  gemm_sm90::Fp4Operand fp4;
  // The caller's BF16 image of the rowwise copy (GemmOperand::expanded), read in place of an
  // expansion: a rowwise read maps it as `matrix` (expand false); a columnwise read keeps the
  // expansion mapped here and map_m_grouped swaps in the image as an MN-major B where the copies
  // are transposes of each other (Fp8ProblemMap::b_mn_groups). image_amax: the rowwise copy's
  // amax (the image's factors).
  const void* image = nullptr;
  const TensorView* image_amax = nullptr;
  bool image_transposes = false;  // the columnwise copy is the rowwise copy transposed
};

struct Fp8ProblemMap {
  Fp8OperandMap a, b;
  ElemKind elem = ElemKind::kE4M3;  // the (A, B) element pair
  int64_t b_group_rows = 0, b_group_cols = 0;  // M-grouped: B_g's coordinate offsets
  // M-grouped NN with B's BF16 image (Fp8OperandMap::image): B = the (G·K, N) image read
  // MN-major as a 3-D map (N, K, group) of b_mn_groups = G groups; 0 otherwise.
  int64_t b_mn_groups = 0;
  // Both operands expanded to BF16 (a pair with an NVFP4 copy): elem is kBF16.
  bool expanded = false;
  // K-grouped, both expanded as stored (MXFP8 columnwise copies, (tokens, cols)): `matrix` of
  // each is (stored tokens, cols, ld), read MN-major (contraction = token rows).
  bool k_grouped_mn = false;
  // K-grouped pairs of Hadamard-transformed NVFP4 copies: each group's contraction must start
  // and end on a 16-token transform block (an end at `rht_rows`, the copies' stored token count,
  // may close a partial one), else its output is NaN (GroupMapParams::bound_block).
  bool rht = false;
  int64_t rht_rows = 0;
  // NVFP4 x NVFP4, M-grouped, without the Hadamard transform, 16-element blocks of 1 or 16 rows,
  // K % 32 == 0 (16-byte rows of codes), 16-byte aligned codes, scales a stage row reads as one
  // aligned word (Fp4Operand), with nvfp4_in_kernel() on: expanded inside the kernel
  // (ElemKind::kNvfp4), no workspace copies.
  bool fp4 = false;
};

// Whether M-grouped NVFP4 x NVFP4 pairs that qualify run expanded in the kernel
// (Fp8ProblemMap::fp4) or through the workspace expansion (the default). The in-kernel path is
// exact (its CUDA tests pass on an H200) but about 3x slower than the workspace expansion there
// (docs/gemm_cuda.md says why): it is off unless the environment variable
// TESSERA_NVFP4_IN_KERNEL=1 was set at start-up or set_nvfp4_in_kernel(true) is called (its CUDA
// tests, A/B timings). A problem is mapped when it is sized and again when it runs: switch
// between GEMM calls only.
bool nvfp4_in_kernel();
void set_nvfp4_in_kernel(bool on);

// Whether either operand is an MXFP8 or NVFP4 copy (a cheap test before map_fp8_problem: only
// those may need workspace copies: transposes or expansions).
bool has_workspace_operand(const GroupedGemmProblem& p);

// Whether the kernel reads one-byte operands: quantized ones, except the pairs with an NVFP4
// copy, expanded to BF16.
bool one_byte_operands(const GroupedGemmProblem& p);

// Maps a validated problem whose operands are both quantized. Returns kOk and fills *out, or the
// status with *reason saying what the CUDA path needs instead.
Status map_fp8_problem(const GroupedGemmProblem& p, const detail::GroupedGemmDims& d,
                       Fp8ProblemMap* out, std::string* reason);

}  // namespace tessera::gemm_cuda
