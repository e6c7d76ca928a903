// linear_backward (and mlp_backward) with dy given as its rowwise quantized copy
// (LinearBackwardArgs::dy_rowwise: a combine's quantized gradient). The oracle is the backward
// given dŷ = dequantize(dy_rowwise) as an FP32 matrix:
// - the wgrad's columnwise copy of dy (kept through keep_grad_output), dW and db equal that
//   backward's bit for bit — on CUDA the rowwise-FP8 copy is made from the codes by the wide
//   kernels, the others through an FP32 image of dŷ;
// - dx is the dgrad of the given codes (dy is not quantized again): against an FP64 product of
//   the dequantized operands, and exactly 0 on rows in no group (whose codes are NaN here);
// - mlp_backward passes it to fc2: fc2's dW equals the dŷ backward's bit for bit;
// - T = 0 runs; bad arguments raise errors naming dy_rowwise.
// CPU and, with an sm_90 GPU, CUDA (every recipe whose gradient the combine quantizes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "nn_device_util.h"
#include "nn_test_util.h"
#include "tessera/core/status.h"
#include "tessera/formats/scaling_modes.h"
#include "tessera/nn/allocator.h"
#include "tessera/nn/linear_step.h"
#include "tessera/nn/mlp_step.h"
#include "tessera/quantize/quantizer.h"
#include "tessera/quantize/recipe.h"

