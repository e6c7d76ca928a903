// The device FP8 encoders of the CUDA kernels (hardware cvt.rn.satfinite, quantize/cuda/
// device_io.cuh) give exactly scale_rules::fp8_element (the rule every backend follows) for all
// 2^32 float bit patterns, E4M3 and E5M2: counted on the device, first mismatch reported. The
// branch-free E2M1 code of the tiled NVFP4 kernels (nvfp4/nvfp4_tile.cuh) is held to
// formats::encode_e2m1(scale_rules::nvfp4_clamp(y)) the same way, and their stochastic-rounding
// code to scale_rules::e2m1_stochastic (one random word per float).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/nvfp4/nvfp4_tile.cuh"
#include "tessera/core/device.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera {
namespace {

using detail::cuda_quant::encode_fp8x2;

template <DType DT>
__global__ void compare_all_kernel(unsigned long long* mismatches, uint32_t* first) {
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x * 2;
  for (uint64_t i = (uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) * 2; i < (uint64_t{1} << 32);
       i += stride) {
    const float a = __uint_as_float(static_cast<uint32_t>(i));
    const float b = __uint_as_float(static_cast<uint32_t>(i + 1));
    const uint32_t hw = encode_fp8x2<DT>(a, b);
    const bool e5 = DT == DType::kFloat8E5M2;
    const uint32_t want = scale_rules::fp8_element(a, e5) | (scale_rules::fp8_element(b, e5) << 8);
    if (hw != want) {
      atomicAdd(mismatches, 1ull);
      atomicMin(first, (hw & 0xff) != (want & 0xff) ? static_cast<uint32_t>(i)
                                                    : static_cast<uint32_t>(i + 1));
    }
  }
}

// One float per element: nvfp4_code against the CPU rule.
__global__ void compare_e2m1_kernel(unsigned long long* mismatches, uint32_t* first) {
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += stride) {
    const float y = __uint_as_float(static_cast<uint32_t>(i));
    const uint32_t want = formats::encode_e2m1(scale_rules::nvfp4_clamp(y));
    // Stochastic rounding with a random word derived from the bits (all rounding branches).
    const uint32_t r =
        static_cast<uint32_t>((i * 0x9E3779B97F4A7C15ull) >> 32) ^ static_cast<uint32_t>(i);
    const uint32_t want_sr = scale_rules::e2m1_stochastic(scale_rules::nvfp4_clamp(y), r);
    if (detail::cuda_quant::nvfp4_code(y) != want ||
        detail::cuda_quant::nvfp4_sr_code(y, r) != want_sr) {
      atomicAdd(mismatches, 1ull);
      atomicMin(first, static_cast<uint32_t>(i));
    }
  }
}

template <DType DT>
void check_all() {
  unsigned long long* count = nullptr;
  uint32_t* first = nullptr;
  ASSERT_EQ(cudaMalloc(&count, sizeof *count), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&first, sizeof *first), cudaSuccess);
  ASSERT_EQ(cudaMemset(count, 0, sizeof *count), cudaSuccess);
  ASSERT_EQ(cudaMemset(first, 0xff, sizeof *first), cudaSuccess);
  if constexpr (DT == DType::kFloat4E2M1) {
    compare_e2m1_kernel<<<4096, 256>>>(count, first);
  } else {
    compare_all_kernel<DT><<<4096, 256>>>(count, first);
  }
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  unsigned long long n = 0;
  uint32_t f = 0;
  ASSERT_EQ(cudaMemcpy(&n, count, sizeof n, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&f, first, sizeof f, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(count);
  cudaFree(first);
  EXPECT_EQ(n, 0u) << dtype_name(DT) << ": first mismatching float bits 0x" << std::hex << f;
}

TEST(CudaDeviceCodecs, HardwareE4M3EqualsRuleOnAllFloats) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_all<DType::kFloat8E4M3>();
}

TEST(CudaDeviceCodecs, HardwareE5M2EqualsRuleOnAllFloats) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_all<DType::kFloat8E5M2>();
}

TEST(CudaDeviceCodecs, Nvfp4E2M1CodeEqualsRuleOnAllFloats) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_all<DType::kFloat4E2M1>();
}

}  // namespace
}  // namespace tessera
