// 16-bit float storage types (bfloat16, float16) with exact RNE conversions, host and device.
// Layout-compatible with __nv_bfloat16 / __half (one uint16_t).
#pragma once

#include <cstdint>

#include "tessera/formats/bits.h"

namespace tessera {
namespace formats {

TESSERA_HD uint16_t encode_bf16(float x) {
  const uint32_t u = float_to_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

TESSERA_HD float decode_bf16(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

// IEEE binary16: RNE, overflow to infinity (not saturating), NaN preserved as quiet NaN.
TESSERA_HD uint16_t encode_fp16(float x) {
  const uint32_t u = float_to_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t code = round_magnitude_rne_sat<10, 15, 0x7c00u>(a);  // overflow → infinity
  return static_cast<uint16_t>(sign | (a > 0x7f800000u ? 0x7e00u : code));
}

TESSERA_HD float decode_fp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t a = h & 0x7fffu;
  if (a >= 0x7c00u) return bits_to_float(sign | 0x7f800000u | ((a & 0x3ffu) << 13));
  return bits_to_float(sign | float_to_bits(decode_magnitude<10, 15>(a)));
}

}  // namespace formats

struct bf16 {
  uint16_t bits;
  TESSERA_HD static bf16 from_float(float x) { return bf16{formats::encode_bf16(x)}; }
  TESSERA_HD float to_float() const { return formats::decode_bf16(bits); }
};

struct fp16 {
  uint16_t bits;
  TESSERA_HD static fp16 from_float(float x) { return fp16{formats::encode_fp16(x)}; }
  TESSERA_HD float to_float() const { return formats::decode_fp16(bits); }
};

// Uniform load/store of an input element as float.
TESSERA_HD float to_float(float x) { return x; }
TESSERA_HD float to_float(bf16 x) { return x.to_float(); }
TESSERA_HD float to_float(fp16 x) { return x.to_float(); }

template <class T>
TESSERA_HD T from_float(float x) {
  if constexpr (sizeof(T) == 4) {
    return x;
  } else {
    return T::from_float(x);
  }
}

}  // namespace tessera
