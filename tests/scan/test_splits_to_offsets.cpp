// splits_to_offsets(_multi) on the CPU against the plain oracle loop: sizes around the tile and
// block sizes, zero groups, strides {0, 1, 7, K, K+17}, mixed int32/int64 outputs, bulk
// placement, totals past 2^31, overflow and negative splits, any number of outputs.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "scan/scan_cases.h"
#include "tessera/core/status.h"

namespace tessera {
namespace {

using testing::mixed_specs;
using testing::oracle_offsets;
using testing::random_splits;
using testing::run_scan;

void expect_matches_oracle(const std::vector<int64_t>& splits, DType splits_dtype,
                           const std::vector<OffsetsSpec>& specs, const std::string& label) {
  const auto outs = run_scan(Device::cpu(), splits, splits_dtype, specs);
  ASSERT_EQ(outs.size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const auto want = oracle_offsets(splits, specs[k]);
    ASSERT_EQ(outs[k].size(), want.size()) << label << " output " << k;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(outs[k][i], want[i]) << label << " output " << k << " ("
                                     << testing::describe(specs[k]) << ") entry " << i;
    }
  }
}

TEST(SplitsToOffsets, SizesStridesAndDtypesMatchTheOracle) {
  for (int64_t n : {1, 4, 255, 256, 257, 1024, 2047, 2048, 2049, 100000}) {
    const int64_t k = n > 4096 ? 64 : 4096;
    const int64_t max_split = n > 4096 ? 100 : 256;
    const auto splits = random_splits(n, max_split, static_cast<uint32_t>(n));
    for (DType dt : {DType::kInt32, DType::kInt64}) {
      expect_matches_oracle(splits, dt, mixed_specs(k),
                            "N=" + std::to_string(n) + " splits " + dtype_name(dt));
    }
  }
}

TEST(SplitsToOffsets, ZeroGroupsAnywhereAndEverywhere) {
  const std::vector<OffsetsSpec> specs = mixed_specs(128);
  expect_matches_oracle({0, 3, 5}, DType::kInt32, specs, "zero first");
  expect_matches_oracle({3, 0, 5}, DType::kInt32, specs, "zero middle");
  expect_matches_oracle({3, 5, 0}, DType::kInt32, specs, "zero last");
  expect_matches_oracle(std::vector<int64_t>(300, 0), DType::kInt64, specs, "all zero");
  expect_matches_oracle({}, DType::kInt64, specs, "no groups");
  const auto outs = run_scan(Device::cpu(), {}, DType::kInt32, specs);
  for (size_t k = 0; k < specs.size(); ++k) {
    EXPECT_EQ(outs[k].size(), specs[k].leading_zero ? 1u : 0u) << k;
  }
}

TEST(SplitsToOffsets, BulkAllocationAlignsEveryOutputTo16Bytes) {
  // Odd lengths with int32 outputs make unaligned packing likely if it were not enforced.
  const std::vector<OffsetsSpec> specs = {{1, true, DType::kInt32, 1},  {3, false, DType::kInt64, 1},
                                          {5, false, DType::kInt32, 1}, {1, true, DType::kInt32, 1},
                                          {7, true, DType::kInt64, 1},  {0, false, DType::kInt32, 1}};
  for (int64_t n : {0, 1, 2, 3, 5, 255}) {
    OffsetsBundle b = allocate_offsets(n, specs, Device::cpu());
    ASSERT_EQ(b.outputs.size(), specs.size());
    ASSERT_EQ(static_cast<int64_t>(b.storage.bytes()), offsets_storage_bytes(n, specs));
    int64_t end = 0;
    for (size_t k = 0; k < specs.size(); ++k) {
      EXPECT_EQ(b.byte_offsets[k] % 16, 0) << "n " << n << " output " << k;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.outputs[k].data) % 16, 0u) << k;
      EXPECT_GE(b.byte_offsets[k], end) << "output " << k << " overlaps the previous one";
      EXPECT_EQ(b.outputs[k].dtype, specs[k].dtype);
      EXPECT_EQ(b.outputs[k].shape[0], offsets_length(n, specs[k]));
      end = b.byte_offsets[k] + b.outputs[k].nbytes();
    }
    EXPECT_LE(end, static_cast<int64_t>(b.storage.bytes()));
  }
}

TEST(SplitsToOffsets, TotalsPast2To31WorkInInt64) {
  const int64_t big = int64_t{1} << 30;
  const std::vector<int64_t> splits = {big, big, 0, big, big + 5, big};  // total ~5.4e9
  const std::vector<OffsetsSpec> specs = {{1, true, DType::kInt64, 1},
                                          {4096, false, DType::kInt64, 1},
                                          {1, false, DType::kInt64, 128}};
  expect_matches_oracle(splits, DType::kInt64, specs, "int64 splits past 2^31");
  // int32 splits whose scaled offsets pass 2^31.
  expect_matches_oracle({1 << 20, 1 << 20, 7}, DType::kInt32, {{7168, true, DType::kInt64, 1}},
                        "int32 splits, stride 7168");
}

