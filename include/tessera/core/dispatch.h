// The one dispatch header: each function turns a run-time value into a compile-time type or
// constant and calls `f` with a tag. The default case names the value received and those accepted.
#pragma once

#include <type_traits>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/half.h"
#include "tessera/formats/scaling_modes.h"

namespace tessera {

template <class T>
struct TypeTag {
  using type = T;
};

// float32 / bfloat16 / float16 → TypeTag<float | bf16 | fp16>.
template <class F>
decltype(auto) dispatch_float_input(DType dt, const char* arg, F&& f) {
  switch (dt) {
    case DType::kFloat32: return f(TypeTag<float>{});
    case DType::kBFloat16: return f(TypeTag<bf16>{});
    case DType::kFloat16: return f(TypeTag<fp16>{});
    default:
      TESSERA_FAIL(Status::kDTypeMismatch, arg, ": dtype ", dtype_name(dt),
                   " is not accepted; expected float32, bfloat16 or float16");
  }
}

// Quantized element types → std::integral_constant<DType, ...>.
template <class F>
decltype(auto) dispatch_quantized_dtype(DType dt, const char* arg, F&& f) {
  switch (dt) {
    case DType::kFloat8E4M3: return f(std::integral_constant<DType, DType::kFloat8E4M3>{});
    case DType::kFloat8E5M2: return f(std::integral_constant<DType, DType::kFloat8E5M2>{});
    case DType::kFloat8E8M0: return f(std::integral_constant<DType, DType::kFloat8E8M0>{});
    case DType::kFloat4E2M1: return f(std::integral_constant<DType, DType::kFloat4E2M1>{});
    default:
      TESSERA_FAIL(Status::kDTypeMismatch, arg, ": dtype ", dtype_name(dt),
                   " is not accepted; expected e4m3, e5m2, e8m0 or e2m1");
  }
}

// FP8 element type → std::bool_constant<is_e5m2> (E4M3: false, E5M2: true).
template <class F>
decltype(auto) dispatch_fp8_element(DType dt, const char* arg, F&& f) {
  switch (dt) {
    case DType::kFloat8E4M3: return f(std::false_type{});
    case DType::kFloat8E5M2: return f(std::true_type{});
    default:
      TESSERA_FAIL(Status::kDTypeMismatch, arg, ": dtype ", dtype_name(dt),
                   " is not an FP8 element type; expected e4m3 or e5m2");
  }
}

// Input type x FP8 element → f(TypeTag<float | bf16 | fp16>, std::integral_constant<DType,
// E4M3 | E5M2>): the pair every FP8 quantize kernel is instantiated on.
template <class F>
decltype(auto) dispatch_input_fp8(DType in, DType element, const char* arg, F&& f) {
  return dispatch_float_input(in, arg, [&](auto tag) -> decltype(auto) {
    return dispatch_fp8_element(element, "element", [&](auto is_e5m2) -> decltype(auto) {
      constexpr DType kElement =
          decltype(is_e5m2)::value ? DType::kFloat8E5M2 : DType::kFloat8E4M3;
      return f(tag, std::integral_constant<DType, kElement>{});
    });
  });
}

// Largest finite value of an FP8 element type (E4M3 448, E5M2 57344), from the format traits.
inline float fp8_max_finite(DType dt) {
  return dispatch_fp8_element(dt, "element", [](auto is_e5m2) {
    return is_e5m2() ? formats::FormatTraits<DType::kFloat8E5M2>::kMax
                     : formats::FormatTraits<DType::kFloat8E4M3>::kMax;
  });
}

// int32 / int64 → TypeTag<int32_t | int64_t>.
template <class F>
decltype(auto) dispatch_index_dtype(DType dt, const char* arg, F&& f) {
  switch (dt) {
    case DType::kInt32: return f(TypeTag<int32_t>{});
    case DType::kInt64: return f(TypeTag<int64_t>{});
    default:
      TESSERA_FAIL(Status::kDTypeMismatch, arg, ": dtype ", dtype_name(dt),
                   " is not accepted; expected int32 or int64");
  }
}

// Quantizing scaling mode → f(std::integral_constant<ScaleFamily, family>, const
// ScalingModeInfo&): the family picks the kernels at compile time, the row (kScalingModeTable)
// gives the block shape, scale dtype and layout at run time. kNone and values outside the table
// are refused, naming the value and the accepted names.
template <class F>
decltype(auto) dispatch_scaling_mode(ScalingMode m, const char* arg, F&& f) {
  const ScalingModeInfo* info = find_scaling_mode(m);
  switch (info == nullptr ? ScaleFamily::kNone : info->family) {
    case ScaleFamily::kTensor:
      return f(std::integral_constant<ScaleFamily, ScaleFamily::kTensor>{}, *info);
    case ScaleFamily::kRowwise:
      return f(std::integral_constant<ScaleFamily, ScaleFamily::kRowwise>{}, *info);
    case ScaleFamily::kBlock:
      return f(std::integral_constant<ScaleFamily, ScaleFamily::kBlock>{}, *info);
    case ScaleFamily::kMXFP8:
      return f(std::integral_constant<ScaleFamily, ScaleFamily::kMXFP8>{}, *info);
    case ScaleFamily::kNVFP4:
      return f(std::integral_constant<ScaleFamily, ScaleFamily::kNVFP4>{}, *info);
    case ScaleFamily::kNone:
      break;
  }
  TESSERA_FAIL(Status::kInvalidArgument, arg, ": scaling mode ",
               info != nullptr ? info->name : "(value not in the table)", " (", static_cast<int>(m),
               ") is not accepted; expected one of ", scaling_mode_names());
}

// Backend chosen by the device of the operands.
enum class Backend : int { kReference = 0, kCPU = 1, kCUDA = 2 };
const char* backend_name(Backend b) noexcept;

inline Backend backend_for(Device d) { return d.is_cuda() ? Backend::kCUDA : Backend::kCPU; }

}  // namespace tessera
