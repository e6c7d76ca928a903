// Grouped GEMM on quantized operands, every recipe: operands are quantized by the quantize layer
// (both usages), the oracle is a loop of single FP64 GEMMs on the quantize layer's own
// dequantize() of the copy each operand reads (an independent reading of the scales). Checked:
// reference == oracle (within output rounding), CPU == oracle and CPU == reference (within the
// FP32-accumulation budget of gemm_tolerance) for forward (TN), dgrad (NN) and wgrad (NT), with
// empty groups and K not a multiple of the block; per-group per-tensor scales; recipe mismatches.
#include <gtest/gtest.h>

#include <cstring>

#include "gemm/gemm_backend.h"
#include "gemm/gemm_case.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::test {
namespace {

// A quantized copy of a dense FP32 fixture operand, as a logical (rows, cols) matrix.
QuantizedTensor quantize_operand(const Owned& dense, const QuantizerConfig& cfg) {
  const TensorView& v = dense.view;
  const int64_t cols = v.shape[v.ndim - 1], rows = v.numel() / cols;
  QuantizedTensor q(cfg, rows, cols, Device::cpu());
  Quantizer quantizer(cfg);
  quantizer.quantize(TensorView::contiguous(v.data, DType::kFloat32, {rows, cols}), q);
  return q;
}

// Replaces the dense operand's values by quantize-layer dequantize() of the copy the GEMM reads.
void dequantize_into(const QuantizedTensor& q, bool columnwise, Owned& dense) {
  const TensorView out = TensorView::contiguous(dense.view.data, DType::kFloat32,
                                                {q.view().rows, q.view().cols});
  dequantize(q.view(), out, columnwise);
}

struct QuantCase {
  std::string name;
  GemmCase gemm;
  QuantRecipe recipe;
  bool a_columnwise = false, b_columnwise = false;
};

std::vector<QuantCase> quantized_cases() {
  std::vector<QuantCase> cases;
  const std::vector<int64_t> rows = {0, 45, 0, 64, 7, 0};  // empty first, middle and last
  for (const QuantRecipe& r : quantized_pairs()) {
    GemmCase fwd;  // forward y = x Wᵀ: x rowwise, W rowwise; K = 100 (not a multiple of 32/128)
    fwd.kind = GroupedGemmKind::kMGrouped;
    fwd.group_rows = rows;
    fwd.extra_rows = 9;
    fwd.n = 40, fwd.k = 100;
    fwd.out_dtype = DType::kBFloat16;
    fwd.name = "fwd_tn_" + r.name;
    cases.push_back({fwd.name, fwd, r, false, false});
    GemmCase dgrad = fwd;  // dx = dy W: dy rowwise (T, N), W (G, N, K) columnwise (blocks along N)
    dgrad.transpose_b = false;
    dgrad.k = 40, dgrad.n = 100;  // contraction over W's N = 40
    dgrad.out_dtype = DType::kFloat32;
    dgrad.name = "dgrad_nn_" + r.name;
    cases.push_back({dgrad.name, dgrad, r, false, true});
    GemmCase wgrad;  // dW_g = dy_gᵀ x_g: both columnwise (blocks along the token dim)
    wgrad.kind = GroupedGemmKind::kKGrouped;
    wgrad.transpose_a = true, wgrad.transpose_b = false;
    wgrad.group_rows = rows;
    wgrad.extra_rows = 5;
    wgrad.m = 24, wgrad.n = 36;
    wgrad.name = "wgrad_nt_" + r.name;
    cases.push_back({wgrad.name, wgrad, r, true, true});
    if (r.name == "rowwise" || r.name == "nvfp4_x_16x16" || r.name == "block1x128_x_block128x128") {
      // Enough work for a team of threads and several tasks per group (2100 rows), where the
      // FP32 path makes each B_g's image in the task (a thread's buffer, refilled per group):
      // from stored rows (forward) and from stored columns of a transposed copy (dgrad).
      GemmCase many = fwd;
      many.group_rows = {2100, 0, 700};
      many.extra_rows = 3;
      many.n = 96, many.k = 256;
      many.name = "fwd_tn_many_tasks_" + r.name;
      cases.push_back({many.name, many, r, false, false});
      GemmCase many_dgrad = many;  // B's columnwise copy (stored transposed for most recipes)
      many_dgrad.transpose_b = false;
      many_dgrad.k = 96, many_dgrad.n = 256;
      many_dgrad.out_dtype = DType::kFloat32;
      many_dgrad.name = "dgrad_nn_many_tasks_" + r.name;
      cases.push_back({many_dgrad.name, many_dgrad, r, false, true});
    }
  }
  return cases;
}

void PrintTo(const QuantCase& c, std::ostream* os) { *os << c.name; }

int64_t contraction(const GemmCase& c) {
  if (c.kind != GroupedGemmKind::kKGrouped) return c.k;
  return *std::max_element(c.group_rows.begin(), c.group_rows.end());
}

// Zeroes the NaN capacity rows of a fixture operand (a per-tensor amax must stay finite).
void clear_nans(Owned& o) {
  float* p = o.view.as<float>();
  for (int64_t i = 0; i < o.view.numel(); ++i) p[i] = std::isnan(p[i]) ? 0.0f : p[i];
}

class QuantizedGemm : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantizedGemm, CpuAndReferenceEqualLoopOnDequantized) {
  const QuantCase& qc = GetParam();
  GemmFixture f = make_fixture(qc.gemm);  // FP32 operands
  clear_nans(f.a);
  clear_nans(f.b);
  const QuantizedTensor qa = quantize_operand(f.a, qc.recipe.a);
  const QuantizedTensor qb = quantize_operand(f.b, qc.recipe.b);
  f.problem.a = GemmOperand::from_quantized(qa.view(), qc.a_columnwise);
  f.problem.b = GemmOperand::from_quantized(qb.view(), qc.b_columnwise);
  GemmFixture r = copy_of(f);  // the same problem, D in r's own storage, for the reference

