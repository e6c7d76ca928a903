// Host-only checks of how the CUDA backend maps quantized operands (quantized_operands.h): what
// it refuses and in which order. No device is needed: the mapping reads only the views' fields.
#include <gtest/gtest.h>

#include <cstdint>
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
  d.capacity = d.a_rows = 32;
  return d;
}

// NVFP4 activations with 128x128 block weights: the refusal names the operand whose mode has no
// CUDA path beside NVFP4, not the pair's mismatch.
TEST(CudaFp8OperandMap, NamesAnUnsupportedScalingModeFirst) {
  const GroupedGemmProblem p = forward_problem(ScalingMode::kNVFP4, ScalingMode::kBlock128x128);
  gemm_cuda::Fp8ProblemMap m;
  std::string why;
  EXPECT_EQ(gemm_cuda::map_fp8_problem(p, forward_dims(), &m, &why), Status::kUnsupported);
  EXPECT_NE(why.find(std::string("B: scaling mode ") +
                     scaling_mode_name(ScalingMode::kBlock128x128) + " meets an NVFP4"),
            std::string::npos)
      << why;
}

// An NVFP4 copy (rows, cols) on the device as far as the mapping can tell (the views' fields
// only): codes, scales and one global amax per usage; `rht` on the columnwise copy.
QuantizedTensorView nvfp4_view(int64_t rows, int64_t cols, bool rht, int64_t amax_values = 1) {
  QuantizedTensorView q;
  q.config = make_config(ScalingMode::kNVFP4, DType::kFloat4E2M1);
  q.config.rowwise = q.config.columnwise = true;
  q.config.random_hadamard = rht;
  q.rows = rows, q.cols = cols;
  q.device = Device::cuda(0);
  for (TensorView* v : {&q.data, &q.scale_inv, &q.columnwise_data, &q.columnwise_scale_inv}) {
    v->data = reinterpret_cast<void*>(uintptr_t{4096});
    v->device = q.device;
  }
  for (TensorView* v : {&q.amax, &q.columnwise_amax})
    *v = TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{8192}), DType::kFloat32,
                                {amax_values}, q.device);
  return q;
}

// An M-grouped NVFP4 x NVFP4 forward (TN) with contraction k: A (40, k) of which 32 rows (the
// capacity) are read, B two groups of 24 weight rows with per-group amax.
void nvfp4_forward(int64_t k, GroupedGemmProblem& p, detail::GroupedGemmDims& d) {
  p.kind = GroupedGemmKind::kMGrouped;
  p.num_groups = 2;
  p.transpose_b = true;
  p.a = GemmOperand::from_quantized(nvfp4_view(40, k, false), false);
  p.b = GemmOperand::from_quantized(nvfp4_view(2 * 24, k, false, 2), false);
  d.groups = 2, d.n = 24, d.k = k, d.capacity = d.a_rows = 32;
}

// NVFP4 x NVFP4: both copies expanded to BF16 K-major matrices (ld padded to 8), the BF16 kind,
// the weights' per-group amax as a per-group epilogue scale.
TEST(CudaFp8OperandMap, Nvfp4PairsExpandToBf16) {
  GroupedGemmProblem p;
  detail::GroupedGemmDims d;
  nvfp4_forward(100, p, d);
  gemm_cuda::Fp8ProblemMap m;
  std::string why;
  d.a_rows = 40;  // A in its own row layout (a_row_starts): all of its 40 rows are expanded
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  EXPECT_EQ(m.a.matrix.rows, 40);
  EXPECT_EQ(m.a.ex.rows, 40);
  d.a_rows = 32;
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  EXPECT_TRUE(m.expanded);
  EXPECT_EQ(m.elem, gemm_cuda::ElemKind::kBF16);
  EXPECT_TRUE(m.a.expand && m.b.expand && !m.a.expand_transposed && !m.b.expand_transposed);
  EXPECT_EQ(m.a.matrix.rows, 32);  // the capacity: rows past it are never read nor expanded
  EXPECT_EQ(m.a.ex.rows, 32);
  EXPECT_EQ(m.a.matrix.cols, 100);
  EXPECT_EQ(m.a.matrix.ld, 104);
  EXPECT_EQ(m.b.matrix.rows, 48);
  EXPECT_EQ(m.b_group_rows, 24);
  EXPECT_EQ(m.a.scale_gs, 0);
  EXPECT_EQ(m.b.scale_gs, 1);
  EXPECT_EQ(m.b.amax_count, 2);
  EXPECT_FALSE(m.rht);
  EXPECT_FALSE(gemm_cuda::one_byte_operands(p));
  // dgrad: B's columnwise copy, stored transposed (cols, rows) = K-major as stored
  p.transpose_b = false;
  p.b = GemmOperand::from_quantized(nvfp4_view(2 * 100, 24, false), true);
  d.n = 24, d.k = 100;
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  EXPECT_EQ(m.b.ex.rows, 24);
  EXPECT_EQ(m.b.ex.cols, 200);
  EXPECT_EQ(m.b_group_cols, 100);
}

