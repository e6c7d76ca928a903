// CPU FP8 block scaling: FP32 current-scaling scale per block of the mode's block shape
// (formats/scaling_modes.h: 1x128, 128x128; power of two by default). The columnwise usage (the
// same quantization of xᵀ, stored transposed) is made by fp8_columnwise.cpp's tiles when the
// block fits them, else from a float copy of xᵀ.
#include <algorithm>
#include <vector>

#include "quantize/cpu/cpu_kernels.h"
#include "tessera/core/dispatch.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cpu {
namespace {

float block_scale(const QuantizerConfig& c, uint32_t amax_bits_value) {
  const float emax = fp8_max_finite(c.element);
  return scale_rules::current_scale(scale_rules::amax_from_abs_bits(amax_bits_value), emax,
                                    c.amax_epsilon, c.power_of_two_scales);
}

// a: the copy (rows, cols); blocks of bh x bw; the scale of the block at (r0, k0) goes to
// scale_inv[scale_index(g, r0, k0)] (padding entries already zero).
template <bool kE5M2, class In>
TESSERA_CPU_KERNEL void quantize_blocks(const QuantizerConfig& c, const In* a, int64_t rows,
                                        int64_t cols, int64_t bh, int64_t bw,
                                        const scale_rules::ScaleGeometry& g, uint8_t* out,
                                        float* scale_inv) {
  const int64_t nb = (cols + bw - 1) / bw, nbr = (rows + bh - 1) / bh;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t br = 0; br < nbr; ++br) {
    const int64_t r0 = br * bh, r1 = std::min(rows, r0 + bh);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * bw, n = std::min(bw, cols - k0);
      uint32_t m = 0;
      for (int64_t r = r0; r < r1; ++r) m = std::max(m, amax_bits(a + r * cols + k0, n));
      const float scale = block_scale(c, m);
      scale_inv[scale_rules::scale_index(g, r0, k0)] = scale_rules::reciprocal(scale);
      for (int64_t r = r0; r < r1; ++r) {
        encode_scaled<kE5M2>(a + r * cols + k0, n, scale, out + r * cols + k0);
      }
    }
  }
}

// One copy (rows, cols) of a (rows, cols) input `a` with FP32 block scales into data/scale_inv.
template <bool kE5M2, class In>
void quantize_copy(const QuantizerConfig& c, const ScalingModeInfo& info, const In* a,
                   int64_t rows, int64_t cols, const scale_rules::ScaleGeometry& g,
                   const TensorView& data, const TensorView& scale_inv) {
  zero_view(scale_inv);
  quantize_blocks<kE5M2>(c, a, rows, cols, info.block_rows, info.block_cols, g,
                         data.as<uint8_t>(), scale_inv.as<float>());
}

template <bool kE5M2>
void run(const QuantizerConfig& c, const TensorView& x, const QuantizedTensorView& out,
         const QuantizeRequest& req) {
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  const int64_t m = x.shape[0], k = x.shape[1];
  if (req.rowwise) {
    const scale_rules::ScaleGeometry g = scale_geometry(c, m, k, false);
    dispatch_float_input(x.dtype, "x", [&](auto tag) {
      using In = typename decltype(tag)::type;
      quantize_copy<kE5M2>(c, info, x.as<const In>(), m, k, g, out.data, out.scale_inv);
    });
  }
  if (!req.columnwise) return;
  if (fp8_columnwise_tiles_fit(info)) {
    quantize_fp8_columnwise(c, x, 1.0f, out.columnwise_data, out.columnwise_scale_inv);
    return;
  }
  // Other block shapes: the rowwise rule on a float copy of xᵀ (k, m) (loads are exact).
  Buffer xt = transpose_to_float(x);
  quantize_copy<kE5M2>(c, info, xt.as<const float>(), k, m, scale_geometry(c, m, k, true),
                       out.columnwise_data, out.columnwise_scale_inv);
}

}  // namespace

void quantize_fp8_block(const QuantizerConfig& c, const TensorView& x,
                        const QuantizedTensorView& out, const QuantizeRequest& req) {
  dispatch_fp8_element(c.element, "config.element",
                       [&](auto is_e5m2) { run<decltype(is_e5m2)::value>(c, x, out, req); });
}

}  // namespace tessera::detail::cpu
