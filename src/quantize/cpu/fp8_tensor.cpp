// CPU FP8 with FP32 scales per tensor (current or delayed scaling) and per row (kRowwise; the
// columnwise usage scales per column and is stored transposed).
#include <algorithm>
#include <cstring>

#include "quantize/cpu/cpu_kernels.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cpu {
namespace {


// a: (rows, cols) row-major. One scale for all of it. out: (rows, cols) codes.
template <bool kE5M2, class In>
TESSERA_CPU_KERNEL void encode_tensor(const In* a, int64_t n, float scale, uint8_t* out) {
  constexpr int64_t kChunk = 16384;
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk)
    encode_scaled<kE5M2>(a + c0, std::min(kChunk, n - c0), scale, out + c0);
}

// a: (rows, cols). One current-scaling scale per row; scale_inv (rows, 1).
template <bool kE5M2, class In>
TESSERA_CPU_KERNEL void encode_rows(const QuantizerConfig& c, const In* a, int64_t rows, int64_t cols, uint8_t* out,
                 float* scale_inv) {
  const float emax = fp8_max_finite(c.element);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const In* row = a + r * cols;
    const float amax = scale_rules::amax_from_abs_bits(amax_bits(row, cols));
    const float scale =
        scale_rules::current_scale(amax, emax, c.amax_epsilon, c.power_of_two_scales);
    encode_scaled<kE5M2>(row, cols, scale, out + r * cols);
    scale_inv[r] = scale_rules::reciprocal(scale);
  }
}

template <bool kE5M2, class In>
void quantize_copy(const QuantizerConfig& c, const In* a, int64_t rows, int64_t cols, float scale,
                   uint8_t* out, float* scale_inv) {
  if (is_family(c.mode, ScaleFamily::kTensor)) {
    encode_tensor<kE5M2>(a, rows * cols, scale, out);
    scale_inv[0] = scale_rules::reciprocal(scale);
  } else {
    encode_rows<kE5M2>(c, a, rows, cols, out, scale_inv);
  }
}

template <bool kE5M2>
void run(const QuantizerConfig& c, const TensorView& x, const QuantizedTensorView& out,
         const QuantizeRequest& req) {
  const int64_t m = x.shape[0], k = x.shape[1];
  const bool per_tensor = is_family(c.mode, ScaleFamily::kTensor);
  float amax = 0.0f, scale = 1.0f;
  if (per_tensor) {
    amax = scale_rules::amax_from_abs_bits(tensor_amax_bits(x));
    scale = c.delayed ? *req.delayed_scale
                      : scale_rules::current_scale(amax, fp8_max_finite(c.element), c.amax_epsilon,
                                                   c.power_of_two_scales);
    if (c.delayed) req.amax_history[0] = amax;
  }
  // Per-tensor scaling with both usages: one tiled pass writes both copies (the same codes).
  const bool fused = per_tensor && req.rowwise && req.columnwise;
  if (req.rowwise && !fused) {
    dispatch_float_input(x.dtype, "x", [&](auto tag) {
      using In = typename decltype(tag)::type;
      quantize_copy<kE5M2>(c, x.as<const In>(), m, k, scale, out.data.as<uint8_t>(),
                           out.scale_inv.as<float>());
    });
  }
  if (fused) out.scale_inv.as<float>()[0] = scale_rules::reciprocal(scale);
  if (req.rowwise && per_tensor) *out.amax.as<float>() = amax;
  if (req.columnwise) {
    quantize_fp8_columnwise(c, x, scale, out.columnwise_data, out.columnwise_scale_inv,
                            fused ? out.data.as<uint8_t>() : nullptr);
    if (per_tensor) *out.columnwise_amax.as<float>() = amax;
  }
}

}  // namespace

void quantize_fp8_tensor(const QuantizerConfig& c, const TensorView& x,
                         const QuantizedTensorView& out, const QuantizeRequest& req) {
  dispatch_fp8_element(c.element, "config.element",
                       [&](auto is_e5m2) { run<decltype(is_e5m2)::value>(c, x, out, req); });
}

}  // namespace tessera::detail::cpu
