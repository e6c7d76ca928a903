// The grouped linear step's spec (linear_step.h): a recipe resolved once into the three roles'
// formats, checked against the step's GEMMs and the layer's sizes, with the sizes the step
// derives from them (the wgrad token alignment, the saved context's bound, the weight layout).
#include "tessera/nn/linear_step.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "nn/member_scaling.h"
#include "nn/weight_layout.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"
#include "tessera/formats/scaling_modes.h"

namespace tessera::nn {
namespace {

// Module type of the roles a linear step asks for.
constexpr const char* kModule = "grouped_linear";

DType recipe_dense_dtype(const Recipe& recipe) {
  for (const RecipeInfo& info : recipe_table()) {
    if (recipe.name == info.name && info.activation_mode == ScalingMode::kNone) {
      return info.scale_dtype;  // "bf16" → bfloat16, "fp32" → float32
    }
  }
  return DType::kBFloat16;
}

// The name a message gives a recipe: a custom one's own name ("custom:<name>;..." texts
// included), a built-in one's.
std::string recipe_label(const Recipe& r) {
  std::string name = r.name;
  if (name.rfind("custom:", 0) == 0) name = name.substr(7, name.find(';') - 7);
  return name;
}

// The three GEMMs of a step meet (input, weight), (grad_output, weight), (grad_output, input).
void check_pairs(const LinearSpec& s, const Recipe& recipe, const std::string& layer) {
  const std::pair<const RoleFormat*, const char*> pairs[3][2] = {
      {{&s.input, "input"}, {&s.weight, "weight"}},
      {{&s.grad_output, "grad_output"}, {&s.weight, "weight"}},
      {{&s.grad_output, "grad_output"}, {&s.input, "input"}}};
  static constexpr const char* kGemm[3] = {"forward x·W", "dgrad dy·W", "wgrad dy·x"};
  for (int i = 0; i < 3; ++i) {
    const auto& [a, b] = pairs[i];
    TESSERA_CHECK_STATUS(
        modes_can_meet(a.first->config.mode, b.first->config.mode), Status::kUnsupported,
        "recipe '", echo(recipe_label(recipe)), "', layer '", echo(layer), "': modes (input ",
        scaling_mode_name(s.input.config.mode), ", weight ",
        scaling_mode_name(s.weight.config.mode), ", grad_output ",
        scaling_mode_name(s.grad_output.config.mode), ") cannot meet in the step's GEMMs (the ",
        kGemm[i], " GEMM meets ", a.second, " and ", b.second,
        "): A and B of a GEMM must be of one scale family — all tensor, all rowwise, "
        "block1x128 / block128x128 in any mix, or mxfp8 / mxfp8_32x32 / nvfp4 / nvfp4_16x16 in "
        "any mix (formats/scaling_modes.h)");
  }
}

// An affine bound of the bytes of x's columnwise copy at T rows as carve_quantized places it
// (scales per member over `groups` members where the step scales so).
// The exact size g(T) (pieces without alignment) grows by blocks and paddings whose periods all
// divide 512 rows, so g(T + 512) = g(T) + (g(512) − g(0)): the slope is the mean over a period
// and the intercept the largest excess within one; each carved piece adds at most 256 bytes.
SavedSize columnwise_copy_size(const QuantizerConfig& c, int64_t cols, int64_t groups) {
  constexpr int64_t kPeriod = 512;
  const int64_t members = detail::member_scaled(c, true) ? groups : 1;
  const auto exact = [&](int64_t rows) {
    int64_t bytes = data_shape(c, rows, cols, true).bytes() +
                    members * scale_shape(c, rows, cols, true).bytes();
    return bytes + (has_amax(c.mode) ? 4 * members : 0);
  };
  SavedSize z;
  const int64_t g0 = exact(0);
  z.per_row = (exact(kPeriod) - g0 + kPeriod - 1) / kPeriod;
  for (int64_t t = 0; t < kPeriod; ++t) z.fixed = std::max(z.fixed, exact(t) - z.per_row * t);
  z.fixed += 4 * 256;  // data, scales, amax: each carved at a 256-byte boundary
  return z;
}

// Rows of the token dimension one scale (or Hadamard block) of a columnwise copy covers: the
// mode's block along the copy's rows, 0 for modes whose unit is the whole dimension (tensor,
// rowwise).
int64_t token_block(ScalingMode m) {
  const ScalingModeInfo& info = scaling_mode_info(m);
  return info.block_rows == 0 || info.block_cols == 0 ? 0 : info.block_cols;
}

// Rows of the stacked (G·out, in) weight matrix that one scaling unit of the weight's copies
// covers: a block mode's block along out in either copy (its rowwise blocks, or the columnwise
// copy's blocks of the transpose); 1 for modes whose unit is a whole dimension, scaled per
// expert by the step (tensor, rowwise).
int64_t weight_unit_rows(ScalingMode m) {
  const ScalingModeInfo& info = scaling_mode_info(m);
  return info.block_rows == 0 || info.block_cols == 0 ? 1
                                                      : std::max(info.block_rows, info.block_cols);
}

// The saved context of a quantized step: starts and padded starts (G+1 int64 each), then x's
// columnwise copy at padded_rows_for(T) <= T + G·(align − 1) + align rows.
SavedSize saved_context_size(const LinearSpec& s) {
  const SavedSize copy = columnwise_copy_size(s.input.config, s.in, s.groups);
  SavedSize z;
  z.per_row = copy.per_row;
  z.fixed = copy.fixed + copy.per_row * (s.groups * (s.wgrad_align - 1) + s.wgrad_align) +
            2 * (s.groups + 1) * 8 + 2 * 256;
  return z;
}

}  // namespace

LinearSpec make_linear_spec(const Recipe& recipe, const std::string& name, int64_t groups,
                            int64_t in, int64_t out, bool bias, std::optional<DType> dense_dtype) {
  TESSERA_CHECK(groups >= 1, "num_groups: ", groups, " must be >= 1");
  TESSERA_CHECK(in >= 1 && out >= 1, "in_features ", in, " and out_features ", out,
                " must be >= 1");
  checked_mul(checked_mul(groups, out, "num_groups * out_features"), in,
              "num_groups * out_features * in_features");
  LinearSpec s;
  s.groups = groups;
  s.in = in;
  s.out = out;
  s.bias = bias;
  if (!recipe.quantized()) {
    const DType dt = dense_dtype.value_or(recipe_dense_dtype(recipe));
    TESSERA_CHECK_STATUS(is_floating_input(dt), Status::kDTypeMismatch, "compute dtype ",
                         dtype_name(dt), " must be float32, bfloat16 or float16");
    for (RoleFormat* r : {&s.input, &s.weight, &s.grad_output}) r->dense_dtype = dt;
    return s;
  }
  const auto role = [&](TensorType t) {
    RoleFormat f;
    f.quantized = true;
    f.config = recipe.config_for({kModule, t, name});
    validate_config(f.config);
    return f;
  };
  s.input = role(TensorType::kInput);
  s.weight = role(TensorType::kWeight);
  s.grad_output = role(TensorType::kGradOutput);
  check_pairs(s, recipe, name);
  // x and W are B operands of the backward GEMMs, which take E5M2 only as A (the gradient).
  for (const auto& [f, t] : {std::pair{&s.input, TensorType::kInput},
                             std::pair{&s.weight, TensorType::kWeight}}) {
    TESSERA_CHECK_STATUS(f->config.element != DType::kFloat8E5M2, Status::kUnsupported,
                         "recipe '", echo(recipe_label(recipe)), "', role ",
                         echo(QuantizerRole{kModule, t, name}.to_string()),
                         ": element 'e5m2' is taken for grad_output only; expected 'e4m3' (the "
                         "GEMMs run E4M3 x E4M3 and E5M2 x E4M3 with the gradient as A: x and "
                         "W are B operands of the backward GEMMs)");
  }
  // Experts stay apart: a weight block spanning the end of W_g and the start of W_g+1 would let
  // one expert's weights (an outlier, a NaN) change another's outputs and gradients.
  const int64_t unit = weight_unit_rows(s.weight.config.mode);
  TESSERA_CHECK_STATUS(groups == 1 || out % unit == 0, Status::kUnsupported, "layer '",
                       echo(name), "': the weight's ", scaling_mode_name(s.weight.config.mode),
                       " blocks cover ", unit, " rows of out_features: out_features (", out,
                       ") must be a multiple of ", unit, " with ", groups, " experts, or a block "
                       "would span two experts (one expert's weights would change another's "
                       "results)");
  s.wgrad_align = std::max({int64_t{16}, token_block(s.input.config.mode),
                            token_block(s.grad_output.config.mode)});
  s.saved_input = saved_context_size(s);
  // Packed E2M1 codes: the widths the NVFP4 copies pack two per byte must be even.
  for (const RoleFormat* f : {&s.input, &s.weight, &s.grad_output}) {
    if (!scaling_mode_info(f->config.mode).fp4) continue;
    TESSERA_CHECK_STATUS(in % 2 == 0 && out % 2 == 0, Status::kUnsupported, "layer '", echo(name),
                         "': NVFP4 packs two codes per byte along in_features (", in,
                         ") and out_features (", out, "): both must be even");
  }
  s.weight_layout = detail::weight_layout_bytes(s);
  return s;
}

SavedSize saved_size(const LinearSpec& s, bool save_input) {
  return s.quantized() && save_input ? s.saved_input : SavedSize{};
}

}  // namespace tessera::nn
