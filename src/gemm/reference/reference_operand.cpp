// The reference's reading of GEMM operands into FP64 (see reference_operand.h).
#include "gemm/reference/reference_operand.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "gemm/gemm_backend.h"
#include "quantize/reference/reference_rules.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/codecs.h"

namespace tessera::detail {
namespace {

int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

float fp32_at(const TensorView& v, int64_t i) {
  float f;
  std::memcpy(&f, v.as<const uint8_t>() + i * 4, 4);
  return f;
}

float fp8_decode(uint8_t code, DType element) {
  return element == DType::kFloat8E5M2 ? formats::decode_e5m2(code) : formats::decode_e4m3(code);
}

// NVFP4 decode factor e4m3(s_b) × (1/S_enc), S_enc from the copy's global amax by the
// reference quantizer's rule (non-finite global amax: S_enc NaN).
float nvfp4_factor(uint8_t s_b, float global_amax) {
  return reference::nvfp4_dec(s_b, reference::nvfp4_s_enc(global_amax));
}

// Logical element (r, c) of quantized operand `o`, in group `g`.
double quantized_element(const GemmOperand& o, int64_t r, int64_t c, int64_t g) {
  const QuantizedTensorView& q = o.quantized;
  const ScalingModeInfo& info = scaling_mode_info(q.config.mode);
  const bool cw = o.columnwise;
  const bool transposed = cw && info.columnwise_transposed;
  // Stored coordinates and stored (full) dims of the copy.
  const int64_t sr = transposed ? c : r, sc = transposed ? r : c;
  const int64_t SR = transposed ? q.cols : q.rows, SC = transposed ? q.rows : q.cols;
  const TensorView& data = cw ? q.columnwise_data : q.data;
  const TensorView& scale = cw ? q.columnwise_scale_inv : q.scale_inv;
  const uint8_t* codes = data.as<const uint8_t>();
  const uint8_t* s = scale.as<const uint8_t>();
  const DType el = q.config.element;
  int64_t pos = info.family == ScaleFamily::kTensor
                    ? 0
                    : reference::copy_scale_position(q.config, cw, sr, sc, SR, SC);
  if (info.family == ScaleFamily::kRowwise && cw) {  // per-group column scales: group g's at g·n
    const int64_t n = scale_shape(q.config, q.rows, q.cols, true).numel();
    if (scale.numel() > n) pos += g * n;
  }
  switch (info.family) {
    case ScaleFamily::kTensor:
      return fp8_decode(codes[sr * SC + sc], el) * fp32_at(scale, scale.numel() == 1 ? 0 : g);
    case ScaleFamily::kRowwise:
    case ScaleFamily::kBlock: return fp8_decode(codes[sr * SC + sc], el) * fp32_at(scale, pos);
    case ScaleFamily::kMXFP8:
      return fp8_decode(codes[sr * SC + sc], el) * formats::decode_e8m0(s[pos]);
    case ScaleFamily::kNVFP4: {
      const uint8_t byte = codes[sr * div_up(SC, 2) + sc / 2];
      const uint8_t code = static_cast<uint8_t>(sc % 2 == 0 ? byte & 0xF : byte >> 4);
      const TensorView& amax = cw ? q.columnwise_amax : q.amax;
      return formats::decode_e2m1(code) * nvfp4_factor(s[pos], fp32_at(amax, amax.numel() == 1 ? 0 : g));
    }
    case ScaleFamily::kNone: break;
  }
  TESSERA_FAIL(Status::kInternal, "reference: scaling mode ", info.name, " is not quantized");
}

}  // namespace

ReferenceMatrix reference_read(const GemmOperand& o, int64_t rows,
                               const std::vector<int64_t>& group_starts) {
  ReferenceMatrix m;
  m.rows = rows;
  m.cols = operand_cols(o);
  m.values.resize(static_cast<size_t>(m.rows * m.cols));
  if (o.is_quantized) {
    for (int64_t r = 0; r < m.rows; ++r) {
      // The group of row r: the last start <= r (empty groups skipped).
      const auto it = std::upper_bound(group_starts.begin(), group_starts.end(), r);
      const int64_t g = static_cast<int64_t>(it - group_starts.begin()) - 1;
      for (int64_t c = 0; c < m.cols; ++c) m.values[r * m.cols + c] = quantized_element(o, r, c, g);
    }
    return m;
  }
  dispatch_float_input(o.dense.dtype, "operand", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = o.dense.as<T>();
    for (int64_t i = 0; i < m.rows * m.cols; ++i) m.values[i] = to_float(src[i]);
  });
  return m;
}

}  // namespace tessera::detail
