// GPU quantization benchmark: each recipe on a 16384 x 7168 BF16 input (larger than L2), timed
// with CUDA events around every call (median of 50 after 5 warm-ups), reported as TB/s of the
// bytes the kernels actually move (reads + writes, every pass counted). Before timing, each case
// is validated byte for byte against the CPU backend on a 1024 x 7168 input. One JSON line per
// case on stdout; bench/gpu/quantize.sh adds the torch.compile baseline measured in the same run.
// QUANTIZE_BENCH_FILTER=text runs only the cases whose name contains text.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/device.h"
#include "tessera/formats/half.h"
#include "tessera/quantize/quantizer.h"

namespace {

using namespace tessera;

constexpr int64_t kRows = 16384, kCols = 7168;
constexpr int kWarmup = 5, kReps = 50;

#define CHECK_CUDA(call)                                                             \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Deterministic pseudo-Gaussian BF16 values with row-dependent magnitudes (never zeros).
__global__ void fill_kernel(uint16_t* x, int64_t n, int64_t cols, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = (h & 0xffffff) * (1.0f / 16777216.0f) - 0.5f;
    const float mag = ldexpf(1.0f, static_cast<int>((i / cols) % 9) - 4);
    const float v = (u * 4.0f + ((h >> 24) & 1 ? 0.25f : -0.25f)) * mag;
    x[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
  }
}

struct Case {
  std::string name;
  QuantizerConfig config;
  double bytes_per_elem;  // bytes moved per input element, every pass counted
  double bytes_per_row;   // per-row scale bytes (rowwise FP32 scales)
};

std::vector<Case> cases() {
  std::vector<Case> v;
  auto cfg = [](ScalingMode m, bool row, bool col) {
    QuantizerConfig c = make_config(m);
    c.rowwise = row;
    c.columnwise = col;
    return c;
  };
  v.push_back({"fp8_rowwise rowwise", cfg(ScalingMode::kRowwise, true, false), 3.0, 4.0});
  v.push_back({"fp8_rowwise both (amax pass + cast/transpose)", cfg(ScalingMode::kRowwise, true, true),
               6.0, 8.0});
  v.push_back({"fp8_current rowwise (amax pass + cast)", cfg(ScalingMode::kTensor, true, false), 5.0, 0});
  v.push_back({"fp8_current both = quantize+transpose (amax + cast)", cfg(ScalingMode::kTensor, true, true),
               6.0, 0});
  QuantizerConfig d = cfg(ScalingMode::kTensor, true, true);
  d.delayed = true;
  v.push_back({"fp8_delayed both = quantize+transpose (one pass)", d, 4.0, 0});
  v.push_back({"mxfp8 rowwise", cfg(ScalingMode::kMXFP8, true, false), 3.0 + 1.0 / 32, 0});
  QuantizerConfig sw = cfg(ScalingMode::kMXFP8, true, false);
  sw.scale_layout = ScaleLayout::kSwizzled;
  v.push_back({"mxfp8 rowwise, swizzled scales", sw, 3.0 + 1.0 / 32, 0});
  v.push_back({"mxfp8 both", cfg(ScalingMode::kMXFP8, true, true), 4.0 + 2.0 / 32, 0});
  sw.columnwise = true;
  v.push_back({"mxfp8 both, swizzled scales", sw, 4.0 + 2.0 / 32, 0});
  v.push_back({"fp8_block1x128 both", cfg(ScalingMode::kBlock1x128, true, true), 4.0 + 8.0 / 128, 0});
  v.push_back({"fp8_block128x128 both", cfg(ScalingMode::kBlock128x128, true, true), 4.0, 0});
  v.push_back({"nvfp4 rowwise", cfg(ScalingMode::kNVFP4, true, false), 2.0 + 2.0 + 0.5 + 1.0 / 16, 0});
  v.push_back({"nvfp4 both", cfg(ScalingMode::kNVFP4, true, true), 2.0 + 2.0 + 1.0 + 2.0 / 16, 0});
  return v;
}

// Byte equality of every buffer of two quantized tensors (a on the device, b on the host).
bool same_bytes(const QuantizedTensorView& dev, const QuantizedTensorView& host) {
  const TensorView* d[] = {&dev.data, &dev.scale_inv, &dev.columnwise_data,
                           &dev.columnwise_scale_inv, &dev.amax, &dev.columnwise_amax};
  const TensorView* h[] = {&host.data, &host.scale_inv, &host.columnwise_data,
                           &host.columnwise_scale_inv, &host.amax, &host.columnwise_amax};
  for (int i = 0; i < 6; ++i) {
    if ((d[i]->data == nullptr) != (h[i]->data == nullptr)) return false;
    if (d[i]->data == nullptr) continue;
    std::vector<uint8_t> got(static_cast<size_t>(d[i]->nbytes()));
    copy_bytes(got.data(), Device::cpu(), d[i]->data, Device::cuda(0), got.size());
    if (std::memcmp(got.data(), h[i]->data, got.size()) != 0) return false;
  }
  return true;
}

// Validates `c` against the CPU backend on a (1024, kCols) input; "ok", "MISMATCH" or the error.
std::string validate(const Case& c, const uint16_t* dev_x) {
  try {
    const int64_t rows = 1024;
    std::vector<uint16_t> host(static_cast<size_t>(rows * kCols));
    copy_bytes(host.data(), Device::cpu(), dev_x, Device::cuda(0), host.size() * 2);
    Quantizer qc(c.config), qg(c.config, Device::cuda(0));
    QuantizedTensor cpu = qc.allocate(rows, kCols), gpu = qg.allocate(rows, kCols);
    qc.quantize(TensorView::contiguous(host.data(), DType::kBFloat16, {rows, kCols}), cpu.view(),
                Backend::kCPU);
    qg.quantize(TensorView::contiguous(const_cast<uint16_t*>(dev_x), DType::kBFloat16,
                                       {rows, kCols}, Device::cuda(0)),
                gpu.view());
    return same_bytes(gpu.view(), cpu.view()) ? "ok" : "MISMATCH";
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what();
  }
}

double median_us(Quantizer& q, const TensorView& x, QuantizedTensor& out) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < kWarmup; ++i) q.quantize(x, out);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < kReps; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    q.quantize(x, out);
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2] * 1e3;
}

}  // namespace

