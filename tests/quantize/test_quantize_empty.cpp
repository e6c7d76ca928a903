// Inputs without elements (M == 0 or K == 0): the dispatcher's empty path gives the bits the
// reference and CPU loops give on small empty shapes (the oracle, called directly), and huge
// empty extents ((2^40, 0), (0, 2^40)) return at once for every recipe, usage, layout and host
// backend, for quantize, dequantize and the grouped CPU path.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "quantize/quantize_backend.h"
#include "quantize_cases.h"
#include "tessera/grouped/grouped_quantize.h"

namespace tessera {
namespace {

constexpr int64_t kHuge = int64_t{1} << 40;
constexpr int64_t kPoison = 0xA5;

void poison(const QuantizedTensorView& v) {
  for (const TensorView* f : {&v.data, &v.scale_inv, &v.columnwise_data, &v.columnwise_scale_inv,
                              &v.amax, &v.columnwise_amax}) {
    if (f->data != nullptr) std::memset(f->data, kPoison, static_cast<size_t>(f->nbytes()));
  }
}

using BackendFn = std::function<void(const QuantizerConfig&, const TensorView&,
                                     const QuantizedTensorView&, const detail::QuantizeRequest&)>;

class EmptyInput : public ::testing::TestWithParam<test::NamedConfig> {};

// The oracle: the backend loops themselves on small empty shapes, each usage on its own and
// both together, with the delayed-scaling state of a quantizer whose scale is not 1.
TEST_P(EmptyInput, MatchesTheBackendLoops) {
  const QuantizerConfig config = GetParam().config;
  const BackendFn backends[] = {detail::quantize_reference, detail::quantize_cpu};
  int cases = 0;
  for (auto [m, k] : {std::pair<int64_t, int64_t>{0, 0}, {0, 5}, {5, 0}, {37, 0}, {0, 37},
                      {129, 0}, {0, 300}, {256, 0}}) {
    if (config.random_hadamard && m % 16 != 0) continue;  // refused for every input
    for (auto [rowwise, columnwise] : {std::pair{true, false}, {false, true}, {true, true}}) {
      QuantizerConfig c = config;
      c.rowwise = rowwise;
      c.columnwise = columnwise;
      float x_dummy = 0.0f;
      const TensorView x = TensorView::contiguous(&x_dummy, DType::kBFloat16, {m, k});
      for (const BackendFn& backend : backends) {
        float scale = 0.25f;  // delayed state given to the loops directly
        std::vector<float> history(static_cast<size_t>(c.amax_history_len), 7.0f);
        QuantizedTensor want(c, m, k, Device::cpu());
        poison(want.view());
        detail::QuantizeRequest req{rowwise, columnwise, &scale, history.data()};
        backend(c, x, want.view(), req);

        Quantizer q(c);
        if (c.delayed) *q.scale().as<float>() = 0.25f;
        for (Backend b : {Backend::kCPU, Backend::kReference}) {
          QuantizedTensor got(c, m, k, Device::cpu());
          poison(got.view());
          if (c.delayed) q.amax_history().as<float>()[0] = 7.0f;
          q.quantize(x, got.view(), b);
          ASSERT_EQ(test::compare_quantized(want.view(), got.view()), "")
              << GetParam().name << " (" << m << ", " << k << ") rowwise " << rowwise
              << " columnwise " << columnwise << " backend " << backend_name(b);
          if (c.delayed) {
            EXPECT_EQ(q.amax_history().as<float>()[0], history[0]);
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 0);
}

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Work scales with elements: a (2^40, 0) or (0, 2^40) input is done in far less than a second
// (the old loops over the empty rows ran for hours). Modes whose scales are per row or per
// column keep one scale per empty row, so they get 2^20 rows (4 MiB of scales) instead.
TEST_P(EmptyInput, HugeEmptyExtentsReturnAtOnce) {
  const QuantizerConfig config = GetParam().config;
  QuantizedTensor small_ref(config, 16, 0, Device::cpu());
  Quantizer(config).quantize(TensorView::contiguous(nullptr, DType::kFloat32, {16, 0}),
                             small_ref.view(), Backend::kReference);
  for (auto [m, k] : {std::pair{kHuge, int64_t{0}}, {int64_t{0}, kHuge}}) {
    if (test::output_bytes(config, m, k) > (int64_t{64} << 20)) {
      m = std::min<int64_t>(m, int64_t{1} << 20);
      k = std::min<int64_t>(k, int64_t{1} << 20);
    }
    for (Backend b : {Backend::kCPU, Backend::kReference}) {
      Quantizer q(config);
      QuantizedTensor t = q.allocate(m, k);
      const TensorView x = TensorView::contiguous(nullptr, DType::kFloat16, {m, k});
      float out_dummy = 0.0f;
      const TensorView out = TensorView::contiguous(&out_dummy, DType::kFloat32, {m, k});
      const double s = seconds([&] {
        q.quantize(x, t.view(), b);
        dequantize(t.view(), out, false, b);
        dequantize(t.view(), out, true, b);
      });
      EXPECT_LT(s, 2.0) << GetParam().name << " (" << m << ", " << k << ") " << backend_name(b);
      // Per-row FP32 scales: every entry is the scale of an empty row, as the reference gives.
      const TensorView& sv = m > 0 ? t.view().scale_inv : t.view().columnwise_scale_inv;
      if (config.mode == ScalingMode::kRowwise && sv.numel() > 0) {
        const float want = small_ref.view().scale_inv.as<const float>()[0];
        const float* p = sv.as<const float>();
        EXPECT_TRUE(std::all_of(p, p + sv.numel(), [&](float v) { return v == want; }));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllConfigs, EmptyInput,
                         ::testing::ValuesIn(test::configs_with_delayed()),
                         [](const auto& param_info) { return param_info.param.name; });

// Grouped CPU path: members with huge empty extents next to ordinary ones.
TEST(EmptyInputGrouped, HugeEmptyMembersReturnAtOnce) {
  for (ScalingMode mode : {ScalingMode::kMXFP8, ScalingMode::kNVFP4, ScalingMode::kBlock128x128,
                           ScalingMode::kTensor}) {
    QuantizerConfig c = make_config(mode);
    c.rowwise = c.columnwise = true;
    const std::vector<std::array<int64_t, 2>> shapes = {{kHuge, 0}, {0, kHuge}, {32, 64}, {kHuge, 0}};
    GroupedTensorOptions o;
    o.config = c;
    GroupedTensor t = GroupedTensor::from_shapes(shapes, o);
    std::vector<float> x(32 * 64, 1.5f), back(32 * 64, 0.0f);
    float dummy = 0.0f;
    std::vector<TensorView> in, out;
    for (const auto& s : shapes) {
      float* p = s[0] * s[1] == 0 ? &dummy : x.data();
      in.push_back(TensorView::contiguous(p, DType::kFloat32, {s[0], s[1]}));
      out.push_back(TensorView::contiguous(s[0] * s[1] == 0 ? &dummy : back.data(),
                                           DType::kFloat32, {s[0], s[1]}));
    }
    Quantizer q(c);
    const double s = seconds([&] {
      grouped_quantize_list(q, in, t);
      grouped_dequantize_list(t.view(), out, false);
    });
    EXPECT_LT(s, 2.0) << scaling_mode_name(mode);
    EXPECT_EQ(back[0], 1.5f) << scaling_mode_name(mode);  // 1.5 is exact in every format
  }
}

}  // namespace
}  // namespace tessera
