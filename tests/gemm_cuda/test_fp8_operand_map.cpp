// Host-only checks of how the CUDA backend maps quantized operands (quantized_operands.h): what
// it refuses and in which order. No device is needed: the mapping reads only the views' fields.
#include <gtest/gtest.h>

#include <string>

#include "gemm/cuda/quantized_operands.h"
#include "tessera/quantize/types.h"

namespace tessera::test {
namespace {

GroupedGemmProblem forward_problem(ScalingMode a_mode, ScalingMode b_mode) {
  QuantizedTensorView a, b;
  a.config = make_config(a_mode, scaling_mode_info(a_mode).fp4 ? DType::kFloat4E2M1
                                                                : DType::kFloat8E4M3);
  b.config = make_config(b_mode, DType::kFloat8E4M3);
  a.rows = 32, a.cols = 64, b.rows = 64, b.cols = 64;
  GroupedGemmProblem p;
  p.kind = GroupedGemmKind::kMGrouped;
  p.num_groups = 2;
  p.a = GemmOperand::from_quantized(a, false);
  p.b = GemmOperand::from_quantized(b, false);
  return p;
}

detail::GroupedGemmDims forward_dims() {
  detail::GroupedGemmDims d;
  d.groups = 2;
  d.n = 32;
  d.k = 64;
  d.capacity = 32;
  return d;
}

// NVFP4 activations with 128x128 block weights: the refusal names the mode that has no CUDA
// path, not the pair's mismatch.
TEST(CudaFp8OperandMap, NamesAnUnsupportedScalingModeFirst) {
  const GroupedGemmProblem p = forward_problem(ScalingMode::kNVFP4, ScalingMode::kBlock128x128);
  gemm_cuda::Fp8ProblemMap m;
  std::string why;
  EXPECT_EQ(gemm_cuda::map_fp8_problem(p, forward_dims(), &m, &why), Status::kUnsupported);
  EXPECT_NE(why.find(std::string("A: scaling mode ") + scaling_mode_name(ScalingMode::kNVFP4)),
            std::string::npos)
      << why;
}

}  // namespace
}  // namespace tessera::test
