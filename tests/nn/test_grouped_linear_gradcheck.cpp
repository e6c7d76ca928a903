// FP32 recipe: GroupedLinear and GroupedMLP gradients (dx, dW, db, routing-probability grads)
// against central finite differences of a float64-summed scalar loss L = Σ r ⊙ y.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "nn_test_util.h"
#include "tessera/nn/grouped_linear.h"
#include "tessera/nn/grouped_mlp.h"

namespace tessera::nn::test {
namespace {

constexpr double kStep = 1e-2;      // central-difference step (L is smooth, O(1) inputs)
constexpr double kMaxRelErr = 1e-3;

// Relative error ‖fd − an‖ / ‖an‖ and the worst element, printed as one table row.
double compare(const char* what, const std::vector<double>& fd, const std::vector<float>& an) {
  double diff = 0, norm = 0, worst = 0;
  for (size_t i = 0; i < fd.size(); ++i) {
    const double d = fd[i] - an[i];
    diff += d * d;
    norm += double(an[i]) * an[i];
    worst = std::max(worst, std::abs(d));
  }
  const double rel = norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
  std::printf("  %-14s %6zu values  |grad| %.3e  rel err %.2e  max abs err %.2e\n", what,
              fd.size(), std::sqrt(norm), rel, worst);
  return rel;
}

// Central differences of `loss` w.r.t. every element of `params`.
std::vector<double> finite_differences(std::vector<float>& params,
                                       const std::function<double()>& loss) {
  std::vector<double> g(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const float keep = params[i];
    params[i] = keep + static_cast<float>(kStep);
    const double up = loss();
    params[i] = keep - static_cast<float>(kStep);
    const double down = loss();
    params[i] = keep;
    g[i] = (up - down) / (double(keep + float(kStep)) - double(keep - float(kStep)));
  }
  return g;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Host copies of a layer's parameters that the loss closure writes back before each forward.
struct HostParam {
  std::vector<float> value;
  TensorView dst;
  explicit HostParam(const TensorView& v) : value(static_cast<size_t>(v.numel())), dst(v) {
    std::copy_n(v.as<float>(), v.numel(), value.data());
  }
  void push() const { std::copy(value.begin(), value.end(), dst.as<float>()); }
};

TEST(GroupedLinearGradcheck, Fp32MatchesFiniteDifferences) {
  const auto recipe = make_recipe("fp32");
  const int64_t g = 3, in = 8, out = 6;
  std::vector<int64_t> splits = {3, 0, 5};
  const int64_t t = 8;
  GroupedLinear layer(g, in, out, *recipe, /*bias=*/true, {});
  layer.reset_parameters(7);
  std::vector<float> x = random_normal(t * in, 1), r = random_normal(t * out, 2);
  std::vector<float> y(static_cast<size_t>(t * out));
  HostParam w(layer.weight()), b(layer.bias());
  auto loss = [&] {
    w.push();
    b.push();
    layer.forward(view_of(x, {t, in}), view_of(splits), view_of(y, {t, out}), {false, true});
    return dot(r, y);
  };
  std::vector<float> dx(x.size()), dw(w.value.size()), db(b.value.size());
  w.push();
  b.push();
  GroupedLinearContext ctx =
      layer.forward(view_of(x, {t, in}), view_of(splits), view_of(y, {t, out}));
  layer.backward(ctx, view_of(r, {t, out}),
                 {view_of(dx, {t, in}), view_of(dw, {g, out, in}), view_of(db, {g, out})});
  std::printf("GroupedLinear FP32 vs central differences (step %g):\n", kStep);
  EXPECT_LT(compare("dx", finite_differences(x, loss), dx), kMaxRelErr);
  EXPECT_LT(compare("dW", finite_differences(w.value, loss), dw), kMaxRelErr);
  EXPECT_LT(compare("db", finite_differences(b.value, loss), db), kMaxRelErr);
  for (int64_t i = 0; i < out * in; ++i) EXPECT_EQ(dw[static_cast<size_t>(out * in + i)], 0.0f);
}

TEST(GroupedMLPGradcheck, Fp32MatchesFiniteDifferences) {
  const auto recipe = make_recipe("fp32");
  const int64_t g = 3, hidden = 6, ffn = 5;
  std::vector<int64_t> splits = {4, 0, 5};
  const int64_t t = 9;
  GroupedMLPOptions opt;
  opt.bias = true;
  GroupedMLP mlp(g, hidden, ffn, *recipe, opt);
  mlp.reset_parameters(3);
  std::vector<float> x = random_normal(t * hidden, 11), r = random_normal(t * hidden, 12);
  std::vector<float> probs = random_normal(t, 13, 0.5f);
  std::vector<float> y(static_cast<size_t>(t * hidden));
  HostParam w1(mlp.fc1().weight()), b1(mlp.fc1().bias());
  HostParam w2(mlp.fc2().weight()), b2(mlp.fc2().bias());
  auto push = [&] {
    for (const HostParam* p : {&w1, &b1, &w2, &b2}) p->push();
  };
  auto loss = [&] {
    push();
    mlp.forward(view_of(x, {t, hidden}), view_of(splits), view_of(probs, {t}),
                view_of(y, {t, hidden}), {false, true});
    return dot(r, y);
  };
  std::vector<float> dx(x.size()), dp(probs.size());
  std::vector<float> dw1(w1.value.size()), db1(b1.value.size());
  std::vector<float> dw2(w2.value.size()), db2(b2.value.size());
  push();
  GroupedMLPContext ctx = mlp.forward(view_of(x, {t, hidden}), view_of(splits),
                                      view_of(probs, {t}), view_of(y, {t, hidden}));
  GroupedMLPGrads grads;
  grads.dx = view_of(dx, {t, hidden});
  grads.dprobs = view_of(dp, {t});
  grads.fc1_dw = view_of(dw1, {g, 2 * ffn, hidden});
  grads.fc1_db = view_of(db1, {g, 2 * ffn});
  grads.fc2_dw = view_of(dw2, {g, hidden, ffn});
  grads.fc2_db = view_of(db2, {g, hidden});
  mlp.backward(ctx, view_of(r, {t, hidden}), grads);
  std::printf("GroupedMLP FP32 (fc1 -> SwiGLU x probs -> fc2) vs central differences:\n");
  EXPECT_LT(compare("dx", finite_differences(x, loss), dx), kMaxRelErr);
  EXPECT_LT(compare("dprobs", finite_differences(probs, loss), dp), kMaxRelErr);
  EXPECT_LT(compare("fc1 dW", finite_differences(w1.value, loss), dw1), kMaxRelErr);
  EXPECT_LT(compare("fc1 db", finite_differences(b1.value, loss), db1), kMaxRelErr);
  EXPECT_LT(compare("fc2 dW", finite_differences(w2.value, loss), dw2), kMaxRelErr);
  EXPECT_LT(compare("fc2 db", finite_differences(b2.value, loss), db2), kMaxRelErr);
}

}  // namespace
}  // namespace tessera::nn::test
