// The sm90a grouped GEMM kernel: persistent, warp-specialized, TMA → shared memory → wgmma.
//
// One CTA per SM (384 threads): warpgroup 0 is the producer (one thread issues TMA loads into a
// ring of `stages` shared-memory slots, each guarded by a full/empty mbarrier pair), warpgroups 1
// and 2 are consumers (each owns 64 rows of the 128-row tile, issues wgmma on the slot, releases
// it, and stores its accumulators through the epilogue). Tiles are numbered group by group; CTA b
// takes tiles b, b + gridDim.x, ... and every role walks the group offsets ON THE DEVICE with the
// same TileWalker, so no host ever sees group sizes. Template arguments: the element kind (an
// (A, B) element pair of sm90_mma_kinds.cuh: BF16, FP16, or FP8; one stage holds 128 bytes of
// contraction = 64 or 128 elements) and the tile width.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gemm/cuda/kernels/grouped_gemm_params.h"
#include "gemm/cuda/kernels/sm90_mma_kinds.cuh"
#include "gemm/cuda/kernels/sm90_primitives.cuh"

namespace tessera::gemm_sm90 {

// Start offset of group `i` (i in [0, G]) clamped to [0, capacity].
__device__ __forceinline__ int64_t group_start(const KernelParams& p, int i) {
  int64_t v = 0;
  const int idx = p.offsets_start ? i : i - 1;
  if (idx >= 0) {
    v = p.offsets_int64 ? __ldg(static_cast<const int64_t*>(p.offsets) + idx)
                        : static_cast<int64_t>(__ldg(static_cast<const int32_t*>(p.offsets) + idx));
  }
  return v < 0 ? 0 : (v > p.capacity ? p.capacity : v);
}

struct Tile {
  int g = 0;
  int64_t start = 0, len = 0;  // group rows (M-grouped) or contraction length (K-grouped)
  int64_t m_blk = 0, n_blk = 0;
  bool poisoned = false;       // K-grouped group the setup kernel found misaligned: NaN output
};

// Maps the linear tile index to (group, m block, n block). Tile indices of one CTA only grow,
// so the walker moves forward through the groups once: O(G + tiles) per CTA.
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
    tile.m_blk = local % m_tiles_;
    tile.n_blk = local / m_tiles_;
    tile.poisoned = poisoned_;
    return true;
  }

 private:
  int g_ = -1;
  int64_t before_ = 0, count_ = 0, start_ = 0, len_ = 0, m_tiles_ = 1;
  bool poisoned_ = false;
};

template <class Elem>
__device__ __forceinline__ int64_t num_k_blocks(const KernelParams& p, const Tile& t) {
  constexpr int kBlockK = kTileKBytes / Elem::kBytes;
  if (t.poisoned) return 0;
  const int64_t k = p.k_grouped ? t.len : p.k;
  return (k + kBlockK - 1) / kBlockK;
}

