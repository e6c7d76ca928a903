// M-grouped grouped GEMM reading A through its own row layout (GroupedGemmProblem::a_row_starts):
// the CPU backend and the reference give, bit for bit, what they give on the compact A (the same
// group rows packed as group_offsets say), for every operand family — dense FP32/BF16/FP16 (FP32
// and native BF16 paths), and quantized A of every recipe read rowwise (forward TN and dgrad
// NN), per-group tensor scales — with ragged groups (empty first, middle and last; sizes not a
// multiple of 16), capacity rows past the last offset, aligned (padded-layout) and arbitrary
// starts, and the rows of A outside the groups poisoned (NaN values, NaN codes and scales).
// Plus the refusals: K-grouped / batched kinds, dtype, length, too few A rows, ranges out of A
// or out of order, D over a_row_starts.
#include <gtest/gtest.h>

#include <cstring>

#include "gemm/cpu/bf16_gemm.h"
#include "gemm/gemm_backend.h"
#include "gemm/gemm_case.h"
#include "gemm/spread_rows.h"

namespace tessera::test {
namespace {

std::vector<int64_t> ragged() { return {0, 45, 17, 0, 130, 1, 0, 64, 33, 0}; }

struct DenseCase {
  std::string name;
  GemmCase gemm;
  int64_t align = 16, max_gap = 0;
  bool with_end = true;
};
void PrintTo(const DenseCase& c, std::ostream* os) { *os << c.name; }

std::vector<DenseCase> dense_cases() {
  std::vector<DenseCase> cases;
  for (DType in : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    GemmCase c;
    c.group_rows = ragged();
    c.extra_rows = 7;
    c.n = 24, c.k = 40;
    c.in_dtype = c.out_dtype = in;
    c.bias = true;
    c.name = std::string("tn_padded_layout_") + dtype_name(in);
    cases.push_back({c.name, c, 16, 0, true});
    c.name = std::string("nn_random_starts_int32_end_offsets_alpha_") + dtype_name(in);
    c.transpose_b = false;
    c.bias = false;
    c.group_alpha = true;
    c.alpha = 0.5f;
    c.offsets_format = GroupOffsetsFormat::kEndOffsets;
    c.offsets_dtype = DType::kInt32;
    cases.push_back({c.name, c, 1, 9, false});
  }
  GemmCase acc;  // beta = 1 into FP32, one group
  acc.group_rows = {77};
  acc.n = 16, acc.k = 24;
  acc.in_dtype = DType::kFloat16;
  acc.out_dtype = DType::kFloat32;
  acc.beta = 1.0f;
  acc.name = "tn_one_group_beta1_fp16_to_fp32";
  cases.push_back({acc.name, acc, 32, 40, true});
  return cases;
}

class DenseARowStarts : public ::testing::TestWithParam<DenseCase> {};

void expect_same_d(const GemmFixture& want, const GemmFixture& got, const std::string& what) {
  ASSERT_EQ(got.d.bytes.size(), want.d.bytes.size());
  for (size_t i = 0; i < want.d.bytes.size(); ++i)
    ASSERT_EQ(got.d.bytes[i], want.d.bytes[i]) << what << ": D byte " << i << " differs";
}

TEST_P(DenseARowStarts, CpuAndReferenceEqualTheCompactProblem) {
  const DenseCase& dc = GetParam();
  for (bool zero_unused : {false, true}) {
    for (bool native_bf16 : {true, false}) {
      if (!native_bf16 && dc.gemm.in_dtype != DType::kBFloat16) continue;
      const bool previous = detail::cpu::set_bf16_native_allowed(native_bf16);
      SpreadCase s(dc.gemm, dc.align, dc.max_gap, dc.with_end, 99);
      s.compact.problem.zero_unused_rows = s.spread.problem.zero_unused_rows = zero_unused;
      std::string reason;
      ASSERT_EQ(can_implement(s.spread.problem, &reason), Status::kOk) << reason;
      grouped_gemm(s.compact.problem);
      grouped_gemm(s.spread.problem);
      detail::cpu::set_bf16_native_allowed(previous);
      const std::string what = std::string("cpu, zero_unused_rows ") + (zero_unused ? "1" : "0") +
                               (native_bf16 ? "" : ", fp32 path");
      expect_same_d(s.compact, s.spread, what);
      const Expected e = loop_of_gemms(s.compact);
      EXPECT_EQ(compare(s.spread, e, gemm_tolerance(dc.gemm.out_dtype, dc.gemm.k)), "") << what;
      if (!zero_unused) {
        EXPECT_EQ(check_untouched(s.spread, e), "") << what;
      }
    }
  }
  SpreadCase r(dc.gemm, dc.align, dc.max_gap, dc.with_end, 7);
  detail::grouped_gemm_reference(r.compact.problem);
  detail::grouped_gemm_reference(r.spread.problem);
  expect_same_d(r.compact, r.spread, "reference");
}

INSTANTIATE_TEST_SUITE_P(Cases, DenseARowStarts, ::testing::ValuesIn(dense_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// ---- quantized A ---------------------------------------------------------------------------


std::vector<QuantCase> quant_cases() {
  std::vector<QuantCase> cases;
  for (const QuantRecipe& r : quantized_pairs()) {
    GemmCase fwd;  // y = x Wᵀ; K = 100 (not a multiple of 32 / 128)
    fwd.group_rows = ragged();
    fwd.extra_rows = 9;
    fwd.n = 40, fwd.k = 100;
    fwd.out_dtype = DType::kBFloat16;
    fwd.name = "fwd_tn_" + r.name;
    cases.push_back({fwd.name, fwd, r});
    GemmCase dgrad = fwd;  // dx = dy W: W's columnwise copy
    dgrad.transpose_b = false;
    dgrad.k = 40, dgrad.n = 100;
    dgrad.out_dtype = DType::kFloat32;
    dgrad.name = "dgrad_nn_" + r.name;
    cases.push_back({dgrad.name, dgrad, r});
  }
  return cases;
}

class QuantizedARowStarts : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantizedARowStarts, CpuAndReferenceEqualTheCompactProblem) {
  const QuantCase& qc = GetParam();
  for (const auto& [align, gap] : {std::pair<int64_t, int64_t>{16, 0}, {1, 13}}) {
    QuantizedSpread q(qc.gemm, qc.recipe, align, gap);
    q.s.compact.problem.zero_unused_rows = q.s.spread.problem.zero_unused_rows = true;
    std::string reason;
    ASSERT_EQ(can_implement(q.s.compact.problem, &reason), Status::kOk) << reason;
    ASSERT_EQ(can_implement(q.s.spread.problem, &reason), Status::kOk) << reason;
    grouped_gemm(q.s.compact.problem);
    grouped_gemm(q.s.spread.problem);
    expect_same_d(q.s.compact, q.s.spread, "cpu, align " + std::to_string(align));
    QuantizedSpread r(qc.gemm, qc.recipe, align, gap);
    detail::grouped_gemm_reference(r.s.compact.problem);
    detail::grouped_gemm_reference(r.s.spread.problem);
    expect_same_d(r.s.compact, r.s.spread, "reference, align " + std::to_string(align));
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, QuantizedARowStarts, ::testing::ValuesIn(quant_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// Per-tensor FP8 A with one scale per group: group g's scale follows g, not the row's place in A
// (the CPU dequantizes A by A's own group rows).
TEST(QuantizedARowStartsPerGroupScales, GroupScaleFollowsTheGroup) {
  GemmCase c;
  c.group_rows = {13, 0, 30, 8, 21};
  c.n = 24, c.k = 56;
  const QuantRecipe r{"tensor", both_usages(ScalingMode::kTensor), both_usages(ScalingMode::kTensor)};
  QuantizedSpread q(c, r, 16, 5);
  std::vector<float> scales(c.group_rows.size());
  for (size_t g = 0; g < scales.size(); ++g)
    scales[g] = q.qa.view().scale_inv.as<float>()[0] * static_cast<float>(1 << g);
  const TensorView per_group =
      TensorView::contiguous(scales.data(), DType::kFloat32, {static_cast<int64_t>(scales.size())});
  QuantizedTensorView compact = q.qa.view(), spread = q.qa_spread.view();
  compact.scale_inv = spread.scale_inv = per_group;
  q.s.compact.problem.a = GemmOperand::from_quantized(compact, false);
  q.s.spread.problem.a = GemmOperand::from_quantized(spread, false);
  grouped_gemm(q.s.compact.problem);
  grouped_gemm(q.s.spread.problem);
  expect_same_d(q.s.compact, q.s.spread, "cpu");
}

// ---- refusals ------------------------------------------------------------------------------

Status status_of(const GroupedGemmProblem& p, const char* must_name) {
  std::string reason;
  const Status s = can_implement(p, &reason);
  EXPECT_NE(reason.find(must_name), std::string::npos) << reason;
  return s;
}

TEST(ARowStartsErrors, RefusedWhereItCannotHold) {
  GemmCase c;
  c.group_rows = {3, 0, 5};
  c.extra_rows = 2;
  c.n = 8, c.k = 12;
  SpreadCase s(c, 4, 2, true, 3);
  ASSERT_EQ(can_implement(s.spread.problem), Status::kOk);
  // int32 starts, wrong lengths
  GroupedGemmProblem p = s.spread.problem;
  std::vector<int32_t> i32 = {0, 4, 8};
  p.a_row_starts = TensorView::contiguous(i32.data(), DType::kInt32, {3});
  EXPECT_EQ(status_of(p, "a_row_starts"), Status::kDTypeMismatch);
  std::vector<int64_t> starts = s.layout.starts;
  starts.push_back(0);
  starts.push_back(0);
  p.a_row_starts = TensorView::contiguous(starts.data(), DType::kInt64, {5});
  EXPECT_EQ(status_of(p, "a_row_starts"), Status::kShapeMismatch);
  p.a_row_starts = TensorView::contiguous(starts.data(), DType::kInt64, {2});
  EXPECT_EQ(status_of(p, "a_row_starts"), Status::kShapeMismatch);
  // group ranges: past A's rows, negative, out of order / overlapping
  std::vector<int64_t> bad = {0, 3, s.a.view.shape[0] - 4};
  p.a_row_starts = TensorView::contiguous(bad.data(), DType::kInt64, {3});
  EXPECT_EQ(status_of(p, "a_row_starts[2]"), Status::kOutOfRange);
  bad = {-1, 3, 4};
  EXPECT_EQ(status_of(p, "a_row_starts[0]"), Status::kOutOfRange);
  bad = {0, 3, 2};  // group 2 starts inside group 0's rows [0, 3)
  EXPECT_EQ(status_of(p, "a_row_starts[2]"), Status::kInvalidArgument);
  bad = {4, 3, 8};  // an empty group may start anywhere in order; group 0 [4, 7) then 8: ok
  EXPECT_EQ(can_implement(p), Status::kInvalidArgument);  // 3 < group 0's end 7
  bad = {4, 7, 8};
  EXPECT_EQ(can_implement(p), Status::kOk);
  // A with fewer rows than the capacity (D's rows)
  p = s.spread.problem;
  p.a.dense.shape[0] = c.extra_rows + 8 - 1;
  EXPECT_EQ(status_of(p, "a_row_starts"), Status::kBufferTooSmall);
  // D over the starts
  p = s.spread.problem;
  std::memcpy(s.spread.d.bytes.data(), s.layout.starts.data(), 3 * 8);  // valid starts, in D
  p.a_row_starts = TensorView::contiguous(s.spread.d.view.data, DType::kInt64, {3});
  EXPECT_EQ(status_of(p, "a_row_starts"), Status::kInvalidArgument);
  // other kinds
  GemmCase kg;
  kg.kind = GroupedGemmKind::kKGrouped;
  kg.transpose_a = true, kg.transpose_b = false;
  kg.group_rows = {4, 6};
  kg.m = 8, kg.n = 6;
  GemmFixture k = make_fixture(kg);
  std::vector<int64_t> two = {0, 4};
  k.problem.a_row_starts = TensorView::contiguous(two.data(), DType::kInt64, {2});
  EXPECT_EQ(status_of(k.problem, "a_row_starts"), Status::kUnsupported);
  GemmCase bt;
  bt.kind = GroupedGemmKind::kBatched;
  bt.batch_count = 2;
  bt.m = 4, bt.n = 8, bt.k = 8;
  GemmFixture b = make_fixture(bt);
  b.problem.a_row_starts = TensorView::contiguous(two.data(), DType::kInt64, {2});
  EXPECT_EQ(status_of(b.problem, "a_row_starts"), Status::kUnsupported);
}

}  // namespace
}  // namespace tessera::test
