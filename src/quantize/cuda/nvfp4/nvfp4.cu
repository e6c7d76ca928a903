// NVFP4 quantization: E2M1 elements, one E4M3 scale per 1x16 block (or per 16x16 tile for
// weights), an FP32 global amax per copy; the columnwise copy is the quantization of xᵀ, optionally
// after the 16-point random Hadamard transform (along M), and stochastic rounding draws the same
// Philox bits as the CPU (element e of a copy's stream: rowwise e = r*K + k, columnwise
// e = M*K + k*M + m). Arithmetic: scale_rules (nvfp4_block_scale, nvfp4_encode_scale,
// nvfp4_clamp, e2m1_stochastic, rht16_forward's order of sums).
//
// The generic kernels below take what the tiled kernels (nvfp4_tiles.cu) do not: 16x16 tiles
// (without stochastic rounding: nvfp4_tile16_kernel, through shared memory), K % 16 != 0,
// unaligned views. One thread per (stripe, 16-column block) of a copy. Rowwise:
// lanes take consecutive blocks of a row (coalesced 32-byte reads); columnwise: lanes take
// consecutive k (for each m the warp reads 32 consecutive elements). A 16x16 tile reads its
// rows twice (amax, then encode; L1/L2 hits).
// Grouped variants run the same work items (and the same 16x16 strips) per member on the generic
// driver (grouped_tiles.cuh).
#include <algorithm>
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/grouped_tiles.cuh"
#include "quantize/cuda/launchers.h"
#include "quantize/cuda/launch_config.h"
#include "quantize/cuda/nvfp4/nvfp4_tile.cuh"
#include "tessera/core/dispatch.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/philox.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant {
namespace {

constexpr int kThreads = 256;
constexpr int kBlock = 16;
constexpr uint8_t kE4M3NanCode = 0x7F;  // decodes to NaN (formats/codecs.h)

constexpr bool signs_match_rule() {
  for (int j = 0; j < 16; ++j) {
    if (rht_sign(j) != scale_rules::kRhtSigns[j]) return false;
  }
  return true;
}
static_assert(signs_match_rule(), "rht_sign must equal scale_rules::kRhtSigns");

// Row r, columns [c0, c0 + 16) of the copy (x or xᵀ), zero past `cols`; transformed when asked
// (full groups only, as the CPU).
template <class In>
__device__ __forceinline__ void load_copy_row(const Nvfp4Args& a, int64_t r, int64_t c0,
                                              int64_t cols, float (&v)[kBlock]) {
  const In* x = static_cast<const In*>(a.x);
#pragma unroll
  for (int j = 0; j < kBlock; ++j) {
    const int64_t c = c0 + j;
    float f = 0.0f;
    if (c < cols) f = load_float(a.columnwise ? x[c * a.cols + r] : x[r * a.cols + c]);
    v[j] = f;
  }
  if (a.rht && c0 + kBlock <= cols) rht16(v);
}

// Work item w of one copy of `a`: stripe s (1 row, or 16 rows for 16x16 tiles) and 16-column
// block b of the copy; encodes its elements and writes its scale. s_enc: the copy's global
// encode scale.
template <class In>
__device__ __forceinline__ void nvfp4_item(const Nvfp4Args& a, int64_t w, float s_enc) {
  const int64_t rows = a.columnwise ? a.cols : a.rows;  // of the copy
  const int64_t cols = a.columnwise ? a.rows : a.cols;
  const int64_t nb = ceil_div_device(cols, kBlock), bh = a.tile16 ? kBlock : 1;
  const int64_t ns = ceil_div_device(rows, bh);
  const int64_t s = a.columnwise ? w % ns : w / nb, b = a.columnwise ? w / ns : w % nb;
  const int64_t r0 = s * bh, r1 = min(rows, r0 + bh), c0 = b * kBlock;
  // The copy's place (Nvfp4Args::row_at / col_at / ld): its own matrix unless in place.
  const int64_t width = a.ld != 0 ? a.ld : cols, gc = a.col_at + c0;
  const int64_t row_bytes = ceil_div_device(width, 2), gnb = ceil_div_device(width, kBlock);
  float v[kBlock];
  uint32_t m = 0;
  for (int64_t r = r0; r < r1; ++r) {
    load_copy_row<In>(a, r, c0, cols, v);
#pragma unroll
    for (int j = 0; j < kBlock; ++j) m = max(m, abs_bits(v[j]));
  }
  const uint8_t s_b = scale_rules::nvfp4_block_scale(scale_rules::amax_from_abs_bits(m), s_enc);
  const float enc = scale_rules::nvfp4_encode_scale(s_b, s_enc);
  for (int64_t r = r0; r < r1; ++r) {
    if (bh > 1) load_copy_row<In>(a, r, c0, cols, v);
    uint32_t packed[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < kBlock; ++j) {
      if (c0 + j >= cols) continue;
      const float y = scale_rules::nvfp4_clamp(v[j] * enc);
      uint32_t code;
      if (a.stochastic) {
        const uint64_t e = a.stream_base + static_cast<uint64_t>(r * cols + c0 + j);
        code = scale_rules::e2m1_stochastic(y, philox::random_bits(a.seed, a.offset, e));
      } else {
        code = formats::encode_e2m1(y);
      }
      packed[j / 8] |= code << (4 * (j % 8));
    }
    const int64_t gr = a.row_at + r;
    uint8_t* d = a.data + gr * row_bytes + gc / 2;
    if (c0 + kBlock <= cols && (reinterpret_cast<uintptr_t>(d) & 7u) == 0) {
      *reinterpret_cast<uint2*>(d) = make_uint2(packed[0], packed[1]);
    } else {
      for (int64_t j = 0; j < kBlock / 2 && c0 / 2 + j < ceil_div_device(cols, 2); ++j) {
        d[j] = static_cast<uint8_t>(packed[j / 4] >> (8 * (j % 4)));
      }
    }
    a.scale[a.padded_cols != 0 ? swizzled_offset(gr, gc / kBlock, a.padded_cols)
                               : gr * gnb + gc / kBlock] = s_b;
  }
}

// Work items of one copy of an (rows, cols) tensor.
__device__ __forceinline__ int64_t nvfp4_items(const Nvfp4Args& a) {
  const int64_t rows = a.columnwise ? a.cols : a.rows, cols = a.columnwise ? a.rows : a.cols;
  return ceil_div_device(rows, a.tile16 ? kBlock : 1) * ceil_div_device(cols, kBlock);
}

template <class In>
__global__ __launch_bounds__(kThreads) void nvfp4_kernel(Nvfp4Args a) {
  const float s_enc =
      scale_rules::nvfp4_global_encode_scale(scale_rules::amax_from_abs_bits(*a.amax));
  const int64_t items = nvfp4_items(a);
  for (int64_t w = blockIdx.x * int64_t{kThreads} + threadIdx.x; w < items;
       w += int64_t{gridDim.x} * kThreads) {
    nvfp4_item<In>(a, w, s_enc);
  }
}

// 16x16 tiles without stochastic rounding or the Hadamard transform (the weights' copies):
// one 512-thread block per strip of 16 x rows x 512 x columns (32 tiles), read once into shared
// memory (16-byte loads where x allows them); thread (tile j, lane i) takes the tile's amax by a
// 16-lane shuffle, then encodes row i of the tile (the rowwise copy) and / or column i (the
// transposed copy: the same values, transposed) into 8 bytes each and writes that copy row's
// scale. Without the transform both copies are made of x's values, so one read of x makes both;
// each copy encodes with its own global amax (the dispatchers give both the amax of x, so the
// copies hold the same scales and codes, transposed). Strips go down the rows first, so the
// blocks running at once fill whole 32-byte sectors of the transposed copy's rows (its codes and
// scales advance 8 bytes / 1 byte per strip); a strip writes whole sectors of the rowwise copy's
// codes and scales (32 tiles: 32 scale bytes per row). Partial sectors would cost the memory a
// read-modify-write each. Same arithmetic as nvfp4_item (the generic kernel, whose transposed
// copy reads x's columns element by element). nvfp4_tile16_grouped_kernel runs the same strips
// over every member's rows.
constexpr int kStripCols = 512;
constexpr int kStripThreads = 512;  // one per (tile, row) of a strip
// Shared strip layout: column c of a row at c + c / 16 (a gap after every 16), rows 545 floats
// apart, so the 16-element chunks the loaders store, the tile rows of the amax and the tile
// columns of the transposed copy each fall on distinct banks (at most 2-way).
constexpr int kStripStride = kStripCols + kStripCols / 16 + 1;
__device__ __forceinline__ int strip_col(int c) { return c + c / 16; }

// Scale slot of row `cr`, block from column c0 of a copy with `copy_cols` columns, at the copy's
// place (Nvfp4Args::row_at / col_at / ld), as nvfp4_item indexes it.
__device__ __forceinline__ uint8_t* nvfp4_scale_slot(const Nvfp4Args& a, int64_t cr, int64_t c0,
                                                     int64_t copy_cols) {
  const int64_t width = a.ld != 0 ? a.ld : copy_cols;
  const int64_t gr = a.row_at + cr, gb = (a.col_at + c0) / kBlock;
  return a.scale + (a.padded_cols != 0 ? swizzled_offset(gr, gb, a.padded_cols)
                                       : gr * ceil_div_device(width, kBlock) + gb);
}

// The 16 codes of `v` · enc (encode_e2m1(nvfp4_clamp(·))), element e in nibble e (bits 4e),
// nibbles from column copy_cols on left zero; c0: the first element's column.
__device__ __forceinline__ uint64_t nvfp4_codes16(const float (&v)[kBlock], float enc,
                                                  int64_t c0, int64_t copy_cols) {
  uint32_t packed[2] = {0u, 0u};
#pragma unroll
  for (int e = 0; e < kBlock; ++e) {
    if (c0 + e >= copy_cols) continue;
    packed[e / 8] |= nvfp4_code(v[e] * enc) << (4 * (e % 8));
  }
  return (uint64_t{packed[1]} << 32) | packed[0];
}

// Row `cr` of a copy with `copy_cols` columns: 16 codes (nvfp4_codes16) from column c0 (8 bytes)
// and the block's scale, at the copy's place, as nvfp4_item writes them.
__device__ __forceinline__ void nvfp4_store_codes16(const Nvfp4Args& a, int64_t cr, int64_t c0,
                                                    int64_t copy_cols, uint64_t codes,
                                                    uint8_t s_b) {
  const int64_t width = a.ld != 0 ? a.ld : copy_cols;
  uint8_t* d = a.data + (a.row_at + cr) * ceil_div_device(width, 2) + (a.col_at + c0) / 2;
  if (c0 + kBlock <= copy_cols && (reinterpret_cast<uintptr_t>(d) & 7u) == 0) {
    *reinterpret_cast<uint2*>(d) =
        make_uint2(static_cast<uint32_t>(codes), static_cast<uint32_t>(codes >> 32));
  } else {
    for (int64_t e = 0; e < kBlock / 2 && c0 / 2 + e < ceil_div_device(copy_cols, 2); ++e)
      d[e] = static_cast<uint8_t>(codes >> (8 * e));
  }
  *nvfp4_scale_slot(a, cr, c0, copy_cols) = s_b;
}

// The 16 x 16 matrix of nibbles held by the 16 lanes of a half-warp (lane i = lane % 16 holds row
// i, column c in bits 4c), transposed: lane i gets column i (row r in bits 4r). Four rounds of
// 2 x 2 block swaps (blocks of 8, 4, 2, 1 nibbles) with the lane i ^ b. Every lane of the warp
// calls it.
__device__ __forceinline__ uint64_t nvfp4_transpose16(uint64_t r, uint32_t i) {
  constexpr uint64_t kLow[4] = {0x00000000FFFFFFFFull, 0x0000FFFF0000FFFFull,
                                0x00FF00FF00FF00FFull, 0x0F0F0F0F0F0F0F0Full};
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t b = 8u >> s;
    const uint64_t low = kLow[s];  // nibbles c with c & b == 0
    const uint64_t o = __shfl_xor_sync(0xffffffffu, r, static_cast<int>(b));
    r = (i & b) == 0 ? (r & low) | ((o & low) << (4 * b)) : ((o & ~low) >> (4 * b)) | (r & ~low);
  }
  return r;
}

