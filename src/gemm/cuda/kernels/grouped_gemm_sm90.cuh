// The sm90a grouped GEMM kernel: persistent, warp-specialized, TMA → shared memory → wgmma.
//
// One CTA per SM (384 threads): warpgroup 0 is the producer (one thread issues TMA loads into a
// ring of `stages` shared-memory slots, each guarded by a full/empty mbarrier pair), warpgroups 1
// and 2 are consumers that issue wgmma on the slots, release them, and store their accumulators
// through the epilogue (grouped_gemm_epilogue.cuh). Two schedules (grouped_gemm_params.h):
// cooperative (both consumers on one 128 x 256 tile, 64 rows each) and ping-pong (each consumer
// owns whole 128 x 128 tiles, in turns, so one's epilogue overlaps the other's MMAs). Tiles are
// numbered group by group; CTA b takes tiles b, b + gridDim.x, ... (or, on a 2-CTA cluster launch,
// the tiles of pairs shared with the other CTA); the producer walks the group offsets ON THE
// DEVICE (TileWalker) and publishes each tile to the consumers in a shared-memory tile ring, so
// no host ever sees group sizes. Once out of tiles, the consumers zero D's rows in no group
// (zero_unused_rows). Template
// arguments: the element kind (an (A, B) element pair of sm90_mma_kinds.cuh: BF16, FP16, or FP8;
// one stage holds 128 bytes of contraction = 64 or 128 elements; 16-bit kinds may read A and/or B
// MN-major, as stored in the token buffer or the weights, so no operand is transposed first), the
// tile width and the schedule.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gemm/cuda/kernels/fp4_stage.cuh"
#include "gemm/cuda/kernels/grouped_gemm_epilogue.cuh"
#include "gemm/cuda/kernels/grouped_gemm_params.h"
#include "gemm/cuda/kernels/sm90_mma_kinds.cuh"
#include "gemm/cuda/kernels/sm90_primitives.cuh"
#include "gemm/cuda/kernels/sm90_tile_pipeline.cuh"
#include "gemm/cuda/kernels/grouped_gemm_sm90_mx.cuh"

