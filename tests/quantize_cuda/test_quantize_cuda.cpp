// CUDA quantization == CPU backend, byte for byte (data, scales, amax), for every recipe config
// with a CUDA kernel, each usage alone and both, input dtypes float32/bfloat16/float16, the
// shape sweep (1 row, widths not a multiple of the block, 303x300, 2000x2000) and input kinds
// (Gaussian, zeros, dtype max, NaN/±inf in a block, tiny). Also delayed scaling across update()
// and dequantize. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "quantize_cuda/cuda_cases.h"
#include "tessera/core/device.h"

namespace tessera {
namespace {

struct Shape {
  int64_t rows, cols;
};

class CudaMatchesCpu : public ::testing::TestWithParam<test::NamedConfig> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    if (!test::cuda_has_kernel(GetParam().config)) GTEST_SKIP() << "no CUDA kernel for this mode";
  }
};

// TESSERA_TEST_SUBSET=1 (used under compute-sanitizer, which is ~100x slower): fewer shapes,
// dtypes and input kinds; every kernel path (vector, edge, scalar) is still reached.
bool subset() {
  const char* e = std::getenv("TESSERA_TEST_SUBSET");
  return e != nullptr && e[0] == '1';
}

TEST_P(CudaMatchesCpu, ShapeSweepEveryUsage) {
  // The Hadamard transform of the columnwise copy needs M % 16 == 0 (checked by the quantizer).
  const bool rht = GetParam().config.random_hadamard;
  const std::vector<Shape> shapes =
      rht ? std::vector<Shape>{{16, 1}, {32, 33}, {256, 96}, {48, 300}, {80, 208}}
      : subset() ? std::vector<Shape>{{1, 300}, {303, 300}, {33, 17}, {256, 512}}
                 : std::vector<Shape>{{1, 1},    {1, 300}, {1, 7168}, {303, 300}, {130, 257},
                                      {256, 96}, {33, 17}, {64, 160}, {4, 16},    {256, 512},
                                      {37, 144}};
  const std::vector<DType> dtypes =
      subset() ? std::vector<DType>{DType::kBFloat16}
               : std::vector<DType>{DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  const std::vector<test::InputKind> kinds =
      subset() ? std::vector<test::InputKind>{test::InputKind::kSpecials}
               : std::vector<test::InputKind>{test::InputKind::kGaussian, test::InputKind::kZeros,
                                              test::InputKind::kDtypeMax,
                                              test::InputKind::kSpecials, test::InputKind::kTiny};
  size_t cases = 0;
  for (int usage = 0; usage < 3; ++usage) {
    QuantizerConfig c = GetParam().config;
    c.rowwise = usage != 1;
    c.columnwise = usage != 0;
    for (DType dt : dtypes) {
      for (const Shape& s : shapes) {
        for (auto kind : kinds) {
          test::HostInput in = test::make_input(dt, s.rows, s.cols, kind, 101u + cases);
          const std::string m = test::cpu_vs_cuda(c, in);
          ASSERT_TRUE(m.empty()) << GetParam().name << " usage=" << usage << " " << dtype_name(dt)
                                 << " (" << s.rows << ", " << s.cols << ") "
                                 << test::input_kind_name(kind) << ": " << m;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * dtypes.size() * shapes.size() * kinds.size());
}

TEST_P(CudaMatchesCpu, Large2000x2000) {
  if (subset()) GTEST_SKIP() << "subset run";
  if (GetParam().config.random_hadamard) GTEST_SKIP() << "M = 2000 is not a multiple of 16";
  for (auto kind : {test::InputKind::kGaussian, test::InputKind::kSpecials}) {
    test::HostInput in = test::make_input(DType::kBFloat16, 2000, 2000, kind, 5);
    const std::string m = test::cpu_vs_cuda(GetParam().config, in);
    EXPECT_TRUE(m.empty()) << GetParam().name << " bfloat16 (2000, 2000) "
                           << test::input_kind_name(kind) << ": " << m;
  }
}

TEST_P(CudaMatchesCpu, DequantizeMatchesCpu) {
  test::HostInput in = test::make_input(DType::kBFloat16, 304, 272, test::InputKind::kSpecials, 9);
  const QuantizerConfig c = GetParam().config;
  Quantizer qc(c);
  QuantizedTensor cpu = qc.allocate(in.rows, in.cols);
  qc.quantize(in.view(), cpu.view(), Backend::kCPU);
  Quantizer qg(c, Device::cuda(0));
  QuantizedTensor gpu = qg.allocate(in.rows, in.cols);
  test::DeviceInput dx(in);
  qg.quantize(dx.view, gpu.view());
  const size_t bytes = static_cast<size_t>(in.rows * in.cols) * sizeof(float);
  for (bool columnwise : {false, true}) {
    std::vector<float> want(static_cast<size_t>(in.rows * in.cols)), got(want.size(), -7.0f);
    dequantize(cpu.view(), TensorView::contiguous(want.data(), DType::kFloat32, {in.rows, in.cols}),
               columnwise);
    Buffer out(bytes, Device::cuda(0));
    copy_bytes(out.data(), Device::cuda(0), got.data(), Device::cpu(), bytes);  // poison
    dequantize(gpu.view(),
               TensorView::contiguous(out.data(), DType::kFloat32, {in.rows, in.cols},
                                      Device::cuda(0)),
               columnwise);
    copy_bytes(got.data(), Device::cpu(), out.data(), Device::cuda(0), bytes);
    // Same bits, except that NaN payloads may differ (GPU arithmetic returns the canonical NaN).
    size_t bad = want.size();
    for (size_t i = 0; i < want.size() && bad == want.size(); ++i) {
      const bool both_nan = std::isnan(want[i]) && std::isnan(got[i]);
      if (!both_nan && std::memcmp(&want[i], &got[i], sizeof(float)) != 0) bad = i;
    }
    EXPECT_EQ(bad, want.size()) << GetParam().name << " columnwise=" << columnwise
                                << ": first difference at element " << bad << ": "
                                << want[std::min(bad, want.size() - 1)] << " vs "
                                << got[std::min(bad, want.size() - 1)];
  }
}

INSTANTIATE_TEST_SUITE_P(AllConfigs, CudaMatchesCpu, ::testing::ValuesIn(test::all_configs()),
                         [](const auto& p) { return p.param.name; });

// Delayed scaling: three steps of quantize + update() on both backends; data, scales, the
// quantizer's scale and its amax history agree after every step.
TEST(CudaDelayedScaling, StepsAndUpdatesMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (auto algo : {AmaxHistoryAlgo::kMax, AmaxHistoryAlgo::kMostRecent}) {
    QuantizerConfig c = make_config(ScalingMode::kTensor);
    c.delayed = true;
    c.amax_history_len = 4;
    c.amax_algo = algo;
    c.margin = 1;
    c.columnwise = true;
    Quantizer qc(c), qg(c, Device::cuda(0));
    QuantizedTensor cpu = qc.allocate(96, 160), gpu = qg.allocate(96, 160),
                    back = qc.allocate(96, 160);
    for (int step = 0; step < 5; ++step) {
      test::HostInput in = test::make_input(
          DType::kBFloat16, 96, 160,
          step == 3 ? test::InputKind::kSpecials : test::InputKind::kGaussian, 40u + step);
      test::DeviceInput dx(in);
      qc.quantize(in.view(), cpu.view(), Backend::kCPU);
      test::poison(gpu.view());
      qg.quantize(dx.view, gpu.view());
      test::copy_to_host(gpu.view(), back.view());
      ASSERT_EQ(test::compare_quantized(cpu.view(), back.view()), "") << "step " << step;
      qc.update();
      qg.update();
      float sc = 0, sg = 0;
      std::vector<float> hc(4), hg(4);
      copy_bytes(&sc, Device::cpu(), qc.scale().data, Device::cpu(), 4);
      copy_bytes(&sg, Device::cpu(), qg.scale().data, Device::cuda(0), 4);
      copy_bytes(hc.data(), Device::cpu(), qc.amax_history().data, Device::cpu(), 16);
      copy_bytes(hg.data(), Device::cpu(), qg.amax_history().data, Device::cuda(0), 16);
      EXPECT_EQ(std::memcmp(&sc, &sg, 4), 0) << "step " << step << ": " << sc << " vs " << sg;
      EXPECT_EQ(std::memcmp(hc.data(), hg.data(), 16), 0) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace tessera
