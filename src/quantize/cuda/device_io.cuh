// Device-side building blocks shared by the quantization kernels: vector loads of the
// high-precision input as float, FP8 encoders on the hardware cvt.rn.satfinite instructions
// (bit-identical to scale_rules::fp8_element, proven over all 2^32 inputs by
// tests/quantize_cuda/test_device_codecs.cu), amax on float bits and warp/block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/half.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant {

// kVec elements of type T, aligned so that one load/store is one instruction.
template <class T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};

// Elements of T per 16-byte load.
template <class T>
inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

__device__ __forceinline__ float load_float(float x) { return x; }
__device__ __forceinline__ float load_float(bf16 x) {
  return __uint_as_float(static_cast<uint32_t>(x.bits) << 16);
}
__device__ __forceinline__ float load_float(fp16 x) {
  return __half2float(__ushort_as_half(x.bits));  // exact: every fp16 is a float
}

// Loads kVec consecutive inputs as floats. p must be aligned to sizeof(In) * kVec.
template <class In, int kVec>
__device__ __forceinline__ void load_vec(const In* p, float (&out)[kVec]) {
  const Vec<In, kVec> v = *reinterpret_cast<const Vec<In, kVec>*>(p);
#pragma unroll
  for (int i = 0; i < kVec; ++i) out[i] = load_float(v.v[i]);
}

// |x| as bits: integer max over these is a float max that propagates NaN (NaN bits > inf bits).
__device__ __forceinline__ uint32_t abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// NaN-canonical amax bits (scale_rules::amax_from_abs_bits): any NaN becomes 0x7fc00000, so
// atomic max over canonical values stays canonical.
__device__ __forceinline__ uint32_t canonical_amax(uint32_t m) {
  return m > 0x7f800000u ? 0x7fc00000u : m;
}

// Folds the amax bits m of a block into *target, a word the caller zeroed, by atomicMax: every
// writer stores canonical bits, and among those the NaN 0x7fc00000 is above +inf (0x7f800000)
// and every finite value, so a NaN anywhere wins and the word stays canonical (no sign bit is
// ever set, so the unsigned order is the order of |x|). m == 0 changes nothing and is skipped.
// Every amax reduction of the kernels (per thread, warp_max / block_max, this) is an unsigned
// max of abs bits: NaN propagates by construction (no fmaxf, which would drop it).
__device__ __forceinline__ void atomic_amax(uint32_t* target, uint32_t m) {
  m = canonical_amax(m);
  if (m != 0) atomicMax(target, m);
}

// FP8 codes of two products (low byte: y0). The hardware cvt.rn.satfinite gives exactly
// scale_rules::fp8_element: RNE, saturation to +-max, and 0x7F for every NaN.
template <DType DT>
__device__ __forceinline__ uint32_t encode_fp8x2(float y0, float y1) {
  constexpr __nv_fp8_interpretation_t kind = DT == DType::kFloat8E4M3 ? __NV_E4M3 : __NV_E5M2;
  return __nv_cvt_float2_to_fp8x2(make_float2(y0, y1), __NV_SATFINITE, kind);
}

template <DType DT>
__device__ __forceinline__ uint32_t encode_fp8(float y) {
  constexpr __nv_fp8_interpretation_t kind = DT == DType::kFloat8E4M3 ? __NV_E4M3 : __NV_E5M2;
  return __nv_cvt_float_to_fp8(y, __NV_SATFINITE, kind);
}

// Four products → four codes in one word (byte i: y[i]).
template <DType DT>
__device__ __forceinline__ uint32_t encode_fp8x4(float y0, float y1, float y2, float y3) {
  return encode_fp8x2<DT>(y0, y1) | (encode_fp8x2<DT>(y2, y3) << 16);
}