namespace tessera::gemm_sm90 {

// map_a_half / map_b_half: the same operands with 64-row boxes, for the half of a shared operand
// each CTA of a cluster pair multicasts (p.cluster == 2).
template <class Elem, int kBlockN>
__device__ __forceinline__ void producer_loop(const KernelParams& p, const CUtensorMap* map_a,
                                              const CUtensorMap* map_b,
                                              const CUtensorMap* map_a_half,
                                              const CUtensorMap* map_b_half, uint8_t* smem_a,
                                              uint8_t* smem_b, uint64_t* full, uint64_t* empty,
                                              TileRing tile_ring) {
  constexpr int kBlockK = kTileKBytes / Elem::kBytes;
  constexpr uint32_t kBytesA = kBlockM * kTileKBytes, kBytesB = kBlockN * kTileKBytes;
  constexpr uint16_t kBothCtas = 0x3;
  TileSequence<kBlockN> tiles(p);
  const int32_t rank = static_cast<int32_t>(tiles.rank());
  Tile t;
  int share = kShareNone;
  RingState ring;
  int acquired = -1;
  while (tiles.next(p, t, share)) {
    publish_tile(tile_ring, &t);
    const TileOrigin o = tile_origin<Elem, kBlockN>(p, t);
    const int64_t a_row = o.a_row, b_row = o.b_row;
    int64_t a_k = o.a_k, b_k = o.b_k;
    // K-grouped: a tile whose contraction windows all lie inside its group reads the launch's
    // maps at their absolute coordinates (nothing to fetch or acquire); one with a window that
    // crosses a group bound reads the group's maps, whose extent ends at the group (zero fill),
    // acquired once per group change. The plain kinds' windows start at `start`; the
    // block-scaled kinds' at multiples of kBlockK (tile_origin).
    const void* ma = map_a;
    const void* mb = map_b;
    if (p.k_grouped) {
      const int64_t bounds = Elem::kPromote ? (t.start | t.len) : t.len;
      if (p.k_interior_global && (bounds & (kBlockK - 1)) == 0) {
        a_k = o.a_kabs;
        b_k = o.b_kabs;
      } else {
        const auto* maps = static_cast<const CUtensorMap*>(p.group_maps);
        ma = maps + 2 * t.g;
        mb = maps + 2 * t.g + 1;
        if (acquired != t.g) {
          tmap_acquire(ma);
          tmap_acquire(mb);
          acquired = t.g;
        }
      }
    }
    const int64_t nk = num_k_blocks<Elem>(p, t);
    for (int64_t kb = 0; kb < nk; ++kb) {
      const int stage = ring.stage;
      mbar_wait(&empty[stage], ring.phase ^ 1);  // with clusters: free in both CTAs
      mbar_arrive_expect_tx(&full[stage], kBytesA + kBytesB);
      const int32_t ak = static_cast<int32_t>(a_k + kb * kBlockK);
      const int32_t bk = static_cast<int32_t>(b_k + kb * kBlockK);
      uint8_t* sa = smem_a + stage * kBytesA;
      uint8_t* sb = smem_b + stage * kBytesB;
      if constexpr (Elem::kAMn) {  // MN-major: 64-row chunks, box (64 rows, kBlockK contraction)
#pragma unroll
        for (int h = 0; h < kBlockM / 64; ++h)
          tma_load_2d(sa + h * kMnChunkBytes, ma, &full[stage], static_cast<int32_t>(a_row) + 64 * h,
                      ak);
      } else if (share == kShareA) {  // rows [64·rank, +64) of A into both CTAs
        tma_load_2d_multicast(sa + rank * 64 * kTileKBytes, map_a_half, &full[stage], ak,
                              static_cast<int32_t>(a_row) + 64 * rank, kBothCtas);
      } else {
        tma_load_2d(sa, ma, &full[stage], ak, static_cast<int32_t>(a_row));
      }
      if constexpr (Elem::kBMn) {  // MN-major: 64-column chunks (K-grouped 2-D, M-grouped 3-D)
#pragma unroll
        for (int j = 0; j < kBlockN / 64; ++j) {
          const int32_t n0 = static_cast<int32_t>(b_row) + 64 * j;
          if (p.k_grouped) tma_load_2d(sb + j * kMnChunkBytes, mb, &full[stage], n0, bk);
          else tma_load_3d(sb + j * kMnChunkBytes, mb, &full[stage], n0, bk, t.g);
        }
      } else if (share == kShareB) {  // rows [kBlockN/2 · rank, +kBlockN/2) of B, 64 at a time
        // (K-grouped: the tile's B map, its group's or the whole operand's, both with 64-row
        // boxes on clustered launches; MXFP8 kinds take no K-grouped clusters)
        const void* mbh = map_b_half;
        if constexpr (Elem::kPromoteK != 32) {
          if (p.k_grouped) mbh = mb;
        }
#pragma unroll
        for (int j = 0; j < kBlockN / 128; ++j) {
          const int32_t r = rank * (kBlockN / 2) + 64 * j;
          tma_load_2d_multicast(sb + r * kTileKBytes, mbh, &full[stage], bk,
                                static_cast<int32_t>(b_row) + r, kBothCtas);
        }
      } else {
        tma_load_2d(sb, mb, &full[stage], bk, static_cast<int32_t>(b_row));
      }
      ring.next(p.stages);
    }
  }
  publish_tile(tile_ring, nullptr);
  // Clusters: the other CTA's consumers arrive on this CTA's empty barriers; stay until every
  // slot's last fill is released by both, so that no remote arrival targets an exited CTA.
  if (p.cluster > 1) {
    for (int s = 0; s < p.stages; ++s) {
      mbar_wait(&empty[ring.stage], ring.phase ^ 1);
      ring.next(p.stages);
    }
  }
}

// ---- NVFP4 expanded in the kernel (ElemNvfp4, KernelParams::fp4) ------------------------------
// The TMA thread loads each stage's raw E2M1 codes (A's 128 rows, B's kBlockN rows, 32 bytes of
// codes = 64 contraction elements a row) into the raw ring; the converter threads (the rest of
// the producer warpgroup but its first warp) turn a raw slot into the FP16 stage of the same
// index (fp4_stage.cuh) once the consumers have released that stage, then arrive on its full
// barrier. The consumers run the FP16 kind's main loop and epilogue unchanged (the copies'
// 1/S_enc factors are the epilogue scales). M-grouped only, 1-CTA clusters.
inline constexpr int kFp4Converters = 96;  // threads 32 .. 127 of the producer warpgroup

template <int kBlockN>
__device__ __forceinline__ void producer_loop_fp4(const KernelParams& p, const CUtensorMap* map_a,
                                                  const CUtensorMap* map_b, uint8_t* raw,
                                                  int64_t raw_stage, uint64_t* raw_full,
                                                  uint64_t* raw_empty, TileRing tile_ring) {
  constexpr uint32_t kBytesA = kBlockM * kFp4RawRowBytes, kBytesB = kBlockN * kFp4RawRowBytes;
  constexpr int kBlockK = kTileKBytes / ElemNvfp4::kBytes;  // 64 elements a stage
  TileSequence<kBlockN> tiles(p);
  Tile t;
  int share = kShareNone;
  RingState ring;
  while (tiles.next(p, t, share)) {
    publish_tile(tile_ring, &t);
    const TileOrigin o = tile_origin<ElemNvfp4, kBlockN>(p, t);
    const int64_t nk = num_k_blocks<ElemNvfp4>(p, t);
    for (int64_t kb = 0; kb < nk; ++kb) {
      const int stage = ring.stage;
      mbar_wait(&raw_empty[stage], ring.phase ^ 1);  // the converters are done with the slot
      mbar_arrive_expect_tx(&raw_full[stage], kBytesA + kBytesB);
      uint8_t* ra = raw + stage * raw_stage;
      // contraction coordinates in bytes of codes (two elements a byte; stages start on even
      // elements, group starts g·K too: K % 32 == 0 on this path)
      tma_load_2d(ra, map_a, &raw_full[stage], static_cast<int32_t>((o.a_k + kb * kBlockK) / 2),
                  static_cast<int32_t>(o.a_row));
      tma_load_2d(ra + kBytesA, map_b, &raw_full[stage],
                  static_cast<int32_t>((o.b_k + kb * kBlockK) / 2), static_cast<int32_t>(o.b_row));
      ring.next(p.stages);
    }
  }
  publish_tile(tile_ring, nullptr);
}

// Converter thread c (0 .. kFp4Converters - 1): per stage, rows c, c + kFp4Converters, ... of
// the stage's 128 + kBlockN rows (A's rows first), each 64 codes under four block scales → 64
// FP16 values (fp4::convert_row). A row's four scale bytes are loaded one stage ahead (global
// memory: their latency hides behind the stage before), the first stage's at its tile's start.
template <int kBlockN>
__device__ __forceinline__ void fp4_converter_loop(const KernelParams& p, const uint8_t* raw,
                                                   int64_t raw_stage, uint8_t* smem_a,
                                                   uint8_t* smem_b, uint64_t* full,
                                                   uint64_t* empty, uint64_t* raw_full,
                                                   uint64_t* raw_empty, TileRing tile_ring,
                                                   int c) {
  constexpr uint32_t kBytesA = kBlockM * kTileKBytes, kBytesB = kBlockN * kTileKBytes;
  constexpr int kBlockK = kTileKBytes / ElemNvfp4::kBytes;
  constexpr int kRows = kBlockM + kBlockN;
  constexpr int kRowsPerThread = (kRows + kFp4Converters - 1) / kFp4Converters;
  Tile t;
  RingState ring;
  while (take_tile(tile_ring, t)) {
    const TileOrigin o = tile_origin<ElemNvfp4, kBlockN>(p, t);
    const int nk = static_cast<int>(num_k_blocks<ElemNvfp4>(p, t));
    const auto load_scales = [&](int kb, uint32_t (&s)[kRowsPerThread]) {
      const int64_t local = int64_t{kb} * kBlockK;
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int r = c + i * kFp4Converters;
        const bool is_a = r < kBlockM;
        s[i] = r >= kRows ? 0u
                          : fp4::stage_row_scales(is_a ? p.fa : p.fb,
                                                  is_a ? o.a_row + r : o.b_row + (r - kBlockM),
                                                  (is_a ? o.a_k : o.b_k) + local, local);
      }
    };
    uint32_t next[kRowsPerThread];
    load_scales(0, next);
    for (int kb = 0; kb < nk; ++kb) {
      uint32_t cur[kRowsPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) cur[i] = next[i];
      if (kb + 1 < nk) load_scales(kb + 1, next);
      mbar_wait(&raw_full[ring.stage], ring.phase);   // the stage's codes have landed
      mbar_wait(&empty[ring.stage], ring.phase ^ 1);  // the consumers released the stage
      // A's raw rows, then B's, kFp4RawRowBytes each
      const uint8_t* rs = raw + ring.stage * raw_stage;
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int r = c + i * kFp4Converters;
        if (r >= kRows) continue;
        const bool is_a = r < kBlockM;
        uint8_t* dst = is_a ? smem_a + ring.stage * kBytesA : smem_b + ring.stage * kBytesB;
        fp4::convert_row(rs + r * kFp4RawRowBytes, dst, is_a ? r : r - kBlockM, cur[i]);
      }
      fence_async_shared();  // the stage's generic-proxy stores, visible to the wgmma (async proxy)
      mbar_arrive(&raw_empty[ring.stage]);
      mbar_arrive(&full[ring.stage]);
      ring.next(p.stages);
    }
  }
}

