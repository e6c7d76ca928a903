// Grouped GEMM (docs/gemm.md): the problem descriptor, can_implement → workspace_size → run, and
// the CUDA tile/config heuristic. One call computes, for every group g,
//
//   D_g = alpha_g · op(A_g) · op(B_g) + bias_g + beta · D_g          (FP32 accumulation)
//
// Kinds (T = rows of the token buffer, its capacity; G groups; offsets give each group's rows):
//   kMGrouped  (forward y = x Wᵀ "TN", dgrad dx = dy W "NN"): A (T, K) rows grouped;
//              B (G, N, K) when transpose_b (TN) or (G, K, N) when not (NN); D (T, N).
//              Group g owns rows [start_g, end_g) of A and D; an empty group writes nothing.
//              transpose_a must be false.
//   kKGrouped  (wgrad dW_g = dy_gᵀ x_g, "NT"): A (T, N) and B (T, K), rows grouped, contraction
//              over the grouped token dim; D (G, N, K). transpose_a must be true and transpose_b
//              false. An empty group writes zeros (beta = 0) or leaves D_g unchanged (beta = 1).
//   kBatched   (3D×3D): A (G, M, K), or (G, K, M) when transpose_a; B (G, N, K) when transpose_b,
//              else (G, K, N); D (G, M, N). No offsets.
// Rows of A, B and D past the last offset (up to the capacity) are never read or written.
// kMGrouped may read A through its own row layout (a_row_starts): group g's A rows then start
// at a_row_starts[g] while its D rows still follow the offsets (e.g. A a copy of the tokens
// padded so that every group starts on an aligned row, D the unpadded output).
//
// Operands: unquantized FP32/BF16/FP16 TensorViews, or a QuantizedTensorView (any recipe of §4)
// plus the usage (rowwise/columnwise copy) the GEMM reads. A quantized operand is described by
// its LOGICAL (rows, cols) matrix: the usage only picks which stored copy is read (a transposed
// columnwise copy still means the same logical matrix). All groups of an operand live in ONE
// quantized tensor: a grouped 2-D operand is (T, cols); a 3-D operand (G, X, Y) is quantized as
// (G·X, Y). For kTensor scaling, scale_inv (and for NVFP4 the global amax) may hold 1 value (shared)
// or G values (one per group). Both operands quantized need compatible recipes (same mode family,
// e.g. kBlock1x128 × kBlock128x128, kMXFP8 × kMXFP8_32x32; FP8 elements may mix E4M3 × E5M2).
//
// Threading / synchronisation: the CUDA path reads group metadata on the device and never syncs;
// can_implement reads offsets only when they are in host memory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/core/status.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/quantize/types.h"

namespace tessera {

enum class GroupedGemmKind : int {
  kMGrouped = 0,  // 2D × 3D → 2D, rows grouped (forward, dgrad)
  kKGrouped = 1,  // 2D × 2D → 3D, contraction grouped (wgrad)
  kBatched = 2,   // 3D × 3D → 3D
};

// How `group_offsets` encodes the groups' row ranges (int32 or int64 either way).
enum class GroupOffsetsFormat : int {
  kStartOffsets = 0,  // G+1 entries, offsets[0] == 0, group g = [offsets[g], offsets[g+1])
  kEndOffsets = 1,    // G entries, cumulative END offsets (torch._grouped_mm's `offs`)
};

const char* grouped_gemm_kind_name(GroupedGemmKind k) noexcept;

// One GEMM operand: either a dense (unquantized) view or a quantized tensor plus the usage read.
// Invariant: exactly one of `dense.data` / `quantized` (has the requested usage) is meaningful,
// selected by `is_quantized`.
struct GemmOperand {
  TensorView dense;                 // FP32 / BF16 / FP16, contiguous
  QuantizedTensorView quantized;    // logical (rows, cols); 3-D operands as (G·X, Y)
  bool is_quantized = false;
  bool columnwise = false;          // quantized only: read the columnwise copy
  // NVFP4 and MXFP8 copies only, optional: the rowwise copy's elements expanded exactly into
  // BF16 (NVFP4: E2M1 value × its block's E4M3 scale, the copy's per-tensor factor 1/S_enc left
  // out, the GEMM takes it from `amax`; MXFP8: the FP8 value × its block's 2^(e − 127)), a
  // contiguous (rows, cols) matrix on the copy's device, cols % 8 == 0, 16-byte aligned. Where
  // the CUDA GEMM expands the copy (every NVFP4 pair; MXFP8 pairs where the expansion pays, or
  // all with TESSERA_MXFP8_EXPANDED=1: docs/gemm_cuda.md) it reads this image instead of
  // expanding into its workspace on every call (an MXFP8 operand with an image counts as
  // expanded already in that choice): for a rowwise read, and (NVFP4) for the columnwise read
  // of an M-grouped NN GEMM (the dgrad on weights) when that copy is the rowwise copy
  // transposed — 16x16 tiles, no Hadamard transform, no stochastic rounding, the NVFP4 weight
  // role — as its MN-major transpose. The caller keeps the image equal to the copy
  // (nn::WeightCopies does); the CPU backend and the MXFP8 kinds read the codes.
  TensorView expanded;

