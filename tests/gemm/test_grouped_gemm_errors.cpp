// Grouped GEMM bad input: each mistake gives its specific status from can_implement, a reason
// naming the argument, and the same status as an Error from run(); D is never written.
#include <gtest/gtest.h>

#include "gemm/gemm_case.h"

namespace tessera::test {
namespace {

GemmCase base_case() { return small_m_grouped_case("errors"); }

// can_implement gives `want` with a reason mentioning `needle`; run throws the same status and
// leaves D untouched.
void expect_status(GemmFixture& f, Status want, const std::string& needle) {
  std::string reason;
  EXPECT_EQ(can_implement(f.problem, &reason), want) << reason;
  EXPECT_NE(reason.find(needle), std::string::npos) << "reason: " << reason;
  try {
    grouped_gemm(f.problem);
    ADD_FAILURE() << "run accepted a problem can_implement rejects";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), want) << e.what();
  }
  EXPECT_EQ(f.d.bytes, f.d_initial) << "D was written";
}

TEST(GroupedGemmErrors, ShapeMismatchOfContractionDim) {
  GemmFixture f = make_fixture(base_case());
  // B (G, N, 11) against A's K = 12.
  f.problem.b.dense = TensorView::contiguous(f.b.bytes.data(), DType::kFloat32, {3, 8, 11});
  expect_status(f, Status::kShapeMismatch, "B: contraction dim");
}

TEST(GroupedGemmErrors, GroupCountMismatch) {
  GemmFixture f = make_fixture(base_case());
  f.problem.b.dense = TensorView::contiguous(f.b.bytes.data(), DType::kFloat32, {2, 8, 12});
  expect_status(f, Status::kShapeMismatch, "num_groups");
}

TEST(GroupedGemmErrors, OffsetsPastTheOperand) {
  GemmFixture f = make_fixture(base_case());
  f.offsets.view.as<int64_t>()[3] = 11;  // A has 10 rows
  expect_status(f, Status::kOutOfRange, "group_offsets[3] = 11");
}

TEST(GroupedGemmErrors, OffsetsPastMaxTotalRows) {
  GemmFixture f = make_fixture(base_case());
  f.problem.max_total_rows = 7;  // last offset is 8
  expect_status(f, Status::kOutOfRange, "group_offsets");
}

TEST(GroupedGemmErrors, DecreasingOffsets) {
  GemmFixture f = make_fixture(base_case());
  f.offsets.view.as<int64_t>()[1] = 6;  // 0, 6, 3, 8
  expect_status(f, Status::kInvalidArgument, "non-decreasing");
}

TEST(GroupedGemmErrors, MissingLeadingZero) {
  GemmFixture f = make_fixture(base_case());
  f.offsets.view.as<int64_t>()[0] = 1;
  expect_status(f, Status::kInvalidArgument, "leading 0");
}

TEST(GroupedGemmErrors, WrongOffsetCount) {
  GemmFixture f = make_fixture(base_case());
  f.problem.offsets_format = GroupOffsetsFormat::kEndOffsets;  // wants G = 3, has 4
  expect_status(f, Status::kShapeMismatch, "group_offsets: expected 3");
}

TEST(GroupedGemmErrors, OffsetsOfWrongDType) {
  GemmFixture f = make_fixture(base_case());
  f.problem.group_offsets.dtype = DType::kFloat32;
  expect_status(f, Status::kDTypeMismatch, "group_offsets");
}

TEST(GroupedGemmErrors, OutputTooSmall) {
  GemmFixture f = make_fixture(base_case());
  f.problem.d = TensorView::contiguous(f.d.bytes.data(), DType::kFloat32, {9, 8});  // 10 needed
  expect_status(f, Status::kBufferTooSmall, "D: 9 rows");
}

TEST(GroupedGemmErrors, OutputOfWrongWidth) {
  GemmFixture f = make_fixture(base_case());
  f.problem.d = TensorView::contiguous(f.d.bytes.data(), DType::kFloat32, {5, 16});
  expect_status(f, Status::kShapeMismatch, "D: expected (rows, 8)");
}

TEST(GroupedGemmErrors, WgradOutputWithTooFewGroups) {
  GemmCase c = base_case();
  c.kind = GroupedGemmKind::kKGrouped;
  c.transpose_a = true, c.transpose_b = false;
  c.m = 4;
  GemmFixture f = make_fixture(c);
  f.problem.d = TensorView::contiguous(f.d.bytes.data(), DType::kFloat32, {2, 4, 8});
  expect_status(f, Status::kBufferTooSmall, "groups cannot hold");
}