// Ping-pong turn taking between the consumers on named barriers kOrderBarrier + cw (256
// threads): warpgroup cw waits for its turn before its main loop and hands the turn to the other
// after issuing it. Every hand-over is matched by one wait (see consumer_loop).
inline constexpr int kOrderBarrier = 3;  // ids 3, 4 (1, 2: the consumers' epilogue barriers)
__device__ __forceinline__ void wait_turn(int cw) { named_barrier(kOrderBarrier + cw, 256); }
__device__ __forceinline__ void pass_turn(int cw) {
  named_barrier_arrive(kOrderBarrier + (1 - cw), 256);
}

// The main loop of one tile for one consumer warpgroup: kRowBlocks m64 wgmma per k-step on the
// A rows starting at row block `a_block` of the stage (cooperative: the warpgroup's half;
// ping-pong: both halves); only the first kActive row blocks (those with rows inside the group)
// are computed, the others keep whatever they held (rows past the group end: never stored). The
// accumulators are not zeroed: each row block's first wgmma of the tile has scale-d 0 (a tile
// has at least one k block: consumer_loop takes empty contractions). kActive is a template
// argument: a wgmma under a run-time condition makes ptxas serialize every wgmma of the kernel
// (C7520). Keeps one stage's batch in flight and releases the previous slot. Ping-pong: passes
// the turn to the other consumer (cw: this one) once all its MMAs are issued. Returns with all MMAs complete and all slots released.
template <class Elem, int kBlockN, int kRowBlocks, int kActive, bool kPingpong>
__device__ __forceinline__ void main_loop(const KernelParams& p, const Tile& t,
                                          float (&acc)[kRowBlocks][kBlockN / 2], uint8_t* smem_a,
                                          uint8_t* smem_b, uint64_t* full, uint64_t* empty,
                                          RingState& ring, int a_block, int cw) {
  constexpr uint32_t kBytesA = kBlockM * kTileKBytes, kBytesB = kBlockN * kTileKBytes;
  constexpr int kMmaPerStage = kTileKBytes / 32;  // each wgmma consumes 32 bytes of contraction
  // Descriptor step per wgmma (16-byte units): K-major 32 bytes along the row; MN-major 16
  // contraction rows of 128 bytes.
  constexpr uint64_t kStepA = Elem::kAMn ? 16 * 128 / 16 : 2, kStepB = Elem::kBMn ? 16 * 128 / 16 : 2;
  const int lane = threadIdx.x % 32;
  const int peer = p.cluster > 1 ? static_cast<int>(cluster_ctarank() ^ 1) : -1;
  const int64_t nk = num_k_blocks<Elem>(p, t);  // >= 1: consumer_loop takes empty contractions
  int prev = -1;
  for (int64_t kb = 0; kb < nk; ++kb) {
    mbar_wait(&full[ring.stage], ring.phase);
    // A row block of 64 rows is 8 KiB in both layouts (K-major: 64 rows x 128 B; MN-major: one
    // chunk), hence `h * 512` below for both.
    const uint8_t* tile_a = smem_a + ring.stage * kBytesA + a_block * 64 * kTileKBytes;
    const uint8_t* tile_b = smem_b + ring.stage * kBytesB;
    const uint64_t da = Elem::kAMn ? smem_desc_mn_major_sw128(tile_a) : smem_desc_k_major_sw128(tile_a);
    const uint64_t db = Elem::kBMn ? smem_desc_mn_major_sw128(tile_b) : smem_desc_k_major_sw128(tile_b);
#pragma unroll
    for (int h = 0; h < kRowBlocks; ++h)
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) fence_operand(acc[h][i]);
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < kMmaPerStage; ++s)
#pragma unroll
      for (int h = 0; h < kActive; ++h)  // descriptor units of 16 B: 64 rows = 512
        Elem::template mma<kBlockN>(acc[h], desc_advance(da, h * 512 + kStepA * s),
                                    desc_advance(db, kStepB * s),
                                    s > 0 || kb > 0);
    wgmma_commit();
    wgmma_wait<1>();  // the previous slot's batch is done: release it