// Global encode scale of a copy (from its amax bits).
__device__ __forceinline__ float nvfp4_copy_encode_scale(const Nvfp4Args& a) {
  return scale_rules::nvfp4_global_encode_scale(scale_rules::amax_from_abs_bits(*a.amax));
}

// The copies a strip writes: each copy's args (at its place) and the constants of its global
// encode scale; col_poison: the transposed copy breaks the storage contract
// (nvfp4_member_breaks_contract): its scales become the E4M3 NaN code, no data.
struct Nvfp4StripCopies {
  Nvfp4Args row, col;
  Nvfp4Enc row_enc, col_enc;
  bool col_poison = false;
  // Both copies written with the same global encode scale (the dispatchers give both the amax
  // of x): their codes and scales are then the same, transposed, so the columnwise copy is the
  // rowwise codes transposed in registers (nvfp4_transpose16) instead of a second encode.
  bool same_codes = false;
  __device__ void set_same_codes() {
    same_codes = !col_poison && __float_as_uint(row_enc.s_enc) == __float_as_uint(col_enc.s_enc);
  }
};

// Strip (rows r0 .. r0 + 15, columns k0 .. k0 + 511) of the (M, K) input x: the rowwise copy
// (kRow) and / or the transposed copy (kCol) of `cp`, each encoded with its own global encode
// scale. vec: x rows are 16-byte aligned and
// K % kVec16 == 0. Block-wide (one barrier, uniform over the block); the caller syncs before
// `strip` is reused. Thread indices are unsigned, so their 64-bit widenings need no sign
// extension (a sign-extended index would stay live in a register pair across the grouped
// kernel's division calls and spill).
template <class In, bool kRow, bool kCol>
__device__ __forceinline__ void nvfp4_strip16(const In* x, int64_t M, int64_t K, bool vec,
                                              int64_t r0, int64_t k0, const Nvfp4StripCopies& cp,
                                              float (&strip)[kBlock][kStripStride]) {
  const uint32_t t = threadIdx.x, j = t / kBlock, i = t % kBlock;
  constexpr uint32_t kLoaders = kStripCols / kBlock;  // threads per strip row when loading
  constexpr int kVec = kVec16<In>;
  // Load: thread t reads x row r0 + t / 32, columns k0 + 16·(t % 32) .. + 16 (zeros outside).
  const uint32_t lr = t / kLoaders, lc = kBlock * (t % kLoaders);
  const int64_t r = r0 + lr, c = k0 + lc;
  float v[kBlock];
  if (vec && r < M && c + kBlock <= K) {
#pragma unroll
    for (int h = 0; h < kBlock / kVec; ++h) {
      float f[kVec];
      load_vec<In, kVec>(x + r * K + c + h * kVec, f);
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[h * kVec + e] = f[e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < kBlock; ++e) v[e] = r < M && c + e < K ? load_float(x[r * K + c + e]) : 0.0f;
  }
#pragma unroll
  for (int e = 0; e < kBlock; ++e) strip[lr][strip_col(lc) + e] = v[e];
  __syncthreads();
  const Nvfp4Args &row = cp.row, &col = cp.col;
  // Tile j (columns k0 + 16j ..), lane i: row i of the tile for the amax.
  uint32_t m = 0;
#pragma unroll
  for (int e = 0; e < kBlock; ++e) m = max(m, abs_bits(strip[i][strip_col(kBlock * j) + e]));
#pragma unroll
  for (int d = 1; d < kBlock; d *= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, d));
  const int64_t kc = k0 + kBlock * j;  // the tile's first x column
  if constexpr (kRow && kCol) {
    if (cp.same_codes) {  // uniform over the block
      float enc;
      const uint8_t s_b = nvfp4_scale_of(m, cp.row_enc, enc);
#pragma unroll
      for (int e = 0; e < kBlock; ++e) v[e] = strip[i][strip_col(kBlock * j) + e];
      const bool in_rows = r0 + i < M;
      const uint64_t codes = in_rows ? nvfp4_codes16(v, enc, kc, K) : 0u;  // zero rows past M
      if (in_rows && kc < K) nvfp4_store_codes16(row, r0 + i, kc, K, codes, s_b);
      const uint64_t t_codes = nvfp4_transpose16(codes, i);  // x column kc + i, rows r0 ..
      if (kc + i < K) nvfp4_store_codes16(col, kc + i, r0, M, t_codes, s_b);
      return;
    }
  }
  if constexpr (kRow) {  // x row r0 + i, columns kc ..
    if (r0 + i < M && kc < K) {
      float enc;  // nvfp4_block_scale and nvfp4_encode_scale on the hardware conversions
      const uint8_t s_b = nvfp4_scale_of(m, cp.row_enc, enc);
#pragma unroll
      for (int e = 0; e < kBlock; ++e) v[e] = strip[i][strip_col(kBlock * j) + e];
      nvfp4_store_codes16(row, r0 + i, kc, K, nvfp4_codes16(v, enc, kc, K), s_b);
    }
  }
  if constexpr (kCol) {  // x column kc + i, rows r0 ..
    if (kc + i < K) {
      if (cp.col_poison) {
        *nvfp4_scale_slot(col, kc + i, r0, M) = kE4M3NanCode;
      } else {
        float enc;
        const uint8_t s_b = nvfp4_scale_of(m, cp.col_enc, enc);
#pragma unroll
        for (int e = 0; e < kBlock; ++e) v[e] = strip[e][strip_col(kBlock * j) + i];
        nvfp4_store_codes16(col, kc + i, r0, M, nvfp4_codes16(v, enc, r0, M), s_b);
      }
    }
  }
}

