// CPU dequantize: decode each copy row by row (multithreaded) with its block scale, undo the
// Hadamard transform when it was applied, and write (M, K) float32 in the logical orientation.
#include <algorithm>
#include <cstring>

#include "quantize/cpu/cpu_kernels.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

float fp8_value(uint8_t code, bool e5m2) {
  return e5m2 ? formats::decode_e5m2(code) : formats::decode_e4m3(code);
}

// Row r of an FP8 copy (cols wide) with FP32 scales (tensor, rowwise, block families) or E8M0
// scales (MXFP8) → dst[0..cols).
void fp8_row(const QuantizerConfig& c, const uint8_t* d, const void* s,
             const scale_rules::ScaleGeometry& g, bool e8m0, int64_t r, int64_t cols, float* dst) {
  const bool e5 = c.element == DType::kFloat8E5M2;
  const int64_t step = g.block_cols > 0 ? g.block_cols : std::max<int64_t>(cols, 1);
  for (int64_t k0 = 0; k0 < cols; k0 += step) {  // one scale per run of a block's columns
    const int64_t i = scale_rules::scale_index(g, r, k0);
    const float si = e8m0 ? formats::decode_e8m0(static_cast<const uint8_t*>(s)[i])
                          : static_cast<const float*>(s)[i];
    for (int64_t k = k0; k < std::min(cols, k0 + step); ++k) {
      dst[k] = fp8_value(d[r * cols + k], e5) * si;
    }
  }
}

void nvfp4_row(const uint8_t* d, const uint8_t* s, const scale_rules::ScaleGeometry& g,
               float s_enc, int64_t r, int64_t cols, float* dst) {
  const int64_t row_bytes = ceil_div(cols, 2);
  for (int64_t k0 = 0; k0 < cols; k0 += g.block_cols) {  // NVFP4: block_cols = 16
    const float dec =
        scale_rules::nvfp4_decode_scale(s[scale_rules::scale_index(g, r, k0)], s_enc);
    for (int64_t k = k0; k < std::min(cols, k0 + g.block_cols); ++k) {
      const uint8_t byte = d[r * row_bytes + k / 2];
      const uint8_t code = static_cast<uint8_t>(k % 2 == 0 ? byte & 0xf : byte >> 4);
      dst[k] = formats::decode_e2m1(code) * dec;
    }
  }
}

}  // namespace

void dequantize_cpu(const QuantizedTensorView& q, const TensorView& out, bool columnwise) {
  const QuantizerConfig& c = q.config;
  // Refuses kNone and values outside the table (naming them) instead of guessing a layout.
  const ScaleFamily family = dispatch_scaling_mode(
      c.mode, "dequantize: config.mode", [](auto f, const ScalingModeInfo&) { return f(); });
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  const bool nv = family == ScaleFamily::kNVFP4;
  const bool e8m0 = info.scale_dtype == DType::kFloat8E8M0;
  const bool transposed = columnwise && info.columnwise_transposed;
  const int64_t rows = transposed ? q.cols : q.rows, cols = transposed ? q.rows : q.cols;
  const uint8_t* d = (columnwise ? q.columnwise_data : q.data).as<const uint8_t>();
  const TensorView& sv = columnwise ? q.columnwise_scale_inv : q.scale_inv;
  const scale_rules::ScaleGeometry g = scale_geometry(c, q.rows, q.cols, columnwise);
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
    if (nv) {
      nvfp4_row(d, sv.as<const uint8_t>(), g, s_enc, r, cols, row);
      for (int64_t k = 0; columnwise && c.random_hadamard && k + 16 <= cols; k += 16) {
        float b[16];
        scale_rules::rht16_inverse(row + k, b);
        std::copy(b, b + 16, row + k);
      }
    } else {
      fp8_row(c, d, sv.data, g, e8m0, r, cols, row);
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
