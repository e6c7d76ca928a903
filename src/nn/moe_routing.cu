// CUDA kernels of the expert-parallel routing ops. Same bits as the CPU loops
// (moe_routing_cpu.cpp) by construction: the kept pairs and their ranks follow pair order, the
// quantization uses the shared rules of moe_kernels.h, and every FP32 sum is written with
// __fadd_rn / __fmul_rn in the order moe_routing.h states (no FMA contraction).
//
// Routing, without a host sync (graph-capturable), in four launches:
//   1. count: one block per chunk of kChunk pairs counts its pairs per expert (shared histogram)
//      into chunk_counts (chunks, E); indices outside [0, E) raise the error flag, not counted;
//   2. scan: one block turns chunk_counts into per-chunk exclusive prefixes per expert and the
//      routed totals, then one thread walks the E experts: kept counts, padded offsets, dropped;
//   3. row_pair = -1 everywhere;
//   4. assign: one warp per chunk walks its pairs 32 at a time in order; __match_any_sync finds
//      the lanes sharing an expert, their rank is the chunk prefix + the running count + the
//      number of lower lanes with that expert.
// Permute: one warp per permuted row (copy, or per-block amax by warp reduction then encode).
// Gather-add / scatter: one thread per output element; dprobs: one warp per pair.
#include <cstdint>

#include "nn/moe_kernels.h"
#include "quantize/cuda/device_io.cuh"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/nn/moe_routing.h"
#include "tessera/formats/half.h"

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

__global__ void __launch_bounds__(kThreads) scan_kernel(RoutingArgs a, int32_t* chunk_counts,
                                                        int64_t chunks, int64_t* routed) {
  for (int64_t e = threadIdx.x; e < a.experts; e += blockDim.x) {
    int64_t running = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t v = chunk_counts[c * a.experts + e];
      chunk_counts[c * a.experts + e] = static_cast<int32_t>(running);  // < kChunk · chunks
      running += v;
    }
    routed[e] = running;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  int64_t offset = 0, dropped = 0;
  a.padded_offsets[0] = 0;
  for (int64_t e = 0; e < a.experts; ++e) {
    const int64_t r = routed[e];
    const int64_t kept = a.capacity < 0 ? r : (r < a.capacity ? r : a.capacity);
    offset += a.capacity < 0 ? (kept + a.align - 1) / a.align * a.align : a.capacity;
    a.counts[e] = kept;
    a.padded_offsets[e + 1] = offset;
    dropped += r - kept;
  }
  *a.dropped = dropped;
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

// ---- permute ---------------------------------------------------------------------------------
template <class In, class Map>
__global__ void __launch_bounds__(kThreads) permute_kernel(PermuteArgs a) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  const auto* x = static_cast<const In*>(a.x);
  const auto* row_pair = static_cast<const Map*>(a.row_pair);
  const int64_t h = a.hidden;
  for (int64_t r = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32; r < a.rows;
       r += warps) {
    const int64_t p = static_cast<int64_t>(row_pair[r]);
    const In* src = p >= 0 && p < a.tokens * a.top_k ? x + (p / a.top_k) * h : nullptr;
    if (a.quant.mode == RowQuantMode::kNone) {
      In* out = static_cast<In*>(a.out) + r * h;
      for (int64_t c = lane; c < h; c += 32) out[c] = src != nullptr ? src[c] : In{};
      continue;
    }
    uint8_t* out = static_cast<uint8_t*>(a.out) + r * h;
    for (int64_t b = 0; b < a.quant.scale_cols; ++b) {
      const int64_t b0 = b * a.quant.block;
      const int64_t n = a.quant.block < h - b0 ? a.quant.block : h - b0;
      uint32_t m = 0;
      for (int64_t c = lane; c < n && src != nullptr; c += 32) {
        const uint32_t v = scale_rules::abs_bits(to_float(src[b0 + c]));
        m = v > m ? v : m;
      }
      m = cuda_quant::warp_max(m);  // abs bits: NaN wins
      float sink = 0.0f;  // lanes other than 0 compute the multiplier without storing the scale
      const int64_t at = r * a.quant.scale_cols + b;
      const float mult = lane == 0 ? block_multiplier(a.quant, m, a.scale_inv, at)
                                   : block_multiplier(a.quant, m, &sink, 0);
      for (int64_t c = lane; c < n; c += 32) {
        const float v = src != nullptr ? to_float(src[b0 + c]) : 0.0f;
        out[b0 + c] = encode_element(a.quant, __fmul_rn(v, mult));
      }
    }
  }
}

// ---- gather-add, scatter, dprobs ---------------------------------------------------------------
template <class Y, class Out, class Map>
__global__ void __launch_bounds__(kThreads) gather_add_kernel(GatherAddArgs a) {
  const auto* y = static_cast<const Y*>(a.y);
  const auto* slot = static_cast<const Map*>(a.slot_map);
  const auto* probs = static_cast<const float*>(a.probs);
  auto* out = static_cast<Out*>(a.out);
  const int64_t n = a.tokens * a.hidden;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / a.hidden, c = i % a.hidden;
    float acc = 0.0f;
    for (int64_t j = 0; j < a.top_k; ++j) {
      const int64_t s = static_cast<int64_t>(slot[t * a.top_k + j]);
      if (s < 0 || s >= a.rows) continue;
      const float v = to_float(y[s * a.hidden + c]);
      acc = __fadd_rn(acc, probs != nullptr ? __fmul_rn(probs[t * a.top_k + j], v) : v);
    }
    out[i] = from_float<Out>(acc);
  }
}