// row: the rowwise copy's args (kRow), col: the columnwise copy's (kCol); x and shapes come from
// whichever is written.
template <class In, bool kRow, bool kCol>
__global__ __launch_bounds__(kStripThreads) void nvfp4_tile16_kernel(Nvfp4Args row,
                                                                     Nvfp4Args col) {
  __shared__ float strip[kBlock][kStripStride];
  const Nvfp4Args& a = kRow ? row : col;
  Nvfp4StripCopies cp{row, col};
  if constexpr (kRow) cp.row_enc = Nvfp4Enc::of(nvfp4_copy_encode_scale(row));
  if constexpr (kCol) cp.col_enc = Nvfp4Enc::of(nvfp4_copy_encode_scale(col));
  if constexpr (kRow && kCol) cp.set_same_codes();
  const In* x = static_cast<const In*>(a.x);
  const int64_t M = a.rows, K = a.cols;
  const int64_t strips_m = ceil_div_device(M, kBlock);
  const int64_t strips = strips_m * ceil_div_device(K, kStripCols);
  const bool vec = K % kVec16<In> == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
  for (int64_t w = blockIdx.x; w < strips; w += gridDim.x) {
    const int64_t r0 = (w % strips_m) * kBlock, k0 = (w / strips_m) * kStripCols;
    nvfp4_strip16<In, kRow, kCol>(x, M, K, vec, r0, k0, cp, strip);
    __syncthreads();
  }
}

