// The recipes `tessera demo` trains with: the built-in table rows and one custom recipe that
// mixes formats by role (MXFP8 for forward tensors, NVFP4 with stochastic rounding for
// gradients).
#include "demo_model.h"
#include "tessera/core/status.h"

namespace tessera::cli::demo {

std::vector<std::string> demo_recipe_names() {
  return {"fp32", "bf16", "fp8_current", "fp8_delayed", "fp8_rowwise", "fp8_block", "mxfp8",
          "nvfp4", "custom"};
}

std::shared_ptr<Recipe> make_demo_recipe(const std::string& name) {
  if (name != "custom") return std::make_shared<Recipe>(parse_recipe(name));
  CustomRecipe custom;
  custom.name = "custom";
  custom.token_alignment = 128;  // NVFP4 gradients: 128 rows per group
  custom.factory = [](const QuantizerRole& role) {
    if (!is_gradient(role.tensor_type)) return make_config(ScalingMode::kMXFP8);
    QuantizerConfig c = make_config(ScalingMode::kNVFP4);
    c.stochastic_rounding = true;
    c.rng_seed = 2026;
    return c;
  };
  return std::make_shared<Recipe>(custom.to_recipe());
}

}  // namespace tessera::cli::demo
