// CUDA-graph capture of the sm90 grouped GEMM (setup kernel included for K-grouped; the forward
// also as a 2-CTA cluster launch): the graph is captured once and replayed with DIFFERENT group
// sizes written into the device offsets between replays; every replay is checked against an FP64
// loop. Nothing in the launch may read the offsets on the host, or the replays would reuse the
// captured sizes. Group sizes are multiples of 8 (16-byte aligned BF16 contraction starts, what
// K-grouped TMA loads need). Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "gemm/cuda/grouped_gemm_sm90.h"
#include "gemm_cuda/gemm_cuda_test_util.h"

namespace tessera::gemm_cuda {
namespace {

using test::DeviceArray;

// BF16 operands as random bits of small normal values; returns decoded doubles.
std::vector<double> random_bf16(int64_t count, std::mt19937& rng, std::vector<uint16_t>& bits) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  bits.resize(count);
  std::vector<double> v(count);
  for (int64_t i = 0; i < count; ++i) {
    bits[i] = bf16::from_float(nd(rng)).bits;
    v[i] = bf16{bits[i]}.to_float();
  }
  return v;
}

double rel_err(const std::vector<double>& ref, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = got[i] - ref[i];
    num += std::isnan(got[i]) ? 1e30 : d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

TEST(GroupedGemmSm90Graph, ReplayWithChangedGroupSizes) {
  if (!test::has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  constexpr int64_t kCap = 640, kN = 192, kK = 136, kM = 136;  // kM: K-grouped output rows
  const std::vector<std::vector<int64_t>> size_sets = {
      {104, 0, 296, 48}, {0, 256, 0, 200}, {0, 0, 0, 0}, {640, 0, 0, 0}};
  constexpr int64_t kG = 4;
  std::mt19937 rng(3);
  std::vector<uint16_t> x_bits, w_bits, dyt_bits, xt_bits;
  const auto x = random_bf16(kCap * kK, rng, x_bits);      // (cap, K) tokens
  const auto w = random_bf16(kG * kN * kK, rng, w_bits);   // (G, N, K)
  const auto dyt = random_bf16(kM * kCap, rng, dyt_bits);  // (M, cap) transposed
  const auto xt = random_bf16(kN * kCap, rng, xt_bits);    // (N, cap) transposed
  DeviceArray dx(x_bits), dw(w_bits), ddyt(dyt_bits), dxt(xt_bits);
  DeviceArray doffs(std::vector<int64_t>(kG + 1, 0));
  DeviceArray dfwd(std::vector<float>(kCap * kN)), dwg(std::vector<float>(kG * kM * kN));
  DeviceArray dfwd2(std::vector<float>(kCap * kN));

  Sm90GroupedGemm fwd;
  fwd.params.num_groups = kG;
  fwd.params.offsets = doffs.ptr;
  fwd.params.capacity = kCap;
  fwd.params.n = kN;
  fwd.params.k = kK;
  fwd.params.b_group_rows = kN;
  fwd.params.d = dfwd.ptr;
  fwd.params.out_type = gemm_sm90::OutType::kFP32;
  fwd.params.ldd = kN;
  fwd.a = {dx.ptr, kCap, kK, kK};
  fwd.b = {dw.ptr, kG * kN, kK, kK};
  Sm90GroupedGemm wg = fwd;
  wg.params.k_grouped = 1;
  wg.params.m = kM;
  wg.params.b_group_rows = 0;
  wg.params.d = dwg.ptr;
  wg.params.d_group_stride = kM * kN;
  wg.a = {ddyt.ptr, kM, kCap, kCap};
  wg.b = {dxt.ptr, kN, kCap, kCap};
  wg.config.block_n = 128;  // the forward runs the cooperative schedule, wgrad the ping-pong one
  wg.config.pingpong = true;
  DeviceArray ws(std::vector<uint8_t>(sm90_workspace_bytes(wg) + 128));
  // The forward again on a cluster launch (2 CTAs, ping-pong, 4 CTAs: pairs wrap the ring).
  Sm90GroupedGemm fwd2 = fwd;
  fwd2.params.d = dfwd2.ptr;
  fwd2.config.block_n = 128;
  fwd2.config.pingpong = true;
  fwd2.config.cluster = 2;
  fwd2.config.num_sms = 4;

  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  launch_grouped_gemm_sm90(fwd, nullptr, 0, s);
  launch_grouped_gemm_sm90(wg, test::align128(ws.ptr), sm90_workspace_bytes(wg), s);
  launch_grouped_gemm_sm90(fwd2, nullptr, 0, s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (const auto& sizes : size_sets) {
    std::vector<int64_t> start(kG + 1, 0);
    for (int64_t g = 0; g < kG; ++g) start[g + 1] = start[g] + sizes[g];
    doffs.upload(start);
    ASSERT_EQ(cudaMemset(dfwd.ptr, 0xFF, dfwd.bytes), cudaSuccess);  // NaN poison
    ASSERT_EQ(cudaMemset(dwg.ptr, 0xFF, dwg.bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(dfwd2.ptr, 0xFF, dfwd2.bytes), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const auto fwd_out = dfwd.to_host<float>();
    const auto wg_out = dwg.to_host<float>();
    const auto fwd2_out = dfwd2.to_host<float>();
    std::vector<double> ref_f, ref_w;
    std::vector<float> got_f, got_w, got_f2;
    for (int64_t g = 0; g < kG; ++g) {
      for (int64_t r = start[g]; r < start[g + 1]; ++r)
        for (int64_t j = 0; j < kN; ++j) {
          double acc = 0;
          for (int64_t kk = 0; kk < kK; ++kk) acc += x[r * kK + kk] * w[(g * kN + j) * kK + kk];
          ref_f.push_back(acc);
          got_f.push_back(fwd_out[r * kN + j]);
          got_f2.push_back(fwd2_out[r * kN + j]);
        }
      for (int64_t i = 0; i < kM; ++i)  // empty groups must come out as zeros
        for (int64_t j = 0; j < kN; ++j) {
          double acc = 0;
          for (int64_t t = start[g]; t < start[g + 1]; ++t) acc += dyt[i * kCap + t] * xt[j * kCap + t];
          ref_w.push_back(acc);
          got_w.push_back(wg_out[(g * kM + i) * kN + j]);
        }
    }
    EXPECT_LT(rel_err(ref_f, got_f), 1e-5) << "forward, sizes[1] = " << sizes[1];
    EXPECT_LT(rel_err(ref_w, got_w), 1e-5) << "wgrad, sizes[1] = " << sizes[1];
    EXPECT_LT(rel_err(ref_f, got_f2), 1e-5) << "forward, cluster 2, sizes[1] = " << sizes[1];
    if (start[kG] == 0) {
      for (float v : wg_out) ASSERT_EQ(v, 0.0f) << "all groups empty: wgrad must write zeros";
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace tessera::gemm_cuda