// amax of the Hadamard-transformed xᵀ: one thread per (k, group of 16 m).
template <class In>
__global__ __launch_bounds__(kThreads) void rht_amax_kernel(Nvfp4Args a, uint32_t* amax) {
  __shared__ uint32_t scratch[kThreads / 32];
  const int64_t rows = a.cols, cols = a.rows, ng = ceil_div_device(cols, kBlock);
  uint32_t m = 0;
  for (int64_t w = blockIdx.x * int64_t{kThreads} + threadIdx.x; w < rows * ng;
       w += int64_t{gridDim.x} * kThreads) {
    float v[kBlock];
    load_copy_row<In>(a, w % rows, (w / rows) * kBlock, cols, v);
#pragma unroll
    for (int j = 0; j < kBlock; ++j) m = max(m, abs_bits(v[j]));
  }
  m = block_max<kThreads>(m, scratch);
  if (threadIdx.x == 0) atomic_amax(amax, m);
}

// ---- grouped (generic driver of grouped_tiles.cuh) ----------------------------------------

// Member i's arguments: its input rows, its data bytes (tensor_offsets[i] / 2), its scales, its
// amax entry, its own stochastic-rounding stream, its swizzled width.
template <class In>
__device__ __forceinline__ Nvfp4Args member_nvfp4_args(const Nvfp4Args& a, const GroupedMeta& g,
                                                       int64_t i, int64_t rows) {
  Nvfp4Args m = a;
  const int64_t off = g.tensor_offsets[i];
  m.x = static_cast<const In*>(a.x) + off;
  m.rows = rows;
  m.cols = g.cols;
  m.amax = a.amax + i;
  if (a.in_place) {
    nvfp4_place_member(m, g, i, off, rows);
    return m;
  }
  m.data = a.data + off / 2;
  m.scale = a.scale + (a.columnwise ? g.col_scale_offsets[i] : g.scale_offsets[i]);
  m.stream_base = a.columnwise ? static_cast<uint64_t>(rows * g.cols) : 0;
  if (a.padded_cols != 0) {
    m.padded_cols = (ceil_div_device(a.columnwise ? rows : g.cols, kBlock) + 3) / 4 * 4;
  }
  return m;
}

