// Bulk encode/decode: argument checks, device dispatch and the OpenMP CPU loops.
#include "tessera/formats/convert.h"

#include <cstdint>

#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"

namespace tessera {
namespace {

void check_pair(const TensorView& src, const TensorView& dst, const char* op) {
  check_view(src, "src");
  check_view(dst, "dst");
  TESSERA_CHECK_STATUS(src.numel() == dst.numel(), Status::kShapeMismatch, op,
                       ": src has ", src.numel(), " elements but dst has ", dst.numel());
  TESSERA_CHECK(src.device == dst.device, op, ": src is on ", to_string(src.device),
                " but dst is on ", to_string(dst.device));
}

template <class In, class Encode>
void encode_bytes(const In* in, uint8_t* out, int64_t n, Encode enc) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = enc(to_float(in[i]));
}

template <class In>
void encode_e2m1_packed(const In* in, uint8_t* out, int64_t n) {
  const int64_t pairs = n / 2;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < pairs; ++j) {
    out[j] = static_cast<uint8_t>(formats::encode_e2m1(to_float(in[2 * j])) |
                                  (formats::encode_e2m1(to_float(in[2 * j + 1])) << 4));
  }
  if (n % 2 != 0) out[pairs] = formats::encode_e2m1(to_float(in[n - 1]));
}

template <class In>
void encode_cpu(const In* in, const TensorView& dst) {
  const int64_t n = dst.numel();
  auto* out8 = dst.as<uint8_t>();
  switch (dst.dtype) {
    case DType::kFloat8E4M3:
      return encode_bytes(in, out8, n, [](float x) { return formats::encode_e4m3(x); });
    case DType::kFloat8E5M2:
      return encode_bytes(in, out8, n, [](float x) { return formats::encode_e5m2(x); });
    case DType::kFloat8E8M0:
      return encode_bytes(in, out8, n, [](float x) { return formats::encode_e8m0(x); });
    case DType::kFloat4E2M1: return encode_e2m1_packed(in, out8, n);
    case DType::kBFloat16: {
      auto* out = dst.as<uint16_t>();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = formats::encode_bf16(to_float(in[i]));
      return;
    }
    case DType::kFloat16: {
      auto* out = dst.as<uint16_t>();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = formats::encode_fp16(to_float(in[i]));
      return;
    }
    default:
      TESSERA_FAIL(Status::kDTypeMismatch, "encode: dst dtype ", dtype_name(dst.dtype),
                   " is not accepted; expected e4m3, e5m2, e8m0, e2m1, bfloat16 or float16");
  }
}

template <class Decode>
void decode_bytes(const uint8_t* in, float* out, int64_t n, Decode dec) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = dec(in[i]);
}

void decode_cpu(const TensorView& src, float* out) {
  const int64_t n = src.numel();
  const auto* in8 = src.as<const uint8_t>();
  switch (src.dtype) {
    case DType::kFloat8E4M3:
      return decode_bytes(in8, out, n, [](uint8_t c) { return formats::decode_e4m3(c); });
    case DType::kFloat8E5M2:
      return decode_bytes(in8, out, n, [](uint8_t c) { return formats::decode_e5m2(c); });
    case DType::kFloat8E8M0:
      return decode_bytes(in8, out, n, [](uint8_t c) { return formats::decode_e8m0(c); });
    case DType::kFloat4E2M1: {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        out[i] = formats::decode_e2m1(static_cast<uint8_t>((in8[i / 2] >> (4 * (i % 2))) & 0xF));
      }
      return;
    }
    case DType::kBFloat16: {
      const auto* in = src.as<const uint16_t>();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = formats::decode_bf16(in[i]);
      return;
    }
    case DType::kFloat16: {
      const auto* in = src.as<const uint16_t>();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = formats::decode_fp16(in[i]);
      return;
    }
    case DType::kFloat32: {
      const auto* in = src.as<const float>();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = in[i];
      return;
    }
    default:
      TESSERA_FAIL(Status::kDTypeMismatch, "decode: src dtype ", dtype_name(src.dtype),
                   " is not accepted; expected float32, bfloat16, float16, e4m3, e5m2, e8m0 "
                   "or e2m1");
  }
}

}  // namespace

void encode(const TensorView& src, const TensorView& dst, Stream stream) {
  check_pair(src, dst, "encode");
  if (src.device.is_cuda()) return detail::encode_cuda(src, dst, stream);
  dispatch_float_input(src.dtype, "encode: src", [&](auto tag) {
    using In = typename decltype(tag)::type;
    encode_cpu(src.as<const In>(), dst);
  });
}

void decode(const TensorView& src, const TensorView& dst, Stream stream) {
  check_pair(src, dst, "decode");
  check_view(dst, "decode: dst", {DType::kFloat32});
  if (src.device.is_cuda()) return detail::decode_cuda(src, dst, stream);
  decode_cpu(src, dst.as<float>());
}

}  // namespace tessera
