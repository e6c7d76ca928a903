// Numerics of the quantizers as a user sees them: dequantize(quantize(x)) within each format's
// bound, SQNR per recipe (printed), stochastic rounding statistics, delayed-scaling state,
// usage union (no stale columnwise copy), and clear errors for bad input.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>

#include "quantize_cases.h"
#include "tessera/core/status.h"
#include "tessera/formats/format_table.h"

namespace tessera {
namespace {

std::vector<float> dequantized(const QuantizedTensorView& q, bool columnwise, Backend b = Backend::kCPU) {
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
  dequantize(q, TensorView::contiguous(out.data(), DType::kFloat32, {q.rows, q.cols}), columnwise, b);
  return out;
}

std::vector<float> as_floats(test::HostInput& in) {
  std::vector<float> v(static_cast<size_t>(in.rows * in.cols));
  std::memcpy(v.data(), in.bytes.data(), v.size() * 4);
  return v;
}

// |x̂ - x| <= rel·|x| + abs·amax(x), per format (see docs/numerics.md, "error bounds").
struct Bound {
  double rel, abs;
};

Bound bound_of(const QuantizerConfig& c) {
  if (c.element == DType::kFloat4E2M1) return c.stochastic_rounding ? Bound{0.5, 0.1} : Bound{0.25, 0.05};
  const double u = format_info(c.element).unit_roundoff();
  const bool floor_rule = (c.mode == ScalingMode::kMXFP8 || c.mode == ScalingMode::kMXFP8_32x32) &&
                          c.e8m0_rounding == E8M0Rounding::kFloor;
  const double rel = floor_rule ? std::max(u, 0.125) : u;
  return {rel, format_info(c.element).min_subnormal / format_info(c.element).max_finite};
}

class RoundTrip : public ::testing::TestWithParam<test::NamedConfig> {};

TEST_P(RoundTrip, DequantizeWithinFormatBound) {
  const QuantizerConfig c = GetParam().config;
  if (c.random_hadamard) GTEST_SKIP() << "the transform spreads errors over 16 values: SQNR test";
  test::HostInput in = test::make_input(DType::kFloat32, 96, 200, test::InputKind::kGaussian, 11);
  const std::vector<float> x = as_floats(in);
  double amax = 0;
  for (float v : x) amax = std::max(amax, double(std::fabs(v)));
  Quantizer q(c);
  QuantizedTensor t = q.allocate(96, 200);
  q.quantize(in.view(), t);
  const Bound b = bound_of(c);
  for (bool columnwise : {false, true}) {
    const std::vector<float> y = dequantized(t.view(), columnwise);
    const std::vector<float> yr = dequantized(t.view(), columnwise, Backend::kReference);
    ASSERT_EQ(std::memcmp(y.data(), yr.data(), y.size() * 4), 0) << "cpu vs reference dequantize";
    for (size_t i = 0; i < x.size(); ++i) {
      const double err = std::fabs(double(y[i]) - x[i]);
      ASSERT_LE(err, b.rel * std::fabs(x[i]) + b.abs * amax)
          << GetParam().name << " columnwise=" << columnwise << " at " << i << ": x=" << x[i]
          << " x̂=" << y[i];
    }
  }
}

double sqnr_db(const std::vector<float>& x, const std::vector<float>& y) {
  double s = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    s += double(x[i]) * x[i];
    n += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
  }
  return 10.0 * std::log10(s / std::max(n, 1e-300));
}

TEST_P(RoundTrip, SqnrOnGaussian) {
  const QuantizerConfig c = GetParam().config;
  test::HostInput in{DType::kFloat32, 512, 1024, {}};
  in.bytes.resize(512 * 1024 * 4);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(512 * 1024);
  for (float& v : x) v = nd(rng);
  std::memcpy(in.bytes.data(), x.data(), in.bytes.size());
  Quantizer q(c);
  QuantizedTensor t = q.allocate(512, 1024);
  q.quantize(in.view(), t);
  const double row = sqnr_db(x, dequantized(t.view(), false));
  const double col = sqnr_db(x, dequantized(t.view(), true));
  std::printf("SQNR %-28s rowwise %6.2f dB  columnwise %6.2f dB\n", GetParam().name.c_str(), row, col);
  const double want = c.element == DType::kFloat4E2M1 ? 14.0 : (c.element == DType::kFloat8E5M2 ? 22.0 : 28.0);
  EXPECT_GE(row, want);
  EXPECT_GE(col, want);
}

INSTANTIATE_TEST_SUITE_P(AllConfigs, RoundTrip, ::testing::ValuesIn(test::all_configs()),
                         [](const auto& param_info) { return param_info.param.name; });

// ---- stochastic rounding ---------------------------------------------------------------------

QuantizerConfig sr_config(uint64_t seed, uint64_t offset) {
  QuantizerConfig c = make_config(ScalingMode::kNVFP4);
  c.stochastic_rounding = true;
  c.rng_seed = seed;
  c.rng_offset = offset;
  return c;
}

TEST(StochasticRounding, ReproducibleAndSeedDependent) {
  test::HostInput in = test::make_input(DType::kBFloat16, 64, 256, test::InputKind::kGaussian, 1);
  auto run = [&](uint64_t seed, uint64_t offset) {
    Quantizer q(sr_config(seed, offset));
    QuantizedTensor t = q.allocate(64, 256);
    q.quantize(in.view(), t);
    const auto* d = t.view().data.as<const uint8_t>();
    return std::vector<uint8_t>(d, d + t.view().data.nbytes());
  };
  EXPECT_EQ(run(5, 0), run(5, 0));
  EXPECT_NE(run(5, 0), run(6, 0));
  EXPECT_NE(run(5, 0), run(5, 1));
}

TEST(StochasticRounding, UnbiasedWhereNearestIsNot) {
  // Values between grid points; the mean of many draws converges to x while RNE keeps its error.
  const int64_t rows = 16, cols = 64;
  test::HostInput in = test::make_input(DType::kFloat32, rows, cols, test::InputKind::kGaussian, 9);
  const std::vector<float> x = as_floats(in);
  std::vector<double> mean(x.size(), 0.0);
  const int draws = 800;
  for (int d = 0; d < draws; ++d) {
    Quantizer q(sr_config(77, static_cast<uint64_t>(d)));
    QuantizedTensor t = q.allocate(rows, cols);
    q.quantize(in.view(), t);
    const std::vector<float> y = dequantized(t.view(), false);
    for (size_t i = 0; i < y.size(); ++i) mean[i] += y[i] / draws;
  }
  Quantizer rne(make_config(ScalingMode::kNVFP4));
  QuantizedTensor t = rne.allocate(rows, cols);
  rne.quantize(in.view(), t);
  const std::vector<float> yr = dequantized(t.view(), false);
  double bias_sr = 0, bias_rne = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    bias_sr += std::fabs(mean[i] - x[i]);
    bias_rne += std::fabs(double(yr[i]) - x[i]);
  }
  std::printf("stochastic rounding: mean |E[x̂] - x| = %.3g, RNE mean |x̂ - x| = %.3g (ratio %.3f)\n",
              bias_sr / x.size(), bias_rne / x.size(), bias_sr / bias_rne);
  EXPECT_LT(bias_sr, 0.15 * bias_rne);
}