// A columnwise member that breaks the storage contract: an odd row count (its transposed rows
// would not start on a byte) or, with the Hadamard transform, rows not a multiple of 16. The
// host cannot see device split sizes, so such a member is not refused but POISONED: every one of
// its scales becomes the E4M3 NaN code and no data is written, so a dequantize or GEMM of it
// gives NaN instead of silent garbage (the CPU path refuses the same member with an error).
__device__ __forceinline__ bool nvfp4_member_breaks_contract(const Nvfp4Args& a, int64_t rows) {
  return a.columnwise && (rows % 2 != 0 || (a.rht && rows % kBlock != 0));
}

// Scale of work item w of a poisoned member (see nvfp4_member_breaks_contract), no data.
__device__ __forceinline__ void nvfp4_poison_item(const Nvfp4Args& a, int64_t w) {
  const int64_t rows = a.columnwise ? a.cols : a.rows;  // of the copy
  const int64_t cols = a.columnwise ? a.rows : a.cols;
  const int64_t nb = ceil_div_device(cols, kBlock), bh = a.tile16 ? kBlock : 1;
  const int64_t ns = ceil_div_device(rows, bh);
  const int64_t s = a.columnwise ? w % ns : w / nb, b = a.columnwise ? w / ns : w % nb;
  const int64_t r0 = s * bh, r1 = min(rows, r0 + bh);
  const int64_t gnb = ceil_div_device(a.ld != 0 ? a.ld : cols, kBlock), gb = a.col_at / kBlock + b;
  for (int64_t r = a.row_at + r0; r < a.row_at + r1; ++r) {
    a.scale[a.padded_cols != 0 ? swizzled_offset(r, gb, a.padded_cols) : r * gnb + gb] =
        kE4M3NanCode;
  }
}

// Tiles of kThreads work items.
struct Nvfp4TileCount {
  int64_t cols = 0;
  bool columnwise = false, tile16 = false;
  __device__ int64_t operator()(int64_t rows) const {
    const int64_t copy_rows = columnwise ? cols : rows, copy_cols = columnwise ? rows : cols;
    const int64_t items = ceil_div_device(copy_rows, tile16 ? kBlock : 1) *
                          ceil_div_device(copy_cols, kBlock);
    return ceil_div_device(items, kThreads);
  }
};

