// Expert-parallel routing ops on CUDA: every output byte-equal to the CPU (which the oracle
// checks in test_moe_routing.cpp) on the same cases — dropless and capacity, every dtype, fused
// quantization — the device error flag for expert indices out of range, and a CUDA graph of
// capacity-mode routing + permute replayed while the routing changes. Skips without a GPU.
#include <gtest/gtest.h>

#include "nn/moe_routing_cases.h"
#include "tessera/core/status.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tessera {
namespace {

using moe_testing::MoeCase;

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

void check_cuda_equals_cpu(const MoeCase& c) {
  const auto in = moe_testing::make_inputs(c);
  const auto cpu = moe_testing::run_ops(c, in, Device::cpu());
  int32_t flag = -1;
  const auto gpu = moe_testing::run_ops(c, in, Device::cuda(0), &flag);
  EXPECT_EQ(flag, 0) << c.name();
  moe_testing::expect_same(gpu, cpu, c.name());
}

TEST(MoeRoutingCuda, EqualsCpu) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 7;
  for (int64_t t : {0, 1, 37, 1000}) {
    for (int64_t k : {1, 2, 8}) {
      for (int64_t e : {1, 8, 256}) {
        for (int64_t cap : {-1, 0, 32}) {
          MoeCase c;
          c.tokens = t;
          c.top_k = k;
          c.experts = e;
          c.hidden = seed % 4 == 0 ? 7 : (seed % 4 == 1 ? 130 : (seed % 4 == 2 ? 96 : 2056));
          c.align = 16;
          c.capacity = cap;
          c.index_dtype = seed % 2 ? DType::kInt32 : DType::kInt64;
          c.map_dtype = seed % 3 ? DType::kInt32 : DType::kInt64;
          c.seed = seed++;
          check_cuda_equals_cpu(c);
        }
      }
    }
  }
}

// The routing's scans at sizes the loops above do not reach: more chunks of 256 pairs than a
// scan warp's run holds (up to 157 chunks), expert counts that are not a multiple of 32 and more
// experts than one round of the offsets scan (up to 3000), dropless and capacity.
TEST(MoeRoutingCuda, ManyChunksAndExpertsEqualCpu) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 300;
  struct Size {
    int64_t tokens, top_k, experts, capacity;
  };
  for (const Size z : {Size{5000, 8, 300, -1}, Size{5000, 8, 300, 48}, Size{4096, 8, 3000, -1},
                       Size{2100, 6, 1000, 16}, Size{40000, 1, 33, -1}}) {
    MoeCase c;
    c.tokens = z.tokens;
    c.top_k = z.top_k;
    c.experts = z.experts;
    c.capacity = z.capacity;
    c.hidden = 8;
    c.align = 16;
    c.index_dtype = seed % 2 ? DType::kInt32 : DType::kInt64;
    c.seed = seed++;
    check_cuda_equals_cpu(c);
  }
}

TEST(MoeRoutingCuda, FusedQuantizationEqualsCpu) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 70;
  for (ScalingMode m : {ScalingMode::kRowwise, ScalingMode::kBlock1x128, ScalingMode::kMXFP8}) {
    for (DType el : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      for (DType xd : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
        for (int64_t h : {32, 300, 7168, 8200}) {
          MoeCase c;
          c.tokens = h > 1000 ? 64 : 200;
          c.top_k = 4;
          c.experts = 16;
          c.hidden = h;
          c.quant = m;
          c.element = el;
          c.x_dtype = xd;
          c.align = 32;
          c.floor_rule = seed % 2 == 1;
          c.seed = seed++;
          check_cuda_equals_cpu(c);
        }
      }
    }
  }
}

#if defined(TESSERA_WITH_CUDA)
TEST(MoeRoutingCuda, OutOfRangeIndexRaisesTheFlagAndIsDropped) {
  SKIP_WITHOUT_GPU();
  MoeCase c;
  c.tokens = 8;
  c.experts = 4;
  auto in = moe_testing::make_inputs(c);
  in.indices[3] = 4;
  int32_t flag = 0;
  const auto gpu = moe_testing::run_ops(c, in, Device::cuda(0), &flag);
  EXPECT_EQ(flag, static_cast<int32_t>(MoeRoutingError::kExpertOutOfRange));
  EXPECT_EQ(gpu.slot_map[3], -1);
}

TEST(MoeRoutingCuda, GraphReplayFollowsNewRouting) {
  SKIP_WITHOUT_GPU();
  MoeCase c;
  c.tokens = 512;
  c.top_k = 4;
  c.experts = 32;
  c.hidden = 256;
  c.align = 32;
  c.capacity = 64;
  c.quant = ScalingMode::kMXFP8;
  const int64_t t_n = c.tokens, k = c.top_k, h = c.hidden, rows = c.rows();
  const Device dev = Device::cuda(0);
  auto in = moe_testing::make_inputs(c);
  using moe_testing::DeviceArray;
  DeviceArray idx(in.indices.data(), t_n * k * 8, DType::kInt64, {t_n, k}, dev);
  DeviceArray x(in.x.data(), t_n * h * 2, DType::kBFloat16, {t_n, h}, dev);
  DeviceArray counts(nullptr, c.experts * 8, DType::kInt64, {c.experts}, dev);
  DeviceArray offs(nullptr, (c.experts + 1) * 8, DType::kInt64, {c.experts + 1}, dev);
  DeviceArray drop(nullptr, 8, DType::kInt64, {1}, dev);
  DeviceArray slot(nullptr, t_n * k * 4, DType::kInt32, {t_n, k}, dev);
  DeviceArray rp(nullptr, rows * 4, DType::kInt32, {rows}, dev);
  DeviceArray flag(nullptr, 4, DType::kInt32, {1}, dev);
  flag.buf.fill_bytes(0);
  MoeRoutingOptions opt = c.options();
  opt.error_flag = flag.view.as<int32_t>();
  const int64_t wsb = moe_routing_workspace_bytes(t_n, k, opt, dev);
  DeviceArray ws(nullptr, wsb, DType::kUInt8, {wsb}, dev);
  QuantizedTensor q(c.config(), rows, h, dev);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  moe_routing(idx.view, opt, {counts.view, offs.view, slot.view, rp.view, drop.view}, ws.view,
              Stream{stream});
  moe_permute_quantize(x.view, rp.view, k, q.view(), Stream{stream});
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (uint32_t round = 0; round < 3; ++round) {
    MoeCase now = c;
    now.map_dtype = DType::kInt32;
    now.seed = 300 + round;
    auto fresh = moe_testing::make_inputs(now);
    fresh.x = in.x;
    copy_bytes(idx.buf.data(), dev, fresh.indices.data(), Device::cpu(), t_n * k * 8);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const auto want = moe_testing::oracle(now, fresh);
    EXPECT_EQ(moe_testing::as_i64(slot.host(t_n * k * 4), DType::kInt32), want.slot_map);
    EXPECT_EQ(moe_testing::as_i64(drop.host(8), DType::kInt64)[0], want.dropped);
    moe_testing::Bytes data(static_cast<size_t>(q.view().data.nbytes()));
    copy_bytes(data.data(), Device::cpu(), q.view().data.data, dev, data.size());
    EXPECT_EQ(moe_testing::first_mismatch(data, want.permuted), -1) << "round " << round;
  }
  EXPECT_EQ(moe_testing::as_i64(flag.host(4), DType::kInt32)[0], 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}
#endif

}  // namespace
}  // namespace tessera