// ---- delayed scaling -------------------------------------------------------------------------

TEST(DelayedScaling, HistorySlotZeroUpdateRollAndScale) {
  QuantizerConfig c = make_config(ScalingMode::kTensor);
  c.delayed = true;
  c.amax_history_len = 3;
  Quantizer q(c);
  auto step = [&](float value) {
    std::vector<float> x(8, value / 2);
    x[3] = -value;
    QuantizedTensor t = q.allocate(2, 4);
    q.quantize(TensorView::contiguous(x.data(), DType::kFloat32, {2, 4}), t);
    return *t.view().scale_inv.as<float>();
  };
  EXPECT_EQ(step(10.0f), 1.0f);  // initial scale 1
  EXPECT_EQ(q.amax_history().as<float>()[0], 10.0f);
  q.update();  // amax 10 → scale 44.8; history rolls: [0, 0, 10]
  EXPECT_EQ(*q.scale().as<float>(), 448.0f / 10.0f);
  EXPECT_EQ(q.amax_history().as<float>()[2], 10.0f);
  EXPECT_EQ(q.amax_history().as<float>()[0], 0.0f);
  EXPECT_EQ(step(2.0f), 1.0f / (448.0f / 10.0f));  // uses the delayed scale
  q.update();  // max(2, 0, 10) = 10
  EXPECT_EQ(*q.scale().as<float>(), 448.0f / 10.0f);
  step(0.0f);
  q.update();  // history [0, 10→?]: max over [0, 2, 0]... keeps working, finite
  step(0.0f);
  q.update();
  step(0.0f);
  q.update();  // all zeros now → amax 0 keeps the old scale
  const float kept = *q.scale().as<float>();
  step(0.0f);
  q.update();
  EXPECT_EQ(*q.scale().as<float>(), kept);
  QuantizerConfig mr = c;
  mr.amax_algo = AmaxHistoryAlgo::kMostRecent;
  mr.margin = 1;
  Quantizer q2(mr);
  std::vector<float> x(4, 7.0f);
  QuantizedTensor t = q2.allocate(1, 4);
  q2.quantize(TensorView::contiguous(x.data(), DType::kFloat32, {1, 4}), t);
  q2.update();
  EXPECT_EQ(*q2.scale().as<float>(), (448.0f / 7.0f) / 2.0f);
}

