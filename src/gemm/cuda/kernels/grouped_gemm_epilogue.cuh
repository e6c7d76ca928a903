// Epilogue of the sm90 grouped GEMM kernel: D = alpha·group_alpha[g]·sa·sb·acc + bias + beta·D
// for one consumer warpgroup's accumulators (kRowBlocks blocks of 64 rows x kBlockN columns).
//
// Two phases so that no global-load latency sits between the last MMA and the stores:
// - epilogue_prefetch() runs BEFORE the tile's main loop: each thread loads its two row scales per
//   row block, group_alpha and the B scale / bias of columns tid + 128·i into registers, and
//   uses none of them there, so the loads complete under the main loop (alpha, group_alpha and
//   the poison are folded into the row scales after it: row_factors()).
// - tile_epilogue() runs after it: the column values go to the warpgroup's shared-memory column
//   vectors (one named barrier), then each thread reads 8 column pairs at a time from there,
//   scales its fragment and writes either the 128-byte swizzled TMA-store staging buffer (tiles
//   whose columns are all inside n; one thread then issues the TMA stores as one bulk group that
//   overlaps the next main loop: 64-row boxes, or 8-row boxes plus plain stores of the last
//   rows % 8 for the block that crosses the group end) or global memory directly (FP32 D,
//   beta = 1, columns past n).
// wgmma fragment layout: thread (warp w, lane l) holds rows w·16 + l/4 (+8) and columns
// 8j + 2(l%4) (+1) of its 64-row block.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gemm/cuda/kernels/group_offsets.cuh"
#include "gemm/cuda/kernels/grouped_gemm_params.h"
#include "gemm/cuda/kernels/sm90_primitives.cuh"

namespace tessera::gemm_sm90 {

struct Tile {
  int g = 0;
  int64_t start = 0, len = 0;  // group rows (M-grouped) or contraction length (K-grouped)
  int64_t m_blk = 0, n_blk = 0;
  bool poisoned = false;       // K-grouped group the setup kernel found misaligned: NaN output
};

// Registers loaded before the main loop. kDefer (the plain kinds): the loads are used only after
// the main loop, so that they complete under the MMAs (a product taken at once stalls the
// warpgroup on them before its main loop; ncu sampled it on the short K-grouped loops). The
// block-scaled kinds fold at once (kDefer false): their consumers have no register to spare.
// sa[h][i]: the A scale of the thread's row i (0: l/4, 1: l/4 + 8) in row block h, 1 where there
// is none (rows past the group end: unused) — without kDefer already times alpha·group_alpha;
// group_alpha: group_alpha[g] or 1 (kDefer only). col[v][i]: column vector v (0: scale_b,
// 1: bias) at column n_blk·kBlockN + tid + 128·i.
template <int kBlockN, int kRowBlocks, bool kDefer>
struct EpiloguePrefetch {
  float sa[kRowBlocks][2];
  float group_alpha;
  float col[2][kBlockN / 128];
};

__device__ __forceinline__ float load_bias(const KernelParams& p, int64_t idx) {
  if (p.bias_type == OutType::kFP32) return static_cast<const float*>(p.bias)[idx];
  if (p.bias_type == OutType::kBF16)
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[idx]);
  return __half2float(static_cast<const __half*>(p.bias)[idx]);
}

__device__ __forceinline__ int64_t group_rows(const KernelParams& p, const Tile& t) {
  return p.k_grouped ? p.m : t.len;
}

// M-grouped: A's row of the group's first row — a_row_starts[g] clamped to [0, a_rows − len]
// when A has its own row layout, else the group start. Read from global memory at each call
// (L1-cached; once per tile by the producer, the scale loaders and the consumers that need it):
// no state in Tile or the tile ring, so no thread holds more registers than without it.
__device__ __forceinline__ int64_t a_group_start(const KernelParams& p, const Tile& t) {
  if (p.a_row_starts == nullptr) return t.start;
  const int64_t v = __ldg(p.a_row_starts + t.g), hi = p.a_rows - t.len;
  return v < 0 ? 0 : (v > hi ? hi : v);
}

