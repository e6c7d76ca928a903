// The CPU backend produces the reference's bits: data, scales and amax, byte for byte, for every
// recipe config, usage, scale layout, input dtype, shape (1 row, odd widths, 303x300, 2000x2000)
// and input kind (Gaussian, zeros, dtype max, NaN/±inf in blocks, tiny values).
#include <gtest/gtest.h>

#include "quantize_cases.h"

namespace tessera {
namespace {

struct Shape {
  int64_t rows, cols;
};

std::string run_case(const QuantizerConfig& config, test::HostInput& in) {
  Quantizer q(config);
  QuantizedTensor ref = q.allocate(in.rows, in.cols);
  QuantizedTensor cpu = q.allocate(in.rows, in.cols);
  // Poison the CPU output so that bytes the backend forgets to write show up.
  for (const TensorView* v : {&cpu.view().data, &cpu.view().scale_inv, &cpu.view().columnwise_data,
                              &cpu.view().columnwise_scale_inv}) {
    if (v->data != nullptr) std::memset(v->data, 0xA5, static_cast<size_t>(v->nbytes()));
  }
  q.quantize(in.view(), ref.view(), Backend::kReference);
  q.quantize(in.view(), cpu.view(), Backend::kCPU);
  return test::compare_quantized(ref.view(), cpu.view());
}

class BackendsAgree : public ::testing::TestWithParam<test::NamedConfig> {};

TEST_P(BackendsAgree, CpuEqualsReferenceByteForByte) {
  const QuantizerConfig config = GetParam().config;
  const std::vector<Shape> shapes = config.random_hadamard
      ? std::vector<Shape>{{16, 1}, {32, 33}, {256, 96}, {48, 300}}
      : std::vector<Shape>{{1, 1}, {1, 300}, {303, 300}, {130, 257}, {256, 96}, {33, 17}};
  int cases = 0;
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (const Shape& s : shapes) {
      for (auto kind : {test::InputKind::kGaussian, test::InputKind::kZeros, test::InputKind::kDtypeMax,
                        test::InputKind::kSpecials, test::InputKind::kTiny}) {
        // float32 sees every kind; the 16-bit inputs the ones their conversion can change.
        if (dt != DType::kFloat32 && (kind == test::InputKind::kZeros || kind == test::InputKind::kTiny)) continue;
        test::HostInput in = test::make_input(dt, s.rows, s.cols, kind, 17u + cases);
        const std::string m = run_case(config, in);
        ASSERT_TRUE(m.empty()) << GetParam().name << " " << dtype_name(dt) << " (" << s.rows << ", "
                               << s.cols << ") " << test::input_kind_name(kind) << ": " << m;
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 0);
}

TEST_P(BackendsAgree, Large2000x2000) {
  // One config per family (the loops are the same for the variants; they run above).
  const std::string n = GetParam().name;
  if (n != "tensor_current_e4m3" && n != "rowwise_e5m2" && n != "block1x128_e4m3" &&
      n != "block128x128_e4m3" && n != "mxfp8_e4m3" && n != "mxfp8_32x32_e5m2_swizzled" &&
      n != "nvfp4_swizzled" && n != "nvfp4_16x16_rht_sr")
    GTEST_SKIP() << "2000x2000 runs for one config per family";
  test::HostInput in = test::make_input(DType::kBFloat16, 2000, 2000, test::InputKind::kSpecials, 5);
  const std::string m = run_case(GetParam().config, in);
  EXPECT_TRUE(m.empty()) << GetParam().name << " bfloat16 (2000, 2000): " << m;
}

TEST_P(BackendsAgree, EachUsageAloneMatchesBoth) {
  test::HostInput in = test::make_input(DType::kFloat32, 64, 160, test::InputKind::kGaussian, 3);
  QuantizerConfig both = GetParam().config;
  Quantizer qb(both);
  QuantizedTensor full = qb.allocate(64, 160);
  qb.quantize(in.view(), full.view(), Backend::kReference);
  for (bool columnwise : {false, true}) {
    QuantizerConfig one = both;
    one.rowwise = !columnwise;
    one.columnwise = columnwise;
    Quantizer q1(one);
    QuantizedTensor part = q1.allocate(64, 160);
    q1.quantize(in.view(), part.view(), Backend::kCPU);
    EXPECT_EQ(part.has_rowwise(), !columnwise);
    EXPECT_EQ(part.has_columnwise(), columnwise);
    const TensorView& a = columnwise ? full.view().columnwise_data : full.view().data;
    const TensorView& b = columnwise ? part.view().columnwise_data : part.view().data;
    EXPECT_EQ(test::first_mismatch("data", a, b), "") << GetParam().name << " columnwise=" << columnwise;
  }
}

INSTANTIATE_TEST_SUITE_P(AllConfigs, BackendsAgree, ::testing::ValuesIn(test::all_configs()),
                         [](const auto& param_info) { return param_info.param.name; });

// Delayed scaling: the same state sequence on both backends gives the same bits and history.
TEST(BackendsAgreeDelayed, SequenceOfStepsWithUpdates) {
  for (DType e : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    QuantizerConfig c = make_config(ScalingMode::kTensor, e);
    c.delayed = true;
    c.amax_history_len = 4;
    c.margin = 1;
    c.columnwise = true;
    Quantizer qr(c), qc(c);
    for (int step = 0; step < 6; ++step) {
      test::HostInput in = test::make_input(DType::kBFloat16, 65, 130,
                                            step == 3 ? test::InputKind::kSpecials : test::InputKind::kGaussian,
                                            100u + step);
      QuantizedTensor r = qr.allocate(65, 130), p = qc.allocate(65, 130);
      qr.quantize(in.view(), r.view(), Backend::kReference);
      qc.quantize(in.view(), p.view(), Backend::kCPU);
      ASSERT_EQ(test::compare_quantized(r.view(), p.view()), "") << "step " << step;
      ASSERT_EQ(test::first_mismatch("history", qr.amax_history(), qc.amax_history()), "");
      qr.update();
      qc.update();
      ASSERT_EQ(test::first_mismatch("scale", qr.scale(), qc.scale()), "");
    }
  }
}

}  // namespace
}  // namespace tessera
