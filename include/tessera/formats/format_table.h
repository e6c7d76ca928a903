// The constexpr table of element formats: what tests, tolerances and `tessera info` read.
#pragma once

#include <cstdint>
#include <span>

#include "tessera/core/dtype.h"

namespace tessera {

struct FormatInfo {
  DType dtype;
  const char* name;             // tessera's name ("e4m3")
  const char* ml_dtypes_name;   // matching ml_dtypes / PyTorch dtype ("float8_e4m3fn")
  int bits;
  int exponent_bits;
  int mantissa_bits;
  int exponent_bias;
  double max_finite;
  double min_normal;
  double min_subnormal;         // 0 when the format has no subnormals
  bool has_sign;
  bool has_inf;
  bool has_nan;
  // Relative error of one RNE rounding inside the normal range: 2^-(mantissa_bits + 1).
  double unit_roundoff() const { return 1.0 / static_cast<double>(int64_t{2} << mantissa_bits); }
};

inline constexpr FormatInfo kFormatTable[] = {
    {DType::kFloat32, "float32", "float32", 32, 8, 23, 127, 3.4028234663852886e38,
     1.1754943508222875e-38, 1.401298464324817e-45, true, true, true},
    {DType::kBFloat16, "bfloat16", "bfloat16", 16, 8, 7, 127, 3.3895313892515355e38,
     1.1754943508222875e-38, 9.183549615799121e-41, true, true, true},
    {DType::kFloat16, "float16", "float16", 16, 5, 10, 15, 65504.0, 6.103515625e-05,
     5.960464477539063e-08, true, true, true},
    {DType::kFloat8E4M3, "e4m3", "float8_e4m3fn", 8, 4, 3, 7, 448.0, 0.015625, 0.001953125, true,
     false, true},
    {DType::kFloat8E5M2, "e5m2", "float8_e5m2", 8, 5, 2, 15, 57344.0, 6.103515625e-05,
     1.52587890625e-05, true, true, true},
    {DType::kFloat8E8M0, "e8m0", "float8_e8m0fnu", 8, 8, 0, 127, 1.7014118346046923e38,
     5.877471754111438e-39, 0.0, false, false, true},
    {DType::kFloat4E2M1, "e2m1", "float4_e2m1fn", 4, 2, 1, 1, 6.0, 1.0, 0.5, true, false, false},
};

// Row of the table for `dt`; throws Error(kDTypeMismatch) for a dtype that is not a float format.
const FormatInfo& format_info(DType dt);
std::span<const FormatInfo> format_table();

}  // namespace tessera
