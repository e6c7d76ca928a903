// Exact float <-> bit-pattern helpers usable on host and device.
#pragma once

#include <cstdint>
#include <cstring>

#include "tessera/core/macros.h"

namespace tessera::formats {

TESSERA_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TESSERA_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// 2^k for k in [-149, 127], built exactly from bits (no libm).
TESSERA_HD float exp2i(int k) {
  if (k >= -126) return bits_to_float(uint32_t(k + 127) << 23);
  return bits_to_float(1u << (k + 149));
}

// Round-to-nearest-even of v / 2^shift for shift >= 1.
TESSERA_HD uint32_t rne_shift_right(uint32_t v, int shift) {
  if (shift >= 33) return 0;
  const uint64_t wide = v;
  uint64_t q = wide >> shift;
  const uint64_t rem = wide & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  return static_cast<uint32_t>(q);
}

// Unclamped RNE code (exponent field << kMan | mantissa) of a finite, non-negative float given
// by its bits, in a binary format with kMan mantissa bits and exponent bias kBias (IEEE-style
// subnormals). A result past the format's largest code means overflow; the caller clamps.
template <int kMan, int kBias>
TESSERA_HD uint32_t round_magnitude_rne(uint32_t abs_bits) {
  constexpr int kEmin = 1 - kBias;
  const int biased = static_cast<int>(abs_bits >> 23);
  uint32_t mant = abs_bits & 0x7fffffu;
  int e;
  if (biased == 0) {
    if (mant == 0) return 0;
    e = -126;  // float subnormal: value = mant * 2^(-126 - 23)
  } else {
    mant |= 0x800000u;
    e = biased - 127;
  }
  if (e > 127) e = 127;  // inf/NaN are handled by callers; keep shifts defined
  const int quantum_exp = (e < kEmin ? kEmin : e) - kMan;
  const int shift = quantum_exp - (e - 23);  // >= 23 - kMan > 0
  const uint32_t n = rne_shift_right(mant, shift);
  if (e < kEmin) return n;  // subnormal; n == 2^kMan is the smallest normal, encoded right
  return (static_cast<uint32_t>(e + kBias) << kMan) + (n - (1u << kMan));
}

// The same RNE code as round_magnitude_rne for a non-negative, non-NaN float (inf allowed),
// clamped to kMaxCode (saturation), computed branch-free so that bulk loops vectorize:
// - normal results: add the RNE bias to the float bits and drop 23 - kMan mantissa bits (a
//   mantissa carry correctly bumps the exponent);
// - subnormal results: add 2^(1 - kBias - kMan + 23), whose ulp is the format's subnormal
//   quantum, so the FPU performs the RNE, and subtract its bits again.
template <int kMan, int kBias, uint32_t kMaxCode>
TESSERA_HD uint32_t round_magnitude_rne_sat(uint32_t abs_bits) {
  constexpr int kShift = 23 - kMan;
  constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 + 1 - kBias) << 23;
  constexpr uint32_t kRebias = static_cast<uint32_t>(127 - kBias) << 23;
  constexpr uint32_t kMagicBits = static_cast<uint32_t>(127 + 1 - kBias - kMan + 23) << 23;
  const uint32_t normal =
      (abs_bits + ((1u << (kShift - 1)) - 1u) + ((abs_bits >> kShift) & 1u) - kRebias) >> kShift;
  const uint32_t subnormal =
      float_to_bits(bits_to_float(abs_bits) + bits_to_float(kMagicBits)) - kMagicBits;
  const uint32_t code = abs_bits < kMinNormalBits ? subnormal : normal;
  return code < kMaxCode ? code : kMaxCode;
}

// Value of a non-negative finite code of such a format.
template <int kMan, int kBias>
TESSERA_HD float decode_magnitude(uint32_t code) {
  const uint32_t exp_field = code >> kMan;
  const uint32_t man = code & ((1u << kMan) - 1);
  if (exp_field == 0) return static_cast<float>(man) * exp2i(1 - kBias - kMan);
  return bits_to_float(((exp_field - kBias + 127) << 23) | (man << (23 - kMan)));
}

}  // namespace tessera::formats
