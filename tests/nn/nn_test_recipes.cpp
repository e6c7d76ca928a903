// The built-in recipes the nn tests run, by name (parse_recipe of recipe.h).
#include "nn_test_util.h"

namespace tessera::nn::test {

std::vector<std::string> recipe_names() {
  return {"fp32", "bf16", "fp8_current", "fp8_delayed", "fp8_rowwise", "fp8_block", "mxfp8",
          "nvfp4"};
}

std::shared_ptr<Recipe> make_recipe(const std::string& name) {
  return std::make_shared<Recipe>(parse_recipe(name));
}

}  // namespace tessera::nn::test
