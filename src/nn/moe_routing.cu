// CUDA kernels of the routing metadata and the regroup index (the row ops: moe_permute_kernels.cu,
// moe_row_kernels.cu). Same bits as the CPU loop (moe_routing_cpu.cpp) by construction: the kept
// pairs and their ranks follow pair order.
//
// Routing, without a host sync (graph-capturable), in four launches:
//   1. count: one block per chunk of kChunk pairs counts its pairs per expert (shared histogram)
//      into chunk_counts (chunks, E); indices outside [0, E) raise the error flag, not counted;
//   2. scan: a block per 32 experts turns chunk_counts into per-chunk exclusive prefixes per
//      expert and the routed totals (lane = expert, so each chunk's row is read coalesced; each
//      warp sums a run of chunks, the runs' sums are scanned in shared memory); then one block
//      scans the experts (cub::BlockScan): kept counts, padded offsets, dropped;
//   3. row_pair = -1 everywhere;
//   4. assign: one warp per chunk walks its pairs 32 at a time in order; __match_any_sync finds
//      the lanes sharing an expert, their rank is the chunk prefix + the running count + the
//      number of lower lanes with that expert.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "nn/moe_kernels.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/nn/moe_routing.h"

namespace tessera::detail::moe {
namespace {

constexpr int64_t kChunk = 256;  // pairs per routing chunk
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 65535;
constexpr int64_t kMaxExperts = 12288;  // the shared histogram: 48 KiB

int64_t num_chunks(int64_t pairs) { return pairs == 0 ? 1 : (pairs + kChunk - 1) / kChunk; }
int64_t chunk_counts_bytes(int64_t pairs, int64_t experts) {
  return (num_chunks(pairs) * experts * 4 + 15) / 16 * 16;
}

int grid_for(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

void set_device(Device device) {
  int current = -1;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
}

// ---- routing ---------------------------------------------------------------------------------
template <class Idx>
__global__ void __launch_bounds__(kThreads) count_kernel(RoutingArgs a, int32_t* chunk_counts) {
  extern __shared__ int32_t hist[];
  for (int64_t e = threadIdx.x; e < a.experts; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const auto* idx = static_cast<const Idx*>(a.indices);
  const int64_t pairs = a.tokens * a.top_k;
  const int64_t p = blockIdx.x * kChunk + threadIdx.x;
  if (threadIdx.x < kChunk && p < pairs) {
    const int64_t e = static_cast<int64_t>(idx[p]);
    if (e >= 0 && e < a.experts) {
      atomicAdd(&hist[e], 1);
    } else {
      atomicOr(a.error_flag, static_cast<int32_t>(MoeRoutingError::kExpertOutOfRange));
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < a.experts; e += blockDim.x)
    chunk_counts[blockIdx.x * a.experts + e] = hist[e];
}

// Per-chunk exclusive prefixes of each expert's counts, in place, and the routed totals: block b
// takes experts [32b, 32b + 32), lane l expert 32b + l; warp w a run of consecutive chunks. Each
// warp sums its run (the run's loads independent of each other), the warps' sums are scanned per
// expert in shared memory, then each warp rewrites its run from its start.
constexpr int kScanWarps = kThreads / 32;
__global__ void __launch_bounds__(kThreads) chunk_scan_kernel(RoutingArgs a, int32_t* chunk_counts,
                                                              int64_t chunks, int64_t* routed) {
  __shared__ int64_t run_sum[kScanWarps][32];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t e = int64_t{blockIdx.x} * 32 + lane;
  const int64_t per = (chunks + kScanWarps - 1) / kScanWarps;
  const int64_t c0 = warp * per, c1 = c0 + per < chunks ? c0 + per : chunks;
  int64_t sum = 0;
  if (e < a.experts) {
#pragma unroll 8
    for (int64_t c = c0; c < c1; ++c) sum += chunk_counts[c * a.experts + e];
  }
  run_sum[warp][lane] = sum;
  __syncthreads();
  int64_t running = 0, total = 0;
#pragma unroll
  for (int w = 0; w < kScanWarps; ++w) {
    running += w < warp ? run_sum[w][lane] : 0;
    total += run_sum[w][lane];
  }
  if (e >= a.experts) return;
  for (int64_t c = c0; c < c1; ++c) {
    const int32_t v = chunk_counts[c * a.experts + e];
    chunk_counts[c * a.experts + e] = static_cast<int32_t>(running);  // < kChunk · chunks
    running += v;
  }
  if (warp == 0) routed[e] = total;
}

// The experts in order, kThreads at a time: kept counts, padded offsets (an exclusive scan of
// the padded lengths, carried across rounds) and the dropped total. One block.
__global__ void __launch_bounds__(kThreads) offsets_kernel(RoutingArgs a, const int64_t* routed) {
  using Scan = cub::BlockScan<int64_t, kThreads>;
  using Reduce = cub::BlockReduce<int64_t, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ typename Reduce::TempStorage reduce_storage;
  int64_t carry = 0, dropped = 0;
  if (threadIdx.x == 0) a.padded_offsets[0] = 0;
  for (int64_t base = 0; base < a.experts; base += kThreads) {
    const int64_t e = base + threadIdx.x;
    int64_t kept = 0, len = 0, drop = 0;
    if (e < a.experts) {
      const int64_t r = routed[e];
      kept = a.capacity < 0 ? r : (r < a.capacity ? r : a.capacity);
      len = a.capacity < 0 ? (kept + a.align - 1) / a.align * a.align : a.capacity;
      drop = r - kept;
    }
    int64_t end = 0, round_total = 0;
    Scan(scan_storage).InclusiveSum(len, end, round_total);
    const int64_t round_dropped = Reduce(reduce_storage).Sum(drop);  // valid in thread 0
    if (e < a.experts) {
      a.counts[e] = kept;
      a.padded_offsets[e + 1] = carry + end;
    }
    carry += round_total;
    if (threadIdx.x == 0) dropped += round_dropped;
    __syncthreads();  // the temp storage is reused by the next round
  }
  if (threadIdx.x == 0) *a.dropped = dropped;
}

template <class Map>
__global__ void fill_kernel(Map* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = static_cast<Map>(-1);
}

// One warp per chunk (blockDim.x == 32).
template <class Idx, class Map>
__global__ void assign_kernel(RoutingArgs a, const int32_t* chunk_prefix) {
  extern __shared__ int32_t running[];
  for (int64_t e = threadIdx.x; e < a.experts; e += 32)
    running[e] = chunk_prefix[blockIdx.x * a.experts + e];
  __syncwarp();
  const auto* idx = static_cast<const Idx*>(a.indices);
  auto* slot = static_cast<Map*>(a.slot_map);
  auto* row_pair = static_cast<Map*>(a.row_pair);
  const int64_t pairs = a.tokens * a.top_k;
  const int lane = static_cast<int>(threadIdx.x);
  const unsigned lower = (1u << lane) - 1u;
  for (int64_t base = blockIdx.x * kChunk; base < (blockIdx.x + 1) * kChunk && base < pairs;
       base += 32) {
    const int64_t p = base + lane;
    int64_t e = p < pairs ? static_cast<int64_t>(idx[p]) : -1;
    if (e >= a.experts) e = -1;  // out of range (flagged by count_kernel): dropped
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    int32_t before = 0;
    if (e >= 0) before = running[e];
    __syncwarp();
    if (e >= 0 && (peers & lower) == 0) running[e] = before + __popc(peers);
    __syncwarp();
    if (p >= pairs) continue;
    int64_t s = -1;
    if (e >= 0) {
      const int64_t rank = before + __popc(peers & lower);
      if (rank < a.counts[e]) s = a.padded_offsets[e] + rank;
    }
    slot[p] = static_cast<Map>(s);
    if (s >= 0) row_pair[s] = static_cast<Map>(p);
  }
}

}  // namespace

int64_t routing_workspace_bytes_cuda(int64_t pairs, int64_t experts) {
  return chunk_counts_bytes(pairs, experts) + experts * 8;
}

// ---- regroup index ---------------------------------------------------------------------------
namespace {

constexpr int64_t kRegroupRowsPerThread = 8;

// Every block scans the counts into both orders' exclusive chunk starts in shared memory (the
// counts are few: one per (source, local expert); each expert's padding joins its last chunk in
// the expert-major order), then maps its rows (regroup_row): source_of's padded_rows, expert_of's
// rows.
template <class Cnt>
__global__ void __launch_bounds__(kThreads) regroup_kernel(RegroupArgs a) {
  extern __shared__ int64_t starts[];  // src (C + 1), then dst (C + 1)
  const int64_t w = a.sources, l = a.locals, chunks = w * l;
  int64_t* src = starts;
  int64_t* dst = starts + chunks + 1;
  const auto* c = static_cast<const Cnt*>(a.counts);
  for (int64_t i = threadIdx.x; i < chunks; i += blockDim.x) {
    const int64_t s = i / l, e = i % l;
    const int64_t n = static_cast<int64_t>(c[s * a.stride + e]);
    src[i + 1] = n > 0 ? n : 0;  // a negative count places nothing
    dst[e * w + s + 1] = n > 0 ? n : 0;
  }
  if (threadIdx.x == 0) src[0] = dst[0] = 0;
  __syncthreads();
  if (a.align > 1) {
    for (int64_t e = threadIdx.x; e < l; e += blockDim.x) {
      int64_t total = 0;
      for (int64_t s = 0; s < w; ++s) total += dst[e * w + s + 1];
      dst[e * w + w] += regroup_padded(total, a.align) - total;
    }
    __syncthreads();
  }
  // Inclusive scans of both arrays, in place: one warp each, 32 entries at a time.
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (warp < 2) {
    int64_t* v = warp == 0 ? src : dst;
    int64_t carry = 0;
    for (int64_t base = 1; base <= chunks; base += 32) {
      const int64_t i = base + lane;
      int64_t x = i <= chunks ? v[i] : 0;
#pragma unroll
      for (int sh = 1; sh < 32; sh *= 2) {
        const int64_t y = __shfl_up_sync(0xffffffffu, x, sh);
        if (lane >= sh) x += y;
      }
      if (i <= chunks) v[i] = x + carry;
      carry += __shfl_sync(0xffffffffu, x, 31);
    }
  }
  __syncthreads();
  const int64_t first = int64_t{blockIdx.x} * kThreads * kRegroupRowsPerThread + threadIdx.x;
  const int64_t most = a.padded_rows > a.rows ? a.padded_rows : a.rows;
#pragma unroll
  for (int64_t j = 0; j < kRegroupRowsPerThread; ++j) {
    const int64_t i = first + j * kThreads;
    if (i >= most) break;
    if (a.source_of && i < a.padded_rows)
      a.source_of[i] = regroup_row(dst, src, chunks, l, w, i, a.rows, a.rows);
    if (a.expert_of && i < a.rows)
      a.expert_of[i] = regroup_row(src, dst, chunks, w, l, i, a.padded_rows,
                                    a.padded_rows > 0 ? a.padded_rows - 1 : 0);
  }
}

}  // namespace

void regroup_cuda(const RegroupArgs& a, Device device, Stream stream) {
  const int64_t chunks = a.sources * a.locals;
  TESSERA_CHECK_STATUS(chunks <= kMaxExperts, Status::kUnsupported, "moe_regroup_index: ",
                       chunks, " chunks (sources x local experts); the CUDA kernel takes up to ",
                       kMaxExperts);
  const int64_t most = a.padded_rows > a.rows ? a.padded_rows : a.rows;
  if (most == 0) return;
  set_device(device);
  const int64_t per_block = kThreads * kRegroupRowsPerThread;
  const int64_t blocks = (most + per_block - 1) / per_block;
  TESSERA_CHECK_STATUS(blocks <= int64_t{1} << 30, Status::kUnsupported, "moe_regroup_index: ",
                       most, " rows are too many for one launch");
  const size_t smem = static_cast<size_t>(2 * (chunks + 1)) * sizeof(int64_t);
  dispatch_index_dtype(a.count_dtype, "counts", [&](auto ct) {
    auto kernel = regroup_kernel<typename decltype(ct)::type>;
    if (smem > 48 * 1024) {
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
    }
    kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream.as<cudaStream_t>()>>>(a);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

void routing_cuda(const RoutingArgs& a, Device device, Stream stream) {
  TESSERA_CHECK_STATUS(a.experts <= kMaxExperts, Status::kUnsupported, "moe_routing: ",
                       a.experts, " experts; the CUDA kernels take up to ", kMaxExperts);
  set_device(device);
  auto s = stream.as<cudaStream_t>();
  const int64_t pairs = a.tokens * a.top_k, chunks = num_chunks(pairs);
  TESSERA_CHECK_STATUS(chunks <= kMaxBlocks, Status::kUnsupported, "moe_routing: ", pairs,
                       " pairs; the CUDA kernels take up to ", kMaxBlocks * kChunk);
  auto* chunk_counts = static_cast<int32_t*>(a.workspace);
  auto* routed = reinterpret_cast<int64_t*>(static_cast<char*>(a.workspace) +
                                            chunk_counts_bytes(pairs, a.experts));
  const size_t smem = static_cast<size_t>(a.experts) * 4;
  dispatch_index_dtype(a.index_dtype, "indices", [&](auto it) {
    using Idx = typename decltype(it)::type;
    count_kernel<Idx><<<static_cast<int>(chunks), kThreads, smem, s>>>(a, chunk_counts);
    TESSERA_CUDA_CHECK_LAUNCH();
    chunk_scan_kernel<<<static_cast<int>((a.experts + 31) / 32), kThreads, 0, s>>>(
        a, chunk_counts, chunks, routed);
    TESSERA_CUDA_CHECK_LAUNCH();
    offsets_kernel<<<1, kThreads, 0, s>>>(a, routed);
    TESSERA_CUDA_CHECK_LAUNCH();
    dispatch_index_dtype(a.map_dtype, "slot_map", [&](auto mt) {
      using Map = typename decltype(mt)::type;
      fill_kernel<Map><<<grid_for(a.rows, kThreads), kThreads, 0, s>>>(
          static_cast<Map*>(a.row_pair), a.rows);
      TESSERA_CUDA_CHECK_LAUNCH();
      if (pairs == 0) return;
      assign_kernel<Idx, Map><<<static_cast<int>(chunks), 32, smem, s>>>(a, chunk_counts);
      TESSERA_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace tessera::detail::moe
