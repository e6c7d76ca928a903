// CUDA kernels of the expert-parallel row ops other than the permute (moe_permute_kernels.cu):
// the gather-add of unpermute and permute backward, unpermute backward (dy and dprobs) and the
// dequantize of a received payload. Conventions and layout of the work: moe_row_io.cuh.
#include <cstdint>

#include "nn/moe_kernels.h"
#include "nn/moe_row_io.cuh"
#include "quantize/cuda/device_io.cuh"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/half.h"

namespace tessera::detail::moe {
namespace {

using namespace rows;  // the shared row constants and chunk I/O (moe_row_io.cuh)

// ---- gather-add: out[t] = 0 + Σ_j (p ·) y[slot[t, j]], j ascending ----------------------------
template <class Y, class Out, class Map>
__global__ void __launch_bounds__(kRowThreads) gather_add_kernel(GatherAddArgs a, bool vec) {
  const auto* y = static_cast<const Y*>(a.y);
  const auto* slot = static_cast<const Map*>(a.slot_map);
  const auto* probs = static_cast<const float*>(a.probs);
  auto* out = static_cast<Out*>(a.out);
  const int64_t h = a.hidden, k = a.top_k, chunks = (h + kVec - 1) / kVec;
  constexpr int kBatch = 4;  // rows loaded before they are added: loads in flight
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    for (int64_t c = threadIdx.x; c < chunks; c += kRowThreads) {
      float acc[kVec] = {};
      for (int64_t j0 = 0; j0 < k; j0 += kBatch) {
        float v[kBatch][kVec];
        bool live[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int64_t s = j0 + u < k ? static_cast<int64_t>(slot[t * k + j0 + u]) : -1;
          live[u] = s >= 0 && s < a.rows;
          if (live[u]) load_chunk(y + s * h, c * kVec, h, vec, v[u]);
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          if (!live[u]) continue;
          const float w = probs != nullptr ? probs[t * k + j0 + u] : 1.0f;
#pragma unroll
          for (int e = 0; e < kVec; ++e)
            acc[e] = __fadd_rn(acc[e], probs != nullptr ? __fmul_rn(w, v[u][e]) : v[u][e]);
        }
      }
      store_chunk(out + t * h, c * kVec, h, vec, acc);
    }
  }
}

// ---- unpermute backward: dy ------------------------------------------------------------------
// Per token: dout[t] read once, written (times p) to the row of each pair whose row holds it
// back (slot[p] = s and row_pair[s] = p, as moe_routing writes them).
template <class D, class Dy, class Map>
__global__ void __launch_bounds__(kRowThreads) scatter_kernel(ScatterArgs a, bool vec) {
  const auto* dout = static_cast<const D*>(a.dout);
  const auto* slot = static_cast<const Map*>(a.slot_map);
  const auto* row_pair = static_cast<const Map*>(a.row_pair);
  const auto* probs = static_cast<const float*>(a.probs);
  auto* dy = static_cast<Dy*>(a.dy);
  const int64_t h = a.hidden, k = a.top_k, chunks = (h + kVec - 1) / kVec;
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    for (int64_t c = threadIdx.x; c < chunks; c += kRowThreads) {
      float g[kVec];
      load_chunk(dout + t * h, c * kVec, h, vec, g);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t p = t * k + j, s = static_cast<int64_t>(slot[p]);
        if (s < 0 || s >= a.rows || static_cast<int64_t>(row_pair[s]) != p) continue;
        float v[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[e] = probs != nullptr ? __fmul_rn(probs[p], g[e]) : g[e];
        store_chunk(dy + s * h, c * kVec, h, vec, v);
      }
    }
  }
}

// The rows scatter_kernel does not write: zero rows (row_pair -1), and rows whose pair's slot is
// elsewhere (maps that are not inverse; the CPU's per-row rule). One warp per row.
template <class D, class Dy, class Map>
__global__ void __launch_bounds__(kRowThreads) scatter_rest_kernel(ScatterArgs a, bool vec) {
  const auto* dout = static_cast<const D*>(a.dout);
  const auto* slot = static_cast<const Map*>(a.slot_map);
  const auto* row_pair = static_cast<const Map*>(a.row_pair);
  const auto* probs = static_cast<const float*>(a.probs);
  auto* dy = static_cast<Dy*>(a.dy);
  const int64_t h = a.hidden, pairs = a.tokens * a.top_k, chunks = (h + kVec - 1) / kVec;
  constexpr int kWarps = kRowThreads / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t r = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32; r < a.rows;
       r += int64_t{gridDim.x} * kWarps) {
    const int64_t p = static_cast<int64_t>(row_pair[r]);
    const bool held = p >= 0 && p < pairs;
    if (held && static_cast<int64_t>(slot[p]) == r) continue;  // scatter_kernel's
    for (int64_t c = lane; c < chunks; c += 32) {
      float v[kVec] = {};
      if (held) {
        load_chunk(dout + (p / a.top_k) * h, c * kVec, h, vec, v);
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[e] = probs != nullptr ? __fmul_rn(probs[p], v[e]) : v[e];
      }
      store_chunk(dy + r * h, c * kVec, h, vec, v);
    }
  }
}

