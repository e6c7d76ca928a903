// CPU FP8 block scaling: FP32 current-scaling scale per 1x128 block or per 128x128 tile (power of
// two by default). The columnwise usage (the same quantization of xᵀ, stored transposed) is made
// by fp8_columnwise.cpp.
#include <algorithm>
#include <vector>

#include "quantize/cpu/cpu_kernels.h"
#include "tessera/core/dispatch.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cpu {
namespace {

constexpr int64_t kBlock = 128;

float block_scale(const QuantizerConfig& c, uint32_t amax_bits_value) {
  const float emax = fp8_max_finite(c.element);
  return scale_rules::current_scale(scale_rules::amax_from_abs_bits(amax_bits_value), emax,
                                    c.amax_epsilon, c.power_of_two_scales);
}

// a: (rows, cols). scale_inv: (roundup(rows, 4), ceil(cols/128)), padding rows already zero.
template <bool kE5M2, class In>
TESSERA_CPU_KERNEL void blocks_1x128(const QuantizerConfig& c, const In* a, int64_t rows, int64_t cols, uint8_t* out,
                  float* scale_inv) {
  const int64_t nb = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * kBlock, n = std::min(kBlock, cols - k0);
      const In* seg = a + r * cols + k0;
      const float scale = block_scale(c, amax_bits(seg, n));
      encode_scaled<kE5M2>(seg, n, scale, out + r * cols + k0);
      scale_inv[r * nb + b] = scale_rules::reciprocal(scale);
    }
  }
}

// a: (rows, cols). scale_inv: (ceil(rows/128), roundup(ceil(cols/128), 4)), padding zero.
template <bool kE5M2, class In>
TESSERA_CPU_KERNEL void tiles_128x128(const QuantizerConfig& c, const In* a, int64_t rows, int64_t cols, uint8_t* out,
                   float* scale_inv) {
  const int64_t nb = (cols + kBlock - 1) / kBlock, padded = (nb + 3) / 4 * 4;
  const int64_t ntr = (rows + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t tr = 0; tr < ntr; ++tr) {
    const int64_t r0 = tr * kBlock, r1 = std::min(rows, r0 + kBlock);
    std::vector<float> scales(static_cast<size_t>(nb));
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * kBlock, n = std::min(kBlock, cols - k0);
      uint32_t m = 0;
      for (int64_t r = r0; r < r1; ++r) m = std::max(m, amax_bits(a + r * cols + k0, n));
      scales[static_cast<size_t>(b)] = block_scale(c, m);
      scale_inv[tr * padded + b] = scale_rules::reciprocal(scales[static_cast<size_t>(b)]);
    }
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t k0 = b * kBlock, n = std::min(kBlock, cols - k0);
        encode_scaled<kE5M2>(a + r * cols + k0, n, scales[static_cast<size_t>(b)], out + r * cols + k0);
      }
  }
}

template <bool kE5M2, class In>
void quantize_copy(const QuantizerConfig& c, const In* a, int64_t rows, int64_t cols, uint8_t* out,
                   float* scale_inv) {
  if (c.mode == ScalingMode::kBlock1x128) {
    blocks_1x128<kE5M2>(c, a, rows, cols, out, scale_inv);
  } else {
    tiles_128x128<kE5M2>(c, a, rows, cols, out, scale_inv);
  }
}

template <bool kE5M2>
void run(const QuantizerConfig& c, const TensorView& x, const QuantizedTensorView& out,
         const QuantizeRequest& req) {
  const int64_t m = x.shape[0], k = x.shape[1];
  if (req.rowwise) {
    zero_view(out.scale_inv);
    dispatch_float_input(x.dtype, "x", [&](auto tag) {
      using In = typename decltype(tag)::type;
      quantize_copy<kE5M2>(c, x.as<const In>(), m, k, out.data.as<uint8_t>(),
                           out.scale_inv.as<float>());
    });
  }
  if (req.columnwise) {
    quantize_fp8_columnwise(c, x, 1.0f, out.columnwise_data, out.columnwise_scale_inv);
  }
}

}  // namespace

void quantize_fp8_block(const QuantizerConfig& c, const TensorView& x,
                        const QuantizedTensorView& out, const QuantizeRequest& req) {
  dispatch_fp8_element(c.element, "config.element",
                       [&](auto is_e5m2) { run<decltype(is_e5m2)::value>(c, x, out, req); });
}

}  // namespace tessera::detail::cpu