  static GemmOperand from_dense(const TensorView& v) {
    GemmOperand o;
    o.dense = v;
    return o;
  }
  static GemmOperand from_quantized(const QuantizedTensorView& q, bool use_columnwise) {
    GemmOperand o;
    o.quantized = q;
    o.is_quantized = true;
    o.columnwise = use_columnwise;
    return o;
  }
  Device device() const { return is_quantized ? quantized.device : dense.device; }
};

// Tile/config of the CUDA kernel. All zeros = "let the heuristic choose". The heuristic's choice
// (select_grouped_gemm_config) round-trips: set as problem.config it gives the same launch. A
// field left 0 takes the kernel's default for the other fields' choice. Values the sm90 kernel
// does not take are refused (kUnsupported) by run(), naming the field; the CPU backend has no
// tiles and refuses any non-default config (kInvalidArgument) rather than ignore it.
//   tile_m: 128 (the kernel's tile rows). tile_n: 256 (cooperative schedule) or 128 (ping-pong).
//   tile_k: the contraction elements per stage, 128 bytes: 128 (FP8) or 64 (BF16/FP16).
//   stages: pipeline depth (>= 1; the launcher caps it to what fits in shared memory).
//   cluster_m x cluster_n: 1 x 1, or 2 x 1 (M-grouped and batched; K-grouped with an even
//   number of 128-row m blocks and K-major operands). num_sms: persistent CTAs.
//   variant: bit 0 set = register-store epilogue (else TMA stores where they apply).
//   raster_band: tile order inside a group, bands of this many m blocks (0: m blocks fastest).
struct GroupedGemmConfig {
  int tile_m = 0, tile_n = 0, tile_k = 0;
  int stages = 0;
  int cluster_m = 0, cluster_n = 0;
  int num_sms = 0;      // persistent grid size (0 = all SMs)
  int variant = 0;      // epilogue variant, see above (0 = default)
  int raster_band = 0;  // tile order, see above
  bool is_default() const {
    return tile_m == 0 && tile_n == 0 && tile_k == 0 && stages == 0 && cluster_m == 0 &&
           cluster_n == 0 && num_sms == 0 && variant == 0 && raster_band == 0;
  }
};

// The problem descriptor. Plain data: views are non-owning and must outlive the call (for CUDA,
// until the stream reaches it).
// Invariants checked by can_implement: every operand on one device (offsets, a_row_starts and
// group_alpha may also be in host memory); shapes as listed in the file header; beta ∈ {0, 1};
// beta = 1 needs an FP32 D; max_total_rows -1 or ≤ rows of the grouped operands and of D
// (kMGrouped); D shares no byte with what the problem reads of A, B (dense, or the codes /
// scales / amax of the quantized copy read), bias, group_offsets, a_row_starts or group_alpha
// (kInvalidArgument "D overlaps A"; only the bytes touched count: grouped operands and an
// M-grouped D cut to the capacity rows, all of A with a_row_starts; beta = 1 reads D itself by
// design).
struct GroupedGemmProblem {
  GroupedGemmKind kind = GroupedGemmKind::kMGrouped;
  int64_t num_groups = 0;  // G ≥ 1
  GemmOperand a, b;
  bool transpose_a = false;
  bool transpose_b = true;
  TensorView d;  // output (and input when beta = 1): FP32 / BF16 / FP16

