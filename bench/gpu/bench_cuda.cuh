// Pieces shared by the CUDA benchmark programs of bench/gpu (quantize_bench.cu,
// grouped_quantize_bench.cu): an exit-on-error CUDA check, the deterministic BF16 input they all
// time, and the CUDA-event median timer (the same harness for every case of a run).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define BENCH_CHECK_CUDA(call)                                                       \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace bench_cuda {

// Deterministic pseudo-Gaussian BF16 bits with row-dependent magnitudes 2^-4 .. 2^4 (never
// zeros): x is (n / cols, cols).
__global__ void fill_bf16_kernel(uint16_t* x, int64_t n, int64_t cols, uint32_t seed) {
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

inline void fill_bf16(uint16_t* x, int64_t n, int64_t cols, uint32_t seed) {
  fill_bf16_kernel<<<4096, 256>>>(x, n, cols, seed);
  BENCH_CHECK_CUDA(cudaDeviceSynchronize());
}

// Median in microseconds of `reps` CUDA-event timings of f() on the default stream, after
// `warmup` untimed calls.
inline double median_us(const std::function<void()>& f, int warmup, int reps) {
  cudaEvent_t a, b;
  BENCH_CHECK_CUDA(cudaEventCreate(&a));
  BENCH_CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) f();
  BENCH_CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    BENCH_CHECK_CUDA(cudaEventRecord(a));
    f();
    BENCH_CHECK_CUDA(cudaEventRecord(b));
    BENCH_CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    BENCH_CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  BENCH_CHECK_CUDA(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2] * 1e3;
}

}  // namespace bench_cuda
