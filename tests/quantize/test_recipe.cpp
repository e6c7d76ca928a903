// Recipes and roles: the table, parsing and its errors, role → config (HYBRID by role, weights
// vs activations, usages), custom factories (called once per role, same bits as the built-in),
// and RecipeState keeping delayed-scaling history across role changes.
#include <gtest/gtest.h>

#include <cstring>

#include "quantize_cases.h"
#include "tessera/core/status.h"
#include "tessera/quantize/recipe.h"

namespace tessera {
namespace {

const QuantizerRole kIn{"grouped_linear", TensorType::kInput, "fc1"};
const QuantizerRole kW{"grouped_linear", TensorType::kWeight, "fc1"};
const QuantizerRole kDy{"grouped_linear", TensorType::kGradOutput, "fc1"};

Status status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.status();
  }
  return Status::kOk;
}

TEST(Recipe, TableHasEveryDesignRowAndAlignment) {
  std::map<std::string, int> align;
  for (const RecipeInfo& r : recipe_table()) align[r.name] = r.token_alignment;
  EXPECT_EQ(align.size(), 8u);
  EXPECT_EQ(align["fp8_delayed"], 16);
  EXPECT_EQ(align["fp8_current"], 16);
  EXPECT_EQ(align["fp8_rowwise"], 16);
  EXPECT_EQ(align["fp8_block"], 16);
  EXPECT_EQ(align["mxfp8"], 32);
  EXPECT_EQ(align["nvfp4"], 128);
  EXPECT_EQ(parse_recipe("nvfp4").token_alignment, 128);
  EXPECT_FALSE(parse_recipe("bf16").quantized());
}

TEST(Recipe, RolesToConfigs) {
  const Recipe hybrid = parse_recipe("fp8_current");
  EXPECT_EQ(hybrid.config_for(kIn).element, DType::kFloat8E4M3);
  EXPECT_EQ(hybrid.config_for(kW).element, DType::kFloat8E4M3);
  EXPECT_EQ(hybrid.config_for(kDy).element, DType::kFloat8E5M2);
  EXPECT_EQ(parse_recipe("fp8_current:e4m3").config_for(kDy).element, DType::kFloat8E4M3);
  const Recipe block = parse_recipe("fp8_block");
  EXPECT_EQ(block.config_for(kIn).mode, ScalingMode::kBlock1x128);
  EXPECT_EQ(block.config_for(kW).mode, ScalingMode::kBlock128x128);
  EXPECT_TRUE(block.config_for(kW).power_of_two_scales);
  const Recipe nv = parse_recipe("nvfp4");
  EXPECT_EQ(nv.config_for(kW).mode, ScalingMode::kNVFP4_16x16);
  EXPECT_TRUE(nv.config_for(kIn).random_hadamard);
  EXPECT_FALSE(nv.config_for(kIn).stochastic_rounding);
  EXPECT_TRUE(nv.config_for(kDy).stochastic_rounding);
  EXPECT_TRUE(parse_recipe("fp8_delayed").config_for(kIn).delayed);
  const QuantizerConfig out = parse_recipe("mxfp8").config_for({"m", TensorType::kGradInput, "x"});
  EXPECT_TRUE(out.rowwise);
  EXPECT_FALSE(out.columnwise);
  EXPECT_TRUE(hybrid.config_for(kIn).columnwise);
}

TEST(Recipe, ParseErrors) {
  EXPECT_EQ(status_of([] { parse_recipe("fp9"); }), Status::kInvalidArgument);
  EXPECT_EQ(status_of([] { parse_recipe("nvfp4:e5m2"); }), Status::kInvalidArgument);
  EXPECT_EQ(status_of([] { parse_recipe("fp8_current:e3m4"); }), Status::kInvalidArgument);
  EXPECT_EQ(status_of([] { parse_recipe("bf16").config_for(kIn); }), Status::kInvalidArgument);
  EXPECT_EQ(status_of([] { CustomRecipe{}.to_recipe(); }), Status::kInvalidArgument);
  try {
    parse_recipe("fp9");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mxfp8"), std::string::npos) << e.what();
  }
}

TEST(Recipe, CustomFactoryReproducesCurrentScalingOncePerRole) {
  std::map<QuantizerRole, int> calls;
  CustomRecipe custom;
  custom.factory = [&](const QuantizerRole& role) {
    ++calls[role];
    QuantizerConfig c = make_config(ScalingMode::kTensor);
    c.element = is_gradient(role.tensor_type) ? DType::kFloat8E5M2 : DType::kFloat8E4M3;
    c.columnwise = true;
    return c;
  };
  RecipeState mine(custom.to_recipe()), builtin(parse_recipe("fp8_current"));
  test::HostInput in = test::make_input(DType::kBFloat16, 40, 72, test::InputKind::kGaussian, 2);
  for (int step = 0; step < 3; ++step) {
    for (const QuantizerRole& role : {kIn, kW, kDy}) {
      Quantizer& a = mine.quantizer(role);
      Quantizer& b = builtin.quantizer(role);
      QuantizedTensor ta = a.allocate(40, 72), tb = b.allocate(40, 72);
      a.quantize(in.view(), ta);
      b.quantize(in.view(), tb);
      ASSERT_EQ(test::compare_quantized(ta.view(), tb.view()), "") << role.to_string();
    }
  }
  EXPECT_EQ(calls.size(), 3u);
  for (const auto& [role, n] : calls) EXPECT_EQ(n, 1) << role.to_string();
}

TEST(RecipeState, DelayedHistorySurvivesRoleChanges) {
  RecipeState state(parse_recipe("fp8_delayed"));
  std::vector<float> x(16 * 32, 3.0f);
  const TensorView xv = TensorView::contiguous(x.data(), DType::kFloat32, {16, 32});
  std::vector<Quantizer*> qs = state.set_roles({kIn, kW});
  QuantizedTensor t = qs[0]->allocate(16, 32);
  qs[0]->quantize(xv, t);
  state.update();
  const float scale_after = *qs[0]->scale().as<float>();
  EXPECT_EQ(scale_after, 448.0f / 3.0f);
  // Roles change (another module, then back): the input's quantizer and history are kept.
  state.set_roles({kDy});
  std::vector<Quantizer*> again = state.set_roles({kIn, kW});
  EXPECT_EQ(again[0], qs[0]);
  EXPECT_EQ(*again[0]->scale().as<float>(), scale_after);
  EXPECT_EQ(again[0]->amax_history().as<float>()[1023], 3.0f);
  EXPECT_EQ(state.size(), 3u);
}

}  // namespace
}  // namespace tessera