namespace tessera::nn::test {
namespace {

constexpr int64_t kG = 4;
// Ragged groups (an empty one, one over two 128-row chunks), 3 capacity rows in no group.
const std::vector<int64_t> kEnds = {37, 37, 338, 356};
constexpr int64_t kT = 359;

// The group of row r (kG: none).
int64_t group_of(int64_t r) {
  int64_t g = 0;
  while (g < kG && r >= kEnds[g]) ++g;
  return g;
}

// dy (T, cols): rows of different magnitudes, rows past the groups NaN (no gradient may read
// them), quantized rowwise in `c`'s mode; its dequantized image.
struct QuantizedDy {
  Quantizer q;
  QuantizedTensor codes;
  std::vector<float> image;
  QuantizedDy(QuantizerConfig c, int64_t cols, Device dev, uint64_t seed)
      : q((c.rowwise = true, c.columnwise = false, c), dev), codes(q.allocate(kT, cols)) {
    std::vector<float> dy = random_normal(kT * cols, seed, 0.1f);
    for (int64_t r = 0; r < kT; ++r)
      for (int64_t c2 = 0; c2 < cols; ++c2)
        dy[r * cols + c2] *= r >= kEnds.back() ? NAN : std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
    Dev d(dy, {kT, cols}, DType::kFloat32, dev);
    q.quantize(d.view, codes);
    image.assign(kT * cols, 0.0f);
    Dev img(image, {kT, cols}, DType::kFloat32, dev);
    dequantize(codes.view(), img.view);
    image = floats_of(img.view);
  }
};

struct Grads {
  std::vector<float> dx, dw, db;
  std::vector<uint8_t> col_codes, col_scales;
};

Grads backward(const LinearSpec& spec, const WeightCopies& wc, const LinearSaved& saved,
               const QuantizedDy& dq, bool as_codes, Allocator& alloc, Device dev) {
  std::vector<int64_t> ends = kEnds;
  Dev offs(ends, {kG}, DType::kInt64, dev);
  Dev dy(dq.image, {kT, spec.out}, DType::kFloat32, dev);
  std::vector<float> poison(kT * spec.in, 7.0f);  // every dx element must be written
  Dev dx(poison, {kT, spec.in}, DType::kFloat32, dev);
  std::vector<float> dw0(kG * spec.out * spec.in, 0.0f), db0(kG * spec.out, 0.0f);
  Dev dw(dw0, {kG, spec.out, spec.in}, DType::kFloat32, dev);
  Dev db(db0, {kG, spec.out}, DType::kFloat32, dev);
  LinearGradOutput kept;
  LinearBackwardArgs b;
  if (as_codes) {
    b.dy_rowwise = dq.codes.view();
  } else {
    b.dy = dy.view;
  }
  b.offsets = offs.view;
  b.dx = dx.view;
  b.dw = dw.view;
  b.db = db.view;
  b.keep_grad_output = &kept;
  linear_backward(spec, wc, saved, b, {}, alloc);
  Grads g;
  g.dx = floats_of(dx.view);
  g.dw = floats_of(dw.view);
  g.db = floats_of(db.view);
  g.col_codes = bytes_of(kept.columnwise.columnwise_data);
  g.col_scales = bytes_of(kept.columnwise.columnwise_scale_inv);
  return g;
}

// Empty when every check passes, else what failed.
std::string check_recipe(const std::string& name, int64_t in, int64_t out, Device dev) {
  const auto recipe = make_recipe(name);
  const LinearSpec spec = make_linear_spec(*recipe, "fc2", kG, in, out, true);
  PoolAllocator alloc;
  std::vector<float> w = random_normal(kG * out * in, 71, 0.05f);
  Dev wd(w, {kG, out, in}, DType::kFloat32, dev);
  const WeightCopies wc = quantize_weight(spec, wd.view, {}, alloc);
  std::vector<float> xs = random_normal(kT * in, 72);
  Dev x(xs, {kT, in}, DType::kFloat32, dev);
  std::vector<int64_t> ends = kEnds;
  Dev offs(ends, {kG}, DType::kInt64, dev);
  std::vector<float> y0(kT * out);
  Dev y(y0, {kT, out}, DType::kFloat32, dev);
  const LinearSaved saved = forward_saving_input(spec, wc, x.view, offs.view, y.view, alloc);
  const QuantizedDy dq(spec.grad_output.config, out, dev, 73);

  const Grads want = backward(spec, wc, saved, dq, false, alloc, dev);
  const Grads got = backward(spec, wc, saved, dq, true, alloc, dev);
  std::string err;
  // The columnwise codes of the layout's rows up to the last group's padded end (rows past it
  // are not read by the wgrad and not specified).
  std::vector<int64_t> ps(kG + 1);
  copy_bytes(ps.data(), Device::cpu(), saved.padded_starts.data, dev, ps.size() * 8);
  const bool transposed = scaling_mode_info(spec.grad_output.config.mode).columnwise_transposed;
  const int64_t tp = saved.padded_rows;
  int64_t diff = 0;
  for (int64_t r = 0; r < ps[kG]; ++r)
    for (int64_t n = 0; n < out; ++n) {
      const int64_t i = transposed ? n * tp + r : r * out + n;
      diff += got.col_codes[i] != want.col_codes[i];
    }
  if (diff) err += std::to_string(diff) + " of dy's columnwise codes differ; ";
  if (got.col_scales != want.col_scales) err += "dy's columnwise scales differ; ";
  if (std::memcmp(got.dw.data(), want.dw.data(), got.dw.size() * 4) != 0) err += "dW differs; ";
  if (std::memcmp(got.db.data(), want.db.data(), got.db.size() * 4) != 0) err += "db differs; ";
  // dx against FP64 over the dequantized operands: dŷ and W's dgrad copy (the columnwise copy
  // of W, or MXFP8's rowwise copy of Wᵀ per group), wh[(g·out + n)·in + k].
  std::vector<float> wimg(kG * out * in);
  std::vector<float> wh(kG * out * in);
  if (wc.columnwise_is_wt()) {
    Dev wt32(wimg, {kG * in, out}, DType::kFloat32, dev);
    dequantize(wc.wt, wt32.view);
    const std::vector<float> t = floats_of(wt32.view);
    for (int64_t g = 0; g < kG; ++g)
      for (int64_t n = 0; n < out; ++n)
        for (int64_t k = 0; k < in; ++k) wh[(g * out + n) * in + k] = t[(g * in + k) * out + n];
  } else {
    Dev w32(wimg, {kG * out, in}, DType::kFloat32, dev);
    dequantize(wc.q, w32.view, /*columnwise=*/true);
    wh = floats_of(w32.view);
  }
  const double rel = 2.0 * (out + 4) * std::ldexp(1.0, -24) + (out / 32.0 + 1) * std::ldexp(1.0, -12);
  int64_t bad = 0;
  for (int64_t r = 0; r < kT; ++r) {
    const int64_t g = group_of(r);
    for (int64_t k = 0; k < in; ++k) {
      const float v = got.dx[r * in + k];
      if (g == kG) {  // a row in no group: exactly 0
        bad += v != 0.0f;
        continue;
      }
      double s = 0, mag = 0;
      for (int64_t n = 0; n < out; ++n) {
        const double p = double(dq.image[r * out + n]) * wh[(g * out + n) * in + k];
        s += p;
        mag += std::fabs(p);
      }
      bad += !(std::fabs(v - s) <= rel * mag + 1e-30);
    }
  }
  if (bad) err += std::to_string(bad) + " dx elements outside the bound; ";
  return err;
}

const char* const kRecipes[] = {"fp8_rowwise", "fp8_block", "mxfp8"};

TEST(LinearDyRowwise, CpuEqualsTheBackwardOnTheDequantizedDy) {
  for (const char* r : kRecipes) EXPECT_EQ(check_recipe(r, 256, 384, Device::cpu()), "") << r;
}

// CUDA: rowwise FP8 through the codes kernels (a partial 256-column slab at out = 400), the
// others through the FP32 image.
TEST(LinearDyRowwise, CudaEqualsTheBackwardOnTheDequantizedDy) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const char* r : kRecipes) {
    EXPECT_EQ(check_recipe(r, 256, 384, Device::cuda(0)), "") << r;
  }
  EXPECT_EQ(check_recipe("fp8_rowwise", 256, 400, Device::cuda(0)), "") << "out = 400";
}