#pragma unroll
    for (int h = 0; h < kRowBlocks; ++h)
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) fence_operand(acc[h][i]);
    if (prev >= 0) release_slot(&empty[prev], lane, peer);
    prev = ring.stage;
    ring.next(p.stages);
  }
  if (kPingpong) pass_turn(cw);  // the other consumer's MMAs queue behind our last batch
  wgmma_wait<0>();  // here, not after the caller's branch merge (ptxas would serialize, C7515)
#pragma unroll
  for (int h = 0; h < kRowBlocks; ++h)
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) fence_operand(acc[h][i]);
  if (prev >= 0) release_slot(&empty[prev], lane, peer);
}

// Named barriers of the block-scaled main loop: kScaleBarrier + cw (one consumer warpgroup).
inline constexpr int kScaleBarrier = 5;  // ids 5, 6

// The index of the block scale of operand row `row` in the stage at stored contraction coordinate
// `k` (BlockScales; k a multiple of 128); the next stage's is the next index. 32-bit: the
// dispatcher refuses scale matrices of 2^31 entries or more (registers are short here).
// FP32 block scales only (k_shift 7, kb_stride 1).
__device__ __forceinline__ int32_t block_scale_index(const BlockScales& s, int64_t row, int64_t k) {
  const int64_t r = row < s.rows ? row : s.rows - 1;
  return static_cast<int32_t>((r >> s.row_shift) * s.ld + (k >> 7));
}

