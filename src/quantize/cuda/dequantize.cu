// CUDA dequantize of one usage of a quantized tensor into float32 (M, K), every recipe:
// x̂ = decode(q) * scale_inv with the scale of the element's block (FP32 for tensor / rowwise /
// block modes, E8M0 for MXFP8, E4M3 block scale times 1/S_enc for NVFP4), written in the logical
// orientation also for transposed columnwise copies. Same bits as the CPU (one multiply per
// element). The inverse Hadamard transform of an NVFP4 columnwise copy runs as a second kernel.
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/launch_config.h"
#include "quantize/quantize_backend.h"
#include "tessera/core/cuda_check.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail {
namespace {

using cuda_quant::ceil_div;
using cuda_quant::ceil_div_device;
using cuda_quant::swizzled_offset;

constexpr int kThreads = 256;

struct DequantArgs {
  const uint8_t* d = nullptr;
  const void* s = nullptr;
  float* out = nullptr;
  int64_t rows = 0, cols = 0;  // of the stored copy
  int64_t logical_rows = 0;    // M of the tensor (MXFP8 columnwise scale index)
  ScalingMode mode = ScalingMode::kTensor;
  bool e5m2 = false, swizzled = false, transposed = false, columnwise = false;
  const float* nv_amax = nullptr;  // NVFP4: the copy's global amax (device)
};


__device__ float element_value(const DequantArgs& a, int64_t r, int64_t k) {
  const int64_t cols = a.cols;
  switch (a.mode) {
    case ScalingMode::kTensor:
    case ScalingMode::kRowwise:
    case ScalingMode::kBlock1x128:
    case ScalingMode::kBlock128x128: {
      const float* s = static_cast<const float*>(a.s);
      const int64_t nb = ceil_div_device(cols, 128);
      float si;
      if (a.mode == ScalingMode::kTensor) {
        si = s[0];
      } else if (a.mode == ScalingMode::kRowwise) {
        si = s[r];
      } else if (a.mode == ScalingMode::kBlock1x128) {
        si = s[r * nb + k / 128];
      } else {
        si = s[(r / 128) * ((nb + 3) / 4 * 4) + k / 128];
      }
      const uint8_t c = a.d[r * cols + k];
      return (a.e5m2 ? formats::decode_e5m2(c) : formats::decode_e4m3(c)) * si;
    }
    case ScalingMode::kMXFP8:
    case ScalingMode::kMXFP8_32x32: {
      const uint8_t* s = static_cast<const uint8_t*>(a.s);
      const int64_t nb = ceil_div_device(cols, 32), ns = ceil_div_device(a.rows, 32);
      int64_t pos;
      if (!a.columnwise) {
        pos = a.swizzled ? swizzled_offset(r, k / 32, (nb + 3) / 4 * 4) : r * nb + k / 32;
      } else {
        pos = a.swizzled ? swizzled_offset(k, r / 32, (ns + 3) / 4 * 4) : (r / 32) * cols + k;
      }
      const uint8_t c = a.d[r * cols + k];
      return (a.e5m2 ? formats::decode_e5m2(c) : formats::decode_e4m3(c)) *
             formats::decode_e8m0(s[pos]);
    }
    default: {  // NVFP4
      const uint8_t* s = static_cast<const uint8_t*>(a.s);
      const int64_t nb = ceil_div_device(cols, 16), row_bytes = ceil_div_device(cols, 2);
      const uint8_t s_b =
          s[a.swizzled ? swizzled_offset(r, k / 16, (nb + 3) / 4 * 4) : r * nb + k / 16];
      const uint8_t byte = a.d[r * row_bytes + k / 2];
      const uint8_t code = static_cast<uint8_t>(k % 2 == 0 ? byte & 0xf : byte >> 4);
      const float s_enc = scale_rules::nvfp4_global_encode_scale(*a.nv_amax);
      return formats::decode_e2m1(code) * scale_rules::nvfp4_decode_scale(s_b, s_enc);
    }
  }
}

__global__ __launch_bounds__(kThreads) void dequantize_kernel(DequantArgs a) {
  const int64_t n = a.rows * a.cols;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / a.cols, k = i % a.cols;
    const float v = element_value(a, r, k);
    a.out[a.transposed ? k * a.rows + r : i] = v;
  }
}

