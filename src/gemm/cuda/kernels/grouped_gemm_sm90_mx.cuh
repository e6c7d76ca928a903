// The MXFP8 kinds' pieces of the sm90 grouped GEMM kernel (grouped_gemm_sm90.cuh; Elem::kPromoteK
// == 32, sm90_mma_kinds.cuh): E8M0 scale decoding and addressing (BlockScales), the scale loaders
// of the producer warpgroup, the promotion of one block's partial sums, and the consumers' main
// loop (docs/gemm_cuda.md, "MXFP8 operands").
#pragma once

#include <cstdint>

#include "gemm/cuda/kernels/grouped_gemm_params.h"
#include "gemm/cuda/kernels/sm90_mma_kinds.cuh"
#include "gemm/cuda/kernels/sm90_primitives.cuh"
#include "gemm/cuda/kernels/sm90_tile_pipeline.cuh"
#include "tessera/quantize/scale_rules.h"

namespace tessera::gemm_sm90 {

// E8M0 code → its FP32 power of two, as the dequantizer decodes it (docs/numerics.md): 2^(e-127),
// e = 0 → 2^-127 (subnormal), e = 255 → NaN.
__device__ __forceinline__ float e8m0_value(uint32_t e) {
  return __uint_as_float(e == 255u ? 0x7fc00000u : (e == 0u ? 0x00400000u : e << 23));
}

// Where the E8M0 scales of one operand row live (BlockScales; 32-bit: the dispatcher refuses
// scale matrices of 2^31 bytes or more): the row's part of the offset, and per contraction block
// kb the block's part — compact: (row >> row_shift)·ld + kb·kb_stride; swizzled (128x4 tiles):
// swizzled_scale_offset(row, kb, ld) split into its row and column terms.
__device__ __forceinline__ int32_t mx_row_offset(const BlockScales& s, int64_t row) {
  const int32_t r = static_cast<int32_t>(row < s.rows ? row : s.rows - 1);
  if (!s.swizzled) return (r >> s.row_shift) * static_cast<int32_t>(s.ld);
  return (r / 128) * static_cast<int32_t>(s.ld / 4) * 512 + (r % 32) * 16 + (r % 128 / 32) * 4;
}
__device__ __forceinline__ int32_t mx_block_offset(const BlockScales& s, int32_t kb) {
  return s.swizzled ? (kb >> 2) * 512 + (kb & 3) : kb * static_cast<int32_t>(s.kb_stride);
}

// The 4 scales of stage kb of one row (byte j: block 4·kb + j of the tile's block stream, whose
// block 0 is `base`) as single bytes, each block clamped to the tile's live blocks [lo, hi − 1]
// (mx_scale_loader_loop).
__device__ __forceinline__ uint32_t mx_stage_bytes(const BlockScales& s, const uint8_t* row,
                                                   int32_t base, int kb, int lo, int hi) {
  uint32_t w = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int32_t rel = min(max(4 * kb + j, lo), hi - 1);
    w |= static_cast<uint32_t>(__ldg(row + mx_block_offset(s, base + rel))) << (8 * j);
  }
  return w;
}

