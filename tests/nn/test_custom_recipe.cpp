// A custom recipe mixing formats by role — MXFP8 for forward tensors (input, weight, the saved
// SwiGLU input), NVFP4 with stochastic rounding for gradients — runs a GroupedMLP forward and
// backward, and its factory is called exactly once for each expected role.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "nn_test_util.h"
#include "tessera/nn/grouped_mlp.h"

namespace tessera::nn::test {
namespace {

struct MlpRun {
  std::vector<float> y, dx, dw1, dw2;
};

MlpRun run_mlp(const Recipe& recipe) {
  const int64_t g = 4, hidden = 64, ffn = 128, t = 300;
  GroupedMLPOptions opt;
  opt.name = "moe";
  GroupedMLP mlp(g, hidden, ffn, recipe, opt);
  mlp.reset_parameters(9);
  std::vector<int64_t> splits = {100, 0, 150, 50};
  std::vector<float> x = random_normal(t * hidden, 41), dy = random_normal(t * hidden, 42);
  std::vector<float> probs = random_normal(t, 43, 0.3f), dp(t);
  MlpRun r{std::vector<float>(t * hidden), std::vector<float>(t * hidden),
        std::vector<float>(g * 2 * ffn * hidden), std::vector<float>(g * hidden * ffn)};
  GroupedMLPContext ctx = mlp.forward(view_of(x, {t, hidden}), view_of(splits),
                                      view_of(probs, {t}), view_of(r.y, {t, hidden}));
  GroupedMLPGrads grads;
  grads.dx = view_of(r.dx, {t, hidden});
  grads.dprobs = view_of(dp, {t});
  grads.fc1_dw = view_of(r.dw1, {g, 2 * ffn, hidden});
  grads.fc2_dw = view_of(r.dw2, {g, hidden, ffn});
  mlp.backward(ctx, view_of(dy, {t, hidden}), grads);
  return r;
}

TEST(CustomRecipe, MixesFormatsByRoleAndSeesTheExpectedRoles) {
  std::map<std::string, int> calls;
  CustomRecipe custom;
  custom.name = "mxfp8_fwd_nvfp4_grad";
  custom.token_alignment = 128;
  custom.factory = [&calls](const QuantizerRole& role) {
    ++calls[role.to_string()];
    if (!is_gradient(role.tensor_type)) return make_config(ScalingMode::kMXFP8);
    QuantizerConfig c = make_config(ScalingMode::kNVFP4);
    c.stochastic_rounding = true;
    c.rng_seed = 7;
    return c;
  };
  const Recipe recipe = custom.to_recipe();
  const MlpRun mixed = run_mlp(recipe);
  const MlpRun ref = run_mlp(parse_recipe("fp32"));
  const std::map<std::string, int> expected = {
      {"grouped_linear/input/moe.fc1", 1},       {"grouped_linear/weight/moe.fc1", 1},
      {"grouped_linear/grad_output/moe.fc1", 1}, {"grouped_linear/input/moe.fc2", 1},
      {"grouped_linear/weight/moe.fc2", 1},      {"grouped_linear/grad_output/moe.fc2", 1},
  };  // (the SwiGLU input is saved in the activation dtype: no role of its own)
  std::printf("custom recipe factory calls:\n");
  for (const auto& [role, n] : calls) std::printf("  %-40s %d\n", role.c_str(), n);
  EXPECT_EQ(calls, expected);
  const double sy = sqnr_db(ref.y, mixed.y), sx = sqnr_db(ref.dx, mixed.dx);
  const double s1 = sqnr_db(ref.dw1, mixed.dw1), s2 = sqnr_db(ref.dw2, mixed.dw2);
  std::printf("custom (MXFP8 forward, NVFP4+SR gradients) vs FP32, SQNR dB: y %.2f  dX %.2f  "
              "fc1 dW %.2f  fc2 dW %.2f\n", sy, sx, s1, s2);
  EXPECT_TRUE(all_finite(mixed.y) && all_finite(mixed.dx) && all_finite(mixed.dw1) &&
              all_finite(mixed.dw2));
  EXPECT_GT(sy, 20.0);  // forward is all MXFP8
  EXPECT_GT(sx, 8.0);   // gradients went through 4-bit NVFP4
  EXPECT_GT(s1, 8.0);
  EXPECT_GT(s2, 8.0);
}

}  // namespace
}  // namespace tessera::nn::test