// The main loop of one tile for one consumer warpgroup of a block-scaled kind (Elem::kPromote;
// cooperative 128 x 128 tiles: this warpgroup's 64 rows, 64 accumulators per thread): per stage,
// the 4 wgmma write fresh partial sums, which are waited for, then multiplied by the A scale of
// their row and the B scale of their column and added to the accumulators (one FFMA each). The
// stage's scales are loaded once its MMAs are issued (their latency hides under the MMAs, and no
// register carries them across stages). kUniformB: the B scale is one scalar over the tile's
// columns (128x128 blocks, tile on a block boundary: forward and dgrad on 128x128 weights);
// otherwise the B scales of the stage (one per tile column, read by column from each thread's
// accumulator layout) go through the shared column vectors `col_scales` (2 x kBlockN,
// alternating by `promo`, a per-warpgroup count of such exchanges that runs across tiles). The
// two are separate instantiations: merged, the compiler gave every accumulator its own scale
// register, filled by a move per accumulator per stage in the uniform case.
// Releases every slot; kActive = 0 (rows past the group end) skips MMAs and scales.
template <class Elem, int kBlockN, int kActive, bool kUniformB>
__device__ __forceinline__ void main_loop_promoted(const KernelParams& p, const Tile& t,
                                                   float (&acc)[1][kBlockN / 2], uint8_t* smem_a,
                                                   uint8_t* smem_b, uint64_t* full,
                                                   uint64_t* empty, RingState& ring, int cw,
                                                   float* col_scales, uint32_t& promo) {
  static_assert(kBlockN == 128, "block-scaled kinds run 128-column tiles (one column per thread)");
  constexpr int kBlockK = kTileKBytes / Elem::kBytes;
  constexpr uint32_t kBytesA = kBlockM * kTileKBytes, kBytesB = kBlockN * kTileKBytes;
  constexpr int kMmaPerStage = kTileKBytes / 32;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const int peer = p.cluster > 1 ? static_cast<int>(cluster_ctarank() ^ 1) : -1;
#pragma unroll
  for (int i = 0; i < kBlockN / 2; ++i) acc[0][i] = 0.0f;
  static_assert(kBlockK == 128, "one stage = one 128-element scale block");
  const int nk = static_cast<int>(num_k_blocks<Elem>(p, t));
  // This thread's scales of stage 0 (the next stage's are the next entries): A rows r and r + 8
  // of its accumulators, B column tid of the tile (the tile's first column when uniform).
  const float* sa0 = nullptr;
  const float* sa1 = nullptr;
  const float* sb = nullptr;
  if constexpr (kActive > 0) {
    const TileOrigin o = tile_origin<Elem, kBlockN>(p, t);
    const int64_t r = o.a_row + cw * 64 + warp * 16 + lane / 4;
    const auto* bsa = static_cast<const float*>(p.bsa.ptr);
    sa0 = bsa + block_scale_index(p.bsa, r, o.a_kabs);
    sa1 = bsa + block_scale_index(p.bsa, r + 8, o.a_kabs);
    sb = static_cast<const float*>(p.bsb.ptr) +
         block_scale_index(p.bsb, o.b_row + (kUniformB ? 0 : tid), o.b_kabs);
  }
  const uint32_t cs_base = smem_addr(col_scales);
  float part[kBlockN / 2];
  for (int kb = 0; kb < nk; ++kb) {
    mbar_wait(&full[ring.stage], ring.phase);
    float a0 = 0.0f, a1 = 0.0f, b = 0.0f;
    if constexpr (kActive > 0) {
      const uint8_t* tile_a = smem_a + ring.stage * kBytesA + cw * 64 * kTileKBytes;
      const uint8_t* tile_b = smem_b + ring.stage * kBytesB;
      const uint64_t da = smem_desc_k_major_sw128(tile_a);
      const uint64_t db = smem_desc_k_major_sw128(tile_b);
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) fence_operand(part[i]);
      wgmma_fence();
#pragma unroll
      for (int s = 0; s < kMmaPerStage; ++s)  // 32 bytes of contraction = 2 descriptor units
        Elem::template mma<kBlockN>(part, desc_advance(da, 2 * s), desc_advance(db, 2 * s),
                                    s > 0 ? 1 : 0);
      wgmma_commit();
      a0 = __ldg(sa0 + kb);
      a1 = __ldg(sa1 + kb);
      b = __ldg(sb + kb);
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) fence_operand(part[i]);
    }
    release_slot(&empty[ring.stage], lane, peer);
    ring.next(p.stages);
    if constexpr (kActive > 0) {
      // Accumulator i: row r + 8·((i / 2) % 2), column 8·(i / 4) + 2·(lane % 4) + i % 2.
      if constexpr (kUniformB) {
        const float s0 = a0 * b, s1 = a1 * b;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
          acc[0][4 * j + 0] += part[4 * j + 0] * s0;
          acc[0][4 * j + 1] += part[4 * j + 1] * s0;
          acc[0][4 * j + 2] += part[4 * j + 2] * s1;
          acc[0][4 * j + 3] += part[4 * j + 3] * s1;
        }
      } else {  // per-column B scales through the shared column vectors
        const uint32_t cs = cs_base + (promo & 1) * kBlockN * 4;
        st_shared_u32(cs + tid * 4, __float_as_uint(b));
        named_barrier(kScaleBarrier + cw, 128);
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
          const float2 bj = ld_shared_f2(cs + (8 * j + 2 * (lane % 4)) * 4);
          acc[0][4 * j + 0] += part[4 * j + 0] * (a0 * bj.x);
          acc[0][4 * j + 1] += part[4 * j + 1] * (a0 * bj.y);
          acc[0][4 * j + 2] += part[4 * j + 2] * (a1 * bj.x);
          acc[0][4 * j + 3] += part[4 * j + 3] * (a1 * bj.y);
        }
        ++promo;
      }
    }
  }
}