TEST(GroupedGemmErrors, OperandDTypeNotAccepted) {
  GemmFixture f = make_fixture(base_case());
  f.problem.a.dense.dtype = DType::kInt32;
  expect_status(f, Status::kDTypeMismatch, "A: dtype int32");
}

TEST(GroupedGemmErrors, BetaOneNeedsFp32Output) {
  GemmCase c = base_case();
  c.out_dtype = DType::kBFloat16;
  GemmFixture f = make_fixture(c);
  f.problem.beta = 1.0f;
  expect_status(f, Status::kDTypeMismatch, "beta = 1");
}

TEST(GroupedGemmErrors, BetaOtherThanZeroOrOne) {
  GemmFixture f = make_fixture(base_case());
  f.problem.beta = 0.5f;
  expect_status(f, Status::kUnsupported, "beta");
}

TEST(GroupedGemmErrors, MGroupedWithTransposedA) {
  GemmFixture f = make_fixture(base_case());
  f.problem.transpose_a = true;
  expect_status(f, Status::kUnsupported, "transpose_a");
}

TEST(GroupedGemmErrors, KGroupedNeedsNtLayout) {
  GemmCase c = base_case();
  c.kind = GroupedGemmKind::kKGrouped;
  c.transpose_a = true, c.transpose_b = false;
  c.m = 4;
  GemmFixture f = make_fixture(c);
  f.problem.transpose_b = true;
  expect_status(f, Status::kUnsupported, "K-grouped");
}

TEST(GroupedGemmErrors, BiasOfWrongShape) {
  GemmCase c = base_case();
  c.bias = true;
  GemmFixture f = make_fixture(c);
  f.problem.bias = TensorView::contiguous(f.bias.bytes.data(), DType::kFloat32, {3, 7});
  expect_status(f, Status::kShapeMismatch, "bias");
}

TEST(GroupedGemmErrors, QuantizedTimesDenseIsARecipeMismatch) {
  GemmFixture f = make_fixture(base_case());
  QuantizedTensorView q;
  q.rows = 24, q.cols = 12;
  q.config.mode = ScalingMode::kTensor;
  f.problem.b = GemmOperand::from_quantized(q, false);
  expect_status(f, Status::kDTypeMismatch, "quantized");
}

TEST(GroupedGemmErrors, ConfigOnTheCpuIsRefusedNotIgnored) {
  GemmFixture f = make_fixture(base_case());
  f.problem.config.tile_n = 128;  // the CPU backend has no tiles
  expect_status(f, Status::kInvalidArgument, "config");
}

TEST(GroupedGemmErrors, NonPositiveGroupCount) {
  GemmFixture f = make_fixture(base_case());
  f.problem.num_groups = 0;
  expect_status(f, Status::kInvalidArgument, "num_groups");
}

TEST(GroupedGemmErrors, OperandsOnDifferentDevices) {
  GemmFixture f = make_fixture(base_case());
  f.problem.d.device = Device::cuda(0);
  expect_status(f, Status::kInvalidArgument, "all operands must be on one device");
}

TEST(GroupedGemmErrors, MisalignedOrSmallWorkspace) {
  GemmCase c = base_case();
  c.in_dtype = DType::kFloat16;  // FP32 copies of A and B: a workspace on every machine
  GemmFixture f = make_fixture(c);
  const int64_t need = workspace_size(f.problem);
  ASSERT_GT(need, 0);
  Buffer ws(static_cast<size_t>(need + 256));
  auto* base = static_cast<uint8_t*>(ws.data());
  try {
    run(f.problem, TensorView::contiguous(base + 4, DType::kUInt8, {need}));
    ADD_FAILURE() << "misaligned workspace accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kMisaligned) << e.what();
  }
  try {
    run(f.problem, TensorView::contiguous(base, DType::kUInt8, {need - 1}));
    ADD_FAILURE() << "small workspace accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kBufferTooSmall) << e.what();
  }
  EXPECT_EQ(f.d.bytes, f.d_initial);
  run(f.problem, TensorView::contiguous(base, DType::kUInt8, {need}));
  EXPECT_NE(f.d.bytes, f.d_initial);
}

}  // namespace
}  // namespace tessera::test