template <class In>
__global__ __launch_bounds__(kThreads) void nvfp4_grouped_kernel(Nvfp4Args a, GroupedMeta g,
                                                                 Nvfp4TileCount count) {
  extern __shared__ int32_t prefix[];  // (n + 1)
  if (grouped_noop(g)) return;
  grouped_for_each_tile<kThreads>(g, count, prefix, [&](int64_t i, int64_t rows, int64_t local) {
    const Nvfp4Args m = member_nvfp4_args<In>(a, g, i, rows);
    const float s_enc =
        scale_rules::nvfp4_global_encode_scale(scale_rules::amax_from_abs_bits(*m.amax));
    const int64_t w = local * kThreads + threadIdx.x;
    if (w >= nvfp4_items(m)) return;
    if (nvfp4_member_breaks_contract(m, rows)) {
      nvfp4_poison_item(m, w);
    } else {
      nvfp4_item<In>(m, w, s_enc);
    }
  });
}

// The grouped kernel's work item: kStripSpan strips of a member down its rows (64 rows x 512
// columns of x), which share the member's setup (its copies' args and global encode scales: a
// few hundred instructions per thread, as much as encoding a strip's 16 elements a thread
// takes).
constexpr int kStripSpan = 4;
struct Nvfp4StripCount {
  int64_t cols = 0;
  __device__ int64_t operator()(int64_t rows) const {
    return ceil_div_device(rows, kBlock * kStripSpan) * ceil_div_device(cols, kStripCols);
  }
};

// Member i's strip setup (thread 0 alone; not inlined, so that its 64-bit arithmetic does not
// add to the strip loop's registers): each copy's member args (member_nvfp4_args: its x rows,
// data, scales, amax, swizzled width or in-place placement) and global encode scale.
template <class In, bool kRow, bool kCol>
__device__ __noinline__ void nvfp4_strip_setup(const Nvfp4Args& row, const Nvfp4Args& col,
                                               const GroupedMeta& g, int64_t i, int64_t rows,
                                               Nvfp4StripCopies& cp) {
  if constexpr (kRow) {
    cp.row = member_nvfp4_args<In>(row, g, i, rows);
    cp.row_enc = Nvfp4Enc::of(nvfp4_copy_encode_scale(cp.row));
  }
  if constexpr (kCol) {
    cp.col = member_nvfp4_args<In>(col, g, i, rows);
    cp.col_enc = Nvfp4Enc::of(nvfp4_copy_encode_scale(cp.col));
    cp.col_poison = nvfp4_member_breaks_contract(cp.col, rows);
  }
  cp.same_codes = false;
  if constexpr (kRow && kCol) cp.set_same_codes();
}

// nvfp4_tile16_kernel per member: member i's items (down its rows first), with the member's
// setup (nvfp4_strip_setup) made once per item by thread 0 and read from shared memory. A
// columnwise copy of a member that breaks the storage contract gets the NaN scales
// nvfp4_poison_item writes and no data; its rowwise copy is encoded as usual. row / col: the
// copies' whole-buffer args (kRow / kCol). Two blocks per multiprocessor: at three (40
// registers) DSv3 fc1's weights took 4.21 ms against 3.93-3.96 at two (H200,
// bench/results/2026-12-02-session27-h200.md).
template <class In, bool kRow, bool kCol>
__global__ __launch_bounds__(kStripThreads, 2) void nvfp4_tile16_grouped_kernel(
    const __grid_constant__ Nvfp4Args row, const __grid_constant__ Nvfp4Args col,
    const __grid_constant__ GroupedMeta g, Nvfp4StripCount count) {
  extern __shared__ int32_t prefix[];  // grouped_prefix_bytes(g)
  __shared__ float strip[kBlock][kStripStride];
  // Raw storage: a __shared__ variable takes no initializer (Nvfp4StripCopies has defaults).
  __shared__ alignas(Nvfp4StripCopies) unsigned char cp_storage[sizeof(Nvfp4StripCopies)];
  const Nvfp4StripCopies& cp = *reinterpret_cast<const Nvfp4StripCopies*>(cp_storage);
  if (grouped_noop(g)) return;
  grouped_for_each_member_tile<kStripThreads>(g, count, prefix, [&](const GroupedTile& w) {
    const int64_t rows = w.rows;
    // Read by all after the barrier; rewritten after the loop's barrier.
    if (threadIdx.x == 0) {
      nvfp4_strip_setup<In, kRow, kCol>(row, col, g, w.member, rows,
                                        *reinterpret_cast<Nvfp4StripCopies*>(cp_storage));
    }
    __syncthreads();
    // member_nvfp4_args' x (the input of both copies).
    const In* x = static_cast<const In*>((kRow ? row : col).x) + g.tensor_offsets[w.member];
    const bool vec = g.cols % kVec16<In> == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
    // Member-local item: 32-bit (items and rows fit int32: grouped_grid).
    const int32_t items_m = (w.rows + kBlock * kStripSpan - 1) / (kBlock * kStripSpan);
    const int64_t r_item = int64_t{w.local % items_m} * kBlock * kStripSpan;
    const int64_t k0 = int64_t{w.local / items_m} * kStripCols;
    for (int64_t r0 = r_item; r0 < r_item + kBlock * kStripSpan && r0 < rows; r0 += kBlock) {
      if (r0 > r_item) __syncthreads();  // the strip before was read
      nvfp4_strip16<In, kRow, kCol>(x, rows, g.cols, vec, r0, k0, cp, strip);
    }
  });
}