// mlp_backward hands dy_rowwise to fc2: fc2's dW equals the dŷ backward's bit for bit; dx is
// close (fc2's dgrad reads the given codes, not a re-quantization of dŷ).
void check_mlp(Device dev) {
  const auto recipe = make_recipe("fp8_rowwise");
  constexpr int64_t kH = 128, kF = 128;
  const MlpSpec spec = make_mlp_spec(*recipe, "", kG, kH, kF, false);
  PoolAllocator alloc;
  std::vector<float> w1 = random_normal(kG * 2 * kF * kH, 81, 0.08f);
  std::vector<float> w2 = random_normal(kG * kH * kF, 82, 0.08f);
  Dev w1d(w1, {kG, 2 * kF, kH}, DType::kFloat32, dev), w2d(w2, {kG, kH, kF}, DType::kFloat32, dev);
  const MlpWeights w{quantize_weight(spec.fc1, w1d.view, {}, alloc),
                     quantize_weight(spec.fc2, w2d.view, {}, alloc)};
  std::vector<float> xs = random_normal(kT * kH, 83);
  Dev x(xs, {kT, kH}, DType::kFloat32, dev);
  std::vector<int64_t> ends = kEnds;
  Dev offs(ends, {kG}, DType::kInt64, dev);
  std::vector<float> y0(kT * kH);
  Dev y(y0, {kT, kH}, DType::kFloat32, dev);
  MlpForwardArgs f;
  f.x = x.view;
  f.offsets = offs.view;
  f.y = y.view;
  f.need_wgrad = true;
  const MlpSaved saved = mlp_forward(spec, w, f, {}, alloc);
  const QuantizedDy dq(spec.fc2.grad_output.config, kH, dev, 84);
  Dev dy(dq.image, {kT, kH}, DType::kFloat32, dev);
  std::vector<float> dxs[2], dw1s[2], dw2s[2];
  for (int codes = 0; codes < 2; ++codes) {
    std::vector<float> dx0(kT * kH), dw10(kG * 2 * kF * kH), dw20(kG * kH * kF);
    Dev dx(dx0, {kT, kH}, DType::kFloat32, dev);
    Dev dw1(dw10, {kG, 2 * kF, kH}, DType::kFloat32, dev), dw2(dw20, {kG, kH, kF}, DType::kFloat32, dev);
    MlpBackwardArgs b;
    if (codes) {
      b.dy_rowwise = dq.codes.view();
    } else {
      b.dy = dy.view;
    }
    b.offsets = offs.view;
    b.dx = dx.view;
    b.fc1_dw = dw1.view;
    b.fc2_dw = dw2.view;
    mlp_backward(spec, w, saved, b, {}, alloc);
    dxs[codes] = floats_of(dx.view);
    dw1s[codes] = floats_of(dw1.view);
    dw2s[codes] = floats_of(dw2.view);
  }
  EXPECT_EQ(std::memcmp(dw2s[0].data(), dw2s[1].data(), dw2s[0].size() * 4), 0) << "fc2 dW";
  for (const auto* v : {&dxs, &dw1s}) {
    double sig = 0, noise = 0;
    for (size_t i = 0; i < (*v)[0].size(); ++i) {
      ASSERT_TRUE(std::isfinite((*v)[1][i])) << i;
      sig += double((*v)[0][i]) * (*v)[0][i];
      noise += double((*v)[1][i] - (*v)[0][i]) * ((*v)[1][i] - (*v)[0][i]);
    }
    EXPECT_GT(10 * std::log10(sig / std::max(noise, 1e-300)), 30.0)
        << (v == &dxs ? "dx" : "fc1 dW");
  }
  for (int64_t r = kEnds.back(); r < kT; ++r)
    for (int64_t c = 0; c < kH; ++c) EXPECT_EQ(dxs[1][r * kH + c], 0.0f) << r;
}