// first_row: the warpgroup's first row inside the group's tile (row block h starts 64·h later).
template <int kBlockN, int kRowBlocks, bool kDefer>
__device__ __forceinline__ void epilogue_prefetch(const KernelParams& p, const Tile& t,
                                                  int64_t first_row,
                                                  EpiloguePrefetch<kBlockN, kRowBlocks, kDefer>& pre) {
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int64_t rows = group_rows(p, t);
  float alpha = 1.0f;
  if constexpr (kDefer) {
    pre.group_alpha = p.group_alpha ? p.group_alpha[t.g] : 1.0f;
  } else {
    alpha = p.alpha * (p.group_alpha ? p.group_alpha[t.g] : 1.0f);
    if (t.poisoned) alpha = __int_as_float(0x7fc00000);  // NaN: the group could not be computed
  }
  // The thread's rows are r0 + 64·h + 8·i. The 64-bit index math is done once, for r0: the
  // rows left in the group from r0 (clamped: the offsets are below 128) and the address of r0's
  // scale; each load then adds a multiple of 8 rows' stride. A's row of the group's row 0:
  // rowwise A scales are per A row; K-grouped: output rows.
  const int64_t r0 = first_row + warp * 16 + lane / 4;
  const int64_t left64 = rows - r0;
  const int left = left64 <= 0 ? 0 : (left64 >= 128 ? 128 : static_cast<int>(left64));
  const float* sa_r0 = nullptr;
  if (p.scale_a) {
    const int64_t a_row0 = p.k_grouped ? 0 : a_group_start(p, t);
    sa_r0 = p.scale_a + t.g * p.sa_gs + (a_row0 + r0) * p.sa_rs;
  }
  const int64_t stride8 = 8 * p.sa_rs;  // elements between rows 8 apart
#pragma unroll
  for (int h = 0; h < kRowBlocks; ++h) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      pre.sa[h][i] = alpha;
      if (64 * h + 8 * i < left && sa_r0 != nullptr) {
        const float sa = sa_r0[(8 * h + i) * stride8];
        pre.sa[h][i] = kDefer ? sa : alpha * sa;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kBlockN / 128; ++i) {
    const int64_t c = t.n_blk * kBlockN + tid + 128 * i;
    const bool in = c < p.n;
    pre.col[0][i] = p.scale_b && in ? p.scale_b[t.g * p.sb_gs + c * p.sb_rs] : 1.0f;
    pre.col[1][i] = p.bias && in ? load_bias(p, t.g * p.bias_gs + c) : 0.0f;
  }
}

// The row factors of the epilogue, alpha·group_alpha·sa (NaN for a group the setup kernel found
// misaligned), from the prefetched loads: the same products as one multiply each would give.
template <int kBlockN, int kRowBlocks, bool kDefer>
__device__ __forceinline__ void row_factors(const KernelParams& p, const Tile& t,
                                            const EpiloguePrefetch<kBlockN, kRowBlocks, kDefer>& pre,
                                            float (&row_scale)[kRowBlocks][2]) {
  float alpha = 1.0f;
  if constexpr (kDefer) {
    alpha = p.alpha * pre.group_alpha;
    if (t.poisoned) alpha = __int_as_float(0x7fc00000);  // NaN: the group could not be computed
  }
#pragma unroll
  for (int h = 0; h < kRowBlocks; ++h)
#pragma unroll
    for (int i = 0; i < 2; ++i) row_scale[h][i] = kDefer ? alpha * pre.sa[h][i] : pre.sa[h][i];
}

__device__ __forceinline__ void store_pair(const KernelParams& p, void* base, int64_t off, float v0,
                                           float v1) {
  if (p.out_type == OutType::kFP32) {
    float2* dst = reinterpret_cast<float2*>(static_cast<float*>(base) + off);
    if (p.beta != 0.0f) {
      const float2 old = *dst;
      v0 += p.beta * old.x;
      v1 += p.beta * old.y;
    }
    *dst = make_float2(v0, v1);
  } else if (p.out_type == OutType::kBF16) {
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(base) + off) =
        __floats2bfloat162_rn(v0, v1);
  } else {
    *reinterpret_cast<__half2*>(static_cast<__half*>(base) + off) = __floats2half2_rn(v0, v1);
  }
}

