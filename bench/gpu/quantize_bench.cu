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

#include "bench_cuda.cuh"
#include "tessera/core/buffer.h"
#include "tessera/core/device.h"
#include "tessera/formats/half.h"
#include "tessera/quantize/quantizer.h"

namespace {

using namespace tessera;

constexpr int64_t kRows = 16384, kCols = 7168;
constexpr int kWarmup = 5, kReps = 50;

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
  QuantizerConfig nv = cfg(ScalingMode::kNVFP4, true, true);
  nv.scale_layout = ScaleLayout::kSwizzled;
  v.push_back({"nvfp4 both, swizzled scales", nv, 2.0 + 2.0 + 1.0 + 2.0 / 16, 0});
  nv = cfg(ScalingMode::kNVFP4, true, true);
  nv.random_hadamard = true;  // one amax pass gives amax(x) and the transformed amax
  v.push_back({"nvfp4 both, RHT", nv, 2.0 + 2.0 + 1.0 + 2.0 / 16, 0});
  nv = cfg(ScalingMode::kNVFP4, true, true);
  nv.stochastic_rounding = true;
  v.push_back({"nvfp4 both, stochastic rounding", nv, 2.0 + 2.0 + 1.0 + 2.0 / 16, 0});
  nv.rowwise = false;
  v.push_back({"nvfp4 columnwise, stochastic rounding", nv, 2.0 + 2.0 + 0.5 + 1.0 / 16, 0});
  v.push_back({"nvfp4_16x16 both (generic kernels)", cfg(ScalingMode::kNVFP4_16x16, true, true),
               2.0 + 2.0 * (2.0 + 0.5) + 2.0 / 256, 0});
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

}  // namespace

int main() {
  const int64_t n = kRows * kCols;
  Buffer xbuf(static_cast<size_t>(n) * 2, Device::cuda(0));
  bench_cuda::fill_bf16(xbuf.as<uint16_t>(), n, kCols, 12345u);
  const TensorView x =
      TensorView::contiguous(xbuf.data(), DType::kBFloat16, {kRows, kCols}, Device::cuda(0));
  // Device copy ceiling in the same process (read + write bytes).
  {
    Buffer y(static_cast<size_t>(n) * 2, Device::cuda(0));
    const double us = bench_cuda::median_us(
        [&] {
          cudaMemcpyAsync(y.data(), xbuf.data(), static_cast<size_t>(n) * 2,
                          cudaMemcpyDeviceToDevice);
        },
        kWarmup, kReps);
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
    const double us = bench_cuda::median_us([&] { q.quantize(x, out); }, kWarmup, kReps);
    const double bytes = c.bytes_per_elem * static_cast<double>(n) + c.bytes_per_row * kRows;
    std::printf("{\"name\": \"%s\", \"us\": %.2f, \"tbps\": %.3f, \"valid\": \"%s\"}\n",
                c.name.c_str(), us, bytes / us / 1e6, valid.c_str());
    std::fflush(stdout);
  }
  return 0;
}
