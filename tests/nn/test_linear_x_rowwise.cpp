// linear_forward with x given as its rowwise quantized copy (LinearForwardArgs::x_rowwise: an FP8
// dispatch's payload). The oracle is the step given x̂ = dequantize(x_rowwise) as an FP32 matrix:
// - the saved columnwise copy (the wgrad's operand) equals that step's bit for bit — on CUDA the
//   rowwise-FP8 copy is made from the codes by the wide kernels, the others through an FP32
//   image; so the weight gradients of the two backward passes are equal bit for bit;
// - y is the GEMM of the given codes (x is not quantized again): against an FP64 product of the
//   dequantized operands, within the CUDA FP8 GEMM tests' budget, and exactly 0 on rows in no
//   group;
// - T = 0 runs; bad arguments raise errors naming x_rowwise.
// CPU and, with an sm_90 GPU, CUDA (every recipe whose payload the dispatch quantizes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "nn_device_util.h"
#include "nn_test_util.h"
#include "tessera/core/status.h"
#include "tessera/nn/allocator.h"
#include "tessera/nn/linear_step.h"
#include "tessera/quantize/quantizer.h"
#include "tessera/quantize/recipe.h"

namespace tessera::nn::test {
namespace {

constexpr int64_t kG = 4;
// Ragged groups (an empty one, one over two 128-row chunks), 3 capacity rows in no group.
const std::vector<int64_t> kEnds = {37, 37, 338, 356};
constexpr int64_t kT = 359;

struct Run {
  std::vector<float> y, dw;
  std::vector<uint8_t> col_codes, col_scales;
};

// One forward (save_input) + backward (dW only) of `spec` on `dev`, x as a float matrix or as
// its rowwise copy.
Run step(const LinearSpec& spec, const WeightCopies& wc, const TensorView* x,
         const QuantizedTensorView* xq, const std::vector<float>& dy, Allocator& alloc,
         Device dev) {
  std::vector<int64_t> ends = kEnds;
  Dev offs(ends, {kG}, DType::kInt64, dev);
  std::vector<float> zeros_y(kT * spec.out, 7.0f);  // poison: every y element must be written
  Dev y(zeros_y, {kT, spec.out}, DType::kFloat32, dev);
  LinearForwardArgs f;
  if (x) f.x = *x;
  if (xq) f.x_rowwise = *xq;
  f.offsets = offs.view;
  f.y = y.view;
  f.save_input = true;
  const LinearSaved saved = linear_forward(spec, wc, f, {}, alloc);
  Run r;
  r.y = floats_of(y.view);
  r.col_codes = bytes_of(saved.input.columnwise_data);
  r.col_scales = bytes_of(saved.input.columnwise_scale_inv);
  Dev dyd(dy, {kT, spec.out}, DType::kFloat32, dev);
  std::vector<float> dw0(kG * spec.out * spec.in, 0.0f);
  Dev dw(dw0, {kG, spec.out, spec.in}, DType::kFloat32, dev);
  LinearBackwardArgs b;
  b.dy = dyd.view;
  b.offsets = offs.view;
  b.dw = dw.view;
  linear_backward(spec, wc, saved, b, {}, alloc);
  r.dw = floats_of(dw.view);
  return r;
}

// Empty when every check passes, else what failed.
std::string check_recipe(const std::string& name, int64_t in, int64_t out, Device dev) {
  const auto recipe = make_recipe(name);
  const LinearSpec spec = make_linear_spec(*recipe, "fc1", kG, in, out, false);
  PoolAllocator alloc;
  std::vector<float> w = random_normal(kG * out * in, 61, 0.05f);
  Dev wd(w, {kG, out, in}, DType::kFloat32, dev);
  const WeightCopies wc = quantize_weight(spec, wd.view, {}, alloc);
  // x's rows of different magnitudes (row scales that differ), rows past the groups NaN: they
  // belong to no group, so neither copy may read them.
  std::vector<float> xs = random_normal(kT * in, 62);
  for (int64_t r = 0; r < kT; ++r)
    for (int64_t c = 0; c < in; ++c)
      xs[r * in + c] *= r >= kEnds.back() ? NAN : std::ldexp(1.0f, static_cast<int>(r % 9) - 4);
  Dev x(xs, {kT, in}, DType::kFloat32, dev);
  QuantizerConfig c = spec.input.config;
  c.rowwise = true;
  c.columnwise = false;
  Quantizer q(c, dev);
  QuantizedTensor xq = q.allocate(kT, in);
  q.quantize(x.view, xq);
  std::vector<float> img(kT * in);
  Dev x32(img, {kT, in}, DType::kFloat32, dev);
  dequantize(xq.view(), x32.view);
  const std::vector<float> dy = random_normal(kT * out, 63, 0.1f);

  const Run want = step(spec, wc, &x32.view, nullptr, dy, alloc, dev);
  const Run got = step(spec, wc, nullptr, &xq.view(), dy, alloc, dev);
  std::string err;
  if (got.col_codes != want.col_codes) err += "saved columnwise codes differ; ";
  if (got.col_scales != want.col_scales) err += "saved columnwise scales differ; ";
  if (std::memcmp(got.dw.data(), want.dw.data(), got.dw.size() * 4) != 0) err += "dW differs; ";
  // y against FP64 over the dequantized operands (W's rowwise copy dequantized).
  std::vector<float> wimg(kG * out * in);
  Dev w32(wimg, {kG * out, in}, DType::kFloat32, dev);
  dequantize(wc.q, w32.view);
  const std::vector<float> xh = floats_of(x32.view), wh = floats_of(w32.view);
  const double rel = 2.0 * (in + 4) * std::ldexp(1.0, -24) + (in / 32.0 + 1) * std::ldexp(1.0, -12);
  int64_t bad = 0;
  for (int64_t r = 0; r < kT; ++r) {
    int64_t g = 0;
    while (g < kG && r >= kEnds[g]) ++g;
    for (int64_t n = 0; n < out; ++n) {
      const float v = got.y[r * out + n];
      if (g == kG) {  // a row in no group
        bad += v != 0.0f;
        continue;
      }
      double s = 0, mag = 0;
      for (int64_t k = 0; k < in; ++k) {
        const double p = double(xh[r * in + k]) * wh[(g * out + n) * in + k];
        s += p;
        mag += std::fabs(p);
      }
      bad += !(std::fabs(v - s) <= rel * mag + 1e-30);
    }
  }
  if (bad) err += std::to_string(bad) + " y elements outside the bound; ";
  return err;
}

const char* const kRecipes[] = {"fp8_rowwise", "fp8_block", "mxfp8"};

TEST(LinearXRowwise, CpuEqualsTheStepOnTheDequantizedX) {
  for (const char* r : kRecipes) EXPECT_EQ(check_recipe(r, 256, 384, Device::cpu()), "") << r;
}

// CUDA: rowwise FP8 through the codes kernels (a partial 256-column slab at in = 272), the
// others through the FP32 image.
TEST(LinearXRowwise, CudaEqualsTheStepOnTheDequantizedX) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const char* r : kRecipes) {
    EXPECT_EQ(check_recipe(r, 256, 384, Device::cuda(0)), "") << r;
  }
  EXPECT_EQ(check_recipe("fp8_rowwise", 272, 384, Device::cuda(0)), "") << "in = 272";
}

