// Empty experts: zero dW (and db) for every expert without tokens, no NaN anywhere, for every
// recipe, including an all-empty batch (T = 0) and all-empty splits over a non-empty buffer;
// and clear errors for bad arguments.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "nn_test_util.h"
#include "tessera/core/status.h"
#include "tessera/nn/grouped_linear.h"
#include "tessera/nn/grouped_mlp.h"

namespace tessera::nn::test {
namespace {

// out_features: whole 128-row FP8 blocks per expert (make_linear_spec refuses others).
constexpr int64_t kG = 5, kIn = 64, kOut = 128;

bool group_is_zero(const std::vector<float>& dw, int64_t g, int64_t per_group) {
  for (int64_t i = 0; i < per_group; ++i) {
    if (dw[static_cast<size_t>(g * per_group + i)] != 0.0f) return false;
  }
  return true;
}

void run_case(const std::string& name, std::vector<int64_t> splits, int64_t t) {
  const auto recipe = make_recipe(name);
  GroupedLinear layer(kG, kIn, kOut, *recipe, true, named("fc1"));
  std::vector<float> x = random_normal(t * kIn, 5), dy = random_normal(t * kOut, 6);
  std::vector<float> y(t * kOut), dx(t * kIn, 0.0f);
  std::vector<float> dw(kG * kOut * kIn, 7.0f), db(kG * kOut, 7.0f);  // garbage to overwrite
  for (int step = 0; step < 2; ++step) {
    GroupedLinearContext ctx =
        layer.forward(view_of(x, {t, kIn}), view_of(splits), view_of(y, {t, kOut}));
    layer.backward(ctx, view_of(dy, {t, kOut}),
                   {view_of(dx, {t, kIn}), view_of(dw, {kG, kOut, kIn}), view_of(db, {kG, kOut})});
  }
  int64_t live = 0;
  for (int64_t s : splits) live += s;
  const std::vector<float> y_live(y.begin(), y.begin() + live * kOut);
  const std::vector<float> dx_live(dx.begin(), dx.begin() + live * kIn);
  EXPECT_TRUE(all_finite(y_live) && all_finite(dx_live) && all_finite(dw) && all_finite(db))
      << name;
  for (int64_t g = 0; g < kG; ++g) {
    if (splits[static_cast<size_t>(g)] != 0) continue;
    EXPECT_TRUE(group_is_zero(dw, g, kOut * kIn)) << name << ": dW of empty expert " << g;
    EXPECT_TRUE(group_is_zero(db, g, kOut)) << name << ": db of empty expert " << g;
  }
}

TEST(GroupedNNEmptyExperts, ZeroWeightGradsAndNoNaN) {
  std::printf("empty experts per recipe: {0,37,0,64,0}, all-empty T=0, all-empty over T=16\n");
  for (const std::string& name : recipe_names()) {
    SCOPED_TRACE(name);
    run_case(name, {0, 37, 0, 64, 0}, 101);
    run_case(name, {0, 0, 0, 0, 0}, 0);
    run_case(name, {0, 0, 0, 0, 0}, 16);
  }
}

TEST(GroupedNNEmptyExperts, MlpAllEmptyBatch) {
  for (const std::string& name : recipe_names()) {
    SCOPED_TRACE(name);
    const auto recipe = make_recipe(name);
    GroupedMLP mlp(3, 128, 64, *recipe, {});  // fc1 and fc2: 128 out_features
    std::vector<int64_t> splits = {0, 0, 0};
    std::vector<float> x, y, probs, dy, dx, dp;
    std::vector<float> dw1(3 * 128 * 128, 1.0f), dw2(3 * 128 * 64, 1.0f);
    GroupedMLPContext ctx = mlp.forward(view_of(x, {0, 128}), view_of(splits), view_of(probs, {0}),
                                        view_of(y, {0, 128}));
    GroupedMLPGrads g;
    g.dx = view_of(dx, {0, 128});
    g.dprobs = view_of(dp, {0});
    g.fc1_dw = view_of(dw1, {3, 128, 128});
    g.fc2_dw = view_of(dw2, {3, 128, 64});
    mlp.backward(ctx, view_of(dy, {0, 128}), g);
    for (float v : dw1) ASSERT_EQ(v, 0.0f);
    for (float v : dw2) ASSERT_EQ(v, 0.0f);
  }
}

TEST(GroupedNNErrors, BadArgumentsNameTheProblem) {
  const auto recipe = make_recipe("fp32");
  EXPECT_THROW(GroupedLinear(0, 4, 4, *recipe, false), Error);
  // Parameter sizes past int64 are refused before anything is allocated (they once wrapped
  // around to a zero-byte weight buffer).
  for (const auto& [g, in, out] : {std::array<int64_t, 3>{2, int64_t{1} << 40, int64_t{1} << 40},
                                   std::array<int64_t, 3>{3, 1, int64_t{1} << 62}}) {
    try {
      GroupedLinear huge(g, in, out, *recipe, true);
      ADD_FAILURE() << "a (" << g << ", " << out << ", " << in << ") weight was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kOutOfRange) << e.what();
      EXPECT_NE(std::string(e.what()).find("num_groups * out_features"), std::string::npos);
    }
  }
  EXPECT_THROW(GroupedMLP(2, 8, int64_t{1} << 62, *recipe), Error);
  GroupedLinear layer(2, 8, 4, *recipe, false);
  std::vector<float> x(10 * 8), y(10 * 4), wrong(10 * 5);
  std::vector<int64_t> splits = {4, 6}, too_many = {8, 6}, negative = {-1, 11};
  EXPECT_THROW(layer.forward(view_of(x, {10, 8}), view_of(splits), view_of(wrong, {10, 5})),
               Error);
  EXPECT_THROW(layer.forward(view_of(x, {10, 8}), view_of(too_many), view_of(y, {10, 4})),
               Error);
  EXPECT_THROW(layer.forward(view_of(x, {10, 8}), view_of(negative), view_of(y, {10, 4})),
               Error);
  GroupedLinearContext eval =
      layer.forward(view_of(x, {10, 8}), view_of(splits), view_of(y, {10, 4}), {false, true});
  try {
    layer.backward(eval, view_of(y, {10, 4}), {view_of(x, {10, 8}), {}, {}});
    FAIL() << "backward of an eval context must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training"), std::string::npos) << e.what();
  }
  // The fp32 recipe computes on the master weights themselves: after a later forward (which may
  // follow a change of them) an earlier context's backward is refused.
  GroupedLinearContext first = layer.forward(view_of(x, {10, 8}), view_of(splits),
                                             view_of(y, {10, 4}));
  layer.forward(view_of(x, {10, 8}), view_of(splits), view_of(y, {10, 4}));
  EXPECT_THROW(layer.backward(first, view_of(y, {10, 4}), {view_of(x, {10, 8}), {}, {}}), Error);
  // Recipes with a compute copy: a context keeps the copy its forward read, so a later forward on
  // changed weights leaves an earlier context's backward as it was.
  for (const char* name : {"bf16", "fp8_current"}) {
    GroupedLinear l2(2, 8, 4, *make_recipe(name), false);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 17);
    std::vector<float> dy(10 * 4, 0.5f), dx_first(10 * 8), dx_again(10 * 8);
    GroupedLinearContext c = l2.forward(view_of(x, {10, 8}), view_of(splits), view_of(y, {10, 4}));
    l2.backward(c, view_of(dy, {10, 4}), {view_of(dx_first, {10, 8}), {}, {}});
    l2.weight().as<float>()[0] += 1.0f;
    l2.forward(view_of(x, {10, 8}), view_of(splits), view_of(y, {10, 4}));
    l2.backward(c, view_of(dy, {10, 4}), {view_of(dx_again, {10, 8}), {}, {}});
    EXPECT_EQ(dx_first, dx_again) << name << ": an earlier context read the later weights";
  }
}

}  // namespace
}  // namespace tessera::nn::test
