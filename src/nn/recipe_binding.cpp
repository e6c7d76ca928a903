// Recipe → operand formats and quantizers for the nn layers' roles.
#include "nn/recipe_binding.h"

#include "tessera/core/status.h"

namespace tessera::nn::detail {
namespace {

// Compute dtype of a recipe without quantization: the table row's dtype ("bf16" → bfloat16,
// "fp32" → float32); float32 for anything else.
DType dense_dtype(const Recipe& recipe) {
  for (const RecipeInfo& info : recipe_table()) {
    if (recipe.name == info.name && info.activation_mode == ScalingMode::kNone) {
      return info.scale_dtype;
    }
  }
  return DType::kFloat32;
}

}  // namespace

OperandProducer make_producer(const std::shared_ptr<RecipeState>& state,
                              const QuantizerRole& role) {
  TESSERA_CHECK(state != nullptr, "make_producer: no recipe state");
  const Recipe& recipe = state->recipe();
  if (!recipe.quantized()) {
    OperandFormat f;
    f.dense_dtype = dense_dtype(recipe);
    return OperandProducer(f, nullptr, nullptr);
  }
  Quantizer& q = state->quantizer(role);
  OperandFormat f;
  f.quantized = true;
  f.config = q.config();
  return OperandProducer(f, &q, state);
}

int64_t recipe_token_alignment(const Recipe& recipe) {
  TESSERA_CHECK(recipe.token_alignment >= 1, "recipe ", echo(recipe.name), ": token alignment ",
                recipe.token_alignment, " must be >= 1");
  return recipe.token_alignment;
}

}  // namespace tessera::nn::detail