TEST(LinearDyRowwise, MlpBackwardPassesItToFc2) {
  check_mlp(Device::cpu());
  if (has_sm90()) check_mlp(Device::cuda(0));
}

TEST(LinearDyRowwise, EmptyBatchAndBadArguments) {
  const auto recipe = make_recipe("fp8_rowwise");
  const LinearSpec spec = make_linear_spec(*recipe, "fc2", kG, 64, 128, false);
  PoolAllocator alloc;
  std::vector<float> w = random_normal(kG * 128 * 64, 91, 0.05f);
  const WeightCopies wc = quantize_weight(spec, view_of(w, {kG, 128, 64}), {}, alloc);
  QuantizerConfig c = spec.grad_output.config;
  c.columnwise = false;
  Quantizer q(c);
  // T = 0.
  std::vector<int64_t> zeros = {0, 0, 0, 0};
  std::vector<float> none(1);
  LinearForwardArgs f0;
  f0.x = TensorView::contiguous(none.data(), DType::kFloat32, {0, 64});
  f0.offsets = view_of(zeros);
  f0.y = TensorView::contiguous(none.data(), DType::kFloat32, {0, 128});
  f0.save_input = true;
  const LinearSaved s0 = linear_forward(spec, wc, f0, {}, alloc);
  QuantizedTensor empty = q.allocate(0, 128);
  std::vector<float> dw0(kG * 128 * 64, 5.0f);
  LinearBackwardArgs b0;
  b0.dy_rowwise = empty.view();
  b0.offsets = view_of(zeros);
  b0.dw = view_of(dw0, {kG, 128, 64});
  linear_backward(spec, wc, s0, b0, {}, alloc);
  for (float v : dw0) ASSERT_EQ(v, 0.0f);

  // Eight rows.
  std::vector<float> xs = random_normal(8 * 64, 92), ys(8 * 128), dys = random_normal(8 * 128, 93);
  std::vector<int64_t> e8 = {2, 4, 6, 8};
  LinearForwardArgs f;
  f.x = view_of(xs, {8, 64});
  f.offsets = view_of(e8);
  f.y = view_of(ys, {8, 128});
  f.save_input = true;
  const LinearSaved saved = linear_forward(spec, wc, f, {}, alloc);
  QuantizedTensor dyq = q.allocate(8, 128);
  q.quantize(view_of(dys, {8, 128}), dyq);
  std::vector<float> dxs(8 * 64);
  const auto expect_error = [&](LinearBackwardArgs a, const LinearSpec& sp, const char* what) {
    try {
      linear_backward(sp, wc, saved, a, {}, alloc);
      ADD_FAILURE() << "no error for: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dy_rowwise"), std::string::npos) << e.what();
    }
  };
  LinearBackwardArgs a;
  a.dy_rowwise = dyq.view();
  a.offsets = view_of(e8);
  a.dx = view_of(dxs, {8, 64});
  LinearBackwardArgs both = a;
  both.dy = view_of(dys, {8, 128});
  expect_error(both, spec, "dy and dy_rowwise both given");
  const LinearSpec block = make_linear_spec(*make_recipe("fp8_block"), "fc2", kG, 64, 128, false);
  expect_error(a, block, "a rowwise copy for a block recipe");
  QuantizedTensor narrow = q.allocate(8, 64);
  LinearBackwardArgs wrong_cols = a;
  wrong_cols.dy_rowwise = narrow.view();
  expect_error(wrong_cols, spec, "a copy of 64 columns for out = 128");
  QuantizedTensor short_rows = q.allocate(6, 128);
  LinearBackwardArgs wrong_rows = a;
  wrong_rows.dy_rowwise = short_rows.view();
  expect_error(wrong_rows, spec, "6 rows for a forward of 8");
}

}  // namespace
}  // namespace tessera::nn::test
