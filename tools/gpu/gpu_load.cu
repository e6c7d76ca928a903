// Background GPU load for tools/gpu/stress.sh (issue 19): keeps every multiprocessor busy with
// kernels of a fixed duration (memory streaming plus FMAs over a device buffer) until killed or
// until `seconds` have passed, so that test processes started beside it share the GPU by time
// slicing, as they do under `ctest -j`: their kernels, memsets and copies then wait for slices,
// which widens any window in which work on two streams is not ordered.
// Build: nvcc -O2 -arch=sm_90 -o gpu_load tools/gpu/gpu_load.cu
// Usage: gpu_load [seconds = 600] [kernel_ms = 5] [megabytes = 256]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Each thread walks the buffer with a grid stride, updating float4s in place, until `ns`
// nanoseconds have passed since its block started.
__global__ void busy_kernel(float4* buf, size_t n4, unsigned long long ns) {
  const unsigned long long start = global_ns();
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  while (global_ns() - start < ns) {
    for (int r = 0; r < 32; ++r) {
      float4 v = buf[i];
      v.x = fmaf(v.x, 0.999f, 1.0f);
      v.y = fmaf(v.y, 0.999f, v.x);
      v.z = fmaf(v.z, 0.999f, v.y);
      v.w = fmaf(v.w, 0.999f, v.z);
      buf[i] = v;
      i += stride;
      if (i >= n4) i -= n4;
    }
  }
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gpu_load: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 600.0;
  const double kernel_ms = argc > 2 ? std::atof(argv[2]) : 5.0;
  const size_t megabytes = argc > 3 ? static_cast<size_t>(std::atol(argv[3])) : 256;
  int sms = 0;
  if (!ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count")) return 1;
  const size_t n4 = megabytes * (size_t{1} << 20) / sizeof(float4);
  float4* buf = nullptr;
  if (!ok(cudaMalloc(&buf, n4 * sizeof(float4)), "cudaMalloc")) return 1;
  if (!ok(cudaMemset(buf, 0, n4 * sizeof(float4)), "cudaMemset")) return 1;
  const auto t0 = std::chrono::steady_clock::now();
  const auto ns = static_cast<unsigned long long>(kernel_ms * 1e6);
  long launches = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    busy_kernel<<<sms * 8, 256>>>(buf, n4, ns);  // 2048 threads per multiprocessor
    if (!ok(cudaGetLastError(), "launch")) return 1;
    // At most 4 kernels queued: the load stops soon after the process is told to.
    if (++launches % 4 == 0 && !ok(cudaDeviceSynchronize(), "sync")) return 1;
  }
  ok(cudaDeviceSynchronize(), "sync");
  std::printf("gpu_load: %ld kernels of %.1f ms on %d SMs\n", launches, kernel_ms, sms);
  cudaFree(buf);
  return 0;
}
