// Element types. Sub-byte types (FP4 E2M1) are packed two per byte, element 2j in the low nibble.
#pragma once

#include <cstdint>
#include <string_view>

namespace tessera {

enum class DType : int {
  kFloat32 = 0,
  kBFloat16 = 1,
  kFloat16 = 2,
  kFloat8E4M3 = 3,  // float8_e4m3fn
  kFloat8E5M2 = 4,  // float8_e5m2
  kFloat8E8M0 = 5,  // float8_e8m0fnu (scale type)
  kFloat4E2M1 = 6,  // float4_e2m1fn, packed two per byte
  kUInt8 = 7,
  kInt32 = 8,
  kInt64 = 9,
  kFloat64 = 10,
};

inline constexpr int kNumDTypes = 11;

// Bits per element (4 for E2M1).
int dtype_bits(DType dt) noexcept;
// Canonical name: "float32", "bfloat16", "float16", "e4m3", "e5m2", "e8m0", "e2m1", "uint8", ...
const char* dtype_name(DType dt) noexcept;
// Accepts the canonical names and common aliases ("fp32", "bf16", "float8_e4m3fn", ...).
// Throws Error(kInvalidArgument) naming the accepted values.
DType parse_dtype(std::string_view name);
// Bytes needed for `numel` elements (rounds sub-byte types up). Throws Error(kOutOfRange) when
// the byte count overflows int64 (see core/checked_math.h).
int64_t dtype_bytes(DType dt, int64_t numel);
bool is_floating_input(DType dt) noexcept;  // float32 / bfloat16 / float16

}  // namespace tessera