template <class D, class Dy, class Map>
__global__ void __launch_bounds__(kThreads) scatter_kernel(ScatterArgs a) {
  const auto* dout = static_cast<const D*>(a.dout);
  const auto* row_pair = static_cast<const Map*>(a.row_pair);
  const auto* probs = static_cast<const float*>(a.probs);
  auto* dy = static_cast<Dy*>(a.dy);
  const int64_t n = a.rows * a.hidden;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / a.hidden, c = i % a.hidden;
    const int64_t p = static_cast<int64_t>(row_pair[r]);
    if (p < 0 || p >= a.tokens * a.top_k) {
      dy[i] = from_float<Dy>(0.0f);
      continue;
    }
    const float g = to_float(dout[(p / a.top_k) * a.hidden + c]);
    dy[i] = from_float<Dy>(probs != nullptr ? __fmul_rn(probs[p], g) : g);
  }
}

template <class D, class Y, class Map>
__global__ void __launch_bounds__(kThreads) dprobs_kernel(ScatterArgs a) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  const auto* dout = static_cast<const D*>(a.dout);
  const auto* y = static_cast<const Y*>(a.y);
  const auto* slot = static_cast<const Map*>(a.slot_map);
  for (int64_t p = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32;
       p < a.tokens * a.top_k; p += warps) {
    const int64_t s = static_cast<int64_t>(slot[p]);
    float acc = 0.0f;
    if (s >= 0 && s < a.rows) {
      const D* g = dout + (p / a.top_k) * a.hidden;
      const Y* row = y + s * a.hidden;
      for (int64_t c = lane; c < a.hidden; c += 32)
        acc = __fadd_rn(acc, __fmul_rn(to_float(g[c]), to_float(row[c])));
    }
    for (int w = 16; w >= 1; w /= 2) acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, w));
    if (lane == 0) a.dprobs[p] = s >= 0 && s < a.rows ? acc : 0.0f;
  }
}

}  // namespace

int64_t routing_workspace_bytes_cuda(int64_t pairs, int64_t experts) {
  return chunk_counts_bytes(pairs, experts) + experts * 8;
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
    scan_kernel<<<1, kThreads, 0, s>>>(a, chunk_counts, chunks, routed);
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

void permute_cuda(const PermuteArgs& a, Device device, Stream stream) {
  set_device(device);
  auto s = stream.as<cudaStream_t>();
  if (a.quant.mode != RowQuantMode::kNone && a.scale_rows > a.rows) {
    const int64_t esize = a.quant.mode == RowQuantMode::kMXFP8 ? 1 : 4;
    TESSERA_CUDA_CHECK(cudaMemsetAsync(
        static_cast<uint8_t*>(a.scale_inv) + a.rows * a.quant.scale_cols * esize, 0,
        static_cast<size_t>((a.scale_rows - a.rows) * a.quant.scale_cols * esize), s));
  }
  if (a.rows == 0) return;
  dispatch_float_input(a.x_dtype, "x", [&](auto xt) {
    dispatch_index_dtype(a.map_dtype, "row_pair", [&](auto mt) {
      permute_kernel<typename decltype(xt)::type, typename decltype(mt)::type>
          <<<grid_for(a.rows, kThreads / 32), kThreads, 0, s>>>(a);
      TESSERA_CUDA_CHECK_LAUNCH();
    });
  });
}

void gather_add_cuda(const GatherAddArgs& a, Device device, Stream stream) {
  set_device(device);
  if (a.tokens * a.hidden == 0) return;
  auto s = stream.as<cudaStream_t>();
  dispatch_float_input(a.y_dtype, "y", [&](auto yt) {
    dispatch_float_input(a.out_dtype, "out", [&](auto ot) {
      dispatch_index_dtype(a.map_dtype, "slot_map", [&](auto mt) {
        gather_add_kernel<typename decltype(yt)::type, typename decltype(ot)::type,
                          typename decltype(mt)::type>
            <<<grid_for(a.tokens * a.hidden, kThreads), kThreads, 0, s>>>(a);
        TESSERA_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void scatter_cuda(const ScatterArgs& a, Device device, Stream stream) {
  set_device(device);
  auto s = stream.as<cudaStream_t>();
  dispatch_float_input(a.dout_dtype, "dout", [&](auto dt) {
    dispatch_index_dtype(a.map_dtype, "slot_map", [&](auto mt) {
      using D = typename decltype(dt)::type;
      using Map = typename decltype(mt)::type;
      if (a.rows * a.hidden > 0) {
        dispatch_float_input(a.dy_dtype, "dy", [&](auto gt) {
          scatter_kernel<D, typename decltype(gt)::type, Map>
              <<<grid_for(a.rows * a.hidden, kThreads), kThreads, 0, s>>>(a);
          TESSERA_CUDA_CHECK_LAUNCH();
        });
      }
      if (a.dprobs == nullptr || a.tokens * a.top_k == 0) return;
      dispatch_float_input(a.y_dtype, "y", [&](auto yt) {
        dprobs_kernel<D, typename decltype(yt)::type, Map>
            <<<grid_for(a.tokens * a.top_k, kThreads / 32), kThreads, 0, s>>>(a);
        TESSERA_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace tessera::detail::moe
