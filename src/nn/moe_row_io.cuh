// Shared by the CUDA kernels of the expert-parallel row ops (moe_permute_kernels.cu: permute
// (+ fused quantization); moe_row_kernels.cu: the gather-add of unpermute and permute backward,
// unpermute backward (dy and dprobs), the dequantize of a received payload); the chunk I/O also
// serves the SwiGLU kernels (row_ops.cu). Same bits as the CPU loops (moe_routing_cpu.cpp): the
// quantization and dequantization use the shared rules of moe_kernels.h, and every FP32 sum is
// written with __fadd_rn / __fmul_rn in the order moe_routing.h states (no FMA contraction).
//
// Layout of the work: one CTA of kRowThreads threads per row (permute: per permuted row, or per
// token with the slot map; gather-add, dy, dprobs: per token), thread i taking the chunks of kVec
// consecutive elements i, i + kRowThreads, ... of the row. A chunk is read with 16-byte loads
// (one for 16-bit types, two for FP32) and written with 16-byte (8-byte for FP8 codes) stores
// when the row length and every pointer allow it (`vec`, decided once per call on the host);
// otherwise element by element, with the same assignment of elements to threads and the same
// arithmetic, so both paths give the same bits. Each input row is read once per use: the fused
// quantization keeps up to kCachedChunks chunks per thread in registers between the amax and the
// encode (a longer row is read a second time), block1x128 / MXFP8 reduce each block's amax
// across the 16 / 4 threads holding it by shuffles; dprobs keeps dout's row in registers across
// the k pairs.
#pragma once

#include <cstdint>
#include <type_traits>

#include "nn/moe_kernels.h"
#include "quantize/cuda/device_io.cuh"
#include "tessera/core/cuda_check.h"
#include "tessera/formats/half.h"

namespace tessera::detail::moe::rows {

constexpr int kRowThreads = kDotPartials;  // dprobs: thread l holds partial l
constexpr int kVec = kDotChunk;            // elements per chunk
constexpr int kCachedChunks = 4;           // per thread: rows up to 8192 elements stay in registers
constexpr int kMaxGrid = 1 << 20;
static_assert(kRowThreads == 256 && kVec == 8, "the chunk loops below assume 256 x 8");

using cuda_quant::load_float;

inline void set_device(Device device) {
  int current = -1;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
}

inline int grid_for(int64_t work) {
  return static_cast<int>(work < 1 ? 1 : (work > kMaxGrid ? kMaxGrid : work));
}

__host__ __device__ inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- chunk I/O ---------------------------------------------------------------------------------
__device__ __forceinline__ void unpack16(uint32_t w, bf16, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void unpack16(uint32_t w, fp16, float& lo, float& hi) {
  lo = __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
  hi = __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}

// Elements c0 .. c0+7 of `row` (n elements) as floats; elements at or past n read as 0. vec: the
// chunk is whole and 16-byte aligned.
template <class T>
__device__ __forceinline__ void load_chunk(const T* row, int64_t c0, int64_t n, bool vec,
                                           float (&v)[kVec]) {
  if (vec) {
    if constexpr (sizeof(T) == 4) {
      const float4 a = *reinterpret_cast<const float4*>(row + c0);
      const float4 b = *reinterpret_cast<const float4*>(row + c0 + 4);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z,
      v[7] = b.w;
    } else {
      const uint4 u = *reinterpret_cast<const uint4*>(row + c0);
      unpack16(u.x, T{}, v[0], v[1]);
      unpack16(u.y, T{}, v[2], v[3]);
      unpack16(u.z, T{}, v[4], v[5]);
      unpack16(u.w, T{}, v[6], v[7]);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) v[i] = c0 + i < n ? load_float(row[c0 + i]) : 0.0f;
}

// Whether any of a chunk's values is NaN.
__device__ __forceinline__ bool any_nan(const float (&v)[kVec]) {
  bool nan = false;
#pragma unroll
  for (int i = 0; i < kVec; ++i) nan |= v[i] != v[i];
  return nan;
}

// Writes elements c0 .. c0+7 (those below n), each rounded once (from_float: RNE, the CPU's).
template <class T>
__device__ __forceinline__ void store_chunk(T* row, int64_t c0, int64_t n, bool vec,
                                            const float (&v)[kVec]) {
  if (vec) {
    if constexpr (sizeof(T) == 4) {
      __stcs(reinterpret_cast<float4*>(row + c0), make_float4(v[0], v[1], v[2], v[3]));
      __stcs(reinterpret_cast<float4*>(row + c0 + 4), make_float4(v[4], v[5], v[6], v[7]));
    } else {
      if constexpr (std::is_same_v<T, bf16>) {
        if (!any_nan(v)) {
          // The hardware's RNE conversion, two elements an instruction: the same bits as
          // encode_bf16 for every value but NaN (its NaN is canonical, encode_bf16 keeps the
          // sign and payload), so a chunk holding a NaN takes the exact path below.
          __nv_bfloat162 h[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
          __stcs(reinterpret_cast<uint4*>(row + c0), *reinterpret_cast<const uint4*>(h));
          return;
        }
      }
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        w[i] = static_cast<uint32_t>(from_float<T>(v[2 * i]).bits) |
               (static_cast<uint32_t>(from_float<T>(v[2 * i + 1]).bits) << 16);
      }
      __stcs(reinterpret_cast<uint4*>(row + c0), make_uint4(w[0], w[1], w[2], w[3]));
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i)
    if (c0 + i < n) row[c0 + i] = from_float<T>(v[i]);
}

}  // namespace tessera::detail::moe::rows
