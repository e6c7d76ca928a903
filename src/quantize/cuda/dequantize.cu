// CUDA dequantize of one usage of a quantized tensor into float32 (M, K), every recipe:
// x̂ = decode(q) * scale_inv with the scale of the element's block (FP32 for tensor / rowwise /
// block modes, E8M0 for MXFP8, E4M3 block scale times 1/S_enc for NVFP4), written in the logical
// orientation also for transposed columnwise copies. Same bits as the CPU (one multiply per
// element; the scale's position from the scaling-mode table, scale_rules::scale_index). The
// inverse Hadamard transform of an NVFP4 columnwise copy runs as a second kernel.
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/launch_config.h"
#include "quantize/quantize_backend.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail {
namespace {

using cuda_quant::ceil_div_device;

constexpr int kThreads = 256;

// How a copy's scales are read: FP32 scale_inv (tensor, rowwise, block families), E8M0 (MXFP8)
// or E4M3 block scale times 1/S_enc (NVFP4) — the table's scale dtype.
enum class ScaleKind : int { kFloat32 = 0, kE8M0 = 1, kNvfp4 = 2 };

struct DequantArgs {
  const uint8_t* d = nullptr;
  const void* s = nullptr;
  float* out = nullptr;
  int64_t rows = 0, cols = 0;  // of the stored copy
  ScaleKind kind = ScaleKind::kFloat32;
  scale_rules::ScaleGeometry geometry;  // scale of stored (r, k): scale_index(geometry, r, k)
  bool e5m2 = false, transposed = false;
  const float* nv_amax = nullptr;  // NVFP4: the copy's global amax (device)
};

__device__ float element_value(const DequantArgs& a, int64_t r, int64_t k) {
  const int64_t i = scale_rules::scale_index(a.geometry, r, k);
  if (a.kind == ScaleKind::kNvfp4) {
    const uint8_t s_b = static_cast<const uint8_t*>(a.s)[i];
    const uint8_t byte = a.d[r * ceil_div_device(a.cols, 2) + k / 2];
    const uint8_t code = static_cast<uint8_t>(k % 2 == 0 ? byte & 0xf : byte >> 4);
    const float s_enc = scale_rules::nvfp4_global_encode_scale(*a.nv_amax);
    return formats::decode_e2m1(code) * scale_rules::nvfp4_decode_scale(s_b, s_enc);
  }
  const float si = a.kind == ScaleKind::kE8M0
                       ? formats::decode_e8m0(static_cast<const uint8_t*>(a.s)[i])
                       : static_cast<const float*>(a.s)[i];
  const uint8_t c = a.d[r * a.cols + k];
  return (a.e5m2 ? formats::decode_e5m2(c) : formats::decode_e4m3(c)) * si;
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
  // Refuses kNone and values outside the table (naming them) instead of guessing a layout.
  const ScaleFamily family = dispatch_scaling_mode(
      c.mode, "dequantize: config.mode", [](auto f, const ScalingModeInfo&) { return f(); });
  TESSERA_CUDA_CHECK(cudaSetDevice(out.device.index));
  if (q.rows == 0 || q.cols == 0) return;
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  const bool nv = family == ScaleFamily::kNVFP4;
  DequantArgs a;
  a.transposed = columnwise && info.columnwise_transposed;
  a.rows = a.transposed ? q.cols : q.rows;
  a.cols = a.transposed ? q.rows : q.cols;
  a.kind = nv ? ScaleKind::kNvfp4
              : (info.scale_dtype == DType::kFloat8E8M0 ? ScaleKind::kE8M0 : ScaleKind::kFloat32);
  a.geometry = scale_geometry(c, q.rows, q.cols, columnwise);
  a.e5m2 = c.element == DType::kFloat8E5M2;
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