// ---- unpermute backward: dprobs --------------------------------------------------------------
// Per token, dout[t]'s chunks kept in registers; for each pair, thread l sums the products of
// its chunks (partial l of moe_kernels.h's order), then the halving tree over the 256 partials.
template <class D, class Y, class Map>
__global__ void __launch_bounds__(kRowThreads) dprobs_kernel(ScatterArgs a, bool vec) {
  __shared__ float part[kRowThreads];
  const auto* dout = static_cast<const D*>(a.dout);
  const auto* y = static_cast<const Y*>(a.y);
  const auto* slot = static_cast<const Map*>(a.slot_map);
  const int64_t h = a.hidden, k = a.top_k, chunks = (h + kVec - 1) / kVec;
  const int tid = static_cast<int>(threadIdx.x);
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    const D* g_row = dout + t * h;
    float g[kCachedChunks][kVec];
#pragma unroll
    for (int i = 0; i < kCachedChunks; ++i) {
      const int64_t c = tid + int64_t{i} * kRowThreads;
      if (c < chunks) load_chunk(g_row, c * kVec, h, vec, g[i]);
    }
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = t * k + j, s = static_cast<int64_t>(slot[p]);
      if (s < 0 || s >= a.rows) {  // uniform over the CTA
        if (tid == 0) a.dprobs[p] = 0.0f;
        continue;
      }
      const Y* y_row = y + s * h;
      float acc = 0.0f;
#pragma unroll
      for (int i = 0; i < kCachedChunks; ++i) {
        const int64_t c = tid + int64_t{i} * kRowThreads;
        if (c >= chunks) break;
        float v[kVec];
        load_chunk(y_row, c * kVec, h, vec, v);
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          if (c * kVec + e < h) acc = __fadd_rn(acc, __fmul_rn(g[i][e], v[e]));
      }
      for (int64_t c = tid + int64_t{kCachedChunks} * kRowThreads; c < chunks; c += kRowThreads) {
        float gv[kVec], v[kVec];
        load_chunk(g_row, c * kVec, h, vec, gv);
        load_chunk(y_row, c * kVec, h, vec, v);
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          if (c * kVec + e < h) acc = __fadd_rn(acc, __fmul_rn(gv[e], v[e]));
      }
      part[tid] = acc;
      __syncthreads();
      for (int w = kRowThreads / 2; w >= 32; w /= 2) {
        if (tid < w) part[tid] = __fadd_rn(part[tid], part[tid + w]);
        __syncthreads();
      }
      if (tid < 32) {
        float v = part[tid];
        for (int w = 16; w >= 1; w /= 2) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, w));
        if (tid == 0) a.dprobs[p] = v;
      }
      __syncthreads();  // part is rewritten by the next pair
    }
  }
}

// ---- dequantize ------------------------------------------------------------------------------
// A chunk: 8 codes, one 8-byte load and one 16-byte store of BF16 / FP16 (two of FP32), so that
// one store instruction of a warp writes 512 contiguous bytes, whole 32-byte sectors (16 codes
// a lane would write half of each sector per instruction).
constexpr int kCodes = kVec;
constexpr int kChunksInFlight = 4;  // chunks a thread loads before it decodes any

__device__ __forceinline__ float decode_code(uint8_t c, bool e5m2) {
  // FP8 -> half is exact for every code (a NaN code gives a NaN, canonicalized after the
  // multiply); half -> float is exact.
  const __half_raw hr = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c),
                                                e5m2 ? __NV_E5M2 : __NV_E4M3);
  return __half2float(__half(hr));
}

__device__ __forceinline__ float scale_at(const DequantizeArgs& a, int64_t r, int64_t col) {
  const int64_t at = r * a.scale_cols + col / a.block;
  return a.e8m0 ? formats::decode_e8m0(static_cast<const uint8_t*>(a.scale_inv)[at])
                : static_cast<const float*>(a.scale_inv)[at];
}

// One 8-code chunk starting at column c0 (a chunk never straddles a scale block: blocks are the
// row, 128 or 32 wide, and H % 8 == 0 on this path).
template <class Out>
__device__ __forceinline__ void dequantize_chunk(const DequantizeArgs& a, int64_t src, uint2 codes,
                                                 int64_t c0, Out* o) {
  const uint32_t w[2] = {codes.x, codes.y};
  const float s = scale_at(a, src, c0);
  float v[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e)
    v[e] = dequantize_product(decode_code(static_cast<uint8_t>(w[e / 4] >> (8 * (e % 4))), a.e5m2),
                              s);
  store_chunk(o, c0, a.hidden, true, v);
}