template <class Elem, int kBlockN>
__device__ void producer_loop(const KernelParams& p, const CUtensorMap* map_a,
                              const CUtensorMap* map_b, uint8_t* smem_a, uint8_t* smem_b,
                              uint64_t* full, uint64_t* empty) {
  constexpr int kBlockK = kTileKBytes / Elem::kBytes;
  constexpr uint32_t kBytesA = kBlockM * kTileKBytes, kBytesB = kBlockN * kTileKBytes;
  TileWalker<kBlockN> walker;
  Tile t;
  int stage = 0;
  uint32_t phase = 0;
  int acquired = -1;
  for (int64_t idx = blockIdx.x; walker.find(p, idx, t); idx += gridDim.x) {
    const void* ma = map_a;
    const void* mb = map_b;
    int64_t a_row, b_row, a_k, b_k;
    if (p.k_grouped) {
      const auto* maps = static_cast<const CUtensorMap*>(p.group_maps);
      ma = maps + 2 * t.g;
      mb = maps + 2 * t.g + 1;
      if (acquired != t.g) {
        tmap_acquire(ma);
        tmap_acquire(mb);
        acquired = t.g;
      }
      a_row = t.m_blk * kBlockM;
      b_row = t.n_blk * kBlockN;
      a_k = p.a_k_origin_start ? t.start : 0;
      b_k = p.b_k_origin_start ? t.start : 0;
    } else {
      a_row = t.start + t.m_blk * kBlockM;
      b_row = t.g * p.b_group_rows + t.n_blk * kBlockN;
      a_k = 0;
      b_k = t.g * p.b_group_cols;
    }
    const int64_t nk = num_k_blocks<Elem>(p, t);
    for (int64_t kb = 0; kb < nk; ++kb) {
      mbar_wait(&empty[stage], phase ^ 1);
      mbar_arrive_expect_tx(&full[stage], kBytesA + kBytesB);
      tma_load_2d(smem_a + stage * kBytesA, ma, &full[stage],
                  static_cast<int32_t>(a_k + kb * kBlockK), static_cast<int32_t>(a_row));
      tma_load_2d(smem_b + stage * kBytesB, mb, &full[stage],
                  static_cast<int32_t>(b_k + kb * kBlockK), static_cast<int32_t>(b_row));
      if (++stage == p.stages) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
}

__device__ __forceinline__ float load_bias(const KernelParams& p, int64_t idx) {
  if (p.bias_type == OutType::kFP32) return static_cast<const float*>(p.bias)[idx];
  if (p.bias_type == OutType::kBF16)
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[idx]);
  return __half2float(static_cast<const __half*>(p.bias)[idx]);
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

// Stores the 64 x kBlockN accumulator block of consumer warpgroup `cw`. wgmma fragment layout:
// thread (warp w, lane l) holds rows w·16 + l/4 (+8) and columns 8j + 2(l%4) (+1).
template <int kBlockN>
__device__ void epilogue(const KernelParams& p, const Tile& t, float (&acc)[kBlockN / 2], int cw) {
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int64_t rows = p.k_grouped ? p.m : t.len;
  float alpha = p.alpha * (p.group_alpha ? p.group_alpha[t.g] : 1.0f);
  if (t.poisoned) alpha = __int_as_float(0x7fc00000);  // NaN: the group could not be computed
  bool valid[2];
  float row_scale[2];
  int64_t row_off[2];
  for (int h = 0; h < 2; ++h) {
    const int64_t r = t.m_blk * kBlockM + cw * 64 + warp * 16 + lane / 4 + 8 * h;
    valid[h] = r < rows;
    const int64_t scale_row = p.k_grouped ? r : t.start + r;
    row_scale[h] = alpha;
    if (valid[h] && p.scale_a) row_scale[h] *= p.scale_a[t.g * p.sa_gs + scale_row * p.sa_rs];
    row_off[h] = p.k_grouped ? t.g * p.d_group_stride + r * p.ldd : (t.start + r) * p.ldd;
  }
  const int64_t col0 = t.n_blk * kBlockN + (lane % 4) * 2;
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) {
    const int64_t c = col0 + j * 8;
    if (c >= p.n) continue;
    float sb0 = 1.0f, sb1 = 1.0f, b0 = 0.0f, b1 = 0.0f;
    if (p.scale_b) {
      sb0 = p.scale_b[t.g * p.sb_gs + c * p.sb_rs];
      sb1 = p.scale_b[t.g * p.sb_gs + (c + 1) * p.sb_rs];
    }
    if (p.bias) {
      b0 = load_bias(p, t.g * p.bias_gs + c);
      b1 = load_bias(p, t.g * p.bias_gs + c + 1);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!valid[h]) continue;
      const float v0 = acc[j * 4 + 2 * h] * row_scale[h] * sb0 + b0;
      const float v1 = acc[j * 4 + 2 * h + 1] * row_scale[h] * sb1 + b1;
      store_pair(p, p.d, row_off[h] + c, v0, v1);
    }
  }
}