  std::string reason;
  ASSERT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
  grouped_gemm(f.problem);
  detail::grouped_gemm_reference(r.problem);

  // The oracle: dense FP32 operands holding the quantize layer's dequantized values.
  GemmFixture deq = copy_of(f);
  dequantize_into(qa, qc.a_columnwise, deq.a);
  dequantize_into(qb, qc.b_columnwise, deq.b);
  const Expected e = loop_of_gemms(deq);
  const GemmTolerance tol = gemm_tolerance(qc.gemm.out_dtype, contraction(qc.gemm));
  EXPECT_EQ(compare(r, e, gemm_tolerance(qc.gemm.out_dtype, 0)), "") << "reference";
  EXPECT_EQ(compare(f, e, tol), "") << "cpu";
  EXPECT_EQ(check_untouched(f, e), "");
  Expected from_reference = e;
  for (size_t i = 0; i < e.value.size(); ++i) {
    if (e.written[i]) from_reference.value[i] = d_value(r.d.view, static_cast<int64_t>(i));
  }
  EXPECT_EQ(compare(f, from_reference, {2 * tol.value_rel, tol.sum_rel}), "") << "cpu vs ref";
}

INSTANTIATE_TEST_SUITE_P(Recipes, QuantizedGemm, ::testing::ValuesIn(quantized_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// Per-tensor FP8 with one scale per expert: each W_g quantized on its own, assembled into one
// (G·N, K) quantized tensor whose scale_inv holds G values.
TEST(QuantizedGemmPerGroupScales, ForwardWithOneTensorScalePerExpert) {
  GemmCase c;
  c.group_rows = {13, 0, 30, 8};
  c.n = 24, c.k = 56;
  GemmFixture f = make_fixture(c);
  clear_nans(f.a);
  const int64_t g_count = 4, n = c.n, k = c.k;
  QuantizerConfig cfg = both_usages(ScalingMode::kTensor);
  cfg.columnwise = false;
  QuantizedTensor qb(cfg, g_count * n, k, Device::cpu());
  std::vector<float> scales(g_count);
  float* w = f.b.view.as<float>();
  for (int64_t g = 0; g < g_count; ++g) {
    for (int64_t i = 0; i < n * k; ++i) w[g * n * k + i] *= static_cast<float>(1 << (3 * g));
    QuantizedTensor one(cfg, n, k, Device::cpu());
    Quantizer(cfg).quantize(TensorView::contiguous(w + g * n * k, DType::kFloat32, {n, k}), one);
    std::memcpy(qb.view().data.as<uint8_t>() + g * n * k, one.view().data.data, n * k);
    scales[g] = one.view().scale_inv.as<float>()[0];
    // The oracle operand: this expert's own dequantize.
    dequantize(one.view(), TensorView::contiguous(w + g * n * k, DType::kFloat32, {n, k}));
  }
  EXPECT_NE(scales[0], scales[3]);
  QuantizedTensorView qv = qb.view();
  qv.scale_inv = TensorView::contiguous(scales.data(), DType::kFloat32, {g_count});
  const QuantizedTensor qa = quantize_operand(f.a, cfg);
  GemmFixture deq = copy_of(f);
  dequantize_into(qa, false, deq.a);
  f.problem.a = GemmOperand::from_quantized(qa.view(), false);
  f.problem.b = GemmOperand::from_quantized(qv, false);
  std::string reason;
  ASSERT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
  grouped_gemm(f.problem);
  const Expected e = loop_of_gemms(deq);
  EXPECT_EQ(compare(f, e, gemm_tolerance(c.out_dtype, c.k)), "");
  qv.scale_inv = TensorView::contiguous(scales.data(), DType::kFloat32, {3});
  f.problem.b = GemmOperand::from_quantized(qv, false);
  EXPECT_EQ(can_implement(f.problem, &reason), Status::kShapeMismatch) << reason;
}

// NVFP4 columnwise copies quantized after the 16-point Hadamard transform (the nvfp4 recipe's
// wgrad operands): the fast rules refuse them; the CPU's emulated path undoes the transform, so
// the result equals a loop of GEMMs on the quantize layer's dequantized values.
TEST(QuantizedGemmEmulated, HadamardTransformedWgradOperands) {
  GemmCase c;
  c.kind = GroupedGemmKind::kKGrouped;
  c.transpose_a = true, c.transpose_b = false;
  c.group_rows = {16, 0, 45, 32};
  c.extra_rows = 3;
  c.m = 24, c.n = 36;
  GemmFixture f = make_fixture(c);
  clear_nans(f.a);
  clear_nans(f.b);
  QuantizerConfig cfg = both_usages(ScalingMode::kNVFP4);
  cfg.random_hadamard = true;
  const QuantizedTensor qa = quantize_operand(f.a, cfg);
  const QuantizedTensor qb = quantize_operand(f.b, cfg);
  f.problem.a = GemmOperand::from_quantized(qa.view(), true);
  f.problem.b = GemmOperand::from_quantized(qb.view(), true);
  std::string reason;
  ASSERT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
  grouped_gemm(f.problem);
  GemmFixture deq = copy_of(f);
  dequantize_into(qa, true, deq.a);
  dequantize_into(qb, true, deq.b);
  const Expected e = loop_of_gemms(deq);
  EXPECT_EQ(compare(f, e, gemm_tolerance(c.out_dtype, contraction(c))), "");
  EXPECT_EQ(check_untouched(f, e), "");
}

// A quantized operand times a dense one: the emulated path on the CPU.
TEST(QuantizedGemmEmulated, QuantizedTimesDense) {
  GemmCase c;
  c.group_rows = {5, 0, 11};
  c.n = 16, c.k = 64;
  GemmFixture f = make_fixture(c);
  clear_nans(f.a);
  const QuantizedTensor qa = quantize_operand(f.a, both_usages(ScalingMode::kMXFP8));
  f.problem.a = GemmOperand::from_quantized(qa.view(), false);
  std::string reason;
  ASSERT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
  grouped_gemm(f.problem);
  GemmFixture deq = copy_of(f);
  dequantize_into(qa, false, deq.a);
  const Expected e = loop_of_gemms(deq);
  EXPECT_EQ(compare(f, e, gemm_tolerance(c.out_dtype, c.k)), "");
}

TEST(QuantizedGemmErrors, RecipeMismatchMissingUsageBadScales) {
  GemmCase c;
  c.group_rows = {5, 11};
  c.n = 16, c.k = 64;
  GemmFixture f = make_fixture(c);
  clear_nans(f.a);
  const QuantizedTensor mx = quantize_operand(f.a, both_usages(ScalingMode::kMXFP8));
  const QuantizedTensor nv = quantize_operand(f.b, both_usages(ScalingMode::kNVFP4));
  QuantizerConfig row_only = both_usages(ScalingMode::kMXFP8);
  row_only.columnwise = false;
  const QuantizedTensor mx_b = quantize_operand(f.b, row_only);
  std::string reason;
  f.problem.a = GemmOperand::from_quantized(mx.view(), false);
  f.problem.b = GemmOperand::from_quantized(mx_b.view(), true);  // no columnwise copy
  EXPECT_EQ(can_implement(f.problem, &reason), Status::kInvalidArgument) << reason;
  EXPECT_NE(reason.find("columnwise"), std::string::npos) << reason;
  QuantizedTensorView bad = mx_b.view();
  bad.scale_inv.shape[1] -= 1;  // a scale matrix of the wrong shape
  f.problem.b = GemmOperand::from_quantized(bad, false);
  EXPECT_EQ(can_implement(f.problem, &reason), Status::kShapeMismatch) << reason;
  bad = mx_b.view();
  bad.data.dtype = DType::kFloat8E5M2;  // codes that do not match the config's element
  f.problem.b = GemmOperand::from_quantized(bad, false);
  EXPECT_EQ(can_implement(f.problem, &reason), Status::kDTypeMismatch) << reason;
  f.problem.b = GemmOperand::from_quantized(mx_b.view(), false);
  EXPECT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
}

// Mxfp8Path::kAuto's rule (detail::mxfp8_expands) on the bench's layer shapes, against the
// FLOPs per expanded element counted here by hand: DSv3 fc1 (32 experts x 512 tokens, 7168 →
// 4096) expands every GEMM; Qwen3 fc1 (128 x 256, 2048 → 1536) keeps its forward native unless
// W has a BF16 image (2·M·N·K / (M·K + G·N·K) = 439 FLOPs per element < 512) and expands its
// wgrad (2·M·N·K / (M·N + M·K) = 1755); small problems stay native; kNative and kExpanded
// override the rule.
TEST(Mxfp8Path, AutoExpandsWhereTheFlopsPayForTheExpansion) {
  using detail::GroupedGemmDims;
  using detail::Mxfp8Path;
  const detail::ScopedMxfp8Path path(Mxfp8Path::kAuto);
  const auto m_grouped = [](int64_t g, int64_t tokens, int64_t k, int64_t n) {
    GroupedGemmDims d;
    d.groups = g, d.capacity = d.a_rows = g * tokens, d.n = n, d.k = k;
    return d;
  };
  const auto k_grouped = [](int64_t g, int64_t tokens, int64_t m, int64_t n) {
    GroupedGemmDims d;
    d.groups = g, d.capacity = d.a_rows = g * tokens, d.m = m, d.n = n;
    return d;
  };
  const auto M = GroupedGemmKind::kMGrouped, K = GroupedGemmKind::kKGrouped;
  EXPECT_TRUE(detail::mxfp8_expands(M, m_grouped(32, 512, 7168, 4096), false, false));
  EXPECT_TRUE(detail::mxfp8_expands(M, m_grouped(32, 512, 4096, 7168), false, false));
  EXPECT_TRUE(detail::mxfp8_expands(K, k_grouped(32, 512, 4096, 7168), false, false));
  EXPECT_FALSE(detail::mxfp8_expands(M, m_grouped(128, 256, 2048, 1536), false, false));
  EXPECT_TRUE(detail::mxfp8_expands(M, m_grouped(128, 256, 2048, 1536), false, true));
  EXPECT_TRUE(detail::mxfp8_expands(K, k_grouped(128, 256, 1536, 2048), false, false));
  EXPECT_FALSE(detail::mxfp8_expands(M, m_grouped(4, 100, 144, 384), false, false));
  EXPECT_FALSE(detail::mxfp8_expands(M, m_grouped(4, 100, 144, 128), false, true));
  {
    const detail::ScopedMxfp8Path native(Mxfp8Path::kNative);
    EXPECT_FALSE(detail::mxfp8_expands(M, m_grouped(32, 512, 7168, 4096), false, true));
  }
  {
    const detail::ScopedMxfp8Path expanded(Mxfp8Path::kExpanded);
    EXPECT_TRUE(detail::mxfp8_expands(M, m_grouped(4, 100, 144, 128), false, false));
  }
  EXPECT_EQ(detail::mxfp8_path(), Mxfp8Path::kAuto);
}

}  // namespace
}  // namespace tessera::test