// RHT amax per member: items (k, group of 16 rows) of the member's transpose.
struct RhtTileCount {
  int64_t cols = 0;
  __device__ int64_t operator()(int64_t rows) const {
    return ceil_div_device(cols * ceil_div_device(rows, kBlock), kThreads);
  }
};

template <class In>
__global__ __launch_bounds__(kThreads) void rht_amax_grouped_kernel(Nvfp4Args a, GroupedMeta g,
                                                                    RhtTileCount count,
                                                                    uint32_t* amax) {
  extern __shared__ int32_t prefix[];  // (n + 1)
  __shared__ uint32_t scratch[kThreads / 32];
  if (grouped_noop(g)) return;
  grouped_for_each_tile<kThreads>(g, count, prefix, [&](int64_t i, int64_t rows, int64_t local) {
    const Nvfp4Args m = member_nvfp4_args<In>(a, g, i, rows);
    const int64_t w = local * kThreads + threadIdx.x, ng = ceil_div_device(rows, kBlock);
    uint32_t mx = 0;
    if (w < g.cols * ng) {
      float v[kBlock];
      load_copy_row<In>(m, w % g.cols, (w / g.cols) * kBlock, rows, v);
#pragma unroll
      for (int j = 0; j < kBlock; ++j) mx = max(mx, abs_bits(v[j]));
    }
    mx = block_max<kThreads>(mx, scratch);
    if (threadIdx.x == 0) atomic_amax(amax + i, mx);
  });
}

}  // namespace