// Whether consumer warpgroup `cw` of tile `t` writes D through the staging buffer: BF16/FP16 D,
// beta = 0, and all of its 64 rows inside the group (TMA clips only at the tensor's bounds).
template <int kBlockN>
__device__ __forceinline__ bool stores_by_tma(const KernelParams& p, const Tile& t, int cw) {
  const int64_t rows = p.k_grouped ? p.m : t.len;
  return p.tma_store && t.m_blk * kBlockM + cw * 64 + 64 <= rows;
}

// The 64 x kBlockN block of consumer warpgroup `cw` through shared memory: each thread writes
// its fragment (same math as epilogue()) into `stage` = kBlockN/64 boxes of 64 rows x 128 bytes
// in the 128-byte swizzled layout of map_d (16-byte chunk j of row r at chunk j ^ (r % 8):
// conflict-free for the wgmma fragment), then one thread issues the TMA stores and commits them
// as one bulk group. The previous group must have finished reading `stage` first (its wait is
// here, after this tile's main loop, so the store overlapped that loop).
template <int kBlockN>
__device__ void epilogue_tma(const KernelParams& p, const CUtensorMap* map_d, const Tile& t,
                             float (&acc)[kBlockN / 2], int cw, uint8_t* stage) {
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  if (tid == 0) bulk_wait_read<0>();
  named_barrier(1 + cw, 128);
  float alpha = p.alpha * (p.group_alpha ? p.group_alpha[t.g] : 1.0f);
  if (t.poisoned) alpha = __int_as_float(0x7fc00000);
  const int64_t row0 = t.m_blk * kBlockM + cw * 64;  // first row of this block inside the group
  float row_scale[2];
  int rr[2];
  for (int h = 0; h < 2; ++h) {
    rr[h] = warp * 16 + lane / 4 + 8 * h;
    const int64_t r = row0 + rr[h];
    const int64_t scale_row = p.k_grouped ? r : t.start + r;
    row_scale[h] = alpha;
    if (p.scale_a) row_scale[h] *= p.scale_a[t.g * p.sa_gs + scale_row * p.sa_rs];
  }
  const int64_t col0 = t.n_blk * kBlockN + (lane % 4) * 2;
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) {
    const int64_t c = col0 + j * 8;
    if (c >= p.n) continue;
    float sb0 = 1.0f, sb1 = 1.0f, b0 = 0.0f, b1 = 0.0f;
    if (p.scale_b) {
      sb0 = p.scale_b[t.g * p.sb_gs + c * p.sb_rs];
      sb1 = p.scale_b[t.g * p.sb_gs + (c + 1) * p.sb_rs];
    }
    if (p.bias) {
      b0 = load_bias(p, t.g * p.bias_gs + c);
      b1 = load_bias(p, t.g * p.bias_gs + c + 1);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float v0 = acc[j * 4 + 2 * h] * row_scale[h] * sb0 + b0;
      const float v1 = acc[j * 4 + 2 * h + 1] * row_scale[h] * sb1 + b1;
      uint32_t bits;
      if (p.out_type == OutType::kBF16) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(v0, v1);
        bits = *reinterpret_cast<const uint32_t*>(&v);
      } else {
        const __half2 v = __floats2half2_rn(v0, v1);
        bits = *reinterpret_cast<const uint32_t*>(&v);
      }
      const int r = rr[h];
      const int off = (j / 8) * (64 * 128) + r * 128 + (((j % 8) ^ (r % 8)) * 16) + (lane % 4) * 4;
      *reinterpret_cast<uint32_t*>(stage + off) = bits;
    }
  }
  fence_async_shared();
  named_barrier(1 + cw, 128);
  if (tid == 0) {
    const int64_t d_row = p.k_grouped ? t.g * p.m + row0 : t.start + row0;
#pragma unroll
    for (int b = 0; b < kBlockN / kStoreBoxCols; ++b) {
      const int64_t c = t.n_blk * kBlockN + b * kStoreBoxCols;
      if (c < p.n)
        tma_store_2d(map_d, stage + b * (64 * 128), static_cast<int32_t>(c),
                     static_cast<int32_t>(d_row));
    }
    bulk_commit();
  }
}

