// The tile schedule and the stage rings of the sm90 grouped GEMM kernel
// (grouped_gemm_sm90.cuh): the device tile walker over the group offsets (TileWalker,
// TileSequence), the mbarrier-guarded rings (RingState; the tile ring the producer publishes to
// and the consumers and MXFP8 scale loaders read), each tile's k-blocks and operand origins
// (num_k_blocks, tile_origin), and the release of a stage slot.
#pragma once

#include <cstdint>

#include "gemm/cuda/kernels/group_offsets.cuh"
#include "gemm/cuda/kernels/grouped_gemm_epilogue.cuh"
#include "gemm/cuda/kernels/grouped_gemm_params.h"
#include "gemm/cuda/kernels/sm90_primitives.cuh"

namespace tessera::gemm_sm90 {


// Start offset of group `i` (i in [0, G]) clamped to [0, capacity].
__device__ __forceinline__ int64_t group_start(const KernelParams& p, int i) {
  return gemm_cuda::device_group_start(p.offsets, p.offsets_int64, p.offsets_start, p.capacity, i);
}

// Maps the linear tile index to (group, m block, n block). Tile indices of one CTA only grow,
// so the walker moves forward through the groups once: O(G + tiles) per CTA. Inside a group the
// m blocks come fastest; with p.raster_band = b > 0 the group's m blocks are cut into bands of b
// and a band's tiles (all its n blocks) come before the next band's, so the CTAs running at once
// share fewer, more reused A row blocks (L2) when a group has many m blocks.
template <int kBlockN>
class TileWalker {
 public:
  __device__ bool find(const KernelParams& p, int64_t t, Tile& tile) {
    while (t >= before_ + count_) {
      before_ += count_;
      if (++g_ >= p.num_groups) return false;
      start_ = group_start(p, g_);
      const int64_t end = group_start(p, g_ + 1);
      len_ = end > start_ ? end - start_ : 0;
      poisoned_ = p.k_grouped && p.group_ok != nullptr && p.group_ok[g_] == 0;
      const int64_t rows = p.k_grouped ? p.m : len_;
      m_tiles_ = (rows + kBlockM - 1) / kBlockM;
      count_ = m_tiles_ * ((p.n + kBlockN - 1) / kBlockN);
    }
    const int64_t local = t - before_;
    tile.g = g_;
    tile.start = start_;
    tile.len = len_;
    // 32-bit tile arithmetic (a group's tile count fits): the producer runs this with 40 registers.
    const uint32_t local32 = static_cast<uint32_t>(local);
    const uint32_t mt = static_cast<uint32_t>(m_tiles_);
    const uint32_t band = static_cast<uint32_t>(p.raster_band);
    if (band > 0 && mt > band) {  // bands of `band` m blocks, m fastest inside a band
      const uint32_t per_band = band * static_cast<uint32_t>((p.n + kBlockN - 1) / kBlockN);
      const uint32_t b = local32 / per_band, w = local32 - b * per_band;
      const uint32_t in_band = mt - b * band < band ? mt - b * band : band;
      tile.m_blk = b * band + w % in_band;
      tile.n_blk = w / in_band;
    } else {
      tile.m_blk = local32 % mt;
      tile.n_blk = local32 / mt;
    }
    tile.poisoned = poisoned_;
    return true;
  }

  // Cluster of two CTAs (p.cluster == 2; M-grouped, so every tile has the same k blocks, or
  // K-grouped with an even number of m blocks and no odd bands, so both tiles of a pair are one
  // group's: either way the two CTAs walk their shared ring slots in step): pair q is tiles 2q
  // and 2q + 1 of the numbering above and CTA `rank` takes tile 2q + rank. A missing partner
  // (odd tile count) is a phantom: the same group and n block, one m block past the group's last
  // (its rows are past the group end: no MMAs, no stores), so that both CTAs still fill and
  // release every slot.
  // share: kShareB when the two tiles read the same B rows (same group and n block), kShareA the
  // same A rows (same group and m block), else kShareNone.
  __device__ bool find_pair(const KernelParams& p, int64_t q, uint32_t rank, Tile& own,
                            int& share) {
    Tile t0, t1;
    if (!find(p, 2 * q, t0)) return false;
    const int64_t past_end = m_tiles_;
    if (!find(p, 2 * q + 1, t1)) {
      t1 = t0;
      t1.m_blk = past_end;
    }
    share = t1.g != t0.g ? kShareNone
            : t1.n_blk == t0.n_blk ? kShareB
            : t1.m_blk == t0.m_blk ? kShareA
                                   : kShareNone;
    own = rank ? t1 : t0;
    return true;
  }

