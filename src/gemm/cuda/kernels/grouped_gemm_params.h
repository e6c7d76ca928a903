// Plain-data parameters of the sm90 grouped GEMM kernel (host and device share this struct; no
// CUDA types in it). Built by the launcher (grouped_gemm_sm90.cu) from an Sm90GroupedGemm
// (grouped_gemm_sm90.h).
//
// Conventions (operands K-major, i.e. the contraction dim contiguous, unless the element kind reads
// one MN-major: sm90_mma_kinds.cuh):
//   M-grouped: D rows [start_g, end_g) = A rows [a_g, a_g + end_g − start_g) (a_rows, k) · B_gᵀ
//     with a_g = start_g, or a_row_starts[g] when given (A in its own row layout); B_g is the
//     box of the B tensor map at rows g·b_group_rows + [0, n) and contraction columns
//     g·b_group_cols + [0, k). D (capacity, n), row stride ldd.
//   K-grouped: D_g (m, n) at d + g·d_group_stride = A_g (m, len_g) · B_g (n, len_g)ᵀ with
//     len_g = end_g − start_g; A_g, B_g come from per-group tensor maps in the workspace whose
//     contraction coordinate starts at k_origin (0 for per-member blocks, start_g for whole
//     transposed tensors).
//   Epilogue: D = alpha·group_alpha[g]·sa·sb·acc + bias + beta·D, sa = scale_a[g·sa_gs + row·sa_rs]
//     (row = A's row for M-grouped, output row for K-grouped), sb = scale_b[g·sb_gs +
//     col·sb_rs]; a null pointer means 1 (scale) or 0 (bias).
#pragma once

#include <cstdint>

#include "tessera/quantize/scale_rules.h"

