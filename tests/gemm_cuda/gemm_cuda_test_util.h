// Small helpers of the CUDA grouped GEMM tests: a device array that owns a cudaMalloc'd copy of
// a host vector, device capability probing, BF16 decoding of results.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/formats/half.h"

namespace tessera::test {

inline bool has_sm90() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
  return prop.major == 9;
}

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Owning device copy of a host vector (bytes + element count for to_host).
struct DeviceArray {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceArray() = default;
  template <class T>
  explicit DeviceArray(const std::vector<T>& host) : bytes(host.size() * sizeof(T)) {
    cuda_ok(cudaMalloc(&ptr, bytes > 0 ? bytes : 16), "cudaMalloc");
    if (bytes) cuda_ok(cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice), "H2D");
  }
  DeviceArray(DeviceArray&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (ptr) cudaFree(ptr);
  }
  template <class T>
  std::vector<T> to_host() const {
    std::vector<T> h(bytes / sizeof(T));
    if (bytes) cuda_ok(cudaMemcpy(h.data(), ptr, bytes, cudaMemcpyDeviceToHost), "D2H");
    return h;
  }
  template <class T>
  void upload(const std::vector<T>& host) {
    if (host.size() * sizeof(T) > bytes) throw std::runtime_error("upload: too large");
    cuda_ok(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "H2D");
  }
};

inline void* align128(void* p) {
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(p) + 127) & ~uintptr_t{127});
}

inline std::vector<float> bf16_to_float(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16{v[i]}.to_float();
  return out;
}

}  // namespace tessera::test