// Inverse Hadamard transform of a dequantized NVFP4 columnwise copy, in place in out (M, K): the
// copy's row k, group of 16 m = out[(m0 + j) * K + k], j < 16 (scale_rules::rht16_inverse).
__global__ __launch_bounds__(kThreads) void inverse_rht_kernel(float* out, int64_t M, int64_t K) {
  const int64_t groups = K * (M / 16);
  for (int64_t g = blockIdx.x * int64_t{kThreads} + threadIdx.x; g < groups;
       g += int64_t{gridDim.x} * kThreads) {
    const int64_t k = g % K, m0 = (g / K) * 16;
    float t[16], b[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) t[j] = out[(m0 + j) * K + k];
    for (int j = 0; j < 16; ++j) {
      float acc = 0.0f;
      for (int i = 0; i < 16; ++i) acc = __fadd_rn(acc, scale_rules::hadamard_entry(i, j) * t[i]);
      b[j] = cuda_quant::rht_sign(j) * (acc * 0.25f);
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) out[(m0 + j) * K + k] = b[j];
  }
}

}  // namespace

void dequantize_cuda(const QuantizedTensorView& q, const TensorView& out, bool columnwise,
                     Stream stream) {
  const QuantizerConfig& c = q.config;
  TESSERA_CHECK(out.device.is_cuda() && out.dtype == DType::kFloat32 &&
                    out.numel() == q.rows * q.cols,
                "dequantize: out must be a float32 (", q.rows, ", ", q.cols,
                ") CUDA view, got ", out.to_string());
  TESSERA_CUDA_CHECK(cudaSetDevice(out.device.index));
  if (q.rows == 0 || q.cols == 0) return;
  const bool mx = c.mode == ScalingMode::kMXFP8 || c.mode == ScalingMode::kMXFP8_32x32;
  const bool nv = c.mode == ScalingMode::kNVFP4 || c.mode == ScalingMode::kNVFP4_16x16;
  DequantArgs a;
  a.transposed = columnwise && !mx;
  a.columnwise = columnwise;
  a.rows = a.transposed ? q.cols : q.rows;
  a.cols = a.transposed ? q.rows : q.cols;
  a.logical_rows = q.rows;
  a.mode = c.mode;
  a.e5m2 = c.element == DType::kFloat8E5M2;
  a.swizzled = c.scale_layout == ScaleLayout::kSwizzled;
  a.d = (columnwise ? q.columnwise_data : q.data).as<const uint8_t>();
  a.s = (columnwise ? q.columnwise_scale_inv : q.scale_inv).data;
  a.out = out.as<float>();
  TESSERA_CHECK(a.d != nullptr && a.s != nullptr, "dequantize: the ",
                columnwise ? "columnwise" : "rowwise", " usage is absent");
  auto s = stream.as<cudaStream_t>();
  if (nv) {
    a.nv_amax = (columnwise ? q.columnwise_amax : q.amax).as<const float>();
    TESSERA_CHECK(a.nv_amax != nullptr, "dequantize: NVFP4 needs the copy's amax");
  }
  const unsigned grid = cuda_quant::grid_stride_blocks(a.rows * a.cols, kThreads);
  dequantize_kernel<<<grid, kThreads, 0, s>>>(a);
  TESSERA_CUDA_CHECK_LAUNCH();
  if (nv && columnwise && c.random_hadamard) {
    const unsigned g2 = cuda_quant::grid_stride_blocks(q.cols * (q.rows / 16), kThreads);
    inverse_rht_kernel<<<g2, kThreads, 0, s>>>(a.out, q.rows, q.cols);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace tessera::detail