template <class Elem, int kBlockN>
__device__ void consumer_loop(const KernelParams& p, const CUtensorMap* map_d, uint8_t* smem_a,
                              uint8_t* smem_b, uint8_t* smem_d, uint64_t* full, uint64_t* empty,
                              int cw) {
  constexpr uint32_t kBytesA = kBlockM * kTileKBytes, kBytesB = kBlockN * kTileKBytes;
  constexpr int kMmaPerStage = kTileKBytes / 32;  // each wgmma consumes 32 bytes of contraction
  float acc[kBlockN / 2];
  TileWalker<kBlockN> walker;
  Tile t;
  int stage = 0;
  uint32_t phase = 0;
  const int lane = threadIdx.x % 32;
  for (int64_t idx = blockIdx.x; walker.find(p, idx, t); idx += gridDim.x) {
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) acc[i] = 0.0f;
    const int64_t nk = num_k_blocks<Elem>(p, t);
    int prev = -1;  // slot whose wgmma batch may still be in flight
    for (int64_t kb = 0; kb < nk; ++kb) {
      mbar_wait(&full[stage], phase);
      const uint64_t da = smem_desc_k_major_sw128(smem_a + stage * kBytesA + cw * 64 * kTileKBytes);
      const uint64_t db = smem_desc_k_major_sw128(smem_b + stage * kBytesB);
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) fence_operand(acc[i]);
      wgmma_fence();
#pragma unroll
      for (int s = 0; s < kMmaPerStage; ++s) Elem::template mma<kBlockN>(acc, da + 2 * s, db + 2 * s);
      wgmma_commit();
      wgmma_wait<1>();  // the previous slot's batch is done: release it
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) fence_operand(acc[i]);
      if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
      prev = stage;
      if (++stage == p.stages) {
        stage = 0;
        phase ^= 1;
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) fence_operand(acc[i]);
    if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
    if (stores_by_tma<kBlockN>(p, t, cw)) {
      epilogue_tma<kBlockN>(p, map_d, t, acc, cw, smem_d + cw * (64 * kBlockN * 2));
    } else {
      epilogue<kBlockN>(p, t, acc, cw);
    }
  }
  if (p.tma_store && threadIdx.x % 128 == 0) bulk_wait<0>();  // stores done before exit
}

template <class Elem, int kBlockN>
__global__ void __launch_bounds__(kNumThreads, 1)
    grouped_gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a,
                             const __grid_constant__ CUtensorMap map_b,
                             const __grid_constant__ CUtensorMap map_d,
                             const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr uint32_t kBytesA = kBlockM * kTileKBytes, kBytesB = kBlockN * kTileKBytes;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem + p.stages * kBytesA;
  uint8_t* smem_d = smem_b + p.stages * kBytesB;  // TMA-store staging: 2 x 64 x kBlockN x 2 B
  auto* full = reinterpret_cast<uint64_t*>(smem_d + (p.tma_store ? 2 * 64 * kBlockN * 2 : 0));
  uint64_t* empty = full + kMaxStages;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 8);  // one arrival per consumer warp
    }
    fence_mbar_init();
    if (!p.k_grouped) {
      prefetch_tmap(&map_a);
      prefetch_tmap(&map_b);
    }
    if (p.tma_store) prefetch_tmap(&map_d);
  }
  __syncthreads();
  if (wg == 0) {
    regs_dealloc<40>();
    if (threadIdx.x == 0) producer_loop<Elem, kBlockN>(p, &map_a, &map_b, smem_a, smem_b, full, empty);
  } else {
    regs_alloc<232>();
    consumer_loop<Elem, kBlockN>(p, &map_d, smem_a, smem_b, smem_d, full, empty, wg - 1);
  }
#endif
}

}  // namespace tessera::gemm_sm90
