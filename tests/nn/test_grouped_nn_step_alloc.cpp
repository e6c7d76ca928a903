// A training step of GroupedLinear / GroupedMLP allocates nothing once its shape has been seen,
// and reusing its storage for other shapes changes no bit of the results (step_alloc_cases.h),
// for every recipe on the CPU.
#include <gtest/gtest.h>

#include <cstdio>

#include "nn_test_util.h"
#include "step_alloc_cases.h"

namespace tessera::nn::test {
namespace {

using step_alloc::Shape;

// Ragged splits with an empty expert and spare capacity rows; b is larger than a, c smaller.
const Shape kLinearA{{30, 0, 41, 17}, 3}, kLinearB{{50, 33, 0, 70}, 5}, kLinearC{{5, 9, 2, 0}, 1};
const Shape kMlpA{{20, 0, 27}, 2}, kMlpB{{40, 31, 9}, 4}, kMlpC{{3, 0, 5}, 0};

TEST(GroupedNNStepAllocations, SecondStepAllocatesNothingAndReuseChangesNoBit) {
  std::printf("Buffers allocated per training step (CPU); the quantize backend's own scratch "
              "is measured alone:\n");
  for (const std::string& name : recipe_names()) {
    SCOPED_TRACE(name);
    step_alloc::check_linear(name, {4, 64, 128}, Device::cpu(), false, kLinearA, kLinearB,
                             kLinearC);
    step_alloc::check_linear(name, {4, 64, 128}, Device::cpu(), true, kLinearA, kLinearB,
                             kLinearC);
    step_alloc::check_mlp(name, {3, 128, 64}, Device::cpu(), kMlpA, kMlpB, kMlpC);
  }
}

}  // namespace
}  // namespace tessera::nn::test
