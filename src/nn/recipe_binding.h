// The one place the nn layers read a Recipe: role → operand format + quantizer (through a
// RecipeState, which owns the quantizers and their delayed-scaling state), the dense compute
// dtype of recipes that do not quantize, and the token alignment. Everything else in src/nn works
// on OperandFormat / OperandProducer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/operand.h"
#include "tessera/quantize/recipe.h"

namespace tessera::nn::detail {

// Module types of the roles the nn layers ask for.
inline constexpr const char* kGroupedLinearModule = "grouped_linear";
// GroupedMLP saves fc1's output (the SwiGLU input) through {grouped_mlp, kOutput, <name>}.
inline constexpr const char* kGroupedMlpModule = "grouped_mlp";

// The producer (format + quantizer) for `role`; the quantizer lives in `state`, which the
// producer keeps alive. Recipes that do not quantize give a dense producer.
OperandProducer make_producer(const std::shared_ptr<RecipeState>& state, const QuantizerRole& role);
// Rows each group is padded to (1: none).
int64_t recipe_token_alignment(const Recipe& recipe);

}  // namespace tessera::nn::detail