namespace tessera::gemm_sm90 {

inline constexpr int kBlockM = 128;         // rows per tile (2 x 64: one wgmma m64 each)
inline constexpr int kTileKBytes = 128;     // contraction bytes per stage (one swizzle row)
inline constexpr int kNumThreads = 384;     // producer warpgroup + 2 consumer warpgroups
inline constexpr int kMaxStages = 8;
inline constexpr int kStoreBoxCols = 64;     // TMA store box: 64 columns (128 bytes of BF16/FP16)
inline constexpr int kTileRing = 4;          // tiles the producer publishes ahead (TileSlot ring)
inline constexpr int kTileSlotBytes = 32;

// How the two consumer warpgroups share the work (a kernel template argument):
// - kCooperative: both work on the same 128 x block_n tile, 64 rows each; a stage is released
//   by both (8 warps).
// - kPingpong: each warpgroup owns whole 128 x block_n tiles (two m64 wgmma per k-step), the two
//   take the CTA's tiles in turns; ordering barriers let only one issue its main loop at a time,
//   so one's epilogue runs while the other's MMAs keep the tensor cores busy. A stage belongs to
//   one tile and is released by its warpgroup's 4 warps. block_n 128 only (128 accumulators per
//   thread, as cooperative 256).
enum class Schedule : int { kCooperative = 0, kPingpong = 1 };

// Byte offsets (from the 1024-byte aligned base) of the kernel's shared-memory regions; the
// launcher sizes the allocation with the same function. Regions: A stages (kBlockM rows x 128 B),
// B stages (block_n rows x 128 B), per-stage block scales (stage_scale_bytes per stage: MXFP8's
// decoded scales, kMxStageScaleBytes), TMA-store staging (per consumer warpgroup: its staged
// rows x block_n x 2 B, when tma_store), per-warpgroup column vectors (col_vectors x block_n
// FP32: the tile's B scales and/or bias), the full/empty mbarriers, the tile ring (kTileRing
// slots: the tiles the producer walked, read by the consumers) and its full/empty mbarriers.
// NVFP4 in-kernel kind (fp4 = 1): after the scales, the raw ring (per stage: A's 128 rows, then
// B's block_n rows, of kFp4RawRowBytes codes), and after the stage barriers the raw ring's
// full/empty barriers.
inline constexpr int kFp4RawRowBytes = 32;  // 64 contraction elements as E2M1 codes
struct SmemLayout {
  int64_t b = 0, scales = 0, raw = 0, d = 0, cols = 0, bars = 0, raw_bars = 0, tiles = 0,
          tile_bars = 0, total = 0;
  int64_t d_per_wg = 0, cols_per_wg = 0, raw_stage = 0;
};
constexpr SmemLayout smem_layout(int block_n, Schedule s, int stages, int tma_store,
                                 int col_vectors, int staging_blocks, int stage_scale_bytes = 0,
                                 int fp4 = 0) {
  SmemLayout l;
  const int wg_rows = s == Schedule::kPingpong ? 64 * staging_blocks : kBlockM / 2;
  l.b = int64_t{stages} * kBlockM * kTileKBytes;
  l.scales = l.b + int64_t{stages} * block_n * kTileKBytes;
  l.raw = l.scales + int64_t{stages} * stage_scale_bytes;
  l.raw_stage = fp4 ? int64_t{kBlockM + block_n} * kFp4RawRowBytes : 0;
  l.d = l.raw + int64_t{stages} * l.raw_stage;
  l.d_per_wg = tma_store ? int64_t{wg_rows} * block_n * 2 : 0;
  l.cols = l.d + 2 * l.d_per_wg;
  l.cols_per_wg = int64_t{col_vectors} * block_n * 4;
  l.bars = l.cols + 2 * l.cols_per_wg;
  l.raw_bars = l.bars + 2 * kMaxStages * 8;
  l.tiles = l.raw_bars + (fp4 ? 2 * kMaxStages * 8 : 0);
  l.tile_bars = l.tiles + kTileRing * kTileSlotBytes;
  l.total = l.tile_bars + 2 * kTileRing * 8;
  return l;
}

// MXFP8 kinds: the scale loader threads of the producer warpgroup (threads 64..127) decode each
// stage's E8M0 scales into FP32 in the stage's scale region: A [4 blocks][128 rows] then B
// [4 blocks][128 columns] (block_n 128), and arrive on the stage's full barrier.
inline constexpr int kMxStageScaleBytes = 2 * 4 * 128 * 4;
inline constexpr int kMxScaleLoaders = 64;

enum class OutType : int { kBF16 = 0, kFP16 = 1, kFP32 = 2 };

// Scales of a block-scaled operand (the kernel kinds with Elem::kPromote). FP8 block modes: FP32
// per block of 1 or 128 rows x 128 contraction elements; MXFP8: one E8M0 byte per 32 contraction
// elements of a row (Elem::kPromoteK = 32). The scale of operand row `row` (the TMA row
// coordinate plus the row inside the tile; clamped to rows - 1) and contraction block `kb`
// (contraction coordinate of the stored copy >> k_shift) is at
//   compact:   (row >> row_shift) · ld + kb · kb_stride
//   swizzled:  scale_rules::swizzled_scale_offset(row, kb, ld)   (ld = the padded width)
// — scale_rules::scale_index of the stored copy's block geometry, read in the orientation the
// kernel reads the data (a columnwise MXFP8 copy transposed into the workspace has its 32x1
// scales at (kb · ld + row): kb_stride = ld, ld = 1), so every operand layout the dispatcher maps
// (forward, dgrad, wgrad) shares one formula. Blocks past kb_count − 1 are never read (clamped;
// their elements are zeros of the tile past the contraction end).
struct BlockScales {
  const void* ptr = nullptr;  // FP32 (k_shift 7) or E8M0 bytes (k_shift 5)
  int64_t ld = 0;    // compact: scale row stride (elements); swizzled: padded width
  int64_t kb_stride = 1;  // compact: stride of one contraction block
  int64_t rows = 1;  // rows of the stored copy (reads are clamped inside it)
  int64_t kb_count = 1;  // contraction blocks of the stored copy (reads are clamped inside it)
  int row_shift = 0;  // log2 of the rows one stored scale covers: 0 (1x128, 1x32) or 7 (128x128)
  int k_shift = 7;    // log2 of the contraction elements per scale: 7 (FP8 block) or 5 (MXFP8)
  int swizzled = 0;   // E8M0 scales in the GEMM-swizzled 128x4 layout
  // MXFP8 weights in 32x32 tiles (mxfp8_32x32: each row stores its tile's scale): 32 rows share
  // one scale, so the kernel reads one per 32 rows (a hint: set only when that holds).
  int rows_per_scale_32 = 0;
  // MXFP8, M-grouped: contraction blocks per group of B (dgrad: group g's scales start at block
  // g·group_kb, while its data starts at g·b_group_cols, padded to whole stages); 0 otherwise.
  int64_t group_kb = 0;
};

// One NVFP4 operand of the in-kernel kind (ElemNvfp4; its tensor map holds the raw E2M1 codes,
// kFp4RawRowBytes a box row): the E4M3 block scales the converter threads read
// (kernels/fp4_stage.cuh), at scale_rules::scale_index(geometry, stored row, stored contraction
// element); rows: the stored copy's rows (a row at or past it is padding); k: one group's
// contraction (elements at or past it, in a group's contraction, are padding). The copy's
// 1/S_enc factors are the epilogue's scale_a / scale_b.
// row_shift: log2 of geometry.block_rows (0 for 1x16, 4 for 16x16 tiles; blocks are 16
// contraction elements wide), so the device looks scales up by shifts. The converters read a
// stage row's four block scales as one 32-bit word, so the host takes this path only where they
// are adjacent and aligned: scales 4-byte aligned, compact ld % 4 == 0 or swizzled (not
// transposed), and every stage starting on a 4-block boundary (each group's contraction origin
// a multiple of 64 elements).
struct Fp4Operand {
  const uint8_t* scales = nullptr;
  scale_rules::ScaleGeometry geometry;
  int64_t rows = 0, k = 0;
  int row_shift = 0;
};

struct KernelParams {
  int k_grouped = 0;       // 0: M-grouped, 1: K-grouped
  int num_groups = 0;
  const void* offsets = nullptr;  // device: int32 or int64
  int offsets_int64 = 1;
  int offsets_start = 1;   // 1: G+1 start offsets (leading 0); 0: G cumulative end offsets
  int64_t capacity = 0;    // group bounds are clamped to [0, capacity]
  // M-grouped: the row of A where each group starts (device int64, G entries; null: the group
  // start), clamped to [0, a_rows − len_g] so a group's rows stay inside A's a_rows rows
  // (a_group_start).
  const int64_t* a_row_starts = nullptr;
  int64_t a_rows = 0;
  int64_t m = 0, n = 0, k = 0;  // M-grouped: n, k; K-grouped: m, n (k unused)
  int64_t b_group_rows = 0, b_group_cols = 0;  // M-grouped B per-group coordinate offsets
  const void* group_maps = nullptr;  // K-grouped: CUtensorMap[2G] (A_g, B_g) in the workspace
  int a_k_origin_start = 0, b_k_origin_start = 0;  // K-grouped: contraction starts at start_g
  // K-grouped, both operands stored whole (not per member): a contraction window wholly inside
  // its group is read through the launch's own maps at its absolute coordinate; only a window
  // that crosses a group bound (zero fill) goes through the group's maps (sm90 producer_loop).
  int k_interior_global = 0;
  const int32_t* group_ok = nullptr;  // K-grouped: per-group flag from the setup kernel

