// DType names, sizes and parsing.
#include "tessera/core/dtype.h"

#include <string>

#include "tessera/core/checked_math.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"

namespace tessera {

int dtype_bits(DType dt) noexcept {
  switch (dt) {
    case DType::kFloat64:
    case DType::kInt64: return 64;
    case DType::kFloat32:
    case DType::kInt32: return 32;
    case DType::kBFloat16:
    case DType::kFloat16: return 16;
    case DType::kFloat4E2M1: return 4;
    default: return 8;
  }
}

const char* dtype_name(DType dt) noexcept {
  switch (dt) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kFloat8E4M3: return "e4m3";
    case DType::kFloat8E5M2: return "e5m2";
    case DType::kFloat8E8M0: return "e8m0";
    case DType::kFloat4E2M1: return "e2m1";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat64: return "float64";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view text;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", DType::kFloat32},       {"fp32", DType::kFloat32},
      {"f32", DType::kFloat32},           {"bfloat16", DType::kBFloat16},
      {"bf16", DType::kBFloat16},         {"float16", DType::kFloat16},
      {"fp16", DType::kFloat16},          {"half", DType::kFloat16},
      {"e4m3", DType::kFloat8E4M3},       {"float8_e4m3fn", DType::kFloat8E4M3},
      {"fp8_e4m3", DType::kFloat8E4M3},   {"e5m2", DType::kFloat8E5M2},
      {"float8_e5m2", DType::kFloat8E5M2}, {"fp8_e5m2", DType::kFloat8E5M2},
      {"e8m0", DType::kFloat8E8M0},       {"float8_e8m0fnu", DType::kFloat8E8M0},
      {"e2m1", DType::kFloat4E2M1},       {"float4_e2m1fn", DType::kFloat4E2M1},
      {"fp4", DType::kFloat4E2M1},        {"uint8", DType::kUInt8},
      {"int32", DType::kInt32},           {"int64", DType::kInt64},
      {"float64", DType::kFloat64},       {"fp64", DType::kFloat64},
  };
  for (const Alias& a : kAliases) {
    if (a.text == name) return a.dtype;
  }
  TESSERA_FAIL(Status::kInvalidArgument, "unknown dtype '", echo(name),
               "'; expected one of float32, bfloat16, float16, e4m3, e5m2, e8m0, e2m1, uint8, "
               "int32, int64, float64 (or aliases fp32, bf16, fp16, float8_e4m3fn, float8_e5m2, "
               "float8_e8m0fnu, float4_e2m1fn)");
}

int64_t dtype_bytes(DType dt, int64_t numel) {
  return checked_dtype_bytes(dt, numel, dtype_name(dt));
}

bool is_floating_input(DType dt) noexcept {
  return dt == DType::kFloat32 || dt == DType::kBFloat16 || dt == DType::kFloat16;
}

const char* backend_name(Backend b) noexcept {
  switch (b) {
    case Backend::kReference: return "reference";
    case Backend::kCPU: return "cpu";
    case Backend::kCUDA: return "cuda";
  }
  return "unknown";
}

}  // namespace tessera
