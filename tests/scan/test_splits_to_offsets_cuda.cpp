// splits_to_offsets(_multi) on CUDA: equal to the CPU on every case, the device error flag, the
// host-side int32 proof, and a CUDA graph replayed after the device splits change (no sync).
#include <gtest/gtest.h>

#include <limits>

#include "scan/scan_cases.h"
#include "tessera/core/status.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tessera {
namespace {

using testing::mixed_specs;
using testing::oracle_offsets;
using testing::random_splits;
using testing::run_scan;

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

int64_t sum_of(const std::vector<int64_t>& s) {
  int64_t t = 0;
  for (int64_t v : s) t += v;
  return t;
}

// A device int32 error flag, zeroed.
struct DeviceFlag {
  Buffer buffer{4, Device::cuda(0)};
  DeviceFlag() { buffer.fill_bytes(0); }
  int32_t* ptr() const { return buffer.as<int32_t>(); }
  int32_t read() const {
    int32_t v = 0;
    copy_bytes(&v, Device::cpu(), buffer.data(), buffer.device(), 4);
    return v;
  }
};

void expect_cuda_equals_cpu(const std::vector<int64_t>& splits, DType dt,
                            const std::vector<OffsetsSpec>& specs, const std::string& label) {
  DeviceFlag flag;
  ScanOptions options;
  options.total_bound = sum_of(splits);  // proves the int32 outputs fit
  options.error_flag = flag.ptr();
  const auto gpu = run_scan(Device::cuda(0), splits, dt, specs, options);
  const auto cpu = run_scan(Device::cpu(), splits, dt, specs, options);
  EXPECT_EQ(flag.read(), 0) << label;
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    ASSERT_EQ(gpu[k], cpu[k]) << label << " output " << k << " (" << testing::describe(specs[k])
                              << ")";
    ASSERT_EQ(gpu[k], oracle_offsets(splits, specs[k])) << label << " output " << k;
  }
}

TEST(SplitsToOffsetsCuda, EqualsCpuOnEveryCase) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 4, 255, 256, 257, 1024, 2047, 2048, 2049, 100000}) {
    const int64_t k = n > 4096 ? 64 : 4096;
    const auto splits = random_splits(n, n > 4096 ? 100 : 256, static_cast<uint32_t>(n));
    for (DType dt : {DType::kInt32, DType::kInt64}) {
      expect_cuda_equals_cpu(splits, dt, mixed_specs(k),
                             "N=" + std::to_string(n) + " " + dtype_name(dt));
    }
  }
  const auto specs = mixed_specs(128);
  expect_cuda_equals_cpu({0, 3, 5}, DType::kInt32, specs, "zero first");
  expect_cuda_equals_cpu({3, 0, 5}, DType::kInt32, specs, "zero middle");
  expect_cuda_equals_cpu({3, 5, 0}, DType::kInt32, specs, "zero last");
  expect_cuda_equals_cpu(std::vector<int64_t>(3000, 0), DType::kInt64, specs, "all zero");
  expect_cuda_equals_cpu({}, DType::kInt64, specs, "no groups");
}

TEST(SplitsToOffsetsCuda, ManyOutputsAndTotalsPast2To31) {
  SKIP_WITHOUT_GPU();
  std::vector<OffsetsSpec> specs;
  for (int k = 0; k < 3 * kScanOutputsPerLaunch + 5; ++k) {
    specs.push_back({k, k % 2 == 0, k % 3 == 0 ? DType::kInt32 : DType::kInt64,
                     k % 5 == 0 ? 8 : (k % 7 == 0 ? 32 : 1)});
  }
  expect_cuda_equals_cpu(random_splits(3000, 64, 5), DType::kInt32, specs, "53 outputs");
  const int64_t big = int64_t{1} << 30;
  expect_cuda_equals_cpu({big, big, 0, big, big + 5, big}, DType::kInt64,
                         {{1, true, DType::kInt64, 1}, {4096, false, DType::kInt64, 1},
                          {1, false, DType::kInt64, 128}},
                         "int64 past 2^31");
  expect_cuda_equals_cpu({1 << 20, 1 << 20, 7}, DType::kInt32, {{7168, true, DType::kInt64, 1}},
                         "int32 splits, stride 7168");
}

