// Token padding on CUDA: byte-equal to the CPU (capacity rows included), device and host splits,
// every copy width, the error flag, and a CUDA graph replayed after the device splits change.
#include <gtest/gtest.h>

#include <algorithm>

#include "nn/test_token_padding_cases.h"
#include "tessera/core/status.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tessera {
namespace {

using testing::kSentinel;
using testing::oracle_pad;
using testing::PaddingBuffers;
using testing::PaddingCase;
using testing::random_bytes;
using testing::random_group_sizes;
using testing::same_rows;

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

// Runs pad then unpad on the CPU and on CUDA (splits on `splits_device`) and compares every
// byte of every output buffer.
void check_cuda_equals_cpu(const PaddingCase& c, Device splits_device, uint32_t seed) {
  const auto x = random_bytes(c.rows_cap() * c.row_bytes(), seed);
  PaddingBuffers cpu(c, Device::cpu(), Device::cpu(), x);
  PaddingBuffers gpu(c, Device::cuda(0), splits_device, x);
  pad_tokens_from_splits(cpu.xv, cpu.sv, c.align, cpu.xpv, cpu.ov, cpu.pov);
  unpad_tokens(cpu.xpv, cpu.ov, cpu.pov, cpu.xbv);
  Buffer flag(4, Device::cuda(0));
  flag.fill_bytes(0);
  pad_tokens_from_splits(gpu.xv, gpu.sv, c.align, gpu.xpv, gpu.ov, gpu.pov,
                         splits_device.is_cuda() ? flag.as<int32_t>() : nullptr);
  unpad_tokens(gpu.xpv, gpu.ov, gpu.pov, gpu.xbv);
  const int64_t rb = c.row_bytes();
  ASSERT_TRUE(same_rows(PaddingBuffers::host(gpu.x_padded), PaddingBuffers::host(cpu.x_padded), rb))
      << c.name() << " pad";
  ASSERT_TRUE(same_rows(PaddingBuffers::host(gpu.x_padded), oracle_pad(c, x), rb)) << c.name();
  ASSERT_TRUE(same_rows(PaddingBuffers::host(gpu.x_back), PaddingBuffers::host(cpu.x_back), rb))
      << c.name() << " unpad";
  ASSERT_EQ(PaddingBuffers::host_i64(gpu.offsets), PaddingBuffers::host_i64(cpu.offsets));
  ASSERT_EQ(PaddingBuffers::host_i64(gpu.padded_offsets),
            PaddingBuffers::host_i64(cpu.padded_offsets));
  int32_t flag_value = -1;
  copy_bytes(&flag_value, Device::cpu(), flag.data(), flag.device(), 4);
  ASSERT_EQ(flag_value, 0) << c.name();
}

TEST(TokenPaddingCuda, EqualsCpuWithDeviceAndHostSplits) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 1;
  for (int64_t n : {1, 4, 33, 256, 3000}) {
    for (int64_t align : {1, 16, 128}) {
      // K chosen so rows take every copy width: 2, 4, 8 and 16 bytes.
      for (auto [dt, k] : {std::pair{DType::kBFloat16, int64_t{3}}, {DType::kFloat32, int64_t{1}},
                           {DType::kFloat16, int64_t{4}}, {DType::kFloat32, int64_t{64}}}) {
        const PaddingCase c{random_group_sizes(n, 40, seed), align, k, dt, 5};
        check_cuda_equals_cpu(c, Device::cuda(0), seed);
        check_cuda_equals_cpu(c, Device::cpu(), seed);
        ++seed;
      }
    }
  }
  check_cuda_equals_cpu({random_group_sizes(32, 300, 9), 128, 7168, DType::kBFloat16, 0},
                        Device::cuda(0), 9);
  check_cuda_equals_cpu({{0, 0, 0}, 16, 8, DType::kFloat32, 4}, Device::cuda(0), 2);
}

#if defined(TESSERA_WITH_CUDA)
TEST(TokenPaddingCuda, SplitsPastCapacityRaiseTheFlagAndStayInBounds) {
  SKIP_WITHOUT_GPU();
  const PaddingCase c{{6, 6}, 16, 8, DType::kFloat32, 0};  // 12 live rows
  const auto x = random_bytes(c.rows_cap() * c.row_bytes(), 3);
  PaddingBuffers b(c, Device::cuda(0), Device::cuda(0), x);
  const std::vector<int64_t> too_many = {6, 9};  // 15 rows > the 12 x holds
  copy_bytes(b.splits.data(), Device::cuda(0), too_many.data(), Device::cpu(), 16);
  Buffer flag(4, Device::cuda(0));
  flag.fill_bytes(0);
  pad_tokens_from_splits(b.xv, b.sv, c.align, b.xpv, b.ov, b.pov, flag.as<int32_t>());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int32_t v = 0;
  copy_bytes(&v, Device::cpu(), flag.data(), flag.device(), 4);
  EXPECT_EQ(v, static_cast<int32_t>(ScanError::kTotalPastBound));
}

TEST(TokenPaddingCuda, GraphReplayFollowsNewDeviceSplits) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 64, k = 256, align = 128, rows_cap = 4096;
  PaddingCase c{std::vector<int64_t>(n, 0), align, k, DType::kBFloat16, 0};
  c.extra_rows = rows_cap;  // with all-zero splits: capacity = rows_cap
  const auto x = random_bytes(rows_cap * c.row_bytes(), 5);
  PaddingBuffers b(c, Device::cuda(0), Device::cuda(0), x);
  Buffer flag(4, Device::cuda(0));
  flag.fill_bytes(0);

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  pad_tokens_from_splits(b.xv, b.sv, align, b.xpv, b.ov, b.pov, flag.as<int32_t>(),
                         Stream{stream});
  unpad_tokens(b.xpv, b.ov, b.pov, b.xbv, Stream{stream});
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (uint32_t round = 0; round < 3; ++round) {
    PaddingCase now = c;
    now.splits = random_group_sizes(n, 120, 50 + round);  // total <= 64 · 120 < rows_cap
    now.extra_rows = rows_cap - now.total();
    ASSERT_EQ(now.padded_cap(), c.padded_cap());
    b.x_padded.fill_bytes(kSentinel);
    b.x_back.fill_bytes(kSentinel);
    copy_bytes(b.splits.data(), Device::cuda(0), now.splits.data(), Device::cpu(), n * 8);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_TRUE(same_rows(PaddingBuffers::host(b.x_padded), oracle_pad(now, x), now.row_bytes()))
        << "round " << round;
    auto want = x;
    std::fill(want.begin() + now.total() * now.row_bytes(), want.end(), kSentinel);
    ASSERT_TRUE(same_rows(PaddingBuffers::host(b.x_back), want, now.row_bytes()))
        << "round " << round;
  }
  int32_t v = -1;
  copy_bytes(&v, Device::cpu(), flag.data(), flag.device(), 4);
  EXPECT_EQ(v, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}
#endif

}  // namespace
}  // namespace tessera