  // kMGrouped / kKGrouped: int32 or int64, format below; ignored for kBatched.
  TensorView group_offsets;
  GroupOffsetsFormat offsets_format = GroupOffsetsFormat::kStartOffsets;
  // Host-known upper bound of the total grouped rows (the capacity). -1 = the grouped operand's row
  // count; other negative values are refused. The last offset must not exceed it (checked on host
  // offsets; on the device, rows past it are clamped away).
  int64_t max_total_rows = -1;
  // kMGrouped only: also write zeros into D's rows past the last group's end (a capacity buffer's
  // unused rows), the end read where the offsets live — on the device without a host sync.
  // false: those rows are left as they were (torch._grouped_mm's behaviour).
  bool zero_unused_rows = false;
  // kMGrouped only, optional: the row of A where each group's rows start, when A is laid out
  // apart from D. int64, G or G+1 entries (only the first G are read, so a G+1 start array may
  // be passed as is), in host memory or on the operands' device. Group g reads A rows
  // [a_row_starts[g], a_row_starts[g] + size_g) and, for a rowwise- or block-scaled A, those
  // rows' scales (a per-group kTensor scale or NVFP4 amax is still group g's); its size, its D
  // rows, bias and zero_unused_rows follow group_offsets. A's other rows are never used (they may
  // hold anything, NaN included). With it, max_total_rows = -1 means D's rows, and A must have at
  // least the capacity rows. The ranges must lie inside A, in group order, without overlap
  // (checked where the starts and offsets are in host memory; on the device a start is clamped
  // so that the group's rows stay inside A). Empty (null data): A's rows follow group_offsets.
  TensorView a_row_starts;

  float alpha = 1.0f;
  TensorView group_alpha;  // optional FP32 (G): alpha_g = alpha · group_alpha[g]
  float beta = 0.0f;       // 0 or 1 (1 = accumulate into an existing FP32 D, e.g. main_grad)
  TensorView bias;         // optional (G, N) FP32/BF16/FP16, added to every row of group g
                           // (kMGrouped, kBatched only)

  GroupedGemmConfig config{};  // CUDA tile override; default = heuristic
};

// Whether `problem` can run on the backend of its operands' device. kOk, or a specific status
// (kShapeMismatch, kDTypeMismatch, kMisaligned, kUnsupported, kOutOfRange, kBufferTooSmall,
// kInvalidArgument, kNoDevice) with the reason written to *reason when given. Never throws.
Status can_implement(const GroupedGemmProblem& problem, std::string* reason = nullptr);

// Bytes of workspace run() needs (0 is possible). Throws Error (the can_implement status) when
// the problem cannot run.
int64_t workspace_size(const GroupedGemmProblem& problem);

// Runs the grouped GEMM. `workspace`: at least workspace_size(problem) bytes (any dtype; its
// nbytes() counts), 256-byte aligned, on the operands' device; may be empty when 0 bytes are
// needed. Throws Error with the can_implement status on a problem it cannot run. On CUDA it is
// asynchronous on `stream`.
void run(const GroupedGemmProblem& problem, const TensorView& workspace, Stream stream = {});

// run() for a caller whose workspace grows on demand, validated once (workspace_size() then run()
// validate twice): when `workspace` holds at least the bytes the problem needs, runs it and
// returns 0; otherwise runs nothing and returns those bytes (call again with a workspace that
// large). Throws like run() on a problem that cannot run.
int64_t run_if_fits(const GroupedGemmProblem& problem, const TensorView& workspace,
                    Stream stream = {});

// run() planned once, with a workspace the caller makes for it: `workspace(bytes)` is called
// once, only when the problem needs bytes (> 0), and must return a view of at least `bytes`
// under run()'s workspace rules (the caller keeps its memory alive until the GEMM is done, as
// its stream orders). Throws like run() on a problem that cannot run.
void run_with_workspace(const GroupedGemmProblem& problem,
                        const std::function<TensorView(int64_t bytes)>& workspace,
                        Stream stream = {});

// Convenience: sizes and allocates the workspace itself, then run().
void grouped_gemm(const GroupedGemmProblem& problem, Stream stream = {});

// What the CPU backend runs for dense BF16 × BF16 operands: the native kernel, e.g. "onednn 2.6.3
// brg:avx512_core_bf16" (FP32 accumulation, no FP32 copies), or "fp32 sgemm (<why>)" — operands
// converted to FP32 for OpenBLAS — when this build has no oneDNN, the CPU has no AVX512-BF16 /
// AMX-BF16, or the environment sets TESSERA_CPU_BF16_GEMM=fp32.
std::string cpu_bf16_gemm_path();

// The CUDA tile/config heuristic (a function of the descriptor and the current device), in the
// form that round-trips through problem.config. Returns problem.config when it is not the
// default. Throws kNoDevice without the CUDA backend.
GroupedGemmConfig select_grouped_gemm_config(const GroupedGemmProblem& problem);

}  // namespace tessera
