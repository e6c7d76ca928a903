// CUDA kernels of the expert-parallel row ops (the routing metadata: moe_routing.cu): permute
// (+ fused quantization), the gather-add of unpermute and permute backward, unpermute backward
// (dy and dprobs) and the dequantize of a received payload. Same bits as the CPU loops
// (moe_routing_cpu.cpp): the quantization and dequantization use the shared rules of
// moe_kernels.h, and every FP32 sum is written with __fadd_rn / __fmul_rn in the order
// moe_routing.h states (no FMA contraction).
//
// Layout of the work: one CTA of kRowThreads threads per row (permute: per permuted row;
// gather-add, dy, dprobs: per token), thread i taking the chunks of kVec consecutive elements
// i, i + kRowThreads, ... of the row. A chunk is read with 16-byte loads (one for 16-bit types,
// two for FP32) and written with 16-byte (8-byte for FP8 codes) stores when the row length and
// every pointer allow it (`vec`, decided once per call on the host); otherwise element by
// element, with the same assignment of elements to threads and the same arithmetic, so both
// paths give the same bits. Each input row is read once per use: the fused rowwise quantization
// keeps up to kCachedChunks chunks per thread in registers between the amax and the encode (a
// longer row is read a second time), block1x128 / MXFP8 reduce each block's amax across the 16
// / 4 threads holding it by shuffles; dprobs keeps dout's row in registers across the k pairs.
#include <cstdint>

#include "nn/moe_kernels.h"
#include "quantize/cuda/device_io.cuh"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/half.h"