// Whether the warpgroup's tile goes through the staging buffer and TMA stores: BF16/FP16 D with
// beta = 0 (p.tma_store) and all kBlockN columns inside n. Row blocks that cross the group end are
// staged too: store_staged() writes their rows inside the group with 8-row boxes (map_d8) and the
// last < 8 rows with plain 16-byte stores (copy_tail_rows); blocks past the group end are staged
// (zeros) but never stored.
template <int kBlockN>
__device__ __forceinline__ bool tile_staged(const KernelParams& p, const Tile& t) {
  return p.tma_store && (t.n_blk + 1) * kBlockN <= p.n;
}

// The general epilogue (tiles not staged: FP32 D, beta = 1, register stores asked for, or columns
// past n): scales the warpgroup's row blocks [kH0, kH1) (64 rows each) and writes them to global
// memory, checking every column against n and every row against the group end. 32 columns at a
// time: their column values are read once from the shared-memory column vectors `cols` (scale_b
// first when present, then bias).
template <int kBlockN, int kRowBlocks, int kH0, int kH1>
__device__ __forceinline__ void epilogue_rows_general(const KernelParams& p, const Tile& t,
                                              const float (&acc)[kRowBlocks][kBlockN / 2],
                                              const float (&row_scale)[kRowBlocks][2],
                                              int64_t first_row, const float* cols) {
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int64_t rows = group_rows(p, t);
  const float* sbv = p.scale_b ? cols : nullptr;
  const float* biasv = p.bias ? cols + (p.scale_b ? kBlockN : 0) : nullptr;
  const bool with_cols = sbv != nullptr || biasv != nullptr;
#pragma unroll
  for (int q = 0; q < kBlockN / 32; ++q) {  // quarter boxes: 32 columns
    float2 s[4], bb[4];  // column values, all loads in flight before the math
#pragma unroll
    for (int jq = 0; jq < 4; ++jq) {
      const int cl = q * 32 + jq * 8 + (lane % 4) * 2;
      s[jq] = sbv ? *reinterpret_cast<const float2*>(sbv + cl) : make_float2(1.0f, 1.0f);
      bb[jq] = biasv ? *reinterpret_cast<const float2*>(biasv + cl) : make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int h = kH0; h < kH1; ++h) {
#pragma unroll
      for (int jq = 0; jq < 4; ++jq) {
        const int j = q * 4 + jq;
        const int64_t c = t.n_blk * kBlockN + j * 8 + (lane % 4) * 2;
        if (c >= p.n) continue;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = warp * 16 + lane / 4 + 8 * i;  // row inside the 64-row block
          // As the staged path: the column math only when there are column vectors (same bits).
          float v0 = acc[h][j * 4 + 2 * i] * row_scale[h][i];
          float v1 = acc[h][j * 4 + 2 * i + 1] * row_scale[h][i];
          if (with_cols) {
            v0 = v0 * s[jq].x + bb[jq].x;
            v1 = v1 * s[jq].y + bb[jq].y;
          }
          const int64_t gr = first_row + 64 * h + r;  // row inside the group
          if (gr < rows) {
            const int64_t off =
                p.k_grouped ? t.g * p.d_group_stride + gr * p.ldd : (t.start + gr) * p.ldd;
            store_pair(p, p.d, off + c, v0, v1);
          }
        }
      }
    }
  }
}

