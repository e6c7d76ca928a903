// An independent oracle for the element codecs: values by the textbook formula (std::ldexp) and
// encoding by brute-force nearest search over every code (ties to the even code), saturating.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tessera/formats/format_table.h"

namespace tessera::testing {

inline double oracle_decode(const FormatInfo& f, uint32_t code) {
  const int m = f.mantissa_bits;
  const int e = f.exponent_bits;
  if (f.dtype == DType::kFloat8E8M0) {
    return code == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, int(code) - 127);
  }
  const uint32_t sign = (code >> (e + m)) & 1u;
  const uint32_t exp_field = (code >> m) & ((1u << e) - 1);
  const uint32_t man = code & ((1u << m) - 1);
  const uint32_t all_ones = (1u << e) - 1;
  double v;
  if (f.dtype == DType::kFloat8E4M3 && exp_field == all_ones && man == all_ones - 8) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (f.has_inf && exp_field == all_ones) {
    v = man == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (exp_field == 0) {
    v = std::ldexp(double(man), 1 - f.exponent_bias - m);
  } else {
    v = std::ldexp(1.0 + std::ldexp(double(man), -m), int(exp_field) - f.exponent_bias);
  }
  return sign ? -v : v;
}

// Sorted finite non-negative values with their codes, for the nearest search.
struct OracleGrid {
  std::vector<double> values;
  std::vector<uint32_t> codes;
};

inline OracleGrid oracle_grid(const FormatInfo& f) {
  OracleGrid g;
  const uint32_t half = 1u << (f.bits - 1);
  for (uint32_t c = 0; c < half; ++c) {
    const double v = oracle_decode(f, c);
    if (std::isfinite(v)) {
      g.values.push_back(v);
      g.codes.push_back(c);
    }
  }
  return g;
}

// Saturating RNE encode of a non-NaN value (sign handled by the caller's sign bit).
inline uint32_t oracle_encode(const FormatInfo& f, const OracleGrid& g, float x) {
  const double a = std::fabs(double(x));
  const uint32_t sign = std::signbit(x) ? (1u << (f.bits - 1)) : 0u;
  if (a >= g.values.back()) return sign | g.codes.back();
  size_t hi = 0;
  while (g.values[hi] < a) ++hi;
  if (g.values[hi] == a || hi == 0) return sign | g.codes[hi];
  const double dlo = a - g.values[hi - 1];
  const double dhi = g.values[hi] - a;
  size_t pick = dlo < dhi ? hi - 1 : hi;
  if (dlo == dhi) pick = (g.codes[hi] & 1u) == 0 ? hi : hi - 1;
  return sign | g.codes[pick];
}

}  // namespace tessera::testing