TEST(LinearXRowwise, EmptyBatchAndBadArguments) {
  const auto recipe = make_recipe("fp8_rowwise");
  const LinearSpec spec = make_linear_spec(*recipe, "fc1", kG, 64, 128, false);
  PoolAllocator alloc;
  std::vector<float> w = random_normal(kG * 128 * 64, 64, 0.05f);
  const WeightCopies wc = quantize_weight(spec, view_of(w, {kG, 128, 64}), {}, alloc);
  std::vector<int64_t> ends = {0, 0, 0, 0};
  QuantizerConfig c = spec.input.config;
  c.columnwise = false;
  Quantizer q(c);
  QuantizedTensor empty = q.allocate(0, 64);
  std::vector<float> y0(1);
  LinearForwardArgs f;
  f.x_rowwise = empty.view();
  f.offsets = view_of(ends);
  f.y = TensorView::contiguous(y0.data(), DType::kFloat32, {0, 128});
  f.save_input = true;
  const LinearSaved saved = linear_forward(spec, wc, f, {}, alloc);
  EXPECT_EQ(saved.rows, 0);

  std::vector<float> xs = random_normal(8 * 64, 65), ys(8 * 128);
  std::vector<int64_t> e8 = {2, 4, 6, 8};
  QuantizedTensor xq = q.allocate(8, 64);
  q.quantize(view_of(xs, {8, 64}), xq);
  const auto expect_error = [&](LinearForwardArgs a, const LinearSpec& sp, const char* what) {
    try {
      (void)linear_forward(sp, wc, a, {}, alloc);
      ADD_FAILURE() << "no error for: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("x_rowwise"), std::string::npos) << e.what();
    }
  };
  LinearForwardArgs a;
  a.x_rowwise = xq.view();
  a.offsets = view_of(e8);
  a.y = view_of(ys, {8, 128});
  LinearForwardArgs both = a;
  both.x = view_of(xs, {8, 64});
  expect_error(both, spec, "x and x_rowwise both given");
  const LinearSpec block = make_linear_spec(*make_recipe("fp8_block"), "fc1", kG, 64, 128, false);
  expect_error(a, block, "a rowwise copy for a block recipe");
  QuantizerConfig tc = make_config(ScalingMode::kTensor, DType::kFloat8E4M3);
  Quantizer tq(tc);
  QuantizedTensor xt = tq.allocate(8, 64);
  tq.quantize(view_of(xs, {8, 64}), xt);
  LinearForwardArgs per_tensor = a;
  per_tensor.x_rowwise = xt.view();
  const LinearSpec current =
      make_linear_spec(*make_recipe("fp8_current"), "fc1", kG, 64, 128, false);
  expect_error(per_tensor, current, "a per-tensor copy");
  QuantizedTensor narrow = q.allocate(8, 32);
  LinearForwardArgs wrong_cols = a;
  wrong_cols.x_rowwise = narrow.view();
  expect_error(wrong_cols, spec, "a copy of 32 columns for in = 64");
  const LinearSpec dense = make_linear_spec(*make_recipe("bf16"), "fc1", kG, 64, 128, false);
  expect_error(a, dense, "a dense recipe");
}

}  // namespace
}  // namespace tessera::nn::test
