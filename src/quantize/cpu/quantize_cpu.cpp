// CPU backend entry: mode dispatch plus the shared pieces (tensor amax, transposed float copy,
// zero fill) used by the per-format files.
#include <algorithm>

#include "core/host_bytes.h"
#include "quantize/cpu/cpu_kernels.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"

namespace tessera::detail {
namespace cpu {

namespace {

template <class In>
TESSERA_CPU_KERNEL uint32_t amax_bits_parallel(const In* p, int64_t n) {
  constexpr int64_t kChunk = 16384;
  uint32_t m = 0;
#pragma omp parallel for schedule(static) reduction(max : m) if (n >= kParallelWork)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const uint32_t cm = amax_bits(p + c0, std::min(kChunk, n - c0));
    m = cm > m ? cm : m;
  }
  return m;
}

}  // namespace

uint32_t tensor_amax_bits(const TensorView& x) {
  return dispatch_float_input(x.dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    return amax_bits_parallel(x.as<const In>(), x.numel());
  });
}

Buffer transpose_to_float(const TensorView& x) {
  const int64_t rows = x.shape[0], cols = x.shape[1];
  Buffer t(static_cast<size_t>(std::max<int64_t>(rows * cols, 1)) * sizeof(float));
  float* dst = t.as<float>();  // (cols, rows)
  constexpr int64_t kTile = 64;
  dispatch_float_input(x.dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    const In* src = x.as<const In>();  // (rows, cols)
    const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(static) if (rows * cols >= kParallelWork)
    for (int64_t tr = 0; tr < row_tiles; ++tr) {
      for (int64_t tc = 0; tc < col_tiles; ++tc) {
        const int64_t r1 = std::min(rows, (tr + 1) * kTile), c1 = std::min(cols, (tc + 1) * kTile);
        for (int64_t c = tc * kTile; c < c1; ++c)
          for (int64_t r = tr * kTile; r < r1; ++r) dst[c * rows + r] = load_float(src[r * cols + c]);
      }
    }
  });
  return t;
}

void zero_view(const TensorView& v) { host_zero_bytes(v.data, static_cast<size_t>(v.nbytes())); }

}  // namespace cpu

void quantize_cpu(const QuantizerConfig& config, const TensorView& x,
                  const QuantizedTensorView& out, const QuantizeRequest& req) {
  dispatch_scaling_mode(config.mode, "config.mode", [&](auto family, const ScalingModeInfo&) {
    constexpr ScaleFamily kFamily = decltype(family)::value;
    if constexpr (kFamily == ScaleFamily::kTensor || kFamily == ScaleFamily::kRowwise) {
      cpu::quantize_fp8_tensor(config, x, out, req);
    } else if constexpr (kFamily == ScaleFamily::kBlock) {
      cpu::quantize_fp8_block(config, x, out, req);
    } else if constexpr (kFamily == ScaleFamily::kMXFP8) {
      cpu::quantize_mxfp8(config, x, out, req);
    } else {
      cpu::quantize_nvfp4(config, x, out, req);
    }
  });
}

}  // namespace tessera::detail
