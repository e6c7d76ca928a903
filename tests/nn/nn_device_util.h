// Device helpers of the nn tests that run on the CPU and, with an sm_90 GPU, on CUDA: whether
// such a GPU is here, host data copied to a device, and device data copied back.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/tensor_view.h"
#include "tessera/nn/linear_step.h"

#if defined(TESSERA_WITH_CUDA)  // set by the tessera headers above
#include <cuda_runtime_api.h>
#endif

namespace tessera::nn::test {

inline bool has_sm90() {
#if defined(TESSERA_WITH_CUDA)
  if (cuda_device_count() == 0) return false;
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9;
#else
  return false;
#endif
}

// Host data on a device (a contiguous view of `shape` in `dtype`).
struct Dev {
  Buffer buf;
  TensorView view;
  template <class T>
  Dev(const std::vector<T>& host, std::initializer_list<int64_t> shape, DType dtype, Device dev)
      : buf(std::max<size_t>(host.size() * sizeof(T), 4), dev) {
    copy_bytes(buf.data(), dev, host.data(), Device::cpu(), host.size() * sizeof(T));
    view = TensorView::contiguous(buf.data(), dtype, shape, dev);
  }
};

inline std::vector<uint8_t> bytes_of(const TensorView& v) {
  std::vector<uint8_t> h(static_cast<size_t>(v.nbytes()));
  if (!h.empty()) copy_bytes(h.data(), Device::cpu(), v.data, v.device, h.size());
  return h;
}
inline std::vector<float> floats_of(const TensorView& v) {
  std::vector<float> h(static_cast<size_t>(v.numel()));
  if (!h.empty()) copy_bytes(h.data(), Device::cpu(), v.data, v.device, h.size() * 4);
  return h;
}

// A training forward of x at `offsets` into y that keeps x's copy for the backward.
inline LinearSaved forward_saving_input(const LinearSpec& spec, const WeightCopies& wc,
                                        const TensorView& x, const TensorView& offsets,
                                        const TensorView& y, Allocator& alloc) {
  LinearForwardArgs f;
  f.x = x;
  f.offsets = offsets;
  f.y = y;
  f.save_input = true;
  return linear_forward(spec, wc, f, {}, alloc);
}

}  // namespace tessera::nn::test