// One CTA per output row at a time (its source row looked up once); thread i takes the chunks
// i, i + kRowThreads, ... of the row, kChunksInFlight at a time with all their loads issued
// first; vec: H % 8 == 0 and aligned pointers. (A thread per chunk of the whole matrix would
// divide 64-bit indices and load the source row once per chunk.)
template <class Out>
__global__ void __launch_bounds__(kRowThreads) dequantize_kernel(DequantizeArgs a, bool vec) {
  auto* out = static_cast<Out*>(a.out);
  const int64_t h = a.hidden, chunks = (h + kCodes - 1) / kCodes;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const int64_t src = dequantize_source(a, r);  // the same in every thread
    Out* o = out + r * h;
    if (src < 0) {  // an index outside the payload: a zero row
      const float zero[kVec] = {};
      for (int64_t c = threadIdx.x; c * kVec < h; c += kRowThreads)
        store_chunk(o, c * kVec, h, vec, zero);
      continue;
    }
    const uint8_t* q = a.data + src * h;
    if (!vec) {
      for (int64_t i = threadIdx.x; i < h; i += kRowThreads)
        o[i] = from_float<Out>(dequantize_product(decode_code(q[i], a.e5m2), scale_at(a, src, i)));
      continue;
    }
    for (int64_t c = threadIdx.x; c < chunks; c += kChunksInFlight * kRowThreads) {
      uint2 codes[kChunksInFlight];
#pragma unroll
      for (int j = 0; j < kChunksInFlight; ++j) {
        const int64_t d = c + j * kRowThreads;
        codes[j] = d < chunks ? __ldcs(reinterpret_cast<const uint2*>(q) + d) : make_uint2(0, 0);
      }
#pragma unroll
      for (int j = 0; j < kChunksInFlight; ++j) {
        const int64_t d = c + j * kRowThreads;
        if (d < chunks) dequantize_chunk(a, src, codes[j], d * kCodes, o);
      }
    }
  }
}

}  // namespace

void gather_add_cuda(const GatherAddArgs& a, Device device, Stream stream) {
  set_device(device);
  if (a.tokens * a.hidden == 0) return;
  auto s = stream.as<cudaStream_t>();
  const bool vec = a.hidden % kVec == 0 && aligned16(a.y) && aligned16(a.out);
  dispatch_float_input(a.y_dtype, "y", [&](auto yt) {
    dispatch_float_input(a.out_dtype, "out", [&](auto ot) {
      dispatch_index_dtype(a.map_dtype, "slot_map", [&](auto mt) {
        gather_add_kernel<typename decltype(yt)::type, typename decltype(ot)::type,
                          typename decltype(mt)::type>
            <<<grid_for(a.tokens), kRowThreads, 0, s>>>(a, vec);
        TESSERA_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void scatter_cuda(const ScatterArgs& a, Device device, Stream stream) {
  set_device(device);
  auto s = stream.as<cudaStream_t>();
  const bool vec_dy = a.hidden % kVec == 0 && aligned16(a.dout) && aligned16(a.dy);
  const bool vec_dp = a.hidden % kVec == 0 && aligned16(a.dout) && aligned16(a.y);
  dispatch_float_input(a.dout_dtype, "dout", [&](auto dt) {
    dispatch_index_dtype(a.map_dtype, "slot_map", [&](auto mt) {
      using D = typename decltype(dt)::type;
      using Map = typename decltype(mt)::type;
      if (a.dy != nullptr && a.rows * a.hidden > 0) {  // dy null: dprobs only
        dispatch_float_input(a.dy_dtype, "dy", [&](auto gt) {
          using Dy = typename decltype(gt)::type;
          if (a.tokens > 0) {
            scatter_kernel<D, Dy, Map><<<grid_for(a.tokens), kRowThreads, 0, s>>>(a, vec_dy);
            TESSERA_CUDA_CHECK_LAUNCH();
          }
          const int64_t per_cta = kRowThreads / 32;
          scatter_rest_kernel<D, Dy, Map>
              <<<grid_for((a.rows + per_cta - 1) / per_cta), kRowThreads, 0, s>>>(a, vec_dy);
          TESSERA_CUDA_CHECK_LAUNCH();
        });
      }
      if (a.dprobs == nullptr || a.tokens * a.top_k == 0) return;
      dispatch_float_input(a.y_dtype, "y", [&](auto yt) {
        dprobs_kernel<D, typename decltype(yt)::type, Map>
            <<<grid_for(a.tokens), kRowThreads, 0, s>>>(a, vec_dp);
        TESSERA_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void dequantize_cuda(const DequantizeArgs& a, Device device, Stream stream) {
  set_device(device);
  if (a.rows * a.hidden == 0) return;
  auto s = stream.as<cudaStream_t>();
  const bool vec = a.hidden % kCodes == 0 && reinterpret_cast<uintptr_t>(a.data) % 8 == 0 &&
                   aligned16(a.out);
  dispatch_float_input(a.out_dtype, "out", [&](auto ot) {
    dequantize_kernel<typename decltype(ot)::type><<<grid_for(a.rows), kRowThreads, 0, s>>>(a, vec);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tessera::detail::moe