namespace tessera::detail::moe {
namespace {

constexpr int kRowThreads = kDotPartials;  // dprobs: thread l holds partial l
constexpr int kVec = kDotChunk;            // elements per chunk
constexpr int kCachedChunks = 4;           // per thread: rows up to 8192 elements stay in registers
constexpr int kMaxGrid = 1 << 20;
static_assert(kRowThreads == 256 && kVec == 8, "the chunk loops below assume 256 x 8");

using cuda_quant::load_float;

void set_device(Device device) {
  int current = -1;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
}

int grid_for(int64_t work) {
  return static_cast<int>(work < 1 ? 1 : (work > kMaxGrid ? kMaxGrid : work));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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

// Writes elements c0 .. c0+7 (those below n), each rounded once (from_float: RNE, the CPU's).
template <class T>
__device__ __forceinline__ void store_chunk(T* row, int64_t c0, int64_t n, bool vec,
                                            const float (&v)[kVec]) {
  if (vec) {
    if constexpr (sizeof(T) == 4) {
      __stcs(reinterpret_cast<float4*>(row + c0), make_float4(v[0], v[1], v[2], v[3]));
      __stcs(reinterpret_cast<float4*>(row + c0 + 4), make_float4(v[4], v[5], v[6], v[7]));
    } else {
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

// FP8 codes of the 8 products v[i] · mult (byte i: element c0 + i), as the shared rule
// encode_element: the hardware cvt.rn.satfinite (device_io.cuh) gives its bits.
__device__ __forceinline__ uint2 encode_chunk(const RowQuant& q, const float (&v)[kVec],
                                              float mult) {
  float y[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) y[i] = __fmul_rn(v[i], mult);
  if (q.e5m2) {
    return make_uint2(cuda_quant::encode_fp8x4<DType::kFloat8E5M2>(y[0], y[1], y[2], y[3]),
                      cuda_quant::encode_fp8x4<DType::kFloat8E5M2>(y[4], y[5], y[6], y[7]));
  }
  return make_uint2(cuda_quant::encode_fp8x4<DType::kFloat8E4M3>(y[0], y[1], y[2], y[3]),
                    cuda_quant::encode_fp8x4<DType::kFloat8E4M3>(y[4], y[5], y[6], y[7]));
}

__device__ __forceinline__ void store_codes(uint8_t* row, int64_t c0, int64_t n, bool vec,
                                            uint2 codes) {
  if (vec) {
    __stcs(reinterpret_cast<uint2*>(row + c0), codes);
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const uint32_t w = i < 4 ? codes.x : codes.y;
    if (c0 + i < n) row[c0 + i] = static_cast<uint8_t>(w >> (8 * (i % 4)));
  }
}

__device__ __forceinline__ uint32_t chunk_amax(const float (&v)[kVec]) {
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < kVec; ++i) m = max(m, scale_rules::abs_bits(v[i]));  // NaN bits win
  return m;
}

// ---- permute -------------------------------------------------------------------------------------
// A row copied (src) or zero-filled (src null) in 16-byte units (vec) or elements.
template <class In>
__device__ __forceinline__ void copy_row(const In* src, In* dst, int64_t h, bool vec) {
  if (vec) {
    const int64_t n = h * static_cast<int64_t>(sizeof(In)) / 16;
    const auto* s = reinterpret_cast<const uint4*>(src);
    auto* d = reinterpret_cast<uint4*>(dst);
    for (int64_t i = threadIdx.x; i < n; i += 4 * kRowThreads) {  // four loads in flight
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t j = i + u * kRowThreads;
        v[u] = src != nullptr && j < n ? s[j] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (i + u * kRowThreads < n) __stcs(d + i + u * kRowThreads, v[u]);
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < h; i += kRowThreads) dst[i] = src != nullptr ? src[i] : In{};
}

// A chunk of a row kept in registers between two uses: a 16-bit row's 8 elements as their bits
// (one 16-byte word: half the registers of 8 floats, so more rows are in flight per SM), an
// FP32 row's as floats.
template <class In>
struct RawChunk {
  uint4 bits;
  __device__ __forceinline__ void load(const In* row, int64_t c0, int64_t n, bool vec) {
    if (vec) {
      bits = *reinterpret_cast<const uint4*>(row + c0);
      return;
    }
    uint32_t w[4] = {};
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (c0 + i < n) w[i / 2] |= static_cast<uint32_t>(row[c0 + i].bits) << (16 * (i % 2));
    bits = make_uint4(w[0], w[1], w[2], w[3]);
  }
  __device__ __forceinline__ void zero() { bits = make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ void floats(float (&v)[kVec]) const {
    unpack16(bits.x, In{}, v[0], v[1]);
    unpack16(bits.y, In{}, v[2], v[3]);
    unpack16(bits.z, In{}, v[4], v[5]);
    unpack16(bits.w, In{}, v[6], v[7]);
  }
};
template <>
struct RawChunk<float> {
  float f[kVec];
  __device__ __forceinline__ void load(const float* row, int64_t c0, int64_t n, bool vec) {
    load_chunk(row, c0, n, vec, f);
  }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int e = 0; e < kVec; ++e) f[e] = 0.0f;
  }
  __device__ __forceinline__ void floats(float (&v)[kVec]) const {
#pragma unroll
    for (int e = 0; e < kVec; ++e) v[e] = f[e];
  }
};

// A weighted row's chunk (PermuteArgs::weights): each element weighted_element(w, v).
template <class In>
__device__ __forceinline__ void weigh(float (&v)[kVec], bool weighted, float w) {
  if (!weighted) return;
#pragma unroll
  for (int e = 0; e < kVec; ++e) v[e] = weighted_element<In>(w, v[e]);
}

// The first kCachedChunks chunks of a row (src null: a zero row) into registers, every load
// issued before the first is used.
template <class In>
__device__ __forceinline__ void load_cached(RawChunk<In> (&cache)[kCachedChunks], const In* src,
                                            int64_t h, int64_t chunks, bool vec) {
#pragma unroll
  for (int i = 0; i < kCachedChunks; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * kRowThreads;
    if (src != nullptr && c < chunks) cache[i].load(src, c * kVec, h, vec);
    else cache[i].zero();
  }
}

// This thread's abs-bits maximum over its cached chunks (weighted as weigh does).
template <class In>
__device__ __forceinline__ uint32_t cached_amax(const RawChunk<In> (&cache)[kCachedChunks],
                                                bool weighted, float w) {
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < kCachedChunks; ++i) {
    float v[kVec];
    cache[i].floats(v);
    weigh<In>(v, weighted, w);
    m = max(m, chunk_amax(v));
  }
  return m;
}

// The codes of this thread's cached chunks under one multiplier (weighted as weigh does).
template <class In>
__device__ __forceinline__ void cached_codes(const RawChunk<In> (&cache)[kCachedChunks],
                                             bool weighted, float w, const RowQuant& q,
                                             float mult, uint2 (&codes)[kCachedChunks]) {
#pragma unroll
  for (int i = 0; i < kCachedChunks; ++i) {
    float v[kVec];
    cache[i].floats(v);
    weigh<In>(v, weighted, w);
    codes[i] = encode_chunk(q, v, mult);
  }
}

// Rowwise: the row's amax over the CTA, then the encode from the chunks kept in registers.
template <class In>
__device__ void quantize_row_rowwise(const RowQuant& q, const In* src, int64_t h, bool vec,
                                     bool weighted, float w, uint8_t* out, void* scale_inv,
                                     int64_t r, uint32_t* scratch) {
  const int64_t chunks = (h + kVec - 1) / kVec;
  RawChunk<In> cache[kCachedChunks];
  load_cached(cache, src, h, chunks, vec);
  uint32_t m = cached_amax(cache, weighted, w);
  for (int64_t c = threadIdx.x + int64_t{kCachedChunks} * kRowThreads; src != nullptr && c < chunks;
       c += kRowThreads) {
    float v[kVec];
    load_chunk(src, c * kVec, h, vec, v);
    weigh<In>(v, weighted, w);
    m = max(m, chunk_amax(v));
  }
  m = cuda_quant::block_max<kRowThreads>(m, scratch);
  float sink = 0.0f;  // threads other than 0 compute the multiplier without storing the scale
  const float mult = threadIdx.x == 0 ? block_multiplier(q, m, scale_inv, r)
                                      : block_multiplier(q, m, &sink, 0);
  uint2 codes[kCachedChunks];
  cached_codes(cache, weighted, w, q, mult, codes);
#pragma unroll
  for (int i = 0; i < kCachedChunks; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * kRowThreads;
    if (c < chunks) store_codes(out, c * kVec, h, vec, codes[i]);
  }
  for (int64_t c = threadIdx.x + int64_t{kCachedChunks} * kRowThreads; c < chunks;
       c += kRowThreads) {
    float v[kVec] = {};
    if (src != nullptr) load_chunk(src, c * kVec, h, vec, v);
    weigh<In>(v, weighted, w);
    store_codes(out, c * kVec, h, vec, encode_chunk(q, v, mult));
  }
}

// Block1x128 / MXFP8: a block's g = block / kVec chunks sit on g neighbouring lanes (g divides 32
// and kRowThreads), whose shuffles give the block amax; the lane holding the first chunk stores
// the scale. The first kCachedChunks rounds' loads are all issued before the first round.
template <class In>
__device__ __forceinline__ void quantize_block_round(const RowQuant& q, int64_t c, int64_t chunks,
                                                     int64_t h, bool vec, const float (&v)[kVec],
                                                     uint8_t* out, void* scale_inv, int64_t r) {
  const int g = static_cast<int>(q.block / kVec);  // 16 or 4
  uint32_t m = chunk_amax(v);
  for (int o = g / 2; o >= 1; o /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  float sink = 0.0f;
  const bool first = c < chunks && c % g == 0;
  const float mult = first ? block_multiplier(q, m, scale_inv, r * q.scale_cols + c / g)
                           : block_multiplier(q, m, &sink, 0);
  if (c < chunks) store_codes(out, c * kVec, h, vec, encode_chunk(q, v, mult));
}

template <class In>
__device__ void quantize_row_blocks(const RowQuant& q, const In* src, int64_t h, bool vec,
                                    bool weighted, float w, uint8_t* out, void* scale_inv,
                                    int64_t r) {
  const int64_t chunks = (h + kVec - 1) / kVec;
  RawChunk<In> cache[kCachedChunks];
  load_cached(cache, src, h, chunks, vec);
#pragma unroll
  for (int i = 0; i < kCachedChunks; ++i) {  // uniform trip count (shuffles)
    if (int64_t{i} * kRowThreads >= chunks) break;
    float v[kVec];
    cache[i].floats(v);
    weigh<In>(v, weighted, w);
    quantize_block_round<In>(q, threadIdx.x + int64_t{i} * kRowThreads, chunks, h, vec, v, out,
                             scale_inv, r);
  }
  for (int64_t base = int64_t{kCachedChunks} * kRowThreads; base < chunks; base += kRowThreads) {
    const int64_t c = base + threadIdx.x;
    float v[kVec] = {};
    if (src != nullptr && c < chunks) load_chunk(src, c * kVec, h, vec, v);
    weigh<In>(v, weighted, w);
    quantize_block_round<In>(q, c, chunks, h, vec, v, out, scale_inv, r);
  }
}

// Whether permuted row r holds pair p and the slot map points back at it: the rows
// permute_tokens_kernel writes (every other row is permute_kernel's).
template <class Map>
__device__ __forceinline__ bool reached(const PermuteArgs& a, int64_t r, int64_t p) {
  const auto* slot = static_cast<const Map*>(a.slot_map);
  return p >= 0 && p < a.tokens * a.top_k && static_cast<int64_t>(slot[p]) == r;
}

// One CTA per permuted row. skip_reached: the rows permute_tokens_kernel wrote are left alone.
template <class In, class Map>
__global__ void __launch_bounds__(kRowThreads) permute_kernel(PermuteArgs a, bool vec,
                                                              bool skip_reached) {
  __shared__ uint32_t scratch[kRowThreads / 32];
  const auto* x = static_cast<const In*>(a.x);
  const auto* row_pair = static_cast<const Map*>(a.row_pair);
  const int64_t h = a.hidden, pairs = a.tokens * a.top_k;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const int64_t p = static_cast<int64_t>(row_pair[r]);
    if (skip_reached && reached<Map>(a, r, p)) continue;  // uniform over the CTA
    const In* src = p >= 0 && p < pairs ? x + (p / a.top_k) * h : nullptr;
    const bool weighted = a.weights != nullptr && src != nullptr;  // uniform over the CTA
    const float w = weighted ? a.weights[p] : 1.0f;
    if (a.quant.mode == RowQuantMode::kNone) {
      copy_row(src, static_cast<In*>(a.out) + r * h, h, vec);
    } else if (a.quant.mode == RowQuantMode::kRowwise) {
      quantize_row_rowwise(a.quant, src, h, vec, weighted, w,
                           static_cast<uint8_t*>(a.out) + r * h, a.scale_inv, r, scratch);
    } else {
      quantize_row_blocks(a.quant, src, h, vec, weighted, w, static_cast<uint8_t*>(a.out) + r * h,
                          a.scale_inv, r);
    }
  }
}

// ---- permute by token (slot_map given, unweighted) -------------------------------------------
// The stored scale a block_multiplier call wrote into a local `sink` (FP32, or the E8M0 byte in
// its first byte), stored at scale_inv[index].
__device__ __forceinline__ void store_scale(const RowQuant& q, void* scale_inv, int64_t index,
                                            float sink) {
  if (q.mode == RowQuantMode::kMXFP8) {
    static_cast<uint8_t*>(scale_inv)[index] = *reinterpret_cast<const uint8_t*>(&sink);
  } else {
    static_cast<float*>(scale_inv)[index] = sink;
  }
}

// One CTA per token: its row is read once and written to every row r = slot_map[p] of its pairs
// p with row_pair[r] == p — quantized once (the same codes and scales as permute_kernel gives
// each of those rows: a row's quantization depends on the row alone), or once per pair with
// per-pair weights (each pair's weighted row, from the row kept in registers). Quantized rows up
// to kCachedChunks · kRowThreads chunks (all in registers); copies in 16-byte units (vec).
template <class In, class Map>
__global__ void __launch_bounds__(kRowThreads) permute_tokens_kernel(PermuteArgs a, bool vec) {
  __shared__ uint32_t scratch[kRowThreads / 32];
  const auto* x = static_cast<const In*>(a.x);
  const auto* slot = static_cast<const Map*>(a.slot_map);
  const auto* row_pair = static_cast<const Map*>(a.row_pair);
  const int64_t h = a.hidden, k = a.top_k, chunks = (h + kVec - 1) / kVec;
  const RowQuant& q = a.quant;
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    const In* src = x + t * h;
    // The token's destinations, the same for every thread of the CTA.
    auto dest = [&](int64_t j) -> int64_t {
      const int64_t p = t * k + j;
      const int64_t r = static_cast<int64_t>(slot[p]);
      return r >= 0 && r < a.rows && static_cast<int64_t>(row_pair[r]) == p ? r : -1;
    };
    if (q.mode == RowQuantMode::kNone) {  // vec: whole 16-byte units, kCachedChunks at a time
      const int64_t n = h * static_cast<int64_t>(sizeof(In)) / 16;
      const auto* s4 = reinterpret_cast<const uint4*>(src);
      for (int64_t base = 0; base < n; base += int64_t{kCachedChunks} * kRowThreads) {
        uint4 v[kCachedChunks];
#pragma unroll
        for (int u = 0; u < kCachedChunks; ++u) {
          const int64_t i = base + threadIdx.x + int64_t{u} * kRowThreads;
          v[u] = i < n ? s4[i] : make_uint4(0, 0, 0, 0);
        }
        for (int64_t j = 0; j < k; ++j) {
          const int64_t r = dest(j);
          if (r < 0) continue;
          auto* d4 = reinterpret_cast<uint4*>(static_cast<In*>(a.out) + r * h);
#pragma unroll
          for (int u = 0; u < kCachedChunks; ++u) {
            const int64_t i = base + threadIdx.x + int64_t{u} * kRowThreads;
            if (i < n) __stcs(d4 + i, v[u]);
          }
        }
      }
      continue;
    }
    RawChunk<In> cache[kCachedChunks];
    load_cached(cache, src, h, chunks, vec);
    uint2 codes[kCachedChunks];
    float sink[kCachedChunks] = {};  // the stored scale of the block whose first chunk is here
    bool owner[kCachedChunks] = {};
    // The codes and scales of the row weighted by w (per-row kernel's arithmetic: weigh, amax,
    // multiplier, encode), from the chunks in registers. Called by the whole CTA.
    auto encode = [&](bool weighted, float w) {
      if (q.mode == RowQuantMode::kRowwise) {
        const uint32_t m =
            cuda_quant::block_max<kRowThreads>(cached_amax(cache, weighted, w), scratch);
        const float mult = block_multiplier(q, m, &sink[0], 0);
        owner[0] = threadIdx.x == 0;
        cached_codes(cache, weighted, w, q, mult, codes);
        return;
      }
      const int g = static_cast<int>(q.block / kVec);  // block1x128 / MXFP8: g lanes a block
#pragma unroll
      for (int i = 0; i < kCachedChunks; ++i) {
        const int64_t c = threadIdx.x + int64_t{i} * kRowThreads;
        float v[kVec];
        cache[i].floats(v);
        weigh<In>(v, weighted, w);
        uint32_t m = chunk_amax(v);
        for (int o = g / 2; o >= 1; o /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float mult = block_multiplier(q, m, &sink[i], 0);
        owner[i] = c < chunks && c % g == 0;
        codes[i] = encode_chunk(q, v, mult);
      }
    };
    // Unweighted: one quantization for all the token's rows; weighted: one per pair.
    const bool weighted = a.weights != nullptr;
    if (!weighted) encode(false, 1.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = dest(j);
      if (r < 0) continue;  // uniform over the CTA
      if (weighted) encode(true, a.weights[t * k + j]);
      uint8_t* out = static_cast<uint8_t*>(a.out) + r * h;
#pragma unroll
      for (int i = 0; i < kCachedChunks; ++i) {
        const int64_t c = threadIdx.x + int64_t{i} * kRowThreads;
        if (c < chunks) store_codes(out, c * kVec, h, vec, codes[i]);
        if (owner[i]) {
          const int64_t at = q.mode == RowQuantMode::kRowwise
                                 ? r
                                 : r * q.scale_cols + c / (q.block / kVec);
          store_scale(q, a.scale_inv, at, sink[i]);
        }
      }
    }
  }
}

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
constexpr int kCodes = 16;  // codes per thread: one 16-byte load

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

// One thread per 16 consecutive codes of a row (a 16-code chunk never straddles a scale block:
// blocks are the row, 128 or 32 wide); vec: H % 16 == 0 and aligned pointers.
template <class Out>
__global__ void __launch_bounds__(kRowThreads) dequantize_kernel(DequantizeArgs a, bool vec) {
  auto* out = static_cast<Out*>(a.out);
  const int64_t h = a.hidden, per_row = (h + kCodes - 1) / kCodes, n = a.rows * per_row;
  for (int64_t i = blockIdx.x * int64_t{kRowThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kRowThreads) {
    const int64_t r = i / per_row, c0 = (i % per_row) * kCodes;
    const int64_t src = dequantize_source(a, r);
    Out* o = out + r * h;
    if (src < 0) {  // an index outside the payload: a zero row
      float zero[kVec] = {};
      for (int e = 0; e < kCodes && c0 + e < h; e += kVec)
        store_chunk(o, c0 + e, h, vec, zero);
      continue;
    }
    const uint8_t* q = a.data + src * h;
    if (!vec) {
      for (int e = 0; e < kCodes && c0 + e < h; ++e)
        o[c0 + e] = from_float<Out>(
            dequantize_product(decode_code(q[c0 + e], a.e5m2), scale_at(a, src, c0 + e)));
      continue;
    }
    const uint4 codes = __ldcs(reinterpret_cast<const uint4*>(q + c0));
    const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
    const float s = scale_at(a, src, c0);
    float v[kCodes];
#pragma unroll
    for (int e = 0; e < kCodes; ++e)
      v[e] = dequantize_product(decode_code(static_cast<uint8_t>(w[e / 4] >> (8 * (e % 4))),
                                            a.e5m2), s);
    float lo[kVec], hi[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) lo[e] = v[e], hi[e] = v[kVec + e];
    store_chunk(o, c0, h, true, lo);
    store_chunk(o, c0 + kVec, h, true, hi);
  }
}

}  // namespace

void permute_cuda(const PermuteArgs& a, Device device, Stream stream) {
  set_device(device);
  auto s = stream.as<cudaStream_t>();
  const bool quantized = a.quant.mode != RowQuantMode::kNone;
  if (quantized && a.scale_rows > a.rows) {
    const int64_t esize = a.quant.mode == RowQuantMode::kMXFP8 ? 1 : 4;
    TESSERA_CUDA_CHECK(cudaMemsetAsync(
        static_cast<uint8_t*>(a.scale_inv) + a.rows * a.quant.scale_cols * esize, 0,
        static_cast<size_t>((a.scale_rows - a.rows) * a.quant.scale_cols * esize), s));
  }
  if (a.rows == 0) return;
  dispatch_float_input(a.x_dtype, "x", [&](auto xt) {
    using In = typename decltype(xt)::type;
    // Copy: whole 16-byte units per row. Quantize: whole chunks of 8 (16-byte loads, 8-byte
    // code stores).
    const bool vec = quantized ? a.hidden % kVec == 0 && aligned16(a.x) &&
                                     reinterpret_cast<uintptr_t>(a.out) % 8 == 0
                               : a.hidden * static_cast<int64_t>(sizeof(In)) % 16 == 0 &&
                                     aligned16(a.x) && aligned16(a.out);
    // With the slot map: a CTA per token writes the rows its pairs hold, then a CTA per row
    // writes the others (rows slot_map does not reach, zero rows). Weighted block scaling stays
    // per row: its k encodes per token measured slower than the per-row kernel
    // (bench/results/2026-11-28-moe-regroup-medians-h200.md, run 9).
    const int64_t chunks = (a.hidden + kVec - 1) / kVec;
    const bool by_token =
        a.slot_map != nullptr && a.tokens > 0 &&
        (quantized ? chunks <= int64_t{kCachedChunks} * kRowThreads &&
                         (a.weights == nullptr || a.quant.mode == RowQuantMode::kRowwise)
                   : vec);
    dispatch_index_dtype(a.map_dtype, "row_pair", [&](auto mt) {
      using Map = typename decltype(mt)::type;
      if (by_token) {
        permute_tokens_kernel<In, Map><<<grid_for(a.tokens), kRowThreads, 0, s>>>(a, vec);
        TESSERA_CUDA_CHECK_LAUNCH();
      }
      permute_kernel<In, Map><<<grid_for(a.rows), kRowThreads, 0, s>>>(a, vec, by_token);
      TESSERA_CUDA_CHECK_LAUNCH();
    });
  });
}

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
  const bool vec = a.hidden % kCodes == 0 && aligned16(a.data) && aligned16(a.out);
  const int64_t work = a.rows * ((a.hidden + kCodes - 1) / kCodes);
  dispatch_float_input(a.out_dtype, "out", [&](auto ot) {
    dequantize_kernel<typename decltype(ot)::type>
        <<<grid_for((work + kRowThreads - 1) / kRowThreads), kRowThreads, 0, s>>>(a, vec);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tessera::detail::moe