 private:
  int g_ = -1;
  int64_t before_ = 0, count_ = 0, start_ = 0, len_ = 0, m_tiles_ = 1;
  bool poisoned_ = false;
};

// The tiles of one CTA, in order: tiles blockIdx.x + i·gridDim.x, or with clusters of two the
// tile 2q + rank of pairs q = clusterid + i·nclusters (TileWalker::find_pair).
template <int kBlockN>
class TileSequence {
 public:
  __device__ explicit TileSequence(const KernelParams& p) {
    if (p.cluster > 1) {
      rank_ = cluster_ctarank();
      next_ = cluster_id_x();
      step_ = num_clusters_x();
    } else {
      next_ = blockIdx.x;
      step_ = gridDim.x;
    }
  }
  // The next tile and the operand its cluster pair shares; false when none is left.
  __device__ bool next(const KernelParams& p, Tile& t, int& share) {
    share = kShareNone;
    const bool have = p.cluster > 1 ? walker_.find_pair(p, next_, rank_, t, share)
                                    : walker_.find(p, next_, t);
    next_ += step_;
    return have;
  }
  __device__ uint32_t rank() const { return rank_; }

 private:
  TileWalker<kBlockN> walker_;
  int64_t next_ = 0, step_ = 1;
  uint32_t rank_ = 0;
};

// Position in a ring of mbarrier-guarded slots (the stage ring, the tile ring): slot and the
// parity of its current phase.
struct RingState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void next(int stages) {
    if (++stage == stages) {
      stage = 0;
      phase ^= 1;
    }
  }
  // Skips `count` slots (a ping-pong consumer passing over the other consumer's tile).
  __device__ __forceinline__ void skip(int64_t count, int stages) {
    const int64_t s = stage + count;
    phase ^= static_cast<uint32_t>((s / stages) & 1);
    stage = static_cast<int>(s % stages);
  }
};

// The tile ring: the producer thread walks the CTA's tiles (TileSequence) and publishes each one
// in a shared-memory slot; the consumer warps read it there instead of walking the group
// offsets themselves (on short-K shapes with many groups, Qwen3, the per-tile walk sat on the
// consumers' critical path). Slot: start, len (int64), g, m block, n block, flags (kTileValid: a
// tile; 0: none left; kTilePoisoned). full: 1 arrival (producer); empty: one per consumer thread
// (each releases its own reads: with one elected lane arriving after __syncwarp, racecheck
// reported every reuse of a slot as a hazard).
struct TileRing {
  uint8_t* slots;
  uint64_t* full;
  uint64_t* empty;
  RingState pos;
};
inline constexpr int32_t kTileValid = 1, kTilePoisoned = 2;
inline constexpr int kTileReaders = 256;  // both consumer warpgroups

// Producer: publishes tile t (or, with t = nullptr, that no tile is left).
__device__ __forceinline__ void publish_tile(TileRing& r, const Tile* t) {
  mbar_wait(&r.empty[r.pos.stage], r.pos.phase ^ 1);
  uint8_t* s = r.slots + r.pos.stage * kTileSlotBytes;
  auto* w = reinterpret_cast<int64_t*>(s);
  auto* i = reinterpret_cast<int32_t*>(s + 16);
  if (t != nullptr) {
    w[0] = t->start;
    w[1] = t->len;
    i[0] = t->g;
    i[1] = static_cast<int32_t>(t->m_blk);
    i[2] = static_cast<int32_t>(t->n_blk);
    i[3] = kTileValid | (t->poisoned ? kTilePoisoned : 0);
  } else {
    i[3] = 0;
  }
  mbar_arrive(&r.full[r.pos.stage]);  // release: the slot's stores are visible to its readers
  r.pos.next(kTileRing);
}

