// Host launchers of the CUDA quantization kernels, one group per format folder. They take raw
// device pointers already validated by the dispatcher (dispatch.cu), enqueue work on `stream`
// and never synchronize: every launcher is capturable in a CUDA graph.
//
// Shapes: x is a row-major (M, K) matrix of `in` elements (float32 / bfloat16 / float16).
// Rowwise codes are (M, K); a transposed columnwise copy is (K, M); MXFP8 columnwise codes are
// (M, K). Scales are laid out as types.h scale_shape() says for the config.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "quantize/quantize_backend.h"
#include "tessera/core/dtype.h"
#include "tessera/quantize/types.h"

namespace tessera::detail::cuda_quant {

// Where the FP8 scale of a tensor / row / column comes from.
struct Fp8ScaleSource {
  const uint32_t* amax = nullptr;  // float bits of amax: one (stride 0) or one per line (stride 1)
  int stride = 0;
  const float* scale = nullptr;    // delayed scaling: use this per-tensor scale (amax unused)
  float fp8_max = 448.0f;
  float eps = 0.0f;
  bool pow2 = false;
  float* scale_inv_out = nullptr;  // 1 / scale, per tensor or per line
  float* scale_inv_out2 = nullptr; // per-tensor: a second copy (columnwise_scale_inv), may be null
  float* amax_out = nullptr;       // per-tensor current scaling: the amax, as float
  float* amax_out2 = nullptr;      // a second copy (columnwise_amax), may be null
};

// FP8 block scaling inside the cast (the tile is exactly one 128x128 block / 128 1x128 blocks):
// scales come from the tile's own amaxes instead of a Fp8ScaleSource.
enum class Fp8Block : int { kNone = 0, k1x128 = 1, k128x128 = 2 };

// The block shapes the cast-transpose kernel takes (its 128x128 tile holds 128 1x128 blocks or
// one 128x128 block); other block modes of the table are refused (kUnsupported) on CUDA.
inline bool fp8_block_kernel_fits(const ScalingModeInfo& info) {
  return info.block_cols == 128 && (info.block_rows == 1 || info.block_rows == 128);
}
inline Fp8Block fp8_block_of(const ScalingModeInfo& info) {
  return info.block_rows == 128 ? Fp8Block::k128x128 : Fp8Block::k1x128;
}

struct Fp8CastArgs {
  const void* x = nullptr;  // (M, K)
  int64_t rows = 0, cols = 0;
  DType in = DType::kBFloat16;
  DType element = DType::kFloat8E4M3;
  uint8_t* q_row = nullptr;  // (M, K) or null
  uint8_t* q_col = nullptr;  // (K, M) transposed, or null
  Fp8ScaleSource row_scale, col_scale;
  bool same_scale = false;          // per-tensor: the columnwise codes are the rowwise ones
  uint32_t* amax_accum = nullptr;   // delayed scaling: atomic max of |x| (float bits) or null
  uint32_t* amax_accum2 = nullptr;  // a second target (the output's amax field) or null
  // Block modes: scale rule from row_scale (fp8_max, eps, pow2); scale_inv written at
  // row_block_sinv[r * row_block_ld + c] (rowwise, (row, block) of the copy) and
  // col_block_sinv[r * col_block_ld + c] (columnwise copy = xᵀ).
  Fp8Block block = Fp8Block::kNone;
  float* row_block_sinv = nullptr;
  int64_t row_block_ld = 0;
  float* col_block_sinv = nullptr;
  int64_t col_block_ld = 0;
  // Rows of x read through a group layout (quantize_through_layout; dst == nullptr: x's own rows,
  // rows x rows): the (rows, cols) matrix quantized is layout's view of x, every dst[g] a
  // multiple of the kernel's 4-row patch.
  LayoutRows layout{};
};

// fp8_cast_transpose/: amax of a whole tensor into *amax_bits (atomic max; caller zeroes it first).
void launch_tensor_amax(const void* x, int64_t n, DType in, uint32_t* amax_bits,
                        cudaStream_t stream);
// fp8_cast_transpose/: one read of x, rowwise codes and/or the transposed columnwise codes.
void launch_fp8_cast_transpose(const Fp8CastArgs& args, cudaStream_t stream);
// fp8_cast_transpose/: delayed-scaling update of `scale` from `history` (len entries), rolled after.
void launch_delayed_update(float* scale, float* history, int len, bool most_recent, float fp8_max,
                           int margin, cudaStream_t stream);

// fp8_rowwise/: one pass per row (amax + cast) for the rowwise usage alone.
void launch_fp8_rowwise(const void* x, int64_t rows, int64_t cols, DType in, DType element,
                        float eps, bool pow2, uint8_t* q, float* scale_inv, cudaStream_t stream);
// fp8_rowwise/: per-row and/or per-column amax (atomic max into zeroed float-bit arrays).
void launch_line_amax(const void* x, int64_t rows, int64_t cols, DType in, uint32_t* row_amax,
                      uint32_t* col_amax, cudaStream_t stream);

// mxfp8/: both usages in one pass over x.
struct MxArgs {
  const void* x = nullptr;  // (M, K)
  int64_t rows = 0, cols = 0;
  DType in = DType::kBFloat16;
  DType element = DType::kFloat8E4M3;
  bool tile32x32 = false;        // kMXFP8_32x32: one scale per 32x32 tile, stored expanded
  bool floor_rule = false;       // E8M0Rounding::kFloor
  bool swizzled = false;
  uint8_t* q_row = nullptr;      // (M, K)
  uint8_t* s_row = nullptr;      // (M, ceil(K/32)) or swizzled
  int64_t s_row_padded_cols = 0; // swizzled: padded width of the rowwise scale matrix
  uint8_t* q_col = nullptr;      // (M, K)
  uint8_t* s_col = nullptr;      // (ceil(M/32), K) or swizzled (transpose, padded)
  int64_t s_col_padded_cols = 0;
  // Rows of x read through a group layout (quantize_through_layout; dst == nullptr: x's own
  // rows): every dst[g] a multiple of the 32-row tile, so a tile lies in one group.
  LayoutRows layout{};
};
void launch_mxfp8(const MxArgs& args, cudaStream_t stream);
// The config-derived fields of MxArgs (element, 32x32 tiles, rounding rule, layout); the caller
// adds shapes and pointers. One definition for the per-tensor and the grouped dispatchers.
inline MxArgs mx_args_of(const QuantizerConfig& c, const void* x, DType in) {
  MxArgs a;
  a.x = x;
  a.in = in;
  a.element = c.element;
  a.tile32x32 = scaling_mode_info(c.mode).block_rows == 32;
  a.floor_rule = c.e8m0_rounding == E8M0Rounding::kFloor;
  a.swizzled = c.scale_layout == ScaleLayout::kSwizzled;
  return a;
}

// Device metadata of a grouped (varying-first) tensor for the grouped launchers. All pointers
// are device memory; member i is rows [tensor_offsets[i] / cols, tensor_offsets[i+1] / cols) of
// the contiguous input, its codes start at element tensor_offsets[i] of each data buffer and
// its scales at scale_offsets[i] / col_scale_offsets[i]. n <= 4096.
struct GroupedMeta {
  int64_t n = 0;
  int64_t cols = 0;
  int64_t rows_bound = 0;  // host-known bound on the live rows (the capacity)
  const int64_t* tensor_offsets = nullptr;     // (n+1)
  const int64_t* scale_offsets = nullptr;      // (n+1)
  const int64_t* col_scale_offsets = nullptr;  // (n+1)
  const float* noop_f32 = nullptr;             // nonzero: the launch does nothing
  const int32_t* noop_i32 = nullptr;
  // Members read through a layout (quantize_nvfp4_members with sources; the NVFP4 tile and amax
  // kernels only): member i's rows come from x rows [sources[i], min(sources[i+1], source_rows))
  // and its rows past those (its padding) read as zero; tensor_offsets still place its copies.
  // Null: member i is x's elements [tensor_offsets[i], tensor_offsets[i+1]).
  const int64_t* sources = nullptr;            // (n+1) row starts in x
  int64_t source_rows = 0;                     // x's rows
};
// mxfp8/: grouped MXFP8 (compact or swizzled scales, each member's scale matrices padded on
// their own) over all members in one persistent launch. `a` holds the whole-buffer pointers
// (x, q_row, s_row, q_col, s_col); rows/cols and the padded widths are ignored.
void launch_mxfp8_grouped(const MxArgs& a, const GroupedMeta& g, cudaStream_t stream);
// fp8_rowwise/: grouped rowwise FP8, rowwise usage: one block per live row, grid from the bound.
void launch_fp8_rowwise_grouped(const void* x, const GroupedMeta& g, DType in, DType element,
                                float eps, bool pow2, uint8_t* q, float* scale_inv,
                                cudaStream_t stream);

// nvfp4/: one copy (rowwise: x; columnwise: xᵀ) per launch.
struct Nvfp4Args {
  const void* x = nullptr;  // (M, K)
  int64_t rows = 0, cols = 0;
  DType in = DType::kBFloat16;
  bool columnwise = false;
  bool tile16 = false;       // kNVFP4_16x16
  bool rht = false;          // Hadamard transform (columnwise copy only)
  bool stochastic = false;
  uint64_t seed = 0, offset = 0, stream_base = 0;
  const uint32_t* amax = nullptr;  // global amax bits of this copy (device)
  uint8_t* data = nullptr;         // (copy rows, ceil(copy cols / 2))
  uint8_t* scale = nullptr;        // E4M3 (copy rows, ceil(copy cols / 16)) or swizzled
  int64_t padded_cols = 0;         // swizzled: padded scale width; 0 = compact
  // Where the copy's codes and scales land: element (r, c) at row row_at + r, column
  // col_at + c of a matrix `ld` codes wide (0: the copy's own width). The grouped launchers set
  // it per member when `in_place` (quantize_nvfp4_members_cuda): member i's copy is then its rows
  // (rowwise) / its columns (xᵀ) of the one copy of the whole x (rows_bound rows) instead of a
  // copy of its own; its stochastic rounding stays a member alone's (its own elements) with
  // offset + i.
  int64_t row_at = 0, col_at = 0, ld = 0;
  bool in_place = false;
};
void launch_nvfp4(const Nvfp4Args& args, cudaStream_t stream);
// 16x16 tiles without stochastic rounding or the Hadamard transform: both copies (row and col
// non-null: the rowwise and columnwise args, each encoded with its own global amax) from one read
// of x, or one (the other null). launch_nvfp4 takes this path for one copy on its own.
bool nvfp4_tile16_eligible(const Nvfp4Args& args);
void launch_nvfp4_tile16(const Nvfp4Args* row, const Nvfp4Args* col, cudaStream_t stream);
// Grouped form: the same strips over every member, with member i's args as
// launch_nvfp4_grouped derives them (in place included; a columnwise member breaking the storage
// contract gets NaN scales and no data). row / col: the whole-buffer args of the two copies
// (col.columnwise set); a copy with data == nullptr is not produced; each copy encodes with its
// own per-member amax. False when a copy asked for is not nvfp4_tile16_eligible (nothing
// launched); launch_nvfp4_grouped takes this path for one copy on its own.
bool launch_nvfp4_tile16_grouped(const Nvfp4Args& row, const Nvfp4Args& col,
                                 const GroupedMeta& g, cudaStream_t stream);
// The config-derived fields of Nvfp4Args (16x16 tiles, stochastic rounding and its stream); the
// caller adds shapes, the copy and pointers. One definition for both dispatchers.
inline Nvfp4Args nvfp4_args_of(const QuantizerConfig& c, const void* x, DType in) {
  Nvfp4Args a;
  a.x = x;
  a.in = in;
  a.tile16 = scaling_mode_info(c.mode).block_rows == 16;
  a.stochastic = c.stochastic_rounding;
  a.seed = c.rng_seed;
  a.offset = c.rng_offset;
  return a;
}
// amax of the Hadamard-transformed xᵀ into *amax (atomic max; zeroed by the caller).
void launch_rht_amax(const Nvfp4Args& args, uint32_t* amax, cudaStream_t stream);

// nvfp4/ tiled path (1x16 blocks; K % 16 == 0, x 16-byte aligned, codes 8-byte aligned: see
// nvfp4_tiles_eligible): both copies from one read of x on 64x64 tiles. A copy whose data is
// null is not produced. The amax arguments hold the copies' global amax bits (device), filled
// before the launch (the tensor amax, or launch_nvfp4_tile_amax with the Hadamard transform).
// Scales are written for every block; swizzle padding is left as it is (zeroed by the caller).
struct Nvfp4TileArgs {
  const void* x = nullptr;  // (M, K)
  int64_t rows = 0, cols = 0;
  DType in = DType::kBFloat16;
  bool rht = false;  // Hadamard transform on the columnwise copy
  bool stochastic = false;
  uint64_t seed = 0, offset = 0;
  uint8_t* row_data = nullptr;   // (M, K / 2)
  uint8_t* row_scale = nullptr;  // (M, K / 16) or swizzled
  int64_t row_padded_cols = 0;   // swizzled width; 0 = compact
  const uint32_t* row_amax = nullptr;
  uint8_t* col_data = nullptr;   // (K, ceil(M / 2))
  uint8_t* col_scale = nullptr;  // (K, ceil(M / 16)) or swizzled
  int64_t col_padded_cols = 0;
  const uint32_t* col_amax = nullptr;
};
// True when the tiled kernels take x (cols % 16 == 0, 16-byte aligned) and the code buffers
// (8-byte aligned; null counts as aligned).
bool nvfp4_tiles_eligible(const void* x, int64_t cols, const uint8_t* data0, const uint8_t* data1);
void launch_nvfp4_tiles(const Nvfp4TileArgs& args, cudaStream_t stream);
// amax of x into *x_amax (may be null) and of the Hadamard-transformed xᵀ into *rht_amax in one
// read of x (atomic max; both zeroed by the caller). Needs nvfp4_tiles_eligible(x, cols, ...).
void launch_nvfp4_tile_amax(const Nvfp4TileArgs& args, uint32_t* x_amax, uint32_t* rht_amax,
                            cudaStream_t stream);
// Grouped forms (launch_nvfp4_tiles_grouped is called by launch_nvfp4_grouped for one copy and
// by the grouped dispatcher for both copies in one read of x; launch_nvfp4_tile_amax_grouped by
// launch_rht_amax_grouped): false when the input is not eligible (nothing launched; the caller
// runs the generic kernels instead). row / col: the two copies' arguments (same input, seed and
// offset; col.columnwise set); a copy with data == nullptr is not produced.
bool launch_nvfp4_tiles_grouped(const Nvfp4Args& row, const Nvfp4Args& col,
                                const GroupedMeta& g, cudaStream_t stream);
bool launch_nvfp4_tile_amax_grouped(const Nvfp4Args& a, const GroupedMeta& g, uint32_t* amax,
                                    uint32_t* x_amax, cudaStream_t stream);

// ---- grouped launchers of every recipe (contiguous varying-first / all-same input) -----------
// All take whole-buffer pointers plus the device member table `g`; member i's pointers follow
// from tensor_offsets[i] (data: elements; E2M1 data: bytes = elements / 2), scale_offsets[i] /
// col_scale_offsets[i] (scales), i (per-member amax arrays). They run one persistent launch
// over every member's tiles (grouped_tiles.cuh), return before any write when the noop flag is
// set, never read or write rows past the last offset, and never sync.

// How member i's FP8 scale and amax pointers follow from the whole-buffer ones.
enum class Fp8GroupedScales : int {
  kTensor = 0,  // per-tensor: row/col_scale.amax, row_scale.amax_out2, amax_accum(2) + i
  kLine = 1,    // per-row / per-column: row_scale.amax + scale_offsets[i], col_scale.amax +
                // col_scale_offsets[i] (amax bits in the scale_inv slots; no scale_inv written)
  kBlock = 2,   // block scales: leading dims derived from the member's rows
};
// Both usages' scale_inv outputs are offset by scale_offsets[i] (rowwise: row_scale.scale_inv_out,
// row_block_sinv) or col_scale_offsets[i] (columnwise: col_scale.scale_inv_out,
// row_scale.scale_inv_out2, col_block_sinv).
struct Fp8GroupedCastArgs {
  Fp8CastArgs cast;  // whole buffers; rows/cols ignored
  Fp8GroupedScales scales = Fp8GroupedScales::kTensor;
};
// fp8_cast_transpose/: grouped cast / cast-transpose (per-tensor current or delayed, per-line, block).
void launch_fp8_cast_transpose_grouped(const Fp8GroupedCastArgs& args, const GroupedMeta& g,
                                       cudaStream_t stream);
// fp8_cast_transpose/: per-member amax: atomic max of member i's |x| (float bits) into target[i] and,
// when not null, target2[i]; both zeroed before (launch_grouped_prepare).
void launch_tensor_amax_grouped(const void* x, DType in, const GroupedMeta& g, uint32_t* target,
                                uint32_t* target2, cudaStream_t stream);
// fp8_rowwise/: per-row and per-column amax of every member, atomic max into zeroed float-bit
// slots: row r of member i at row_amax[scale_offsets[i] + r] (may be null), column k at
// col_amax[col_scale_offsets[i] + k] (the members' own FP32 scale_inv slots).
void launch_line_amax_grouped(const void* x, DType in, const GroupedMeta& g, uint32_t* row_amax,
                              uint32_t* col_amax, cudaStream_t stream);
// nvfp4/: one copy of every member. `a` holds whole buffers: a.amax = per-member amax bits (n),
// a.data + tensor_offsets[i] / 2, a.scale + (col_)scale_offsets[i]; a.padded_cols != 0 selects
// the swizzled layout (the padded width is then derived per member). Stochastic rounding uses
// each member's own element stream (as alone).
void launch_nvfp4_grouped(const Nvfp4Args& a, const GroupedMeta& g, cudaStream_t stream);
// nvfp4/: amax of each member's Hadamard-transformed transpose into amax[i] (zeroed before)
// and, when x_amax is given, of each member's rows into x_amax[i] (zeroed before) from the same
// read where the tiled kernel takes x. Returns false when x_amax was given and not written (the
// generic kernel ran: the caller takes x's amax with its own pass).
bool launch_rht_amax_grouped(const Nvfp4Args& a, const GroupedMeta& g, uint32_t* amax,
                             uint32_t* x_amax, cudaStream_t stream);

// Work done before a grouped launch, on the device (so that the noop flag covers it): zero the
// per-member amax arrays and the scale matrices of every member (padding included), usage u of
// member i being scales[u][offsets[u][i] * elem_bytes[u] ...] of elem_bytes[u] × per_block[u] ×
// ceil(rows_i / rows_per_block[u]) bytes (per_block[u] × 1 when rows_per_block[u] == 0).
struct GroupedPrepare {
  uint32_t* zero_amax[2] = {nullptr, nullptr};  // (n) each, or null
  uint8_t* scales[2] = {nullptr, nullptr};      // whole scale buffers, or null
  const int64_t* offsets[2] = {nullptr, nullptr};
  int64_t elem_bytes[2] = {1, 1};
  int64_t per_block[2] = {0, 0};
  int64_t rows_per_block[2] = {0, 0};
};
void launch_grouped_prepare(const GroupedPrepare& p, const GroupedMeta& g, cudaStream_t stream);
// Per-line FP8: every member's FP32 scale slots of `p` (scales/offsets/per_block/rows_per_block as
// for the zeroing) hold amax bits; each becomes 1 / current_scale(amax) by `rule` (fp8_max, eps,
// pow2).
void launch_grouped_line_scales(const GroupedPrepare& p, const Fp8ScaleSource& rule,
                                const GroupedMeta& g, cudaStream_t stream);
// Delayed scaling: dst[0] = src[n - 1] (amax history slot 0 = the last member's amax, what
// quantizing the members one after the other leaves there). Nothing when n == 0 or noop.
void launch_grouped_last_amax(const uint32_t* src, float* dst, const GroupedMeta& g,
                              cudaStream_t stream);

}  // namespace tessera::detail::cuda_quant