  void* d = nullptr;
  OutType out_type = OutType::kBF16;
  int64_t ldd = 0, d_group_stride = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* group_alpha = nullptr;
  const float* scale_a = nullptr;
  int64_t sa_gs = 0, sa_rs = 0;
  const float* scale_b = nullptr;
  int64_t sb_gs = 0, sb_rs = 0;
  const void* bias = nullptr;
  OutType bias_type = OutType::kFP32;
  int64_t bias_gs = 0;
  // FP8 block operands (Elem::kPromote kinds): each stage's partial sums are multiplied by
  // bsa(row) · bsb(col) and added to the accumulators (scale_a / scale_b are then null).
  // K-grouped: the per-group maps start at start_g (origin_at_start) and the stages cover the
  // 128-aligned windows [128·floor(start_g/128), end_g) of the whole token dim, elements outside
  // the group read as zeros, so each window is one scale block of the stored copy.
  BlockScales bsa, bsb;
  int stages = 4;
  // 1: BF16/FP16 D with beta = 0 is staged through shared memory and written by TMA stores
  // (map_d / map_d8: D as (rows, n), rows = capacity (M-grouped) or G·m (K-grouped), boxes 64 x
  // 64 / 64 columns x 8 rows, 128-byte swizzle) for every tile whose columns are all inside n: row
  // blocks inside the group with 64-row boxes, a block crossing the group end with 8-row boxes
  // plus plain stores for its last (rows % 8) rows; the stores overlap the next tile's main loop.
  // Tiles with columns past n, FP32 D and beta = 1 use register stores.
  int tma_store = 0;
  // Ping-pong with tma_store: 64-row staging blocks per consumer warpgroup, 2 (its whole tile:
  // one bulk store group) or 1 (reused block by block, a shorter epilogue traded for one more
  // stage). Cooperative: 1. Set by the launcher.
  int staging_blocks = 1;
  // Tile order inside a group (TileWalker): 0 = m blocks fastest over the whole group; b > 0 =
  // bands of b m blocks, m fastest inside a band, band after band.
  int raster_band = 0;
  // CTAs per thread-block cluster (set by the launcher): 1, or 2 = the CTAs of a cluster take the
  // two tiles of a tile pair (TileWalker::find_pair) and, where the two tiles read the same A rows
  // or the same B rows, each loads half of that operand into both CTAs' shared memory (TMA
  // multicast, map_a_half / map_b_half: 64-row boxes; K-grouped: B through the tile's B map, the
  // whole operand's or the group's, both built with 64-row boxes). A ring slot is then released
  // to the producers of both CTAs.
  int cluster = 1;
  // M-grouped with zero_unused_rows: D's row count; its rows past the last group's end (read on
  // the device) are set to zero by the consumer warpgroups once their tiles are done
  // (zero_tail_rows). 0: no such rows are written.
  int64_t zero_rows = 0;
  // NVFP4 x NVFP4 expanded in the kernel (ElemNvfp4: M-grouped, ping-pong 128 x 128, 1-CTA
  // clusters): the raw codes of A and B come by TMA into the raw ring, the producer warpgroup's
  // converter threads write them as FP16 stages (fp4_stage.cuh) for the FP16 consumers.
  int fp4 = 0;
  Fp4Operand fa, fb;
};

// Shared-memory column vectors per consumer warpgroup (SmemLayout::cols_per_wg): the tile's B
// scales and bias for the epilogue, then, for block-scaled kinds, two (double-buffered) vectors
// of the stage's B block scales (FP8 block kinds; MXFP8 scales come with the stage instead).
constexpr int epilogue_col_vectors(const KernelParams& p) {
  return (p.scale_b ? 1 : 0) + (p.bias ? 1 : 0);
}
constexpr int col_vectors(const KernelParams& p) {
  return epilogue_col_vectors(p) + (p.bsb.ptr && p.bsb.k_shift == 7 ? 2 : 0);
}
// Whether the launch runs an MXFP8 kind (E8M0 scales per 32 contraction elements).
constexpr bool mx_scaled(const KernelParams& p) { return p.bsa.ptr != nullptr && p.bsa.k_shift == 5; }
constexpr int stage_scale_bytes(const KernelParams& p) { return mx_scaled(p) ? kMxStageScaleBytes : 0; }

// Which operand the two tiles of a cluster's tile pair share (TileWalker::find_pair).
inline constexpr int kShareNone = 0, kShareA = 1, kShareB = 2;

// Everything the K-grouped setup kernel needs to derive group g's tensor maps from a template:
// per-member blocks: address = base + start_g·rows·elem_bytes, dim0 = len_g, stride = len_g·elem;
// whole transposed: address = base, dim0 = end_g (contraction clipped at the group end).
// TMA needs 16-byte aligned contraction starts (and per-member strides): a group that breaks
// this gets group_ok = 0 and the GEMM writes NaN for it instead of faulting.
struct GroupMapParams {
  const void* offsets = nullptr;
  int offsets_int64 = 1, offsets_start = 1;
  int num_groups = 0;
  int64_t capacity = 0;
  const void* base[2] = {nullptr, nullptr};  // A, B
  int64_t rows[2] = {0, 0};                  // rows of A_g (m) and B_g (n)
  int per_member[2] = {0, 0};
  // Whole tensors only: which dimension of the map is the contraction clipped at end_g: 0 for
  // K-major copies (m, capacity), 1 for MN-major token matrices (capacity rows, m) — whose group
  // starts are row coordinates and need no alignment.
  int contraction_dim[2] = {0, 0};
  // Whole K-major tensors with k_block_aligned windows: the map starts at column start_g
  // (address + start_g·elem_bytes) and is len_g wide, so the kernel's window coordinates
  // 128·floor(start_g/128) − start_g + 128·i may be negative and read zeros below the group.
  int origin_at_start[2] = {0, 0};
  int elem_bytes = 1;
  // bound_block > 0: group g is also ok only when start_g and end_g are multiples of
  // bound_block, or end_g == bound_exempt (the products of Hadamard-transformed copies equal the
  // untransformed ones only over whole transform blocks).
  int64_t bound_block = 0, bound_exempt = 0;
  int32_t* group_ok = nullptr;  // out: 1 when group g's operands meet TMA's 16-byte rules
};

}  // namespace tessera::gemm_sm90