// Consumer thread: the next tile of the CTA; false when none is left.
__device__ __forceinline__ bool take_tile(TileRing& r, Tile& t) {
  mbar_wait(&r.full[r.pos.stage], r.pos.phase);
  const uint8_t* s = r.slots + r.pos.stage * kTileSlotBytes;
  const auto* w = reinterpret_cast<const int64_t*>(s);
  const auto* i = reinterpret_cast<const int32_t*>(s + 16);
  const int32_t flags = i[3];
  t.start = w[0];
  t.len = w[1];
  t.g = i[0];
  t.m_blk = i[1];
  t.n_blk = i[2];
  t.poisoned = (flags & kTilePoisoned) != 0;
  mbar_arrive(&r.empty[r.pos.stage]);
  r.pos.next(kTileRing);
  return (flags & kTileValid) != 0;
}

template <class Elem>
__device__ __forceinline__ int64_t num_k_blocks(const KernelParams& p, const Tile& t) {
  constexpr int kBlockK = kTileKBytes / Elem::kBytes;
  if (t.poisoned) return 0;
  if (Elem::kPromote && p.k_grouped)  // the 128-aligned windows over [start, end)
    return t.len > 0 ? ((t.start + t.len + kBlockK - 1) >> 7) - (t.start >> 7) : 0;  // start >= 0
  const int64_t k = p.k_grouped ? t.len : p.k;
  return (k + kBlockK - 1) / kBlockK;
}

// Where a tile's operands start in their tensor maps: A / B row coordinates and the contraction
// coordinate of stage 0 (stage kb adds kb·kBlockK); a_kabs / b_kabs: the same contraction
// coordinate in the stored copy (block-scale lookup; differs from a_k / b_k where the map
// starts at start_g). Shared by the producer (loads) and the block-scaled consumers (scales).
struct TileOrigin {
  int64_t a_row, b_row, a_k, b_k, a_kabs, b_kabs;
};
template <class Elem, int kBlockN>
__device__ __forceinline__ TileOrigin tile_origin(const KernelParams& p, const Tile& t) {
  constexpr int kBlockK = kTileKBytes / Elem::kBytes;
  TileOrigin o;
  if (p.k_grouped) {
    o.a_row = t.m_blk * kBlockM;
    o.b_row = t.n_blk * kBlockN;
    if constexpr (Elem::kPromote) {  // maps start at start_g; windows at multiples of kBlockK
      static_assert(kBlockK == 128, "block-scaled stages are 128 elements");
      o.a_kabs = o.b_kabs = t.start & ~int64_t{kBlockK - 1};  // start >= 0
      o.a_k = o.b_k = o.a_kabs - t.start;
    } else {
      o.a_k = o.a_kabs = p.a_k_origin_start ? t.start : 0;
      o.b_k = o.b_kabs = p.b_k_origin_start ? t.start : 0;
    }
  } else {  // MN-major B: a 3-D map (n, k, group), the group is its own coordinate
    o.a_row = a_group_start(p, t) + t.m_blk * kBlockM;  // A's own row layout where given
    o.b_row = (Elem::kBMn ? 0 : t.g * p.b_group_rows) + t.n_blk * kBlockN;
    o.a_k = o.a_kabs = 0;
    o.b_k = o.b_kabs = Elem::kBMn ? 0 : t.g * p.b_group_cols;
  }
  return o;
}

// A consumer warp is done reading a ring slot: lane 0 arrives on this CTA's empty barrier and,
// with clusters (peer >= 0), lane 1 on the other CTA's (its producer multicasts into this slot).
__device__ __forceinline__ void release_slot(uint64_t* empty, int lane, int peer) {
  if (lane == 0) mbar_arrive(empty);
  else if (lane == 1 && peer >= 0) mbar_arrive_remote(empty, static_cast<uint32_t>(peer));
}

}  // namespace tessera::gemm_sm90