// A quantizer on caller-owned state (a framework's module buffers) gives the bits and the state
// of one that owns its state, step for step, and writes only into the caller's memory.
TEST(DelayedScaling, CallerOwnedStateMatchesOwnedState) {
  QuantizerConfig c = make_config(ScalingMode::kTensor, DType::kFloat8E5M2);
  c.delayed = true;
  c.amax_history_len = 4;
  c.margin = 2;
  Quantizer owned(c);
  float scale = 1.0f;
  std::vector<float> history(4, 0.0f);
  const DelayedScalingState state{
      TensorView::contiguous(&scale, DType::kFloat32, {1}),
      TensorView::contiguous(history.data(), DType::kFloat32, {4})};
  for (float value : {3.0f, 40.0f, 0.5f, 0.0f, 7.0f, 2.0f}) {
    std::vector<float> x(12, value / 3);
    x[5] = -value;
    const TensorView xv = TensorView::contiguous(x.data(), DType::kFloat32, {3, 4});
    Quantizer caller(c, Device::cpu(), state);  // made per step: it holds nothing itself
    QuantizedTensor a = owned.allocate(3, 4), b = caller.allocate(3, 4);
    owned.quantize(xv, a);
    caller.quantize(xv, b);
    EXPECT_EQ(*a.view().scale_inv.as<float>(), *b.view().scale_inv.as<float>());
    for (int i = 0; i < 12; ++i) {
      EXPECT_EQ(a.view().data.as<uint8_t>()[i], b.view().data.as<uint8_t>()[i]);
    }
    owned.update();
    caller.update();
    EXPECT_EQ(*owned.scale().as<float>(), scale);
    EXPECT_EQ(caller.scale().data, static_cast<void*>(&scale));
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(owned.amax_history().as<float>()[i], history[static_cast<size_t>(i)]);
    }
  }
  EXPECT_EQ(scale, (57344.0f / 7.0f) / 4.0f);  // max over the last 4 amaxes (40 rolled out), margin 2
  std::vector<float> short_history(3);
  const DelayedScalingState wrong{
      state.scale, TensorView::contiguous(short_history.data(), DType::kFloat32, {3})};
  EXPECT_THROW(Quantizer(c, Device::cpu(), wrong), Error);
  QuantizerConfig current = c;
  current.delayed = false;
  EXPECT_THROW(Quantizer(current, Device::cpu(), state), Error);
}

// ---- usages ----------------------------------------------------------------------------------

TEST(Usages, RequantizeNeverDropsAUsageAndNeverLeavesItStale) {
  for (const auto& nc : test::all_configs()) {
    QuantizerConfig train = nc.config, eval = nc.config;
    eval.columnwise = false;
    Quantizer qt(train), qe(eval);
    QuantizedTensor w = qt.allocate(64, 96);
    for (int step = 0; step < 4; ++step) {
      test::HostInput in = test::make_input(DType::kFloat32, 64, 96, test::InputKind::kGaussian, 40u + step);
      Quantizer& q = step % 2 == 0 ? qt : qe;  // train, eval, train, eval
      q.quantize(in.view(), w);
      ASSERT_TRUE(w.has_rowwise() && w.has_columnwise()) << nc.name;
      QuantizedTensor fresh = qt.allocate(64, 96);
      qt.quantize(in.view(), fresh);
      ASSERT_EQ(test::compare_quantized(fresh.view(), w.view()), "") << nc.name << " step " << step;
    }
  }
}

// ---- errors ----------------------------------------------------------------------------------

template <class F>
Status status_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).size(), 0u);
    return e.status();
  }
  return Status::kOk;
}