void launch_nvfp4_grouped(const Nvfp4Args& a, const GroupedMeta& g, cudaStream_t stream) {
  if (g.n == 0 || g.cols == 0) return;
  Nvfp4Args none = a;  // the other copy: not produced
  none.data = nullptr;
  none.columnwise = !a.columnwise;
  if (launch_nvfp4_tiles_grouped(a.columnwise ? none : a, a.columnwise ? a : none, g, stream)) {
    return;  // 1x16, K % 16 == 0, aligned
  }
  TESSERA_CHECK(g.sources == nullptr, "grouped quantize: NVFP4 reads x through a layout only "
                "on the tiled kernels (1x16 blocks, K % 16 == 0, 16-byte aligned x)");
  if (launch_nvfp4_tile16_grouped(a.columnwise ? none : a, a.columnwise ? a : none, g, stream)) {
    return;  // 16x16 tiles without stochastic rounding or the transform
  }
  Nvfp4TileCount count;
  count.cols = g.cols;
  count.columnwise = a.columnwise;
  count.tile16 = a.tile16;
  // Σ ceil(items_i / kThreads) <= items of the bound (+ one partial block row / column and one
  // partial tile per member).
  const int64_t bh = a.tile16 ? kBlock : 1;
  const int64_t items_bound =
      a.columnwise ? ceil_div(g.cols, bh) * (ceil_div(g.rows_bound, kBlock) + g.n)
                   : (ceil_div(g.rows_bound, bh) + g.n) * ceil_div(g.cols, kBlock);
  const unsigned grid = grouped_grid(g, ceil_div(items_bound, kThreads) + g.n);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    nvfp4_grouped_kernel<In><<<grid, kThreads, grouped_prefix_bytes(g), stream>>>(a, g, count);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

bool launch_rht_amax_grouped(const Nvfp4Args& a, const GroupedMeta& g, uint32_t* amax,
                             uint32_t* x_amax, cudaStream_t stream) {
  if (g.n == 0 || g.cols == 0) return true;
  if (launch_nvfp4_tile_amax_grouped(a, g, amax, x_amax, stream)) return true;  // K % 16 == 0
  TESSERA_CHECK(g.sources == nullptr, "grouped quantize: the NVFP4 Hadamard amax reads x "
                "through a layout only on the tiled kernel (K % 16 == 0, 16-byte aligned x)");
  RhtTileCount count;
  count.cols = g.cols;
  const int64_t items_bound = g.cols * (ceil_div(g.rows_bound, kBlock) + g.n);
  const unsigned grid = grouped_grid(g, ceil_div(items_bound, kThreads) + g.n);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    rht_amax_grouped_kernel<In><<<grid, kThreads, grouped_prefix_bytes(g), stream>>>(a, g, count,
                                                                                   amax);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
  return x_amax == nullptr;  // the generic kernel leaves x's amax to the caller
}

bool nvfp4_tile16_eligible(const Nvfp4Args& a) { return a.tile16 && !a.stochastic && !a.rht; }

void launch_nvfp4_tile16(const Nvfp4Args* row, const Nvfp4Args* col, cudaStream_t stream) {
  const Nvfp4Args& a = row != nullptr ? *row : *col;
  if (a.rows == 0 || a.cols == 0) return;
  const int64_t strips = ceil_div(a.rows, kBlock) * ceil_div(a.cols, kStripCols);
  const unsigned grid = grid_stride_blocks(strips, 1, 8);
  const Nvfp4Args none;
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    if (row != nullptr && col != nullptr)
      nvfp4_tile16_kernel<In, true, true><<<grid, kStripThreads, 0, stream>>>(*row, *col);
    else if (row != nullptr)
      nvfp4_tile16_kernel<In, true, false><<<grid, kStripThreads, 0, stream>>>(*row, none);
    else
      nvfp4_tile16_kernel<In, false, true><<<grid, kStripThreads, 0, stream>>>(none, *col);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

bool launch_nvfp4_tile16_grouped(const Nvfp4Args& row, const Nvfp4Args& col,
                                 const GroupedMeta& g, cudaStream_t stream) {
  const bool with_row = row.data != nullptr, with_col = col.data != nullptr;
  if ((with_row && !nvfp4_tile16_eligible(row)) || (with_col && !nvfp4_tile16_eligible(col))) {
    return false;
  }
  if (g.n == 0 || g.cols == 0 || (!with_row && !with_col)) return true;
  Nvfp4StripCount count;
  count.cols = g.cols;
  // Σ ceil(rows_i / 64) <= ceil(rows_bound / 64) + n items per 512 columns.
  const int64_t strips_bound =
      (ceil_div(g.rows_bound, kBlock * kStripSpan) + g.n) * ceil_div(g.cols, kStripCols);
  const size_t smem = grouped_prefix_bytes(g);
  // The strip (34.9 KB) and the member table (8 bytes per member: 32 KB for kMaxGroupedMembers)
  // pass the 48 KB a block gets without opting in at about 1750 members. From a margin below
  // that on, the kernel's limit is raised to the table of kMaxGroupedMembers: one value for every
  // launch and thread, so that a concurrent launch never lowers it (larger member counts are
  // refused by grouped_grid).
  constexpr size_t kStripBytes = sizeof(float) * kBlock * kStripStride;
  constexpr size_t kStaticSlack = 2048;  // the driver's scan scratch, reserved shared memory
  const size_t max_smem = sizeof(int32_t) * 2 * (kMaxGroupedMembers + 1);
  const Nvfp4Args& a = with_row ? row : col;
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    auto* kernel = !with_col   ? nvfp4_tile16_grouped_kernel<In, true, false>
                   : !with_row ? nvfp4_tile16_grouped_kernel<In, false, true>
                               : nvfp4_tile16_grouped_kernel<In, true, true>;
    if (kStripBytes + kStaticSlack + smem > 48 * 1024) {
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(std::max(smem, max_smem))));
    }
    const unsigned grid =
        grouped_grid(g, strips_bound, resident_blocks_per_sm(kernel, kStripThreads, smem));
    kernel<<<grid, kStripThreads, smem, stream>>>(row, col, g, count);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
  return true;
}

void launch_nvfp4(const Nvfp4Args& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  const int64_t rows = a.columnwise ? a.cols : a.rows, cols = a.columnwise ? a.rows : a.cols;
  const int64_t bh = a.tile16 ? kBlock : 1;
  const int64_t work = ceil_div(rows, bh) * ceil_div(cols, kBlock);
  if (nvfp4_tile16_eligible(a)) return launch_nvfp4_tile16(a.columnwise ? nullptr : &a,
                                                           a.columnwise ? &a : nullptr, stream);
  const unsigned grid = grid_stride_blocks(work, kThreads, 16);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    nvfp4_kernel<In><<<grid, kThreads, 0, stream>>>(a);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_rht_amax(const Nvfp4Args& a, uint32_t* amax, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  const unsigned grid = grid_stride_blocks(a.cols * ceil_div(a.rows, kBlock), kThreads, 8);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    rht_amax_kernel<In><<<grid, kThreads, 0, stream>>>(a, amax);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
