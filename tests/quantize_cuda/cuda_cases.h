// Shared pieces of the CUDA quantize tests: which configs have CUDA kernels, and running one
// quantization on the CPU backend and on the CUDA backend (poisoned device output) with the
// device result copied back to host memory for a byte comparison (quantize/quantize_cases.h).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "quantize/quantize_cases.h"
#include "tessera/core/buffer.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::test {

inline bool cuda_has_kernel(const QuantizerConfig& c) {
  switch (c.mode) {
    case ScalingMode::kTensor:
    case ScalingMode::kRowwise:
    case ScalingMode::kBlock1x128:
    case ScalingMode::kBlock128x128:
    case ScalingMode::kMXFP8:
    case ScalingMode::kMXFP8_32x32:
    case ScalingMode::kNVFP4:
    case ScalingMode::kNVFP4_16x16:
      return true;
    default:
      return false;
  }
}

inline std::vector<TensorView*> fields(QuantizedTensorView& v) {
  return {&v.data, &v.scale_inv, &v.columnwise_data, &v.columnwise_scale_inv, &v.amax,
          &v.columnwise_amax};
}

// Fills every present device buffer of `v` with 0xA5 so that unwritten bytes show.
inline void poison(QuantizedTensorView& v) {
  for (TensorView* f : fields(v)) {
    if (f->data == nullptr) continue;
    std::vector<uint8_t> p(static_cast<size_t>(f->nbytes()), 0xA5);
    copy_bytes(f->data, f->device, p.data(), Device::cpu(), p.size());
  }
}

// Copies every buffer of the device tensor `d` into the same-shaped host tensor `h`.
inline void copy_to_host(QuantizedTensorView& d, QuantizedTensorView& h) {
  auto df = fields(d), hf = fields(h);
  for (size_t i = 0; i < df.size(); ++i) {
    ASSERT_EQ(df[i]->data == nullptr, hf[i]->data == nullptr);
    if (df[i]->data == nullptr) continue;
    ASSERT_EQ(df[i]->nbytes(), hf[i]->nbytes());
    copy_bytes(hf[i]->data, Device::cpu(), df[i]->data, d.device, static_cast<size_t>(df[i]->nbytes()));
  }
}

// x copied to the device. Owns the buffer.
struct DeviceInput {
  Buffer buf;
  TensorView view;
  explicit DeviceInput(HostInput& in)
      : buf(static_cast<size_t>(std::max<int64_t>(dtype_bytes(in.dtype, in.rows * in.cols), 1)),
            Device::cuda(0)) {
    if (!in.bytes.empty()) {
      copy_bytes(buf.data(), Device::cuda(0), in.bytes.data(), Device::cpu(), in.bytes.size());
    }
    view = TensorView::contiguous(buf.data(), in.dtype, {in.rows, in.cols}, Device::cuda(0));
  }
};

// Quantizes `in` with `config` on the CPU backend and on the CUDA backend; "" when every byte
// agrees, else the first mismatch.
inline std::string cpu_vs_cuda(const QuantizerConfig& config, HostInput& in) {
  Quantizer qc(config);
  QuantizedTensor cpu = qc.allocate(in.rows, in.cols);
  qc.quantize(in.view(), cpu.view(), Backend::kCPU);
  Quantizer qg(config, Device::cuda(0));
  QuantizedTensor gpu = qg.allocate(in.rows, in.cols);
  poison(gpu.view());
  DeviceInput dx(in);
  qg.quantize(dx.view, gpu.view());
  QuantizedTensor back = qc.allocate(in.rows, in.cols);
  copy_to_host(gpu.view(), back.view());
  return compare_quantized(cpu.view(), back.view());
}

}  // namespace tessera::test
