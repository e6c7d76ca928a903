// The reference dequantizer: x̂ = decoded element × the block's scale_inv (NVFP4: × the decode
// scale, then the inverse Hadamard transform), written back in the logical (M, K) orientation.
#include <cstring>

#include "core/host_bytes.h"
#include "quantize/quantize_backend.h"
#include "quantize/reference/reference_rules.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"

namespace tessera::detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

float fp8_value(uint8_t code, DType element) {
  return element == DType::kFloat8E5M2 ? formats::decode_e5m2(code) : formats::decode_e4m3(code);
}

float float_at(const TensorView& v, int64_t index) {
  float f;
  std::memcpy(&f, v.as<const uint8_t>() + index * 4, 4);
  return f;
}

// The copy's values (R, C): rowwise (M, K); columnwise (K, M) except MXFP8 (M, K).
reference::Matrix decode_copy(const QuantizedTensorView& q, bool columnwise) {
  const QuantizerConfig& c = q.config;
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  const bool transposed = columnwise && info.columnwise_transposed;
  reference::Matrix a{transposed ? q.cols : q.rows, transposed ? q.rows : q.cols, {}};
  a.v.resize(static_cast<size_t>(a.rows * a.cols));
  const TensorView& data = columnwise ? q.columnwise_data : q.data;
  const TensorView& scale = columnwise ? q.columnwise_scale_inv : q.scale_inv;
  const uint8_t* d = data.as<const uint8_t>();
  const uint8_t* s = scale.as<const uint8_t>();
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t k = 0; k < a.cols; ++k) {
      const int64_t pos = reference::copy_scale_position(c, columnwise, r, k, a.rows, a.cols);
      float v = 0.0f;
      switch (info.family) {
        case ScaleFamily::kTensor:
        case ScaleFamily::kRowwise:
        case ScaleFamily::kBlock:
          v = fp8_value(d[r * a.cols + k], c.element) * float_at(scale, pos);
          break;
        case ScaleFamily::kMXFP8:
          v = fp8_value(d[r * a.cols + k], c.element) * formats::decode_e8m0(s[pos]);
          break;
        case ScaleFamily::kNVFP4: {
          const TensorView& amax = columnwise ? q.columnwise_amax : q.amax;
          const float s_enc = reference::nvfp4_s_enc(float_at(amax, 0));
          const uint8_t byte = d[r * ceil_div(a.cols, 2) + k / 2];
          const uint8_t code = static_cast<uint8_t>(k % 2 == 0 ? byte & 0xf : byte >> 4);
          v = formats::decode_e2m1(code) * reference::nvfp4_dec(s[pos], s_enc);
          break;
        }
        case ScaleFamily::kNone:
          TESSERA_FAIL(Status::kInternal, "reference: mode ", info.name, " does not quantize");
      }
      a.at(r, k) = v;
    }
  }
  if (columnwise && c.random_hadamard) {
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t k = 0; k + 16 <= a.cols; k += 16) {
        float block[16];
        reference::hadamard_inverse(&a.v[static_cast<size_t>(r * a.cols + k)], block);
        for (int j = 0; j < 16; ++j) a.at(r, k + j) = block[j];
      }
  }
  return transposed ? reference::transposed(a) : a;
}

}  // namespace

void dequantize_reference(const QuantizedTensorView& q, const TensorView& out, bool columnwise) {
  const reference::Matrix x = decode_copy(q, columnwise);
  host_copy_bytes(out.data, x.v.data(), x.v.size() * sizeof(float));
}

}  // namespace tessera::detail
