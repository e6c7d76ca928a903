// The built-in recipes the nn tests run, by name (parse_recipe of recipe.h; "nvfp4:nosr": nvfp4
// without stochastic rounding).
#include "nn_test_util.h"

namespace tessera::nn::test {

std::vector<std::string> recipe_names() {
  return {"fp32", "bf16", "fp8_current", "fp8_delayed", "fp8_rowwise", "fp8_block", "mxfp8",
          "nvfp4"};
}

std::shared_ptr<Recipe> make_recipe(const std::string& name) {
  if (name == "nvfp4:nosr") {  // nvfp4 with round-to-nearest gradients (a deterministic run)
    Recipe r = parse_recipe("nvfp4");
    r.stochastic_rounding = false;
    return std::make_shared<Recipe>(r);
  }
  return std::make_shared<Recipe>(parse_recipe(name));
}

}  // namespace tessera::nn::test