// Packs two FP32 values into the 32 bits of two 16-bit outputs (round to nearest even).
template <OutType kOut>
__device__ __forceinline__ uint32_t pack2(float v0, float v1) {
  if constexpr (kOut == OutType::kBF16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(v0, v1);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(v0, v1);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Which column vectors a staged epilogue applies (compile time, so that no load or multiply is
// predicated on a run-time pointer): B scales, bias, both, neither; kAny: whichever the launch
// has (checked at run time: the FP16 variant).
enum class Cols { kNone, kScale, kBias, kBoth, kAny };

// The common case, straight-line: every row block goes to the staging buffer (16-bit D, all rows
// inside the group) and all kBlockN columns are inside n. Per column pair: two FMUL, two FFMA
// (B scales and/or bias, read 8 pairs at a time from the column vectors; v·s + 0 without bias,
// v·1 + b without B scales: the same bits as the general path; without either one FMUL per
// value), one pack; per 16 values one STSM. A thread's pair (row half i, column group j) is the
// MMA fragment of the 8x8 block (rows 16·warp + 8i.., columns 8j..), so one stmatrix.x4 stores
// the blocks (i, j), (i + 1, j), (i, j + 1), (i + 1, j + 1) of j even, lane L giving the address
// of row L % 8 of block L / 8: staging row r = 16·warp + 8·((L / 8) % 2) + L % 8, 16-byte chunk
// (j + L / 16) ^ (r % 8) of its 64-column box (the 128-byte swizzle). With j even, j + L / 16 =
// j ^ (L / 16), and the row start (128 B per row of a 128-byte aligned buffer) leaves bits 4..6
// of the address free, so the address is one per-lane base XOR (j % 8)·16; row block and box
// are immediate offsets.
template <int kBlockN, int kRowBlocks, int kH0, int kH1, OutType kOut, Cols kCols>
__device__ __forceinline__ void epilogue_rows_staged(const KernelParams& p,
                                                     const float (&acc)[kRowBlocks][kBlockN / 2],
                                                     const float (&row_scale)[kRowBlocks][2],
                                                     const float* cols, uint8_t* staging) {
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  constexpr bool kScale = kCols == Cols::kScale || kCols == Cols::kBoth || kCols == Cols::kAny;
  constexpr bool kBias = kCols == Cols::kBias || kCols == Cols::kBoth || kCols == Cols::kAny;
  const bool has_scale = kCols == Cols::kAny ? p.scale_b != nullptr : kScale;
  const bool has_bias = kCols == Cols::kAny ? p.bias != nullptr : kBias;
  // This lane's column pairs 2·(lane % 4) (+8j) in the column vectors (B scales first).
  const uint32_t sb_addr = smem_addr(cols) + (lane % 4) * 8;
  const uint32_t bias_addr = sb_addr + (has_scale ? kBlockN * 4 : 0);
  const uint32_t base = smem_addr(staging) + (warp * 16 + 8 * ((lane / 8) % 2) + lane % 8) * 128 +
                        (static_cast<uint32_t>((lane / 16) ^ (lane % 8)) << 4);
#pragma unroll
  for (int q = 0; q < kBlockN / 32; ++q) {  // 32 columns at a time
    float2 s[4], bb[4];
#pragma unroll
    for (int jq = 0; jq < 4; ++jq) {
      const uint32_t cl = (q * 32 + jq * 8) * 4;
      if constexpr (kScale)
        s[jq] = has_scale ? ld_shared_f2(sb_addr + cl) : make_float2(1.0f, 1.0f);
      if constexpr (kBias)
        bb[jq] = has_bias ? ld_shared_f2(bias_addr + cl) : make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int h = kH0; h < kH1; ++h) {
      uint32_t packed[4][2];  // [column group jq][row half i]
#pragma unroll
      for (int jq = 0; jq < 4; ++jq) {
        const int j = q * 4 + jq;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float v0 = acc[h][j * 4 + 2 * i] * row_scale[h][i];
          float v1 = acc[h][j * 4 + 2 * i + 1] * row_scale[h][i];
          if constexpr (kScale || kBias) {
            const float2 sj = kScale ? s[jq] : make_float2(1.0f, 1.0f);
            const float2 bj = kBias ? bb[jq] : make_float2(0.0f, 0.0f);
            v0 = fmaf(v0, sj.x, bj.x);
            v1 = fmaf(v1, sj.y, bj.y);
          }
          packed[jq][i] = pack2<kOut>(v0, v1);
        }
      }
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        const int j = q * 4 + 2 * jp;  // even
        const uint32_t box = (h - kH0) * (64 * kBlockN * 2) + (j / 8) * (64 * 128);
        st_shared_matrix_x4((base ^ static_cast<uint32_t>((j % 8) << 4)) + box,
                            packed[2 * jp][0], packed[2 * jp][1], packed[2 * jp + 1][0],
                            packed[2 * jp + 1][1]);
      }
    }
  }
}

// One row block kH of a tile that is not staged: nothing when it is entirely past the group end
// (uniform across the warpgroup), else the general path.
template <int kBlockN, int kRowBlocks, int kH>
__device__ __forceinline__ void epilogue_one_block(const KernelParams& p, const Tile& t,
                                                   const float (&acc)[kRowBlocks][kBlockN / 2],
                                                   const float (&row_scale)[kRowBlocks][2],
                                                   int64_t first_row, const float* cols) {
  if (first_row + 64 * kH >= group_rows(p, t)) return;
  epilogue_rows_general<kBlockN, kRowBlocks, kH, kH + 1>(p, t, acc, row_scale, first_row, cols);
}

// Scales and writes the warpgroup's row blocks [kH0, kH1) (block h staged at staging + (h - kH0)
// · 64 · kBlockN · 2): the straight-line staged path when the tile is staged (ragged row blocks
// included), otherwise the general path block by block. kColVariants: one staged copy per set of
// column vectors (B scales, bias, both, neither); without it, one for none and one that checks at
// run time (the MX-scaled kernels: their register pools are at the edge, and the extra copies
// made ptxas spill 24 bytes instead of 8 in the producer's tile walk).
template <bool kColVariants, int kBlockN, int kRowBlocks, int kH0, int kH1>
__device__ __forceinline__ void epilogue_rows(const KernelParams& p, const Tile& t,
                                              const float (&acc)[kRowBlocks][kBlockN / 2],
                                              const float (&row_scale)[kRowBlocks][2],
                                              int64_t first_row, const float* cols,
                                              uint8_t* staging) {
  static_assert(kH1 - kH0 == 1 || kH1 - kH0 == 2, "one or two row blocks");
  const bool staged = tile_staged<kBlockN>(p, t);
  constexpr OutType kBF16 = OutType::kBF16;
  if (!staged) {
    epilogue_one_block<kBlockN, kRowBlocks, kH0>(p, t, acc, row_scale, first_row, cols);
    if constexpr (kH1 - kH0 == 2)
      epilogue_one_block<kBlockN, kRowBlocks, kH0 + 1>(p, t, acc, row_scale, first_row, cols);
    return;
  }
  if (p.out_type != kBF16) {  // FP16 D: one variant (the column vectors checked at run time)
    epilogue_rows_staged<kBlockN, kRowBlocks, kH0, kH1, OutType::kFP16, Cols::kAny>(
        p, acc, row_scale, cols, staging);
    return;
  }
  const bool scale = p.scale_b != nullptr, bias = p.bias != nullptr;
  if (!scale && !bias)
    epilogue_rows_staged<kBlockN, kRowBlocks, kH0, kH1, kBF16, Cols::kNone>(p, acc, row_scale,
                                                                           cols, staging);
  else if constexpr (!kColVariants)
    epilogue_rows_staged<kBlockN, kRowBlocks, kH0, kH1, kBF16, Cols::kAny>(p, acc, row_scale,
                                                                          cols, staging);
  else if (scale && bias)
    epilogue_rows_staged<kBlockN, kRowBlocks, kH0, kH1, kBF16, Cols::kBoth>(p, acc, row_scale,
                                                                           cols, staging);
  else if (scale)
    epilogue_rows_staged<kBlockN, kRowBlocks, kH0, kH1, kBF16, Cols::kScale>(p, acc, row_scale,
                                                                            cols, staging);
  else
    epilogue_rows_staged<kBlockN, kRowBlocks, kH0, kH1, kBF16, Cols::kBias>(p, acc, row_scale,
                                                                           cols, staging);
}

// D row (of map_d) of row `row0` inside tile t's group.
__device__ __forceinline__ int64_t d_row_of(const KernelParams& p, const Tile& t, int64_t row0) {
  return p.k_grouped ? t.g * p.m + row0 : t.start + row0;
}

// Issues the TMA stores of the staged row blocks [h0, h1) (block h at staging + (h - h0) · 64 ·
// kBlockN · 2) as one bulk group (one thread): a block inside the group with 64-row boxes
// (map_d), a block crossing the group end with 8-row boxes (map_d8) for its first
// floor(valid / 8) · 8 rows (the 128-byte swizzle repeats every 8 rows, so an 8-row box starts
// 1024-byte aligned in the staging layout); the last valid % 8 rows go to copy_tail_rows.
template <int kBlockN>
__device__ __forceinline__ void store_staged(const KernelParams& p, const CUtensorMap* map_d,
                                             const CUtensorMap* map_d8, const Tile& t,
                                             int64_t first_row, int h0, int h1,
                                             uint8_t* staging) {
  bool any = false;
  const int64_t rows = group_rows(p, t);
  for (int h = h0; h < h1; ++h) {
    const int64_t row0 = first_row + 64 * h;
    const int64_t valid = rows - row0;
    if (valid <= 0) continue;
    const int64_t d_row = d_row_of(p, t, row0);
    uint8_t* block = staging + (h - h0) * (64 * kBlockN * 2);
#pragma unroll
    for (int b = 0; b < kBlockN / kStoreBoxCols; ++b) {
      const int32_t c = static_cast<int32_t>(t.n_blk * kBlockN + b * kStoreBoxCols);
      if (valid >= 64) {
        tma_store_2d(map_d, block + b * (64 * 128), c, static_cast<int32_t>(d_row));
        any = true;
      } else {
        for (int r8 = 0; r8 + 8 <= valid; r8 += 8) {
          tma_store_2d(map_d8, block + b * (64 * 128) + r8 * 128, c,
                       static_cast<int32_t>(d_row + r8));
          any = true;
        }
      }
    }
  }
  if (any) bulk_commit();
}

// The last valid % 8 rows of a staged row block that crosses the group end, copied by the
// warpgroup's 128 threads from the swizzled staging buffer to D with 16-byte stores (chunk j of
// row r at j ^ (r % 8)). Blocks [h0, h1) as in store_staged.
template <int kBlockN>
__device__ __forceinline__ void copy_tail_rows(const KernelParams& p, const Tile& t,
                                               int64_t first_row, int h0, int h1,
                                               const uint8_t* staging) {
  constexpr int kChunksPerRow = kBlockN / 8;  // 16-byte chunks: 8 BF16/FP16 values
  const int tid = threadIdx.x % 128;
  const int64_t rows = group_rows(p, t);
  for (int h = h0; h < h1; ++h) {
    const int64_t row0 = first_row + 64 * h;
    const int64_t valid = rows - row0;
    if (valid <= 0 || valid >= 64 || valid % 8 == 0) continue;
    const int r_first = static_cast<int>(valid / 8 * 8);
    const int count = static_cast<int>(valid) - r_first;
    const uint8_t* block = staging + (h - h0) * (64 * kBlockN * 2);
    auto* d = static_cast<uint8_t*>(p.d);
    for (int idx = tid; idx < count * kChunksPerRow; idx += 128) {
      const int r = r_first + idx / kChunksPerRow;
      const int b = (idx % kChunksPerRow) / 8, j = idx % 8;
      const uint4 v =
          *reinterpret_cast<const uint4*>(block + b * (64 * 128) + r * 128 + ((j ^ (r % 8)) * 16));
      const int64_t col = t.n_blk * kBlockN + b * kStoreBoxCols + j * 8;
      *reinterpret_cast<uint4*>(d + (d_row_of(p, t, row0 + r) * p.ldd + col) * 2) = v;
    }
  }
}

// Stores the staged blocks [h0, h1): TMA by one thread, tail rows by all (call after the barrier
// that completes the staging buffer; the caller's next barrier orders the tail reads before the
// buffer is rewritten).
template <int kBlockN>
__device__ __forceinline__ void store_tile_blocks(const KernelParams& p, const CUtensorMap* map_d,
                                                  const CUtensorMap* map_d8, const Tile& t,
                                                  int64_t first_row, int h0, int h1,
                                                  uint8_t* staging) {
  if (threadIdx.x % 128 == 0)
    store_staged<kBlockN>(p, map_d, map_d8, t, first_row, h0, h1, staging);
  copy_tail_rows<kBlockN>(p, t, first_row, h0, h1, staging);
}

// D's rows [end, p.zero_rows) set to zero (end: the last group's end, clamped to [0, capacity]),
// columns [0, n) of each, by the consumer warps of every CTA once their tiles are done (cw: the
// warpgroup): a row per warp at a time, 16-byte words across the lanes (rows of 16-byte
// multiples at aligned addresses) or elements. Disjoint from every tile's rows, so no ordering
// with the tiles' stores is needed.
__device__ __forceinline__ void zero_tail_rows(const KernelParams& p, int cw) {
  const int64_t end = gemm_cuda::device_group_start(p.offsets, p.offsets_int64 != 0,
                                                    p.offsets_start != 0, p.capacity,
                                                    p.num_groups);
  const int lane = threadIdx.x % 32;
  const int64_t elem = p.out_type == OutType::kFP32 ? 4 : 2;
  const int64_t row_bytes = p.n * elem, ld_bytes = p.ldd * elem;
  char* const d = static_cast<char*>(p.d);
  const bool vec = row_bytes % 16 == 0 && ld_bytes % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(d) % 16 == 0;
  const int warps = 8 * static_cast<int>(gridDim.x);
  for (int64_t r = end + blockIdx.x * 8 + cw * 4 + (threadIdx.x % 128) / 32; r < p.zero_rows;
       r += warps) {
    char* row = d + r * ld_bytes;
    if (vec) {
      for (int64_t c = lane; c < row_bytes / 16; c += 32)
        *reinterpret_cast<uint4*>(row + c * 16) = make_uint4(0, 0, 0, 0);
    } else if (elem == 4) {
      for (int64_t c = lane; c < p.n; c += 32) reinterpret_cast<float*>(row)[c] = 0.0f;
    } else {
      for (int64_t c = lane; c < p.n; c += 32) reinterpret_cast<uint16_t*>(row)[c] = 0;
    }
  }
}

// Both epilogues' first part: the column values to the shared column vectors (B scales first,
// then bias), the row factors.
template <int kBlockN, int kRowBlocks, bool kDefer>
__device__ __forceinline__ void epilogue_setup(const KernelParams& p, const Tile& t,
                                               const EpiloguePrefetch<kBlockN, kRowBlocks, kDefer>& pre,
                                               float* cols, float (&row_scale)[kRowBlocks][2]) {
  const int tid = threadIdx.x % 128;
#pragma unroll
  for (int i = 0; i < kBlockN / 128; ++i) {
    int v = 0;
    if (p.scale_b) cols[(v++) * kBlockN + tid + 128 * i] = pre.col[0][i];
    if (p.bias) cols[v * kBlockN + tid + 128 * i] = pre.col[1][i];
  }
  row_factors(p, t, pre, row_scale);
}

// The epilogue of a tile whose contraction is empty (a K-grouped group of no tokens: no MMA;
// skewed routing leaves many): D = 0·(scales) + bias + beta·D as for any tile. When the tile is
// staged, has no bias and every row and column factor is finite with its sign bit clear (one
// OR over the warpgroup), that is +0 everywhere: the staging buffer is cleared with 16-byte
// stores and TMA-stored for each row block (one cleared block serves all). Otherwise (bias,
// FP32 D, beta, columns past n, a poisoned group or a negative or non-finite factor) the
// general path runs on zeros, one single-row-block instance per block (rare, and every kernel
// instantiation carries it). The accumulators themselves are never zeroed (a tile's first
// wgmma overwrites them), so this path does not touch them.
template <int kBlockN, int kRowBlocks, bool kDefer>
__device__ __forceinline__ void empty_tile_epilogue(
    const KernelParams& p, const CUtensorMap* map_d, const CUtensorMap* map_d8, const Tile& t,
    const EpiloguePrefetch<kBlockN, kRowBlocks, kDefer>& pre, int64_t first_row,
    uint8_t* staging, float* cols, int bar) {
  const int tid = threadIdx.x % 128;
  const bool staged = tile_staged<kBlockN>(p, t);
  if (p.tma_store && tid == 0) bulk_wait_read<0>();  // the previous tile's stores read staging
  float row_scale[kRowBlocks][2];
  epilogue_setup(p, t, pre, cols, row_scale);
  // A factor whose product with +0 is not +0: sign bit set, infinite or NaN.
  auto not_plus = [](float x) { return __float_as_uint(x) >= 0x7f800000u; };
  bool general = !staged || p.bias != nullptr;
#pragma unroll
  for (int h = 0; h < kRowBlocks; ++h)
    general |= not_plus(row_scale[h][0]) | not_plus(row_scale[h][1]);
  if (p.scale_b) {
#pragma unroll
    for (int i = 0; i < kBlockN / 128; ++i) general |= not_plus(pre.col[0][i]);
  }
  general = named_barrier_or(bar, 128, general);  // also: column vectors written
  if (!general) {
    constexpr int kBlockBytes = 64 * kBlockN * 2;
    const int blocks = p.staging_blocks < kRowBlocks ? 1 : kRowBlocks;
    for (int off = tid * 16; off < blocks * kBlockBytes; off += 128 * 16)
      *reinterpret_cast<uint4*>(staging + off) = make_uint4(0, 0, 0, 0);
    fence_async_shared();
    named_barrier(bar, 128);  // staging complete; column vectors free for the next tile
    if (blocks == kRowBlocks) {
      store_tile_blocks<kBlockN>(p, map_d, map_d8, t, first_row, 0, kRowBlocks, staging);
    } else {
#pragma unroll
      for (int h = 0; h < kRowBlocks; ++h)
        store_tile_blocks<kBlockN>(p, map_d, map_d8, t, first_row + 64 * h, 0, 1, staging);
    }
    return;
  }
  const float zeros[1][kBlockN / 2] = {};
#pragma unroll 1
  for (int h = 0; h < kRowBlocks; ++h) {
    const float rs[1][2] = {{h == 0 ? row_scale[0][0] : row_scale[kRowBlocks - 1][0],
                             h == 0 ? row_scale[0][1] : row_scale[kRowBlocks - 1][1]}};
    epilogue_one_block<kBlockN, 1, 0>(p, t, zeros, rs, first_row + 64 * h, cols);
  }
  named_barrier(bar, 128);  // column vectors free for the next tile
}

// The warpgroup's epilogue of tile `t`: first_row = its first row inside the group's tile;
// staging = its TMA-store buffer (p.staging_blocks row blocks of 64 x kBlockN x 2 B: all of its
// kRowBlocks, or one reused block by block); cols = its column vectors; bar = its named barrier
// id (128 threads); map_d / map_d8: D with 64-row / 8-row boxes. The wait for the previous tile's stores to finish READING the staging buffer
// is here, so those stores overlapped this tile's main loop.
template <bool kColVariants, int kBlockN, int kRowBlocks, bool kDefer>
__device__ __forceinline__ void tile_epilogue(const KernelParams& p, const CUtensorMap* map_d,
                                              const CUtensorMap* map_d8, const Tile& t, float (&acc)[kRowBlocks][kBlockN / 2],
                                              const EpiloguePrefetch<kBlockN, kRowBlocks, kDefer>& pre,
                                              int64_t first_row, uint8_t* staging, float* cols,
                                              int bar) {
  const int tid = threadIdx.x % 128;
  const bool staged = tile_staged<kBlockN>(p, t);
  if (p.tma_store && tid == 0) bulk_wait_read<0>();
  float row_scale[kRowBlocks][2];
  epilogue_setup(p, t, pre, cols, row_scale);
  named_barrier(bar, 128);
  if (kRowBlocks == 1 || p.staging_blocks == kRowBlocks) {
    epilogue_rows<kColVariants, kBlockN, kRowBlocks, 0, kRowBlocks>(p, t, acc, row_scale,
                                                                    first_row, cols, staging);
    if (p.tma_store) fence_async_shared();
    named_barrier(bar, 128);  // staging complete; column vectors free for the next tile
    if (staged) store_tile_blocks<kBlockN>(p, map_d, map_d8, t, first_row, 0, kRowBlocks, staging);
  } else {  // one staging block: block 0, its stores, wait until they have read it, block 1
    epilogue_rows<kColVariants, kBlockN, kRowBlocks, 0, 1>(p, t, acc, row_scale, first_row,
                                                           cols, staging);
    if (p.tma_store) fence_async_shared();
    named_barrier(bar, 128);
    if (staged) {
      store_tile_blocks<kBlockN>(p, map_d, map_d8, t, first_row, 0, 1, staging);
      if (tid == 0) bulk_wait_read<0>();
    }
    named_barrier(bar, 128);
    epilogue_rows<kColVariants, kBlockN, kRowBlocks, 1, 2>(p, t, acc, row_scale, first_row,
                                                           cols, staging);
    if (p.tma_store) fence_async_shared();
    named_barrier(bar, 128);  // staging complete; column vectors free for the next tile
    if (staged) store_tile_blocks<kBlockN>(p, map_d, map_d8, t, first_row, 1, 2, staging);
  }
}

}  // namespace tessera::gemm_sm90
