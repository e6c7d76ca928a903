// Grouped GEMM, unquantized operands: reference == a loop of single FP64 GEMMs (within output
// rounding), CPU backend == reference (within gemm_tolerance), over generated cases: one group,
// 40+ groups with empty ones at the start/middle/end, sizes not a multiple of 16, every kind and
// layout, BF16/FP16/FP32 in and out, bias, per-group alpha, beta = 1, capacity rows (poisoned with
// NaN in A/B and a byte pattern in D, which must stay untouched).
#include <cmath>

#include <gtest/gtest.h>

#include "gemm/gemm_backend.h"
#include "gemm/gemm_case.h"

namespace tessera::test {
namespace {

std::vector<int64_t> ragged_rows(int64_t groups, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(1, 37);
  std::vector<int64_t> r(static_cast<size_t>(groups));
  for (auto& x : r) x = dist(rng);
  r.front() = 0;              // empty first group
  r[r.size() / 2] = 0;        // empty middle group
  r[r.size() / 2 + 1] = 0;    // two in a row
  r.back() = 0;               // empty last group
  return r;
}

void add_batched_cases(DType in, std::vector<GemmCase>& cases);
void add_mixed_cases(const std::vector<int64_t>& many, std::vector<GemmCase>& cases);

std::vector<GemmCase> unquantized_cases() {
  std::vector<GemmCase> cases;
  const auto many = ragged_rows(43, 7);
  for (DType in : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const std::string tn = dtype_name(in);
    GemmCase c;
    c.in_dtype = in;
    c.out_dtype = in;
    // M-grouped forward (TN) and dgrad (NN).
    c.kind = GroupedGemmKind::kMGrouped;
    c.name = "m_grouped_tn_1group_" + tn;
    c.group_rows = {29};
    c.n = 35, c.k = 53;
    cases.push_back(c);
    c.name = "m_grouped_tn_43groups_empty_capacity_" + tn;
    c.group_rows = many;
    c.extra_rows = 11;
    c.bias = true;
    cases.push_back(c);
    c.name = "m_grouped_nn_43groups_alpha_" + tn;
    c.transpose_b = false;
    c.bias = false;
    c.group_alpha = true;
    c.alpha = 0.75f;
    c.offsets_format = GroupOffsetsFormat::kEndOffsets;
    c.offsets_dtype = DType::kInt32;
    cases.push_back(c);
    // K-grouped wgrad (NT).
    GemmCase w;
    w.in_dtype = in;
    w.out_dtype = in;
    w.kind = GroupedGemmKind::kKGrouped;
    w.transpose_a = true, w.transpose_b = false;
    w.name = "k_grouped_nt_43groups_empty_capacity_" + tn;
    w.group_rows = many;
    w.extra_rows = 5;
    w.m = 19, w.n = 23;
    cases.push_back(w);
    w.name = "k_grouped_nt_1group_" + tn;
    w.group_rows = {61};
    w.extra_rows = 0;
    cases.push_back(w);
    add_batched_cases(in, cases);
  }
  add_mixed_cases(many, cases);
  return cases;
}

// Batched, every layout.
void add_batched_cases(DType in, std::vector<GemmCase>& cases) {
  for (int layout = 0; layout < 4; ++layout) {
    GemmCase bt;
    bt.in_dtype = in;
    bt.out_dtype = DType::kFloat32;
    bt.kind = GroupedGemmKind::kBatched;
    bt.batch_count = 3;
    bt.m = 17, bt.n = 9, bt.k = 33;
    bt.transpose_a = layout & 1;
    bt.transpose_b = layout & 2;
    bt.bias = layout == 3;
    bt.name = std::string("batched_") + (bt.transpose_a ? "t" : "n") +
              (bt.transpose_b ? "t_" : "n_") + dtype_name(in);
    cases.push_back(bt);
  }
}

void add_mixed_cases(const std::vector<int64_t>& many, std::vector<GemmCase>& cases) {
  // FP32 accumulation into main_grad (beta = 1) with BF16 operands; empty experts stay unchanged.
  GemmCase acc;
  acc.kind = GroupedGemmKind::kKGrouped;
  acc.transpose_a = true, acc.transpose_b = false;
  acc.in_dtype = DType::kBFloat16;
  acc.out_dtype = DType::kFloat32;
  acc.beta = 1.0f;
  acc.group_rows = many;
  acc.m = 21, acc.n = 18;
  acc.name = "k_grouped_nt_beta1_main_grad_bf16";
  cases.push_back(acc);
  GemmCase fwd_acc;
  fwd_acc.kind = GroupedGemmKind::kMGrouped;
  fwd_acc.in_dtype = DType::kFloat16;
  fwd_acc.out_dtype = DType::kFloat32;
  fwd_acc.beta = 1.0f;
  fwd_acc.bias = true;
  fwd_acc.group_rows = many;
  fwd_acc.extra_rows = 3;
  fwd_acc.n = 14, fwd_acc.k = 40;
  fwd_acc.name = "m_grouped_tn_beta1_bias_fp16_to_fp32";
  cases.push_back(fwd_acc);
  // Mixed output dtype: FP32 operands into a BF16 output.
  GemmCase mixed;
  mixed.group_rows = {5, 0, 130, 1};
  mixed.extra_rows = 7;
  mixed.n = 47, mixed.k = 129;
  mixed.out_dtype = DType::kBFloat16;
  mixed.name = "m_grouped_tn_fp32_to_bf16";
  cases.push_back(mixed);
}

int64_t contraction(const GemmCase& c) {
  if (c.kind != GroupedGemmKind::kKGrouped) return c.k;
  int64_t mx = 0;
  for (int64_t r : c.group_rows) mx = std::max(mx, r);
  return mx;
}

class UnquantizedGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(UnquantizedGemm, ReferenceEqualsLoopOfSingleGemms) {
  GemmFixture f = make_fixture(GetParam());
  detail::grouped_gemm_reference(f.problem);
  const Expected e = loop_of_gemms(f);
  EXPECT_EQ(compare(f, e, gemm_tolerance(f.c.out_dtype, 0)), "");
  EXPECT_EQ(check_untouched(f, e), "");
}

TEST_P(UnquantizedGemm, CpuEqualsReference) {
  GemmFixture f = make_fixture(GetParam());
  std::string reason;
  ASSERT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
  grouped_gemm(f.problem);
  const GemmTolerance tol = gemm_tolerance(f.c.out_dtype, contraction(f.c));
  // Against the FP64 oracle ...
  const Expected e = loop_of_gemms(f);
  EXPECT_EQ(compare(f, e, tol), "");
  EXPECT_EQ(check_untouched(f, e), "");
  // ... and against the reference's own (rounded) output: both sides rounded, so twice the
  // output-rounding budget.
  GemmFixture r = make_fixture(GetParam());
  detail::grouped_gemm_reference(r.problem);
  Expected from_reference = e;
  for (size_t i = 0; i < e.value.size(); ++i) {
    if (e.written[i]) from_reference.value[i] = d_value(r.d.view, static_cast<int64_t>(i));
  }
  EXPECT_EQ(compare(f, from_reference, {2 * tol.value_rel, tol.sum_rel}), "");
}

INSTANTIATE_TEST_SUITE_P(Cases, UnquantizedGemm, ::testing::ValuesIn(unquantized_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(GroupedGemmCpu, EmptyExpertsInWgradAreExactZeros) {
  GemmCase c;
  c.kind = GroupedGemmKind::kKGrouped;
  c.transpose_a = true, c.transpose_b = false;
  c.group_rows = {0, 12, 0, 0, 9, 0};
  c.m = 8, c.n = 6;
  c.name = "wgrad_empty";
  for (DType out : {DType::kFloat32, DType::kBFloat16}) {
    c.out_dtype = out;
    GemmFixture f = make_fixture(c);
    grouped_gemm(f.problem);
    for (int64_t g : {0, 2, 3, 5}) {
      for (int64_t i = 0; i < c.m * c.n; ++i) {
        const double v = d_value(f.d.view, g * c.m * c.n + i);
        ASSERT_EQ(v, 0.0) << "group " << g << " element " << i;
        ASSERT_FALSE(std::signbit(v)) << "group " << g << " element " << i << " is -0";
      }
    }
  }
}

TEST(GroupedGemmCpu, WorkspaceIsZeroForFp32AndSizedOtherwise) {
  GemmCase c;
  c.group_rows = {4, 0, 9};
  c.extra_rows = 6;
  c.n = 16, c.k = 24;
  GemmFixture f = make_fixture(c);
  EXPECT_EQ(workspace_size(f.problem), 0);
  // FP16 (BF16 may take the native path, whose workspace test_grouped_gemm_bf16.cpp checks).
  c.in_dtype = DType::kFloat16;
  c.out_dtype = DType::kFloat16;
  GemmFixture h = make_fixture(c);
  // A: capacity (19 rows) × 24, B: 3 × 16 × 24, D staging: 19 × 16, each region 256-aligned.
  auto region = [](int64_t elems) { return (elems * 4 + 255) / 256 * 256; };
  EXPECT_EQ(workspace_size(h.problem), region(19 * 24) + region(3 * 16 * 24) + region(19 * 16));
  Buffer small(64);
  EXPECT_THROW(run(h.problem, TensorView::contiguous(small.data(), DType::kUInt8, {64})), Error);
}

}  // namespace
}  // namespace tessera::test

namespace tessera::test {
namespace {

// zero_unused_rows on the CPU: the rows past the last group's end are zero, the others equal the
// run without the flag (whose unused rows keep the poisoned initial D).
TEST(GroupedGemmCpu, ZeroUnusedRowsZeroesOnlyTheTail) {
  GemmCase c;
  c.group_rows = {5, 0, 11, 0};
  c.extra_rows = 7;
  c.n = 16, c.k = 24;
  for (DType out : {DType::kFloat32, DType::kBFloat16}) {
    c.in_dtype = out;
    c.out_dtype = out;
    GemmFixture plain = make_fixture(c);
    GemmFixture zeroed = copy_of(plain);
    zeroed.problem.zero_unused_rows = true;
    grouped_gemm(plain.problem);
    grouped_gemm(zeroed.problem);
    const int64_t live = 16, row = c.n;
    for (int64_t i = 0; i < (live + c.extra_rows) * row; ++i) {
      const double z = d_value(zeroed.d.view, i), p = d_value(plain.d.view, i);
      if (i < live * row) {
        ASSERT_TRUE(z == p || (std::isnan(z) && std::isnan(p))) << "element " << i;
      } else {
        ASSERT_EQ(z, 0.0) << "element " << i << " of a row past the groups";
        ASSERT_FALSE(std::signbit(z));
      }
    }
    EXPECT_NE(d_value(plain.d.view, live * row), 0.0);  // the plain run left the poison there
  }
  GemmCase kg;
  kg.kind = GroupedGemmKind::kKGrouped;
  kg.transpose_a = true, kg.transpose_b = false;
  kg.group_rows = {4, 6};
  kg.m = 8, kg.n = 6;
  GemmFixture f = make_fixture(kg);
  f.problem.zero_unused_rows = true;
  EXPECT_EQ(can_implement(f.problem), Status::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::test

namespace tessera::test {
namespace {

// run_if_fits: too small a workspace runs nothing (D keeps its poison) and answers the bytes
// workspace_size gives; with that many it runs, and D equals grouped_gemm's.
TEST(GroupedGemmCpu, RunIfFitsAnswersTheWorkspaceOrRuns) {
  GemmCase c;
  c.group_rows = {4, 0, 9};
  c.extra_rows = 6;
  c.n = 16, c.k = 24;
  c.in_dtype = DType::kFloat16;
  c.out_dtype = DType::kFloat16;
  GemmFixture f = make_fixture(c), want = copy_of(f);
  const int64_t need = workspace_size(f.problem);
  ASSERT_GT(need, 0);
  Buffer small(64), ws(static_cast<size_t>(need));
  EXPECT_EQ(run_if_fits(f.problem, TensorView{}), need);
  EXPECT_EQ(run_if_fits(f.problem, TensorView::contiguous(small.data(), DType::kUInt8, {64})),
            need);
  EXPECT_EQ(f.d.bytes, f.d_initial) << "nothing may run with too small a workspace";
  EXPECT_EQ(run_if_fits(f.problem, TensorView::contiguous(ws.data(), DType::kUInt8, {need})), 0);
  grouped_gemm(want.problem);
  EXPECT_EQ(f.d.bytes, want.d.bytes);
}

}  // namespace
}  // namespace tessera::test