int main() {
  const int64_t n = kRows * kCols;
  Buffer xbuf(static_cast<size_t>(n) * 2, Device::cuda(0));
  fill_kernel<<<4096, 256>>>(xbuf.as<uint16_t>(), n, kCols, 12345u);
  CHECK_CUDA(cudaDeviceSynchronize());
  const TensorView x =
      TensorView::contiguous(xbuf.data(), DType::kBFloat16, {kRows, kCols}, Device::cuda(0));
  // Device copy ceiling in the same process (read + write bytes).
  {
    Buffer y(static_cast<size_t>(n) * 2, Device::cuda(0));
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> ms;
    for (int i = 0; i < kWarmup + kReps; ++i) {
      cudaEventRecord(a);
      cudaMemcpyAsync(y.data(), xbuf.data(), static_cast<size_t>(n) * 2, cudaMemcpyDeviceToDevice);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float t = 0;
      cudaEventElapsedTime(&t, a, b);
      if (i >= kWarmup) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double us = ms[ms.size() / 2] * 1e3;
    std::printf("{\"name\": \"device copy 16384x7168 bf16\", \"us\": %.2f, \"tbps\": %.3f, \"valid\": \"-\"}\n",
                us, 4.0 * n / us / 1e6);
  }
  // QUANTIZE_BENCH_FILTER=text: only the cases whose name contains text (kernel variants).
  const char* filter = std::getenv("QUANTIZE_BENCH_FILTER");
  for (const Case& c : cases()) {
    if (filter != nullptr && c.name.find(filter) == std::string::npos) continue;
    const std::string valid = validate(c, xbuf.as<uint16_t>());
    if (valid.rfind("error", 0) == 0) {
      std::printf("{\"name\": \"%s\", \"us\": 0, \"tbps\": 0, \"valid\": \"%s\"}\n", c.name.c_str(),
                  valid.substr(0, 120).c_str());
      std::fflush(stdout);
      continue;
    }
    Quantizer q(c.config, Device::cuda(0));
    QuantizedTensor out = q.allocate(kRows, kCols);
    const double us = median_us(q, x, out);
    const double bytes = c.bytes_per_elem * static_cast<double>(n) + c.bytes_per_row * kRows;
    std::printf("{\"name\": \"%s\", \"us\": %.2f, \"tbps\": %.3f, \"valid\": \"%s\"}\n",
                c.name.c_str(), us, bytes / us / 1e6, valid.c_str());
    std::fflush(stdout);
  }
  return 0;
}
