// Codecs of the low-precision element formats (docs/formats.md), bit-exact, host and device.
//
// Encoders round to nearest even and SATURATE to the largest finite value (as cvt.rn.satfinite):
// ±inf and overflow map to ±max. NaN maps to NaN where the format has one (E4M3 0x7F|sign,
// E5M2 0x7F|sign, E8M0 0xFF). E2M1 has no NaN: NaN encodes as +6 (0x7), documented behaviour.
// E8M0 encode follows ml_dtypes (nearest power of two, ties up; float subnormals
// up to 2^-127 → 0x00, above → 0x01; zero, negative, inf, NaN → 0xFF);
// recipes compute their E8M0 scales with their own rule (quantize/), not with this function.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/formats/bits.h"
#include "tessera/formats/half.h"

namespace tessera::formats {

TESSERA_HD uint8_t encode_e4m3(float x) {
  const uint32_t u = float_to_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t code = round_magnitude_rne_sat<3, 7, 0x7eu>(a);
  return static_cast<uint8_t>(sign | (a > 0x7f800000u ? 0x7fu : code));
}

TESSERA_HD float decode_e4m3(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t a = c & 0x7fu;
  if (a == 0x7fu) return bits_to_float(sign | 0x7fc00000u);
  return bits_to_float(sign | float_to_bits(decode_magnitude<3, 7>(a)));
}

TESSERA_HD uint8_t encode_e5m2(float x) {
  const uint32_t u = float_to_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t code = round_magnitude_rne_sat<2, 15, 0x7bu>(a);
  return static_cast<uint8_t>(sign | (a > 0x7f800000u ? 0x7fu : code));
}

TESSERA_HD float decode_e5m2(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t a = c & 0x7fu;
  if (a >= 0x7cu) return bits_to_float(sign | 0x7f800000u | ((a & 0x3u) << 21));
  return bits_to_float(sign | float_to_bits(decode_magnitude<2, 15>(a)));
}

// 4-bit code in the low nibble.
TESSERA_HD uint8_t encode_e2m1(float x) {
  const uint32_t u = float_to_bits(x);
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t sign = (u >> 28) & 0x8u;
  const uint32_t code = round_magnitude_rne_sat<1, 1, 0x7u>(a);
  return static_cast<uint8_t>(a > 0x7f800000u ? 0x7u : (sign | code));
}

TESSERA_HD float decode_e2m1(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x8u) << 28;
  return bits_to_float(sign | float_to_bits(decode_magnitude<1, 1>(c & 0x7u)));
}

TESSERA_HD uint8_t encode_e8m0(float x) {
  const uint32_t u = float_to_bits(x);
  if ((u >> 31) != 0 || u >= 0x7f800000u || u == 0) return 0xffu;
  const uint32_t biased = u >> 23;
  const uint32_t mant = u & 0x7fffffu;
  // Float subnormals: the same rule in linear terms, between code 0 (2^-127, mantissa 0x400000)
  // and code 1 (2^-126): the midpoint 1.5 * 2^-127 (mantissa 0x600000) and above give code 1.
  if (biased == 0) return mant >= 0x600000u ? 0x01u : 0x00u;
  const uint32_t code = biased + (mant >= 0x400000u ? 1u : 0u);
  return code >= 0xffu ? 0xffu : static_cast<uint8_t>(code);
}

TESSERA_HD float decode_e8m0(uint8_t c) {
  if (c == 0xffu) return bits_to_float(0x7fc00000u);
  if (c == 0) return bits_to_float(0x00400000u);  // 2^-127, a float subnormal
  return bits_to_float(static_cast<uint32_t>(c) << 23);
}

// Compile-time traits of each element format, for kernels. Runtime facts: format_table.h.
template <DType D>
struct FormatTraits;

template <>
struct FormatTraits<DType::kFloat8E4M3> {
  static constexpr float kMax = 448.0f;
  static constexpr int kBits = 8;
  TESSERA_HD static uint8_t encode(float x) { return encode_e4m3(x); }
  TESSERA_HD static float decode(uint8_t c) { return decode_e4m3(c); }
};

template <>
struct FormatTraits<DType::kFloat8E5M2> {
  static constexpr float kMax = 57344.0f;
  static constexpr int kBits = 8;
  TESSERA_HD static uint8_t encode(float x) { return encode_e5m2(x); }
  TESSERA_HD static float decode(uint8_t c) { return decode_e5m2(c); }
};

template <>
struct FormatTraits<DType::kFloat4E2M1> {
  static constexpr float kMax = 6.0f;
  static constexpr int kBits = 4;
  TESSERA_HD static uint8_t encode(float x) { return encode_e2m1(x); }
  TESSERA_HD static float decode(uint8_t c) { return decode_e2m1(c); }
};

template <>
struct FormatTraits<DType::kFloat8E8M0> {
  static constexpr float kMax = 1.7014118346046923e38f;  // 2^127
  static constexpr int kBits = 8;
  TESSERA_HD static uint8_t encode(float x) { return encode_e8m0(x); }
  TESSERA_HD static float decode(uint8_t c) { return decode_e8m0(c); }
};

}  // namespace tessera::formats