TEST(SplitsToOffsetsCuda, ErrorFlagReportsNegativeOverflowAndBound) {
  SKIP_WITHOUT_GPU();
  const int32_t kNeg = static_cast<int32_t>(ScanError::kNegativeSplit);
  const int32_t kOver = static_cast<int32_t>(ScanError::kOverflow);
  const int32_t kBound = static_cast<int32_t>(ScanError::kTotalPastBound);
  auto flag_of = [](const std::vector<int64_t>& splits, const std::vector<OffsetsSpec>& specs,
                    int64_t bound) {
    DeviceFlag flag;
    ScanOptions options;
    options.error_flag = flag.ptr();
    options.total_bound = bound;
    run_scan(Device::cuda(0), splits, DType::kInt64, specs, options);
    return flag.read();
  };
  const std::vector<OffsetsSpec> i64 = {{1, true, DType::kInt64, 1}};
  const std::vector<OffsetsSpec> i32 = {{4096, false, DType::kInt32, 1}};
  EXPECT_EQ(flag_of({1, 2, 3}, i64, -1), 0);
  EXPECT_EQ(flag_of({1, -2, 3}, i64, -1), kNeg);
  std::vector<int64_t> late_negative(5000, 1);
  late_negative[4999] = -1;  // in the third tile
  EXPECT_EQ(flag_of(late_negative, i64, -1), kNeg);
  EXPECT_EQ(flag_of({1 << 20, 1 << 20}, i32, -1), kOver);
  EXPECT_EQ(flag_of({(1 << 19) - 1, 1}, i32, -1), kOver);     // 4096 · 2^19 = 2^31: over
  EXPECT_EQ(flag_of({(1 << 19) - 1, 0}, i32, -1), 0);
  EXPECT_EQ(flag_of({1 << 19}, i32, -1), kOver);
  EXPECT_EQ(flag_of({4, 7}, i64, 10), kBound);
  EXPECT_EQ(flag_of({4, 6}, i64, 10), 0);
  EXPECT_EQ(flag_of({std::numeric_limits<int64_t>::max(), 1}, i64, -1), kOver);
  EXPECT_EQ(flag_of({-1, 1 << 20, 1 << 20}, i32, 5), kNeg | kOver | kBound);
  EXPECT_THROW(check_scan_error_flag(flag_of({-1}, i64, -1), "test"), Error);
}

TEST(SplitsToOffsetsCuda, Int32OutputsMustBeProvenOrChecked) {
  SKIP_WITHOUT_GPU();
  const std::vector<OffsetsSpec> i32 = {{1, true, DType::kInt64, 1}, {4096, false, DType::kInt32, 1}};
  ScanOptions none;
  try {
    run_scan(Device::cuda(0), {1, 2}, DType::kInt32, i32, none);
    FAIL() << "an unchecked int32 output on CUDA was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("output 1"), std::string::npos) << e.what();
  }
  ScanOptions proven;
  proven.total_bound = (int64_t{1} << 31) / 4096 - 1;  // 4096 · bound < 2^31
  EXPECT_EQ(run_scan(Device::cuda(0), {1, 2}, DType::kInt32, i32, proven)[1],
            (std::vector<int64_t>{4096, 3 * 4096}));
  ScanOptions too_big;
  too_big.total_bound = (int64_t{1} << 31) / 4096 + 1;
  EXPECT_THROW(run_scan(Device::cuda(0), {1, 2}, DType::kInt32, i32, too_big), Error);
  // int64 outputs need neither.
  EXPECT_NO_THROW(run_scan(Device::cuda(0), {1, 2}, DType::kInt32,
                           {{4096, false, DType::kInt64, 1}}, none));
}

#if defined(TESSERA_WITH_CUDA)
TEST(SplitsToOffsetsCuda, GraphReplayFollowsNewDeviceSplits) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 256;
  const std::vector<OffsetsSpec> specs = {{1, true, DType::kInt64, 1},    {1, false, DType::kInt32, 1},
                                          {7168, true, DType::kInt64, 1}, {2048, false, DType::kInt32, 1},
                                          {1, true, DType::kInt64, 128},  {0, false, DType::kInt32, 1}};
  Buffer splits(n * 4, Device::cuda(0));
  OffsetsBundle bundle = allocate_offsets(n, specs, Device::cuda(0));
  DeviceFlag flag;
  ScanOptions options;
  options.total_bound = 65536;  // the token capacity: proves 2048 · total < 2^31
  options.error_flag = flag.ptr();
  const TensorView sv = TensorView::contiguous(splits.data(), DType::kInt32, {n}, Device::cuda(0));

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  splits_to_offsets_multi(sv, specs, bundle.outputs, options, Stream{stream});
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (uint32_t round = 0; round < 3; ++round) {
    const auto values = random_splits(n, 255, 100 + round);
    const auto bytes = testing::encode_splits(values, DType::kInt32);
    ASSERT_EQ(cudaMemcpy(splits.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (size_t k = 0; k < specs.size(); ++k) {
      std::vector<char> out(static_cast<size_t>(bundle.outputs[k].nbytes()));
      copy_bytes(out.data(), Device::cpu(), bundle.outputs[k].data, Device::cuda(0), out.size());
      ASSERT_EQ(testing::to_int64(out, specs[k].dtype), oracle_offsets(values, specs[k]))
          << "round " << round << " output " << k;
    }
    EXPECT_EQ(flag.read(), 0);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}
#endif

}  // namespace
}  // namespace tessera