// Encodes kVec products y[i] into kVec bytes. kVec: 1, 2 or a multiple of 4.
template <DType DT, int kVec>
__device__ __forceinline__ void encode_fp8_products(const float (&y)[kVec],
                                                    Vec<uint8_t, kVec>& out) {
  if constexpr (kVec == 1) {
    out.v[0] = static_cast<uint8_t>(encode_fp8<DT>(y[0]));
  } else if constexpr (kVec == 2) {
    const uint32_t c = encode_fp8x2<DT>(y[0], y[1]);
    out.v[0] = static_cast<uint8_t>(c);
    out.v[1] = static_cast<uint8_t>(c >> 8);
  } else {
    static_assert(kVec % 4 == 0, "vector of 1, 2 or a multiple of 4 codes");
    uint32_t words[kVec / 4];
#pragma unroll
    for (int i = 0; i < kVec; i += 4) {
      words[i / 4] = encode_fp8x4<DT>(y[i], y[i + 1], y[i + 2], y[i + 3]);
    }
    memcpy(&out, words, sizeof(out));
  }
}

// Encodes kVec values x[i] * scale.
template <DType DT, int kVec>
__device__ __forceinline__ void encode_fp8_vec(const float (&x)[kVec], float scale,
                                               Vec<uint8_t, kVec>& out) {
  float y[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) y[i] = x[i] * scale;
  encode_fp8_products<DT, kVec>(y, out);
}

__device__ __forceinline__ int64_t ceil_div_device(int64_t a, int64_t b) { return (a + b - 1) / b; }

// scale_rules::kRhtSigns as a bit mask (bit j set: sign j is -1), usable in device code; a
// static_assert in nvfp4/nvfp4.cu holds it equal to the table.
inline constexpr uint32_t kRhtNegativeMask = (1u << 3) | (1u << 5) | (1u << 6) | (1u << 7) |
                                             (1u << 8) | (1u << 9) | (1u << 10) | (1u << 12) |
                                             (1u << 14) | (1u << 15);
TESSERA_HD constexpr float rht_sign(int j) { return (kRhtNegativeMask >> j) & 1u ? -1.0f : 1.0f; }

// Byte offset of scale (r, c) in the GEMM-swizzled layout of a scale matrix whose padded width
// is padded_cols: scale_rules::swizzled_scale_offset (the one definition).
__device__ __forceinline__ int64_t swizzled_offset(int64_t r, int64_t c, int64_t padded_cols) {
  return scale_rules::swizzled_scale_offset<int64_t>(r, c, padded_cols);
}

// Unsigned division by a run-time constant d >= 1 for dividends n < 2^31, without a divide
// instruction: q = (n * mul) >> shift with shift = 31 + ceil(log2 d), mul = ceil(2^shift / d)
// (< 2^32). The error of mul*d - 2^shift is below d <= 2^(shift-31), so n * error < 2^shift and
// the floor is exact for every n < 2^31. Host code builds it (make), device code divides.
struct DivMod31 {
  uint32_t d = 1, mul = 0x80000000u, shift = 31;
  static DivMod31 make(uint32_t divisor) {
    DivMod31 r;
    uint32_t l = 0;
    while ((uint64_t{1} << l) < divisor) ++l;
    r.d = divisor;
    r.shift = 31 + l;
    r.mul = static_cast<uint32_t>(((uint64_t{1} << r.shift) + divisor - 1) / divisor);
    return r;
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return static_cast<uint32_t>((static_cast<uint64_t>(n) * mul) >> shift);
  }
};

// Per-halfword unsigned maximum of two packed pairs (one max.u16x2 on sm_90 and later).
__device__ __forceinline__ uint32_t max_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return __vmaxu2(a, b);
#endif
}

// swizzled_offset for matrices whose padded size is below 2^32 bytes (32-bit arithmetic).
__device__ __forceinline__ uint32_t swizzled_offset32(uint32_t r, uint32_t c, uint32_t padded_cols) {
  return scale_rules::swizzled_scale_offset<uint32_t>(r, c, padded_cols);
}

template <class T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Max over the block of one value per thread; every thread gets the result. `scratch` holds
// one entry per warp; the call contains two __syncthreads.
template <int kThreads>
__device__ __forceinline__ uint32_t block_max(uint32_t v, uint32_t* scratch) {
  constexpr int kWarps = kThreads / 32;
  v = warp_max(v);
  if (kWarps == 1) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : 0u;
  v = warp_max(v);
  __syncthreads();  // scratch may be reused
  return v;
}

}  // namespace tessera::detail::cuda_quant
