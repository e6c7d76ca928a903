// A training step of GroupedLinear / GroupedMLP on CUDA allocates nothing once its shape has been
// seen, and reusing its storage for other shapes changes no bit of the results
// (step_alloc_cases.h), for the recipes the CUDA grouped GEMM takes. Skips without an sm_90 GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <exception>

#include "nn_test_util.h"
#include "step_alloc_cases.h"

namespace tessera::nn::test {
namespace {

using step_alloc::Shape;

bool has_sm90() {
  if (cuda_device_count() == 0) return false;
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9;
}

// Output widths a multiple of 128 (FP8 block dgrad), as in test_grouped_nn_cuda.cpp.
const Shape kA{{37, 0, 101, 18}, 2}, kB{{80, 45, 0, 120}, 3}, kC{{9, 3, 0, 14}, 0};

TEST(GroupedNNStepAllocationsCuda, SecondStepAllocatesNothingAndReuseChangesNoBit) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::printf("Buffers allocated per training step (CUDA, host splits):\n");
  for (const char* name : {"bf16", "fp8_current", "fp8_delayed", "fp8_rowwise", "fp8_block"}) {
    SCOPED_TRACE(name);
    try {
      step_alloc::check_linear(name, {4, 160, 384}, Device::cuda(0), false, kA, kB, kC);
      step_alloc::check_linear(name, {4, 160, 384}, Device::cuda(0), true, kA, kB, kC);
      step_alloc::check_mlp(name, {4, 384, 192}, Device::cuda(0), kA, kB, kC);
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << " threw: " << e.what();
    }
  }
}

}  // namespace
}  // namespace tessera::nn::test