// The scale loaders (kMxScaleLoaders threads of the producer warpgroup): they read the CTA's tiles
// from the tile ring, walk their stages as the TMA producer does and, per stage, decode the E8M0 scales of the
// stage's 4 contraction blocks for the tile's 128 A rows and 128 B rows into the stage's scale
// region (A [block][row], B [block][row]: 2 rows of each per thread), then arrive on the stage's
// full barrier. Block indices are clamped to the tile's live blocks [lo, hi) (contraction inside
// K, or inside [start, end) of a K-grouped window): a block outside them holds zero partial sums
// and takes a scale of the tile's own, so no other group's scale (possibly NaN) meets it.
template <class Elem, int kBlockN>
__device__ __forceinline__ void mx_scale_loader_loop(const KernelParams& p, float* smem_scales,
                                                     uint64_t* full, uint64_t* empty,
                                                     TileRing tile_ring, int loader) {
  static_assert(kBlockN == 128 && 2 * kMxScaleLoaders == kBlockN, "2 rows of A and B per loader");
  Tile t;
  RingState ring;
  const auto* sa = static_cast<const uint8_t*>(p.bsa.ptr);
  const auto* sb = static_cast<const uint8_t*>(p.bsb.ptr);
  while (take_tile(tile_ring, t)) {  // the tiles the producer walked (the loaders are readers)
    const TileOrigin o = tile_origin<Elem, kBlockN>(p, t);
    const int32_t kba = static_cast<int32_t>(o.a_kabs >> 5);
    const int32_t kbb = static_cast<int32_t>(p.k_grouped ? o.b_kabs >> 5 : t.g * p.bsb.group_kb);
    int lo = 0, hi = static_cast<int>((p.k + 31) >> 5);
    if (p.k_grouped) {
      lo = static_cast<int>((t.start - o.a_kabs) >> 5);
      hi = static_cast<int>((t.start + t.len - o.a_kabs + 31) >> 5);
    }
    int32_t ra[2], rb[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      ra[h] = mx_row_offset(p.bsa, o.a_row + loader + 64 * h);
      rb[h] = mx_row_offset(p.bsb, o.b_row + loader + 64 * h);
    }
    const int nk = static_cast<int>(num_k_blocks<Elem>(p, t));
    // Word loads (the stage's 4 scales of a row at once) where they are contiguous and aligned
    // for both operands: compact rowwise scales with ld % 4 == 0, or swizzled ones (a 4-aligned
    // block column of a 128x4 tile is one word); stages whose blocks are all live (no clamping).
    const bool words_a = p.bsa.swizzled || (p.bsa.kb_stride == 1 && p.bsa.ld % 4 == 0 && kba % 4 == 0);
    const bool words_b = p.bsb.swizzled || (p.bsb.kb_stride == 1 && p.bsb.ld % 4 == 0 && kbb % 4 == 0);
    for (int kb = 0; kb < nk; ++kb) {
      // The loaders run up to `stages` stages ahead of the consumers: the loads' latency is
      // hidden by that depth (and by all of a stage's loads being in flight at once).
      const uint32_t dst = smem_addr(smem_scales + ring.stage * (kMxStageScaleBytes / 4));
      const bool interior = 4 * kb >= lo && 4 * kb + 3 < hi;
      uint32_t wa[2], wb[2];
      if (interior && words_a && words_b) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wa[h] = __ldg(reinterpret_cast<const uint32_t*>(sa + ra[h] + mx_block_offset(p.bsa, kba + 4 * kb)));
          wb[h] = __ldg(reinterpret_cast<const uint32_t*>(sb + rb[h] + mx_block_offset(p.bsb, kbb + 4 * kb)));
        }
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wa[h] = mx_stage_bytes(p.bsa, sa + ra[h], kba, kb, lo, hi);
          wb[h] = mx_stage_bytes(p.bsb, sb + rb[h], kbb, kb, lo, hi);
        }
      }
      mbar_wait(&empty[ring.stage], ring.phase ^ 1);
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          st_shared_u32(dst + 4 * (j * kBlockM + loader + 64 * h),
                        __float_as_uint(e8m0_value((wa[h] >> (8 * j)) & 0xffu)));
          st_shared_u32(dst + 4 * (4 * kBlockM + j * kBlockN + loader + 64 * h),
                        __float_as_uint(e8m0_value((wb[h] >> (8 * j)) & 0xffu)));
        }
      mbar_arrive(&full[ring.stage]);  // release: the scales are visible to the consumers
      ring.next(p.stages);
    }
  }
}

// Promotes the partial sums `part` of contraction block j (0..3) of a stage, columns [64h, 64h +
// 64) of the tile (half h), into `acc`: accumulator 4c + e (c in [8h, 8h + 8): row r + 8·(e / 2),
// column 8c + 2·(lane % 4) + e % 2) += part[4(c − 8h) + e] · sa(row, j) · sb(column, j), the
// scales from the stage's scale region at shared-window address `stage_scales` (LDS: A at this
// thread's row r, B block j). kUniformB: B's scales are shared by 32-row groups (one per 32
// columns of the tile), read once per group.
template <int kBlockN, bool kUniformB>
__device__ __forceinline__ void mx_promote(float (&acc)[kBlockN / 2], const float (&part)[32],
                                           uint32_t stage_scales, int a_row, int j, int h,
                                           int lane) {
  const uint32_t sa = stage_scales + 4 * (j * kBlockM + a_row);
  const uint32_t sb = stage_scales + 4 * (4 * kBlockM + j * kBlockN + 64 * h);
  const float a0 = ld_shared_f32(sa), a1 = ld_shared_f32(sa + 4 * 8);
  if constexpr (kUniformB) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {  // columns 64h + 32q .. + 31
      const float b = ld_shared_f32(sb + 4 * 32 * q);
      const float s0 = a0 * b, s1 = a1 * b;
#pragma unroll
      for (int c = 4 * q; c < 4 * q + 4; ++c) {
        acc[32 * h + 4 * c + 0] += part[4 * c + 0] * s0;
        acc[32 * h + 4 * c + 1] += part[4 * c + 1] * s0;
        acc[32 * h + 4 * c + 2] += part[4 * c + 2] * s1;
        acc[32 * h + 4 * c + 3] += part[4 * c + 3] * s1;
      }
    }
  } else {
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const float2 b = ld_shared_f2(sb + 4 * (8 * c + 2 * (lane % 4)));
      acc[32 * h + 4 * c + 0] += part[4 * c + 0] * (a0 * b.x);
      acc[32 * h + 4 * c + 1] += part[4 * c + 1] * (a0 * b.y);
      acc[32 * h + 4 * c + 2] += part[4 * c + 2] * (a1 * b.x);
      acc[32 * h + 4 * c + 3] += part[4 * c + 3] * (a1 * b.y);
    }
  }
}

