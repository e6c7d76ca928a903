// Building blocks of the CPU quantize backend: branch-free (vectorizable) input loads and FP8
// encoders that give exactly the bits of formats/codecs.h + scale_rules::fp8_element, amax
// reductions, the transposed float copy used by the columnwise usages, and the per-format entry
// points (fp8_tensor.cpp, fp8_block.cpp, mxfp8.cpp, nvfp4.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "core/cpu_parallel.h"
#include "quantize/quantize_backend.h"
#include "tessera/core/buffer.h"
#include "tessera/formats/half.h"

namespace tessera::detail::cpu {

// Loops over fewer elements than kParallelWork (core/cpu_parallel.h) run on the calling thread.
using detail::kParallelWork;

// Function multiversioning for the kernels that hold the hot loops (and their OpenMP bodies):
// GCC compiles them for AVX2 and for the x86-64 baseline and picks one when the library is
// loaded (ifunc), so the library still runs on any x86-64. Same source, same IEEE-754 operations
// (no FMA is enabled, nothing is reassociated), so both versions give the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TESSERA_CPU_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define TESSERA_CPU_KERNEL
#endif
// Element and block helpers called from those kernels are forced inline, so that they are
// compiled with the kernel's instruction set (an out-of-line copy would be the baseline one).
#if defined(__GNUC__)
#define TESSERA_CPU_INLINE [[gnu::always_inline]] inline
#else
#define TESSERA_CPU_INLINE inline
#endif

// ---- loads: exact, branch-free --------------------------------------------------------------
TESSERA_CPU_INLINE float load_float(float v) { return v; }
TESSERA_CPU_INLINE float load_float(bf16 v) { return std::bit_cast<float>(static_cast<uint32_t>(v.bits) << 16); }
// binary16 → binary32: magnitude bits shifted into a float and scaled by 2^112 (exact for
// normals and subnormals); inf/NaN patterns rebuilt. Same bits as formats::decode_fp16.
TESSERA_CPU_INLINE float load_float(fp16 v) {
  const uint32_t h = v.bits;
  const uint32_t a = h & 0x7fffu;
  const float mag = std::bit_cast<float>(a << 13) * 5.192296858534828e33f;  // 2^112
  const uint32_t special = 0u - static_cast<uint32_t>(a >= 0x7c00u);       // inf / NaN
  const uint32_t r = ((0x7f800000u | ((a & 0x3ffu) << 13)) & special) |
                     (std::bit_cast<uint32_t>(mag) & ~special);
  return std::bit_cast<float>(((h & 0x8000u) << 16) | r);
}

TESSERA_CPU_INLINE uint32_t abs_bits(float f) { return std::bit_cast<uint32_t>(f) & 0x7fffffffu; }

// ---- FP8 encoders: scale_rules::fp8_element without branches --------------------------------
// Normal range: RNE of the float bits to the format's mantissa width (add 0x7ffff/0xfffff plus the
// lowest kept bit, shift), rebias. Subnormal range: one float addition of a magic power of two
// whose ulp is the format's subnormal quantum (RNE by the FPU), then the bit difference.
// Selections are written with all-ones masks (no branches) so that GCC vectorizes the loops.
TESSERA_CPU_INLINE uint32_t mask_if(bool c) { return 0u - static_cast<uint32_t>(c); }

template <uint32_t kShift, uint32_t kRebias, uint32_t kSubLimit, uint32_t kMagicBits, int32_t kMaxCode>
TESSERA_CPU_INLINE uint8_t fp8_element_bits(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t normal = ((a + ((1u << (kShift - 1)) - 1u) + ((a >> kShift) & 1u)) >> kShift) - kRebias;
  const float sub = std::bit_cast<float>(a) + std::bit_cast<float>(kMagicBits);
  const uint32_t subnormal = std::bit_cast<uint32_t>(sub) - kMagicBits;
  // a < 2^31: signed compares give the unsigned answer and map to single AVX2 instructions.
  const uint32_t is_sub = mask_if(static_cast<int32_t>(a) < static_cast<int32_t>(kSubLimit));
  int32_t code = static_cast<int32_t>((subnormal & is_sub) | (normal & ~is_sub));
  code = std::min(code, kMaxCode);
  const uint32_t r = ((u >> 24) & 0x80u) | static_cast<uint32_t>(code);
  const uint32_t is_nan = mask_if(static_cast<int32_t>(a) > 0x7f800000);
  return static_cast<uint8_t>((r & ~is_nan) | (0x7fu & is_nan));
}

// E4M3: mantissa kept at bit 20, rebias (127-7)<<3, subnormal below 2^-6 with magic 2^14.
TESSERA_CPU_INLINE uint8_t e4m3_element(float v) {
  return fp8_element_bits<20, 960, 0x3c800000u, 0x46800000u, 0x7e>(v);
}

// E5M2: mantissa kept at bit 21, rebias (127-15)<<2, subnormal below 2^-14 with magic 2^7.
TESSERA_CPU_INLINE uint8_t e5m2_element(float v) {
  return fp8_element_bits<21, 448, 0x38800000u, 0x43000000u, 0x7b>(v);
}

template <bool kE5M2>
TESSERA_CPU_INLINE uint8_t fp8_element(float v) {
  if constexpr (kE5M2) {
    return e5m2_element(v);
  } else {
    return e4m3_element(v);
  }
}

// E2M1 (formats::encode_e2m1) of any float, branch-free: the magnitude code counts the RNE
// decision points of the grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} (ties to the even code: 0.25→0,
// 0.75→1, 1.25→1, 1.75→2, 2.5→2, 3.5→4, 5→4); beyond 6 and inf saturate to 6; NaN → 0x7.
TESSERA_CPU_INLINE uint8_t e2m1_element(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint32_t a = u & 0x7fffffffu;
  const float f = std::bit_cast<float>(a);
  const uint32_t code = static_cast<uint32_t>(f > 0.25f) + static_cast<uint32_t>(f >= 0.75f) +
                        static_cast<uint32_t>(f > 1.25f) + static_cast<uint32_t>(f >= 1.75f) +
                        static_cast<uint32_t>(f > 2.5f) + static_cast<uint32_t>(f >= 3.5f) +
                        static_cast<uint32_t>(f > 5.0f);
  const uint32_t is_nan = mask_if(a > 0x7f800000u);
  return static_cast<uint8_t>(((((u >> 28) & 0x8u) | code) & ~is_nan) | (0x7u & is_nan));
}

// ---- loops ---------------------------------------------------------------------------------
// Max of abs bits over n values (serial, vectorized); see scale_rules::amax_from_abs_bits.
template <class In>
TESSERA_CPU_INLINE uint32_t amax_bits(const In* x, int64_t n) {
  uint32_t m = 0;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = abs_bits(load_float(x[i]));
    m = a > m ? a : m;
  }
  return m;
}