template <class Elem, int kBlockN, Schedule kSchedule>
__device__ __forceinline__ void consumer_loop(const KernelParams& p, const CUtensorMap* map_d,
                                              const CUtensorMap* map_d8,
                                              uint8_t* smem_a, uint8_t* smem_b,
                                              const float* smem_scales, uint8_t* staging,
                                              float* cols, uint64_t* full, uint64_t* empty,
                                              TileRing tile_ring, int cw) {
  constexpr bool kPingpong = kSchedule == Schedule::kPingpong;
  constexpr int kRowBlocks = kPingpong ? 2 : 1;
  static_assert(!Elem::kPromote || !kPingpong, "block-scaled kinds run the cooperative schedule");
  float acc[kRowBlocks][kBlockN / 2];
  Tile t;
  RingState ring;
  uint32_t promo = 0;  // block-scaled kinds: stages promoted by this warpgroup
  for (int64_t i = 0;; ++i) {
    const bool have = take_tile(tile_ring, t);
    if (kPingpong && (i & 1) != cw) {  // the other consumer's tile: skip its slots
      if (!have) break;
      ring.skip(num_k_blocks<Elem>(p, t), p.stages);
      continue;
    }
    if (!have) {
      // Ping-pong: take the turn the other consumer passed after this CTA's last tile, so that
      // every arrive on an order barrier is matched before exit.
      if (kPingpong && i > 0) wait_turn(cw);
      break;
    }
    const int64_t first_row = t.m_blk * kBlockM + (kPingpong ? 0 : cw * 64);
    // The plain kinds keep the epilogue's loads unused until after the main loop (kDefer).
    EpiloguePrefetch<kBlockN, kRowBlocks, !Elem::kPromote && Elem::kPromoteK != 32> pre;
    epilogue_prefetch(p, t, first_row, pre);
    if (kPingpong && i > 0) wait_turn(cw);
    // Row blocks entirely past the group end (partial tiles of ragged groups) skip their MMAs.
    const int64_t left = group_rows(p, t) - first_row;
    const int active = left <= 0 ? 0 : (left >= 64 * kRowBlocks ? kRowBlocks : (left + 63) / 64);
    const int a_block = kPingpong ? 0 : cw;
    if constexpr (Elem::kPromoteK == 32) {
      // B scales shared by 32-row groups (mxfp8_32x32 weights, tile on a group boundary).
      const bool uniform_b = p.bsb.rows_per_scale_32 != 0 &&
                             ((p.k_grouped ? 0 : t.g * p.b_group_rows) + t.n_blk * kBlockN) % 32 == 0;
      if (active == 0)
        main_loop_mx<Elem, kBlockN, 0, false>(p, t, acc, smem_a, smem_b, smem_scales, full, empty,
                                              ring, cw);
      else if (uniform_b)
        main_loop_mx<Elem, kBlockN, 1, true>(p, t, acc, smem_a, smem_b, smem_scales, full, empty,
                                             ring, cw);
      else
        main_loop_mx<Elem, kBlockN, 1, false>(p, t, acc, smem_a, smem_b, smem_scales, full, empty,
                                              ring, cw);
    } else if constexpr (Elem::kPromote) {
      float* col_scales = cols + epilogue_col_vectors(p) * kBlockN;
      // B scales uniform over the tile's columns: 128x128 blocks, the tile on a block boundary.
      const bool uniform_b =
          p.bsb.row_shift == 7 && (tile_origin<Elem, kBlockN>(p, t).b_row & 127) == 0;
      if (active == 0)
        main_loop_promoted<Elem, kBlockN, 0, false>(p, t, acc, smem_a, smem_b, full, empty, ring,
                                                    cw, col_scales, promo);
      else if (uniform_b)
        main_loop_promoted<Elem, kBlockN, 1, true>(p, t, acc, smem_a, smem_b, full, empty, ring,
                                                   cw, col_scales, promo);
      else
        main_loop_promoted<Elem, kBlockN, 1, false>(p, t, acc, smem_a, smem_b, full, empty, ring,
                                                    cw, col_scales, promo);
    } else if (num_k_blocks<Elem>(p, t) == 0) {
      // An empty contraction (a K-grouped group of no tokens): no MMA; the accumulators are not
      // read (empty_tile_epilogue writes what a zero product gives).
      if (kPingpong) pass_turn(cw);
      empty_tile_epilogue(p, map_d, map_d8, t, pre, first_row, staging, cols, 1 + cw);
      continue;
    } else if (active == kRowBlocks)
      main_loop<Elem, kBlockN, kRowBlocks, kRowBlocks, kPingpong>(p, t, acc, smem_a, smem_b, full,
                                                                  empty, ring, a_block, cw);
    else if (active == 1)
      main_loop<Elem, kBlockN, kRowBlocks, 1, kPingpong>(p, t, acc, smem_a, smem_b, full, empty,
                                                         ring, a_block, cw);
    else
      main_loop<Elem, kBlockN, kRowBlocks, 0, kPingpong>(p, t, acc, smem_a, smem_b, full, empty,
                                                         ring, a_block, cw);
    tile_epilogue<Elem::kPromoteK != 32>(p, map_d, map_d8, t, acc, pre, first_row, staging, cols,
                                         1 + cw);
  }
  if (p.tma_store && threadIdx.x % 128 == 0) bulk_wait<0>();  // stores done before exit
  if (p.zero_rows > 0) zero_tail_rows(p, cw);
}