TEST(QuantizeErrors, BadConfigs) {
  QuantizerConfig c = make_config(ScalingMode::kNVFP4);
  c.element = DType::kFloat8E5M2;
  EXPECT_EQ(status_of([&] { Quantizer q(c); }), Status::kDTypeMismatch);
  c = make_config(ScalingMode::kMXFP8);
  c.element = DType::kFloat4E2M1;
  EXPECT_EQ(status_of([&] { Quantizer q(c); }), Status::kDTypeMismatch);
  c = make_config(ScalingMode::kTensor);
  c.scale_layout = ScaleLayout::kSwizzled;
  EXPECT_EQ(status_of([&] { Quantizer q(c); }), Status::kInvalidArgument);
  c = make_config(ScalingMode::kTensor);
  c.amax_history_len = 0;
  c.delayed = true;
  EXPECT_EQ(status_of([&] { Quantizer q(c); }), Status::kInvalidArgument);
  c = make_config(ScalingMode::kMXFP8);
  c.random_hadamard = true;
  EXPECT_EQ(status_of([&] { Quantizer q(c); }), Status::kInvalidArgument);
  EXPECT_EQ(status_of([&] { Quantizer q(make_config(ScalingMode::kNone)); }), Status::kInvalidArgument);
  EXPECT_EQ(status_of([] { scaling_mode_from_name("mxfp9"); }), Status::kInvalidArgument);
  Quantizer plain(make_config(ScalingMode::kTensor));
  EXPECT_EQ(status_of([&] { plain.update(); }), Status::kInvalidArgument);
}

TEST(QuantizeErrors, BadTensors) {
  std::vector<float> x(32 * 48, 1.0f);
  const TensorView xv = TensorView::contiguous(x.data(), DType::kFloat32, {32, 48});
  Quantizer q(make_config(ScalingMode::kMXFP8));
  QuantizedTensor t = q.allocate(32, 48);
  // Wrong shape.
  QuantizedTensor other = q.allocate(32, 40);
  EXPECT_EQ(status_of([&] { q.quantize(xv, other); }), Status::kShapeMismatch);
  // Wrong input dtype and rank.
  const TensorView bad_dtype = TensorView::contiguous(x.data(), DType::kInt32, {32, 48});
  EXPECT_EQ(status_of([&] { q.quantize(bad_dtype, t); }), Status::kDTypeMismatch);
  const TensorView three_d = TensorView::contiguous(x.data(), DType::kFloat32, {2, 16, 48});
  EXPECT_EQ(status_of([&] { q.quantize(three_d, t); }), Status::kShapeMismatch);
  // Scale buffer too small.
  QuantizedTensorView small = t.view();
  small.scale_inv.shape[0] = 16;
  EXPECT_EQ(status_of([&] { q.quantize(xv, small); }), Status::kBufferTooSmall);
  // Output allocated for another recipe.
  Quantizer qn(make_config(ScalingMode::kNVFP4));
  EXPECT_EQ(status_of([&] { qn.quantize(xv, t); }), Status::kInvalidArgument);
  // A view lacking a requested usage.
  QuantizerConfig both = make_config(ScalingMode::kMXFP8);
  both.columnwise = true;
  Quantizer qb(both);
  QuantizedTensorView lacking = t.view();
  EXPECT_EQ(status_of([&] { qb.quantize(xv, lacking); }), Status::kInvalidArgument);
  // Hadamard on a columnwise copy whose M is not a multiple of 16.
  QuantizerConfig rht = make_config(ScalingMode::kNVFP4);
  rht.random_hadamard = true;
  rht.columnwise = true;
  Quantizer qr(rht);
  std::vector<float> x2(20 * 16, 1.0f);
  QuantizedTensor t2 = qr.allocate(20, 16);
  EXPECT_EQ(status_of([&] { qr.quantize(TensorView::contiguous(x2.data(), DType::kFloat32, {20, 16}), t2); }),
            Status::kShapeMismatch);
  // Dequantize a usage that is absent, into a wrong shape.
  std::vector<float> out(32 * 48);
  q.quantize(xv, t);
  EXPECT_EQ(status_of([&] { dequantize(t.view(), TensorView::contiguous(out.data(), DType::kFloat32, {32, 48}), true); }),
            Status::kInvalidArgument);
  EXPECT_EQ(status_of([&] { dequantize(t.view(), TensorView::contiguous(out.data(), DType::kFloat32, {48, 32})); }),
            Status::kShapeMismatch);
  // CUDA backend on host data.
  EXPECT_EQ(status_of([&] { q.quantize(xv, t.view(), Backend::kCUDA); }), Status::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
