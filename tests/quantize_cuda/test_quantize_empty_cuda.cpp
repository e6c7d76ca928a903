// Inputs without elements on a CUDA device (quantize_empty_cuda): every recipe, usage and
// layout gives the CPU backend's bytes (poisoned device output: every byte is written), with a
// delayed-scaling quantizer whose scale is not 1 and whose history slot 0 is not 0, and huge
// empty extents ((2^40, 0), (0, 2^40)) return at once — no launch over the empty rows. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "quantize_cuda/cuda_cases.h"
#include "tessera/core/device.h"

namespace tessera {
namespace {

constexpr int64_t kHuge = int64_t{1} << 40;

class CudaEmptyInput : public ::testing::TestWithParam<test::NamedConfig> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

// Quantizes the empty (m, k) input on both backends, delayed state scale 0.25 / history[0] 7;
// "" when every byte (and the history slot) agrees.
std::string empty_cpu_vs_cuda(const QuantizerConfig& c, int64_t m, int64_t k, double* seconds) {
  const Device gpu = Device::cuda(0);
  Quantizer qc(c), qg(c, gpu);
  const float scale = 0.25f, seven = 7.0f;
  if (c.delayed) {
    copy_bytes(qc.scale().data, Device::cpu(), &scale, Device::cpu(), 4);
    copy_bytes(qg.scale().data, gpu, &scale, Device::cpu(), 4);
    copy_bytes(qc.amax_history().data, Device::cpu(), &seven, Device::cpu(), 4);
    copy_bytes(qg.amax_history().data, gpu, &seven, Device::cpu(), 4);
  }
  QuantizedTensor cpu = qc.allocate(m, k), gpu_out = qg.allocate(m, k), back = qc.allocate(m, k);
  qc.quantize(TensorView::contiguous(nullptr, DType::kBFloat16, {m, k}), cpu.view(), Backend::kCPU);
  test::poison(gpu_out.view());
  const auto t0 = std::chrono::steady_clock::now();
  qg.quantize(TensorView::contiguous(nullptr, DType::kBFloat16, {m, k}, gpu), gpu_out.view());
  test::copy_to_host(gpu_out.view(), back.view());  // synchronous: the quantize is done
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string why = test::compare_quantized(cpu.view(), back.view());
  if (why.empty() && c.delayed) {
    float hc = 1, hg = 1;
    copy_bytes(&hc, Device::cpu(), qc.amax_history().data, Device::cpu(), 4);
    copy_bytes(&hg, Device::cpu(), qg.amax_history().data, gpu, 4);
    if (hc != hg) why = "amax history slot 0: " + std::to_string(hc) + " vs " + std::to_string(hg);
  }
  return why;
}

TEST_P(CudaEmptyInput, MatchesCpuAndReturnsAtOnce) {
  const QuantizerConfig config = GetParam().config;
  for (auto [m0, k0] : {std::pair<int64_t, int64_t>{0, 0}, {0, 5}, {5, 0}, {129, 0}, {0, 300},
                        {256, 0}, {kHuge, 0}, {0, kHuge}}) {
    if (config.random_hadamard && m0 % 16 != 0) continue;  // refused for every input
    for (auto [rowwise, columnwise] : {std::pair{true, false}, {false, true}, {true, true}}) {
      QuantizerConfig c = config;
      c.rowwise = rowwise;
      c.columnwise = columnwise;
      int64_t m = m0, k = k0;
      // Per-row / per-column scales of a huge extent: 2^20 lines (4 MiB of scales) instead.
      if (test::output_bytes(c, m, k) > (int64_t{64} << 20)) {
        m = std::min<int64_t>(m, int64_t{1} << 20);
        k = std::min<int64_t>(k, int64_t{1} << 20);
      }
      double s = 0;
      const std::string why = empty_cpu_vs_cuda(c, m, k, &s);
      ASSERT_EQ(why, "") << GetParam().name << " (" << m << ", " << k << ") rowwise " << rowwise
                         << " columnwise " << columnwise;
      EXPECT_LT(s, 2.0) << GetParam().name << " (" << m << ", " << k << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllConfigs, CudaEmptyInput,
                         ::testing::ValuesIn(test::configs_with_delayed()),
                         [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace tessera