// cm[j] = max(cm[j], abs bits of x[r][c0 + j]) over rows [r0, r1) and j < w of a row-major x
// with k columns: column amaxes of a row band (serial, vectorized along the row).
template <class In>
TESSERA_CPU_INLINE void band_column_amax_bits(const In* x, int64_t k, int64_t r0, int64_t r1,
                                         int64_t c0, int64_t w, uint32_t* cm) {
  for (int64_t r = r0; r < r1; ++r) {
    const In* row = x + r * k + c0;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) {
      const uint32_t a = abs_bits(load_float(row[j]));
      cm[j] = a > cm[j] ? a : cm[j];
    }
  }
}

// out[i] = fp8(x[i] * scale) for n values (serial, vectorized).
template <bool kE5M2, class In>
TESSERA_CPU_INLINE void encode_scaled(const In* x, int64_t n, float scale, uint8_t* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = fp8_element<kE5M2>(load_float(x[i]) * scale);
}

// Max of abs bits over a whole (rows, cols) tensor, multithreaded.
uint32_t tensor_amax_bits(const TensorView& x);

// xᵀ as float32 (cols, rows), multithreaded, tiled. Returns the owning buffer (NVFP4 only).
Buffer transpose_to_float(const TensorView& x);

// True when quantize_fp8_columnwise makes the columnwise copy of mode `info` (FP32-scaled
// families; blocks of 1x128 or 128x128, the tile it works on).
bool fp8_columnwise_tiles_fit(const ScalingModeInfo& info);
// The columnwise FP8 copy of x (m, k) for the FP32-scaled modes (tensor with `tensor_scale`,
// rowwise, blocks that fp8_columnwise_tiles_fit): data (k, m) transposed, scale_inv of the copy; made from x
// by cache-blocked tiles (fp8_columnwise.cpp). Mode tensor only: `rowwise_data` (m, k), when not
// null, receives the rowwise codes in the same pass (one scale: the same codes).
void quantize_fp8_columnwise(const QuantizerConfig& c, const TensorView& x, float tensor_scale,
                             const TensorView& data, const TensorView& scale_inv,
                             uint8_t* rowwise_data = nullptr);

// Bit-wise byte fill of a whole view (padding of scale buffers), multithreaded for big views.
void zero_view(const TensorView& v);

// ---- per-format entry points -----------------------------------------------------------------
void quantize_fp8_tensor(const QuantizerConfig& c, const TensorView& x,
                         const QuantizedTensorView& out, const QuantizeRequest& req);
void quantize_fp8_block(const QuantizerConfig& c, const TensorView& x,
                        const QuantizedTensorView& out, const QuantizeRequest& req);
void quantize_mxfp8(const QuantizerConfig& c, const TensorView& x, const QuantizedTensorView& out,
                    const QuantizeRequest& req);
void quantize_nvfp4(const QuantizerConfig& c, const TensorView& x, const QuantizedTensorView& out,
                    const QuantizeRequest& req);
// NVFP4 per member in place (quantize_backend.h, quantize_nvfp4_members_cuda's contract), with
// the members' element offsets in host memory; the usages config.rowwise / config.columnwise.
void quantize_nvfp4_members(const QuantizerConfig& c, const TensorView& x, const int64_t* offsets,
                            int64_t groups, const QuantizedTensorView& out);

}  // namespace tessera::detail::cpu
