// Grouped GEMM with an output that overlaps an input: refused by can_implement (kInvalidArgument,
// the reason naming D, the input and both byte ranges) whichever input D overlaps (A, B, bias,
// offsets, group_alpha, a quantized operand's data or scales), with beta = 0 or 1; run throws the
// same status and writes nothing. Byte ranges count only what the problem reads or writes: D
// and A in one allocation but apart, A's rows past the capacity under D, and an empty D are
// accepted, and give the result of the same problem on separate buffers.
#include <gtest/gtest.h>

#include <cstring>

#include "gemm/gemm_case.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::test {
namespace {

// small_m_grouped_case with a bias and group_alpha: D (10, 8), A (10, 12), B (3, 8, 12).
GemmCase base_case() {
  GemmCase c = small_m_grouped_case("overlap");
  c.bias = c.group_alpha = true;
  return c;
}

// D (rows, 8) FP32 at `at`.
TensorView d_at(void* at, int64_t rows = 10) {
  return TensorView::contiguous(at, DType::kFloat32, {rows, 8});
}

// can_implement refuses with kInvalidArgument naming `input`; run throws the same; the bytes
// of every buffer of `f` are unchanged.
void expect_overlap_refused(GemmFixture& f, const std::string& input) {
  const GemmFixture before = copy_of(f);
  std::string reason;
  EXPECT_EQ(can_implement(f.problem, &reason), Status::kInvalidArgument) << reason;
  EXPECT_NE(reason.find("D overlaps " + input), std::string::npos) << reason;
  try {
    grouped_gemm(f.problem);
    ADD_FAILURE() << "run accepted D overlapping " << input;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
  }
  EXPECT_EQ(f.a.bytes, before.a.bytes);
  EXPECT_EQ(f.b.bytes, before.b.bytes);
  EXPECT_EQ(f.bias.bytes, before.bias.bytes);
  EXPECT_EQ(f.offsets.bytes, before.offsets.bytes);
  EXPECT_EQ(f.group_alpha.bytes, before.group_alpha.bytes);
}

TEST(GroupedGemmOverlap, DIsA) {
  GemmFixture f = make_fixture(base_case());
  f.problem.d = d_at(f.a.bytes.data());  // A: 10 x 12 floats, D: 10 x 8
  expect_overlap_refused(f, "A");
}

TEST(GroupedGemmOverlap, DStartsInsideB) {
  GemmFixture f = make_fixture(base_case());
  f.problem.d = d_at(f.b.bytes.data() + 400);  // B: 3 x 8 x 12 floats = 1152 bytes
  expect_overlap_refused(f, "B");
}

TEST(GroupedGemmOverlap, DEndsInsideBias) {
  GemmCase c = base_case();
  GemmFixture f = make_fixture(c);
  // bias (3, 8) placed at D's row 8: D's rows 8 and 9 are bias rows 0 and 1.
  std::vector<float> storage(10 * 8 + 24, 0.0f);
  std::memcpy(storage.data() + 8 * 8, f.bias.bytes.data(), f.bias.bytes.size());
  f.problem.bias = TensorView::contiguous(storage.data() + 8 * 8, DType::kFloat32, {3, 8});
  f.problem.d = d_at(storage.data());
  expect_overlap_refused(f, "bias");
}

TEST(GroupedGemmOverlap, DOverOffsetsOrGroupAlpha) {
  GemmFixture f = make_fixture(base_case());
  std::vector<float> storage(10 * 8, 0.0f);
  std::memcpy(storage.data(), f.offsets.bytes.data(), f.offsets.bytes.size());
  f.problem.group_offsets = TensorView::contiguous(storage.data(), DType::kInt64, {4});
  f.problem.d = d_at(storage.data());
  expect_overlap_refused(f, "group_offsets");

  GemmFixture g = make_fixture(base_case());
  std::memcpy(storage.data() + 40, g.group_alpha.bytes.data(), g.group_alpha.bytes.size());
  g.problem.group_alpha = TensorView::contiguous(storage.data() + 40, DType::kFloat32, {3});
  g.problem.d = d_at(storage.data());
  expect_overlap_refused(g, "group_alpha");
}

// beta = 1 reads and writes D by design; D over A is refused all the same.
TEST(GroupedGemmOverlap, MainGradAccumulationStillRefusesDOverA) {
  GemmCase c = base_case();
  c.beta = 1.0f;
  GemmFixture f = make_fixture(c);
  std::string reason;
  EXPECT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;  // D read and written
  f.problem.d = d_at(f.a.bytes.data());
  expect_overlap_refused(f, "A");
}

TEST(GroupedGemmOverlap, QuantizedOperandBuffers) {
  GemmCase c = base_case();
  c.bias = c.group_alpha = false;
  GemmFixture f = make_fixture(c);
  QuantizerConfig cfg = make_config(ScalingMode::kMXFP8);
  cfg.columnwise = true;
  Quantizer quantizer(cfg);
  QuantizedTensor qa(cfg, 10, 12, Device::cpu()), qb(cfg, 24, 12, Device::cpu());
  quantizer.quantize(f.a.view, qa);
  quantizer.quantize(TensorView::contiguous(f.b.bytes.data(), DType::kFloat32, {24, 12}), qb);
  f.problem.a = GemmOperand::from_quantized(qa.view(), false);
  f.problem.b = GemmOperand::from_quantized(qb.view(), false);
  std::string reason;
  ASSERT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
  std::vector<float> storage(10 * 8 + 64, 0.0f);
  // A's rowwise E8M0 scales (10 x 1 bytes) copied under D's second row.
  std::memcpy(storage.data() + 8, qa.view().scale_inv.data, 10);
  f.problem.a.quantized.scale_inv.data = storage.data() + 8;
  f.problem.d = d_at(storage.data());
  expect_overlap_refused(f, "A.scale_inv");
  // B's columnwise copy is not read (its rowwise one is): D over it is accepted.
  GemmFixture g = make_fixture(c);
  g.problem.a = GemmOperand::from_quantized(qa.view(), false);
  g.problem.b = GemmOperand::from_quantized(qb.view(), false);
  std::vector<float> unread(10 * 8, 0.0f);  // 320 bytes >= B's 24 x 12 columnwise codes
  std::memcpy(unread.data(), qb.view().columnwise_data.data, 24 * 12);
  g.problem.b.quantized.columnwise_data.data = unread.data();
  g.problem.d = d_at(unread.data());
  EXPECT_EQ(can_implement(g.problem, &reason), Status::kOk) << reason;
}

// Runs `f` and returns D's bytes.
std::vector<uint8_t> d_bytes_after_run(const GemmFixture& f) {
  grouped_gemm(f.problem);
  const auto* p = static_cast<const uint8_t*>(f.problem.d.data);
  return {p, p + f.problem.d.nbytes()};
}

// D and A in one allocation, D right after A: no byte in common, the same result as apart.
TEST(GroupedGemmOverlap, AdjacentBuffersAreAccepted) {
  GemmFixture apart = make_fixture(base_case());
  GemmFixture f = copy_of(apart);
  std::vector<uint8_t> storage(f.a.bytes.size() + f.d.bytes.size());
  std::memcpy(storage.data(), f.a.bytes.data(), f.a.bytes.size());
  std::memcpy(storage.data() + f.a.bytes.size(), f.d.bytes.data(), f.d.bytes.size());
  f.problem.a.dense.data = storage.data();
  f.problem.d = d_at(storage.data() + f.a.bytes.size());
  std::string reason;
  ASSERT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
  EXPECT_EQ(d_bytes_after_run(f), d_bytes_after_run(apart));
}

// Capacity 8 of A's 10 rows: rows 8 and 9 of A are never read, so D may start on them.
TEST(GroupedGemmOverlap, RowsPastTheCapacityAreNotRead) {
  GemmFixture apart = make_fixture(base_case());
  apart.problem.max_total_rows = 8;
  GemmFixture f = copy_of(apart);
  const size_t a_read = 8 * 12 * sizeof(float);
  std::vector<uint8_t> storage(a_read + f.d.bytes.size());
  std::memcpy(storage.data(), f.a.bytes.data(), a_read);
  std::memcpy(storage.data() + a_read, f.d.bytes.data(), f.d.bytes.size());
  f.problem.a.dense.data = storage.data();
  f.problem.d = d_at(storage.data() + a_read);  // over A's rows 8 and 9 (A ends 2 rows later)
  std::string reason;
  ASSERT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
  EXPECT_EQ(d_bytes_after_run(f), d_bytes_after_run(apart));
  // One row earlier, D's first row is A's row 7, which is read.
  f.problem.d = d_at(storage.data() + a_read - 12 * sizeof(float));
  EXPECT_EQ(can_implement(f.problem, &reason), Status::kInvalidArgument) << reason;
}

// An empty D writes nothing: its pointer may be anything, A's included.
TEST(GroupedGemmOverlap, EmptyOutputOverlapsNothing) {
  GemmCase c = base_case();
  c.n = 0;
  GemmFixture f = make_fixture(c);
  f.problem.d = TensorView::contiguous(f.a.bytes.data(), DType::kFloat32, {10, 0});
  f.problem.bias = TensorView::contiguous(f.bias.bytes.data(), DType::kFloat32, {3, 0});
  std::string reason;
  EXPECT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
}

}  // namespace
}  // namespace tessera::test
