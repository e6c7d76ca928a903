// CPU dequantize: decode each copy row by row (multithreaded) with its block scale, undo the
// Hadamard transform when it was applied, and write (M, K) float32 in the logical orientation.
#include <algorithm>
#include <cstring>

#include "quantize/cpu/cpu_kernels.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

float fp8_value(uint8_t code, bool e5m2) {
  return e5m2 ? formats::decode_e5m2(code) : formats::decode_e4m3(code);
}

// Row r of an FP8 copy with FP32 scales (tensor, rowwise, block modes) → dst[0..cols).
void fp8_fp32_row(const QuantizerConfig& c, const uint8_t* d, const float* s, int64_t r,
                  int64_t cols, float* dst) {
  const bool e5 = c.element == DType::kFloat8E5M2;
  const int64_t nb = ceil_div(cols, 128);
  for (int64_t k = 0; k < cols; ++k) {
    float si = 0.0f;
    switch (c.mode) {
      case ScalingMode::kTensor: si = s[0]; break;
      case ScalingMode::kRowwise: si = s[r]; break;
      case ScalingMode::kBlock1x128: si = s[r * nb + k / 128]; break;
      default: si = s[(r / 128) * ((nb + 3) / 4 * 4) + k / 128]; break;
    }
    dst[k] = fp8_value(d[r * cols + k], e5) * si;
  }
}

void mxfp8_row(const QuantizerConfig& c, const uint8_t* d, const uint8_t* s, int64_t r,
               int64_t rows, int64_t cols, bool columnwise, float* dst) {
  const bool e5 = c.element == DType::kFloat8E5M2;
  const bool sw = c.scale_layout == ScaleLayout::kSwizzled;
  const int64_t nb = ceil_div(cols, 32), ns = ceil_div(rows, 32);
  for (int64_t k = 0; k < cols; ++k) {
    int64_t pos;
    if (!columnwise) {
      pos = sw ? swizzled_scale_offset(r, k / 32, (nb + 3) / 4 * 4) : r * nb + k / 32;
    } else {
      pos = sw ? swizzled_scale_offset(k, r / 32, (ns + 3) / 4 * 4) : (r / 32) * cols + k;
    }
    dst[k] = fp8_value(d[r * cols + k], e5) * formats::decode_e8m0(s[pos]);
  }
}

void nvfp4_row(const QuantizerConfig& c, const uint8_t* d, const uint8_t* s, float s_enc,
               int64_t r, int64_t cols, float* dst) {
  const int64_t nb = ceil_div(cols, 16), row_bytes = ceil_div(cols, 2);
  const bool sw = c.scale_layout == ScaleLayout::kSwizzled;
  for (int64_t k = 0; k < cols; ++k) {
    const uint8_t s_b = s[sw ? swizzled_scale_offset(r, k / 16, (nb + 3) / 4 * 4) : r * nb + k / 16];
    const uint8_t byte = d[r * row_bytes + k / 2];
    const uint8_t code = static_cast<uint8_t>(k % 2 == 0 ? byte & 0xf : byte >> 4);
    dst[k] = formats::decode_e2m1(code) * scale_rules::nvfp4_decode_scale(s_b, s_enc);
  }
}

}  // namespace

void dequantize_cpu(const QuantizedTensorView& q, const TensorView& out, bool columnwise) {
  const QuantizerConfig& c = q.config;
  const bool mx = c.mode == ScalingMode::kMXFP8 || c.mode == ScalingMode::kMXFP8_32x32;
  const bool nv = c.mode == ScalingMode::kNVFP4 || c.mode == ScalingMode::kNVFP4_16x16;
  const bool transposed = columnwise && !mx;
  const int64_t rows = transposed ? q.cols : q.rows, cols = transposed ? q.rows : q.cols;
  const uint8_t* d = (columnwise ? q.columnwise_data : q.data).as<const uint8_t>();
  const TensorView& sv = columnwise ? q.columnwise_scale_inv : q.scale_inv;
  float s_enc = 1.0f;
  if (nv) s_enc = scale_rules::nvfp4_global_encode_scale(*(columnwise ? q.columnwise_amax : q.amax).as<const float>());
  Buffer tmp;
  float* dst = out.as<float>();  // (rows, cols) of the copy
  if (transposed) {
    tmp = Buffer(static_cast<size_t>(std::max<int64_t>(rows * cols, 1)) * sizeof(float));
    dst = tmp.as<float>();
  }
#pragma omp parallel for schedule(static) if (rows * cols >= cpu::kParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = dst + r * cols;
    if (mx) {
      mxfp8_row(c, d, sv.as<const uint8_t>(), r, rows, cols, columnwise, row);
    } else if (nv) {
      nvfp4_row(c, d, sv.as<const uint8_t>(), s_enc, r, cols, row);
      for (int64_t k = 0; columnwise && c.random_hadamard && k + 16 <= cols; k += 16) {
        float b[16];
        scale_rules::rht16_inverse(row + k, b);
        std::copy(b, b + 16, row + k);
      }
    } else {
      fp8_fp32_row(c, d, sv.as<const float>(), r, cols, row);
    }
  }
  if (transposed) {
    float* o = out.as<float>();  // (cols, rows) = (M, K)
#pragma omp parallel for schedule(static) if (rows * cols >= cpu::kParallelWork)
    for (int64_t m = 0; m < cols; ++m)
      for (int64_t k = 0; k < rows; ++k) o[m * rows + k] = dst[k * cols + m];
  }
}

}  // namespace tessera::detail