// NVFP4 x NVFP4 with K % 32 == 0, scales a stage row reads as one aligned word, and the
// in-kernel path switched on (set_nvfp4_in_kernel): expanded inside the kernel
// (ElemKind::kNvfp4): the raw code matrices (cols and ld in bytes), each operand's scales and
// rows for the converter threads, no workspace copies; otherwise (K % 32 != 0, a compact scale
// width that is not a multiple of 4, a dgrad whose groups start off a 64-element stage, or
// switched off: the default) the workspace expansion as above.
TEST(CudaFp8OperandMap, Nvfp4PairsWithWholeRowsExpandInTheKernel) {
  GroupedGemmProblem p;
  detail::GroupedGemmDims d;
  nvfp4_forward(128, p, d);
  gemm_cuda::Fp8ProblemMap m;
  std::string why;
  const bool was = gemm_cuda::nvfp4_in_kernel();  // off by default
  gemm_cuda::set_nvfp4_in_kernel(true);
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  EXPECT_TRUE(m.fp4);
  EXPECT_EQ(m.elem, gemm_cuda::ElemKind::kNvfp4);
  EXPECT_FALSE(m.a.expand || m.b.expand);
  EXPECT_EQ(m.a.matrix.ptr, p.a.quantized.data.data);
  EXPECT_EQ(m.a.matrix.rows, 32);  // the capacity
  EXPECT_EQ(m.a.matrix.cols, 64);  // bytes: two codes each
  EXPECT_EQ(m.a.matrix.ld, 64);
  EXPECT_EQ(m.a.fp4.rows, 32);
  EXPECT_EQ(m.a.fp4.k, 128);
  EXPECT_EQ(m.a.fp4.row_shift, 0);  // 1x16 blocks
  EXPECT_EQ(m.a.fp4.scales, p.a.quantized.scale_inv.data);
  EXPECT_EQ(m.a.fp4.geometry.ld, 8);  // compact: 8 scales a row, one word per stage row
  EXPECT_EQ(m.b.matrix.rows, 48);
  EXPECT_EQ(m.b_group_rows, 24);
  EXPECT_EQ(m.b.scale_gs, 1);  // the per-group 1/S_enc stays the epilogue's
  // dgrad: B's columnwise copy (24, 2 x 128) stored transposed; group g at columns g·128
  p.transpose_b = false;
  p.b = GemmOperand::from_quantized(nvfp4_view(2 * 128, 24, false), true);
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  EXPECT_TRUE(m.fp4);
  EXPECT_EQ(m.b.matrix.rows, 24);
  EXPECT_EQ(m.b.matrix.cols, 128);
  EXPECT_EQ(m.b_group_cols, 128);
  // dgrad with K = 96 (swizzled scales): group 1 starts at contraction column 96, half a stage
  // in: the workspace
  nvfp4_forward(96, p, d);
  p.transpose_b = false;
  p.b = GemmOperand::from_quantized(nvfp4_view(2 * 96, 24, false), true);
  for (GemmOperand* o : {&p.a, &p.b}) o->quantized.config.scale_layout = ScaleLayout::kSwizzled;
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  EXPECT_FALSE(m.fp4);
  EXPECT_EQ(m.b_group_cols, 96);
  // forward with K = 96: compact scale rows of 6 bytes (a stage row's 4 scales not one aligned
  // word): the workspace
  nvfp4_forward(96, p, d);
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  EXPECT_FALSE(m.fp4);
  EXPECT_EQ(m.elem, gemm_cuda::ElemKind::kBF16);
  // the same with swizzled scales (rows padded to a multiple of 4): in the kernel
  for (GemmOperand* o : {&p.a, &p.b}) o->quantized.config.scale_layout = ScaleLayout::kSwizzled;
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  EXPECT_TRUE(m.fp4);
  // K % 32 != 0: the workspace expansion
  nvfp4_forward(80, p, d);
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  EXPECT_FALSE(m.fp4);
  EXPECT_EQ(m.elem, gemm_cuda::ElemKind::kBF16);
  // switched off
  nvfp4_forward(128, p, d);
  gemm_cuda::set_nvfp4_in_kernel(false);
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  gemm_cuda::set_nvfp4_in_kernel(was);
  EXPECT_FALSE(m.fp4);
  EXPECT_TRUE(m.a.expand && m.b.expand);
}

// Hadamard-transformed copies: only with each other, K-grouped; the groups then need whole
// 16-token blocks.
TEST(CudaFp8OperandMap, Nvfp4HadamardCopiesOnlyMeetEachOtherInWgrad) {
  GroupedGemmProblem p;
  p.kind = GroupedGemmKind::kKGrouped;
  p.num_groups = 2;
  p.transpose_a = true, p.transpose_b = false;
  p.a = GemmOperand::from_quantized(nvfp4_view(64, 24, true), true);
  p.b = GemmOperand::from_quantized(nvfp4_view(64, 40, true), true);
  detail::GroupedGemmDims d;
  d.groups = 2, d.m = 24, d.n = 40, d.capacity = 64;
  gemm_cuda::Fp8ProblemMap m;
  std::string why;
  ASSERT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kOk) << why;
  EXPECT_TRUE(m.rht);
  EXPECT_EQ(m.rht_rows, 64);
  EXPECT_EQ(m.a.matrix.rows, 24);
  EXPECT_EQ(m.a.matrix.ld, 64);
  p.b = GemmOperand::from_quantized(nvfp4_view(64, 40, false), true);
  EXPECT_EQ(gemm_cuda::map_fp8_problem(p, d, &m, &why), Status::kUnsupported);
  EXPECT_NE(why.find("random Hadamard"), std::string::npos) << why;
}

}  // namespace
}  // namespace tessera::test
