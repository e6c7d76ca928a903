// CUDA kernels of moe_permute / moe_permute_quantize (moe_routing.h): per permuted row, or per
// token when the routing's slot map is given (then permute_rest_kernel writes the rows the tokens
// did not). Conventions and layout of the work: moe_row_io.cuh.
#include <cstdint>

#include "nn/moe_kernels.h"
#include "nn/moe_row_io.cuh"
#include "quantize/cuda/device_io.cuh"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/half.h"

namespace tessera::detail::moe {
namespace {

using namespace rows;  // the shared row constants and chunk I/O (moe_row_io.cuh)

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

// ---- permute ------------------------------------------------------------------------------------
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
  // Thread 0 stores the scale; the others only take the multiplier.
  const BlockScale bs = block_scale(q, m);
  if (threadIdx.x == 0) store_block_scale(q, bs, scale_inv, r);
  const float mult = bs.multiplier;
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
  const BlockScale bs = block_scale(q, m);
  if (c < chunks && (c & (g - 1)) == 0)  // g a power of two: no 64-bit division
    store_block_scale(q, bs, scale_inv, r * q.scale_cols + (c >> (__ffs(g) - 1)));
  if (c < chunks) store_codes(out, c * kVec, h, vec, encode_chunk(q, v, bs.multiplier));
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

// Permuted row r (holding pair p, or none) by the whole CTA: the token's row copied or quantized,
// or a zero row.
template <class In, class Map>
__device__ __forceinline__ void permute_row(const PermuteArgs& a, int64_t r, int64_t p, bool vec,
                                            uint32_t* scratch) {
  const int64_t h = a.hidden, pairs = a.tokens * a.top_k;
  const In* src = p >= 0 && p < pairs ? static_cast<const In*>(a.x) + (p / a.top_k) * h : nullptr;
  const bool weighted = a.weights != nullptr && src != nullptr;  // uniform over the CTA
  const float w = weighted ? a.weights[p] : 1.0f;
  if (a.quant.mode == RowQuantMode::kNone) {
    copy_row(src, static_cast<In*>(a.out) + r * h, h, vec);
  } else if (a.quant.mode == RowQuantMode::kRowwise) {
    quantize_row_rowwise(a.quant, src, h, vec, weighted, w, static_cast<uint8_t*>(a.out) + r * h,
                         a.scale_inv, r, scratch);
  } else {
    quantize_row_blocks(a.quant, src, h, vec, weighted, w, static_cast<uint8_t*>(a.out) + r * h,
                        a.scale_inv, r);
  }
}

// One CTA per permuted row.
template <class In, class Map>
__global__ void __launch_bounds__(kRowThreads) permute_kernel(PermuteArgs a, bool vec) {
  __shared__ uint32_t scratch[kRowThreads / 32];
  const auto* row_pair = static_cast<const Map*>(a.row_pair);
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x)
    permute_row<In, Map>(a, r, static_cast<int64_t>(row_pair[r]), vec, scratch);
}

// Rows rows[0 .. n) of the permuted buffer as zero rows, by the whole CTA at once: the bytes
// permute_row gives a row of no pair — a copy's zero elements, or the codes of 0 · the scale of
// an all-zero block (one code byte, computed here as the per-row path computes it) and that
// block's scale in every scale slot of the row.
template <class In>
__device__ void zero_rows(const PermuteArgs& a, const int64_t* rows, int n) {
  const bool quantized = a.quant.mode != RowQuantMode::kNone;
  const int64_t row_bytes = a.hidden * (quantized ? 1 : static_cast<int64_t>(sizeof(In)));
  auto* out = static_cast<uint8_t*>(a.out);
  uint32_t fill = 0;
  BlockScale zero{};
  if (quantized) {
    zero = block_scale(a.quant, 0u);
    fill = 0x01010101u * encode_element(a.quant, __fmul_rn(0.0f, zero.multiplier));
  }
  if (row_bytes % 16 == 0 && aligned16(out)) {
    const int64_t per = row_bytes / 16;
    const uint4 v = make_uint4(fill, fill, fill, fill);
    for (int64_t i = threadIdx.x; i < n * per; i += blockDim.x)
      __stcs(reinterpret_cast<uint4*>(out + rows[i / per] * row_bytes) + i % per, v);
  } else {
    for (int64_t i = threadIdx.x; i < n * row_bytes; i += blockDim.x)
      out[rows[i / row_bytes] * row_bytes + i % row_bytes] = static_cast<uint8_t>(fill);
  }
  if (!quantized) return;
  const int64_t cols = a.quant.mode == RowQuantMode::kRowwise ? 1 : a.quant.scale_cols;
  for (int64_t i = threadIdx.x; i < n * cols; i += blockDim.x)
    store_block_scale(a.quant, zero, a.scale_inv, rows[i / cols] * cols + i % cols);
}

// The rows permute_tokens_kernel did not write (padding rows, and rows the slot map does not
// reach): a CTA per kRestRows rows, whose first warp tests them all at once and lists the ones
// left; the CTA then writes the listed zero rows (no pair) together and the others one after
// another. (A CTA per row would spend most of its time on its row's pair of dependent loads.)
constexpr int kRestRows = 32;
template <class In, class Map>
__global__ void __launch_bounds__(kRowThreads) permute_rest_kernel(PermuteArgs a, bool vec) {
  __shared__ uint32_t scratch[kRowThreads / 32];
  __shared__ int64_t zero[kRestRows], live[kRestRows], live_pair[kRestRows];
  __shared__ int zero_count, live_count;
  const auto* row_pair = static_cast<const Map*>(a.row_pair);
  const int64_t pairs = a.tokens * a.top_k;
  for (int64_t base = int64_t{blockIdx.x} * kRestRows; base < a.rows;
       base += int64_t{gridDim.x} * kRestRows) {
    if (threadIdx.x < 32) {
      const int64_t r = base + threadIdx.x;
      const int64_t p = r < a.rows ? static_cast<int64_t>(row_pair[r]) : 0;
      const bool left = r < a.rows && !reached<Map>(a, r, p);
      const bool none = left && (p < 0 || p >= pairs);  // a zero row
      const unsigned below = (1u << threadIdx.x) - 1u;
      const unsigned zeros = __ballot_sync(0xffffffffu, none);
      const unsigned lives = __ballot_sync(0xffffffffu, left && !none);
      if (none) zero[__popc(zeros & below)] = r;
      if (left && !none) {
        live[__popc(lives & below)] = r;
        live_pair[__popc(lives & below)] = p;
      }
      if (threadIdx.x == 0) zero_count = __popc(zeros), live_count = __popc(lives);
    }
    __syncthreads();
    if (zero_count > 0) zero_rows<In>(a, zero, zero_count);
    const int n = live_count;
    for (int i = 0; i < n; ++i) permute_row<In, Map>(a, live[i], live_pair[i], vec, scratch);
    __syncthreads();  // the lists are refilled by the next round
  }
}
static_assert(kRestRows == 32, "permute_rest_kernel tests its rows with one warp");

// ---- permute by token (slot_map given) -------------------------------------------------------

// The by-token kernel's compiled forms, one per payload: each leaves out the others' registers
// (one form for all three held 80 registers for 16-bit input: three blocks per SM; rowwise or
// block scaling alone fit 64 without spilling: four).
enum class TokenForm { kCopy, kRowwise, kBlocks };
template <class In>
constexpr int token_blocks(TokenForm f) {
  // FP32 input holds twice the registers per chunk: its block form spills at four blocks.
  return f == TokenForm::kCopy ? 1 : (f == TokenForm::kBlocks && sizeof(In) == 4 ? 3 : 4);
}

// One CTA per token: its row is read once and written to every row r = slot_map[p] of its pairs
// p with row_pair[r] == p — quantized once (the same codes and scales as permute_kernel gives
// each of those rows: a row's quantization depends on the row alone), or once per pair with
// per-pair weights (each pair's weighted row, from the row kept in registers). Quantized rows up
// to kCachedChunks · kRowThreads chunks (all in registers); copies in 16-byte units (vec).
template <class In, class Map, TokenForm kForm>
__global__ void __launch_bounds__(kRowThreads, token_blocks<In>(kForm))
    permute_tokens_kernel(PermuteArgs a, bool vec) {
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
    if constexpr (kForm == TokenForm::kCopy) {  // vec: whole 16-byte units, kCachedChunks at a time
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
    // The stored scale (stored_scale: made once, not once per destination row) of the block
    // whose first chunk is here, for the lane that stores it (owner).
    uint32_t stored[kCachedChunks] = {};
    bool owner[kCachedChunks] = {};
    // Block1x128 / MXFP8: a block is g = block / kVec chunks (16 or 4) on neighbouring lanes;
    // chunk c (< kCachedChunks · kRowThreads: 32 bits) is in block c >> g_log2 of the row.
    const int g = kForm == TokenForm::kBlocks ? static_cast<int>(q.block / kVec) : 1;
    const int g_log2 = __ffs(g) - 1;
    // The codes and scales of the row weighted by w (per-row kernel's arithmetic: weigh, amax,
    // multiplier, encode), from the chunks in registers. Called by the whole CTA.
    auto encode = [&](bool weighted, float w) {
      if constexpr (kForm == TokenForm::kRowwise) {
        const uint32_t m =
            cuda_quant::block_max<kRowThreads>(cached_amax(cache, weighted, w), scratch);
        const BlockScale bs = block_scale(q, m);
        owner[0] = threadIdx.x == 0;
        if (owner[0]) stored[0] = stored_scale(q, bs);
        cached_codes(cache, weighted, w, q, bs.multiplier, codes);
      } else {
#pragma unroll
        for (int i = 0; i < kCachedChunks; ++i) {
          const int c = static_cast<int>(threadIdx.x) + i * kRowThreads;
          float v[kVec];
          cache[i].floats(v);
          weigh<In>(v, weighted, w);
          uint32_t m = chunk_amax(v);
          for (int o = g / 2; o >= 1; o /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
          const BlockScale bs = block_scale(q, m);
          owner[i] = c < chunks && (c & (g - 1)) == 0;
          if (owner[i]) stored[i] = stored_scale(q, bs);
          codes[i] = encode_chunk(q, v, bs.multiplier);
        }
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
        const int c = static_cast<int>(threadIdx.x) + i * kRowThreads;
        if (c < chunks) store_codes(out, int64_t{c} * kVec, h, vec, codes[i]);
        if (owner[i]) {
          const int64_t at = kForm == TokenForm::kRowwise ? r : r * q.scale_cols + (c >> g_log2);
          store_scale(q, stored[i], a.scale_inv, at);
        }
      }
    }
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
    // With the slot map: a CTA per token writes the rows its pairs hold, then
    // permute_rest_kernel writes the others (rows slot_map does not reach, zero rows).
    // Weighted block scaling stays per row: its k encodes per token measured slower than the
    // per-row kernel (bench/results/2026-11-28-moe-regroup-medians-h200.md, run 9).
    const int64_t chunks = (a.hidden + kVec - 1) / kVec;
    const bool by_token =
        a.slot_map != nullptr && a.tokens > 0 &&
        (quantized ? chunks <= int64_t{kCachedChunks} * kRowThreads &&
                         (a.weights == nullptr || a.quant.mode == RowQuantMode::kRowwise)
                   : vec);
    dispatch_index_dtype(a.map_dtype, "row_pair", [&](auto mt) {
      using Map = typename decltype(mt)::type;
      if (by_token) {
        const unsigned grid = static_cast<unsigned>(grid_for(a.tokens));
        if (!quantized) {
          permute_tokens_kernel<In, Map, TokenForm::kCopy><<<grid, kRowThreads, 0, s>>>(a, vec);
        } else if (a.quant.mode == RowQuantMode::kRowwise) {
          permute_tokens_kernel<In, Map, TokenForm::kRowwise><<<grid, kRowThreads, 0, s>>>(a, vec);
        } else {
          permute_tokens_kernel<In, Map, TokenForm::kBlocks><<<grid, kRowThreads, 0, s>>>(a, vec);
        }
        TESSERA_CUDA_CHECK_LAUNCH();
      }
      if (by_token) {
        permute_rest_kernel<In, Map>
            <<<grid_for((a.rows + kRestRows - 1) / kRestRows), kRowThreads, 0, s>>>(a, vec);
      } else {
        permute_kernel<In, Map><<<grid_for(a.rows), kRowThreads, 0, s>>>(a, vec);
      }
      TESSERA_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace tessera::detail::moe