TEST(SplitsToOffsets, Int32OverflowThrowsNamingTheOutput) {
  std::vector<int64_t> splits = {1 << 20, 1 << 20, 3};
  const std::vector<OffsetsSpec> specs = {{1, true, DType::kInt32, 1},
                                          {4096, false, DType::kInt32, 1},
                                          {4096, false, DType::kInt64, 1}};
  try {
    run_scan(Device::cpu(), splits, DType::kInt32, specs);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("output 1"), std::string::npos) << e.what();
  }
  // Exactly INT32_MAX fits; one more does not.
  const int64_t max32 = std::numeric_limits<int32_t>::max();
  const std::vector<OffsetsSpec> one = {{1, false, DType::kInt32, 1}};
  EXPECT_EQ(run_scan(Device::cpu(), {max32 - 5, 5}, DType::kInt64, one)[0].back(), max32);
  EXPECT_THROW(run_scan(Device::cpu(), {max32 - 5, 6}, DType::kInt64, one), Error);
  // Padding can push an int32 output over.
  EXPECT_THROW(run_scan(Device::cpu(), {max32 - 5, 1}, DType::kInt64, {{1, false, DType::kInt32, 16}}),
               Error);
  // int64 overflow of the sum itself.
  const int64_t max64 = std::numeric_limits<int64_t>::max();
  EXPECT_THROW(run_scan(Device::cpu(), {max64, 1}, DType::kInt64, {{0, false, DType::kInt64, 1}}),
               Error);
}

TEST(SplitsToOffsets, NegativeSplitThrows) {
  try {
    run_scan(Device::cpu(), {4, 2, -1, 3}, DType::kInt32, {{1, true, DType::kInt64, 1}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("splits[2]"), std::string::npos) << e.what();
  }
}

TEST(SplitsToOffsets, TotalBoundIsChecked) {
  ScanOptions options;
  options.total_bound = 10;
  EXPECT_NO_THROW(run_scan(Device::cpu(), {4, 6}, DType::kInt32, {{1, true, DType::kInt32, 1}},
                           options));
  try {
    run_scan(Device::cpu(), {4, 7}, DType::kInt32, {{1, true, DType::kInt32, 1}}, options);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kOutOfRange);
  }
}

TEST(SplitsToOffsets, ManyMoreOutputsThanOneLaunchTakes) {
  std::vector<OffsetsSpec> specs;
  for (int k = 0; k < 3 * kScanOutputsPerLaunch + 5; ++k) {
    specs.push_back({k, k % 2 == 0, k % 3 == 0 ? DType::kInt32 : DType::kInt64,
                     k % 5 == 0 ? 8 : (k % 7 == 0 ? 32 : 1)});
  }
  expect_matches_oracle(random_splits(300, 64, 5), DType::kInt32, specs, "53 outputs");
}

TEST(SplitsToOffsets, SingleOutputFormPicksLeadingZeroFromLength) {
  const std::vector<int32_t> splits = {2, 0, 5};
  int64_t ends[3] = {};
  int32_t starts[4] = {-1, -1, -1, -1};
  auto sv = TensorView::contiguous(const_cast<int32_t*>(splits.data()), DType::kInt32, {3});
  splits_to_offsets(sv, TensorView::contiguous(ends, DType::kInt64, {3}));
  splits_to_offsets(sv, TensorView::contiguous(starts, DType::kInt32, {4}), 10);
  EXPECT_EQ(std::vector<int64_t>(ends, ends + 3), (std::vector<int64_t>{2, 2, 7}));
  EXPECT_EQ(std::vector<int32_t>(starts, starts + 4), (std::vector<int32_t>{0, 20, 20, 70}));
  EXPECT_THROW(splits_to_offsets(sv, TensorView::contiguous(ends, DType::kInt64, {2})), Error);
}

TEST(SplitsToOffsets, BadArgumentsAreClearErrors) {
  int32_t s[3] = {1, 2, 3};
  int64_t o[4] = {};
  float f[3] = {};
  auto sv = TensorView::contiguous(s, DType::kInt32, {3});
  auto out = TensorView::contiguous(o, DType::kInt64, {4});
  const OffsetsSpec lead{1, true, DType::kInt64, 1};
  const OffsetsSpec ends{1, false, DType::kInt64, 1};
  auto call = [&](const TensorView& splits, const OffsetsSpec& spec, const TensorView& v) {
    splits_to_offsets_multi(splits, std::span<const OffsetsSpec>(&spec, 1),
                            std::span<const TensorView>(&v, 1));
  };
  EXPECT_NO_THROW(call(sv, lead, out));
  EXPECT_THROW(call(sv, ends, out), Error);                                         // length
  EXPECT_THROW(call(TensorView::contiguous(f, DType::kFloat32, {3}), lead, out), Error);  // dtype
  EXPECT_THROW(call(sv, {1, true, DType::kInt32, 1}, out), Error);                   // spec dtype
  EXPECT_THROW(call(sv, {-1, true, DType::kInt64, 1}, out), Error);                  // stride
  EXPECT_THROW(call(sv, {1, true, DType::kInt64, 0}, out), Error);                   // align
  EXPECT_THROW(call(sv, {1, true, DType::kFloat32, 1}, out), Error);
  EXPECT_THROW(call(TensorView::contiguous(s, DType::kInt32, {3}, Device::cuda(0)), lead, out),
               Error);  // devices differ (or no CUDA)
  EXPECT_THROW(splits_to_offsets_multi(sv, std::span<const OffsetsSpec>(&lead, 1),
                                       std::span<const TensorView>()),
               Error);  // counts differ
  try {
    call(sv, ends, out);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kShapeMismatch);
  }
}

TEST(SplitsToOffsets, ErrorFlagText) {
  EXPECT_EQ(scan_error_string(0), "none");
  EXPECT_EQ(scan_error_string(3), "negative split | offset overflows its output dtype");
  EXPECT_NO_THROW(check_scan_error_flag(0, "test"));
  try {
    check_scan_error_flag(static_cast<int32_t>(ScanError::kNegativeSplit), "test");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
  }
  try {
    check_scan_error_flag(static_cast<int32_t>(ScanError::kTotalPastBound), "test");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kOutOfRange);
  }
}

}  // namespace
}  // namespace tessera