// The main loop of one tile for one consumer warpgroup of an MXFP8 kind (cooperative 128 x 128:
// this warpgroup's 64 rows). Each contraction block j = 0..3 of a stage is two wgmma m64n64k32,
// one per half h of the tile's columns, into the partial-sum buffer part[h]; each wgmma is
// issued before its predecessor in the stage (complete after wgmma_wait<1>) is promoted with its
// scales from the stage's scale region, so the tensor cores run under the promotions with only
// two 32-register buffers beside the accumulators. The stage's last half is promoted after
// wgmma_wait<0>, then the slot is released: no accumulator read crosses the ring wait of the
// next stage (ptxas serializes every wgmma when one does, C7514), and none sits in a branch
// (C7518). kActive = 0 (rows past the group end) skips MMAs and promotions.
template <class Elem, int kBlockN, int kActive, bool kUniformB>
__device__ __forceinline__ void main_loop_mx(const KernelParams& p, const Tile& t,
                                             float (&acc)[1][kBlockN / 2], uint8_t* smem_a,
                                             uint8_t* smem_b, const float* smem_scales,
                                             uint64_t* full, uint64_t* empty, RingState& ring,
                                             int cw) {
  static_assert(kBlockN == 128, "MXFP8 kinds run 128-column tiles (two n64 halves)");
  static_assert(Elem::kPromoteK == 32 && kTileKBytes / Elem::kBytes == 128, "4 blocks per stage");
  constexpr uint32_t kBytesA = kBlockM * kTileKBytes, kBytesB = kBlockN * kTileKBytes;
  constexpr int kStageFloats = kMxStageScaleBytes / 4;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const int a_row = cw * 64 + warp * 16 + lane / 4;  // this thread's first row in the tile
  constexpr int peer = -1;  // MXFP8 kinds run 1-CTA clusters (the launcher checks)
#pragma unroll
  for (int i = 0; i < kBlockN / 2; ++i) acc[0][i] = 0.0f;
  const int nk = static_cast<int>(num_k_blocks<Elem>(p, t));
  float part[2][32];
  for (int kb = 0; kb < nk; ++kb) {
    mbar_wait(&full[ring.stage], ring.phase);
    if constexpr (kActive > 0) {
      const uint8_t* tile_a = smem_a + ring.stage * kBytesA + cw * 64 * kTileKBytes;
      const uint8_t* tile_b = smem_b + ring.stage * kBytesB;
      const uint64_t da = smem_desc_k_major_sw128(tile_a);
      const uint64_t db = smem_desc_k_major_sw128(tile_b);
      const uint32_t scales = smem_addr(smem_scales + ring.stage * kStageFloats);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int i = 0; i < 32; ++i) fence_operand(part[h][i]);
          wgmma_fence();
          // 32 bytes of contraction = 2 descriptor units; B rows 64h.. = 64·128 B = 512 units.
          Elem::template mma<64>(part[h], desc_advance(da, 2 * j),
                                 desc_advance(db, 2 * j + 512 * h), 0);
          wgmma_commit();
          if (j > 0 || h > 0) {  // the predecessor: block j's left half, or block j − 1's right
            wgmma_wait<1>();
#pragma unroll
            for (int i = 0; i < 32; ++i) fence_operand(part[1 - h][i]);
            mx_promote<kBlockN, kUniformB>(acc[0], part[1 - h], scales, a_row, h ? j : j - 1,
                                           1 - h, lane);
          }
        }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 32; ++i) fence_operand(part[1][i]);
      mx_promote<kBlockN, kUniformB>(acc[0], part[1], scales, a_row, 3, 1, lane);
    }
    release_slot(&empty[ring.stage], lane, peer);
    ring.next(p.stages);
  }
}

}  // namespace tessera::gemm_sm90