template <class Elem, int kBlockN, Schedule kSchedule>
__global__ void __launch_bounds__(kNumThreads, 1)
    grouped_gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a,
                             const __grid_constant__ CUtensorMap map_b,
                             const __grid_constant__ CUtensorMap map_a_half,
                             const __grid_constant__ CUtensorMap map_b_half,
                             const __grid_constant__ CUtensorMap map_d,
                             const __grid_constant__ CUtensorMap map_d8,
                             const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(kSchedule == Schedule::kCooperative || kBlockN == 128,
                "ping-pong holds a 128 x 128 tile per consumer (128 accumulators per thread)");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  constexpr bool kFp4 = kFp4Kind<Elem>;
  const SmemLayout l = smem_layout(kBlockN, kSchedule, p.stages, p.tma_store, col_vectors(p),
                                   p.staging_blocks, stage_scale_bytes(p), kFp4 ? 1 : 0);
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem + l.b;
  auto* full = reinterpret_cast<uint64_t*>(smem + l.bars);
  uint64_t* empty = full + kMaxStages;
  TileRing tile_ring{smem + l.tiles, reinterpret_cast<uint64_t*>(smem + l.tile_bars),
                     reinterpret_cast<uint64_t*>(smem + l.tile_bars) + kTileRing};
  auto* smem_scales = reinterpret_cast<float*>(smem + l.scales);
  auto* raw_full = reinterpret_cast<uint64_t*>(smem + l.raw_bars);  // NVFP4 in-kernel only
  uint64_t* raw_empty = raw_full + kMaxStages;
  const int wg = threadIdx.x / 128;
  constexpr bool kMx = Elem::kPromoteK == 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      // The TMA producer (plus, MXFP8, every scale loader thread); NVFP4 in-kernel: the
      // converter threads.
      mbar_init(&full[s], kFp4 ? kFp4Converters : 1 + (kMx ? kMxScaleLoaders : 0));
      // One arrival per consumer warp that reads the slot, in each CTA of the cluster.
      mbar_init(&empty[s], (kSchedule == Schedule::kPingpong ? 4 : 8) * p.cluster);
      if constexpr (kFp4) {
        mbar_init(&raw_full[s], 1);
        mbar_init(&raw_empty[s], kFp4Converters);
      }
    }
    for (int s = 0; s < kTileRing; ++s) {
      mbar_init(&tile_ring.full[s], 1);
      mbar_init(&tile_ring.empty[s], kTileReaders + (kMx ? kMxScaleLoaders : 0) +
                                         (kFp4 ? kFp4Converters : 0));
    }
    fence_mbar_init();
    if (!p.k_grouped) {
      prefetch_tmap(&map_a);
      prefetch_tmap(&map_b);
    }
    if (p.cluster > 1) {
      prefetch_tmap(&map_a_half);
      prefetch_tmap(&map_b_half);
    }
    if (p.tma_store) {
      prefetch_tmap(&map_d);
      prefetch_tmap(&map_d8);
    }
  }
  // Clusters: the other CTA's barriers are initialized before anything is multicast into them.
  if (p.cluster > 1) cluster_sync();
  else __syncthreads();
  // Register split (128·producer + 256·consumer <= 64 K): the block-scaled kinds' 128-column
  // tiles need fewer consumer registers, and their producer build spills at 40.
  // MXFP8: the producer warpgroup also runs the scale loaders (mx_scale_loader_loop), and the
  // consumers' partial sums are two n64 halves (main_loop_mx).
  // NVFP4 in-kernel: the converter threads run in the producer warpgroup.
  constexpr int kProducerRegs = kFp4 ? 72 : Elem::kPromoteK == 32 ? 64 : (Elem::kPromote ? 56 : 40);
  constexpr int kConsumerRegs = kFp4 || Elem::kPromoteK == 32 ? 216 : (Elem::kPromote ? 224 : 232);
  // The pool is what the launch allocated (168 per thread of 384): a consumer's setmaxnreg.inc
  // past it waits forever for registers the producer never freed.
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 168 * kNumThreads, "register pool");
  if (wg == 0) {
    regs_dealloc<kProducerRegs>();
    if constexpr (kFp4) {
      if (threadIdx.x == 0)
        producer_loop_fp4<kBlockN>(p, &map_a, &map_b, smem + l.raw, l.raw_stage, raw_full,
                                   raw_empty, tile_ring);
      else if (threadIdx.x >= 128 - kFp4Converters)
        fp4_converter_loop<kBlockN>(p, smem + l.raw, l.raw_stage, smem_a, smem_b, full, empty,
                                    raw_full, raw_empty, tile_ring,
                                    threadIdx.x - (128 - kFp4Converters));
    } else if (threadIdx.x == 0) {
      producer_loop<Elem, kBlockN>(p, &map_a, &map_b, &map_a_half, &map_b_half, smem_a, smem_b,
                                   full, empty, tile_ring);
    } else if constexpr (kMx) {
      if (threadIdx.x >= 128 - kMxScaleLoaders)
        mx_scale_loader_loop<Elem, kBlockN>(p, smem_scales, full, empty, tile_ring,
                                            threadIdx.x - (128 - kMxScaleLoaders));
    }
  } else {
    regs_alloc<kConsumerRegs>();
    const int cw = wg - 1;
    consumer_loop<Elem, kBlockN, kSchedule>(
        p, &map_d, &map_d8, smem_a, smem_b, smem_scales, smem + l.d + cw * l.d_per_wg,
        reinterpret_cast<float*>(smem + l.cols + cw * l.cols_per_wg), full, empty, tile_ring, cw);
  }
#endif
}

}  // namespace tessera::gemm_sm90
