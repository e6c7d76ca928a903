// Recipes and roles (docs/numerics.md): what a quantizer is for (QuantizerRole), the built-in
// recipes as a constexpr table (what `tessera info` and the tests read), Recipe (built-in or a
// custom factory) → QuantizerConfig per role, and RecipeState, which keeps one Quantizer per role —
// and with it the delayed-scaling state — across changes of the role list.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/quantize/quantizer.h"
#include "tessera/quantize/types.h"

namespace tessera {

enum class TensorType : int {
  kInput = 0,       // x of y = x Wᵀ: forward (rowwise) and wgrad (columnwise)
  kWeight = 1,      // W: forward (rowwise) and dgrad (columnwise)
  kOutput = 2,      // y, when a module emits quantized output (rowwise)
  kGradOutput = 3,  // dy: dgrad (rowwise) and wgrad (columnwise)
  kGradInput = 4,   // dx (rowwise)
  kGradWeight = 5,  // dW (rowwise)
};
// "input", "weight", "output", "grad_output", "grad_input", "grad_weight".
const char* tensor_type_name(TensorType t) noexcept;
bool is_gradient(TensorType t) noexcept;

// What a quantizer is for, e.g. {"grouped_linear", kWeight, "fc1"}. Ordered, comparable.
struct QuantizerRole {
  std::string module_type;
  TensorType tensor_type = TensorType::kInput;
  std::string name;
  friend auto operator<=>(const QuantizerRole&, const QuantizerRole&) = default;
  friend bool operator==(const QuantizerRole&, const QuantizerRole&) = default;
  std::string to_string() const;  // "grouped_linear/weight/fc1"
};

// Element formats of an FP8 recipe: one for everything, or HYBRID = E4M3 for forward tensors
// (input, weight, output) and E5M2 for gradients. NVFP4 recipes use kE2M1.
enum class ElementFormat : int { kE4M3 = 0, kE5M2 = 1, kHybrid = 2, kE2M1 = 3, kNone = 4 };
const char* element_format_name(ElementFormat f) noexcept;

// One row per built-in recipe (docs/numerics.md table) plus "bf16"/"fp32" (no quantization).
struct RecipeInfo {
  const char* name;
  ScalingMode activation_mode;   // inputs, outputs and gradients
  ScalingMode weight_mode;       // weights
  ElementFormat default_format;
  DType scale_dtype;             // FP32, E8M0, E4M3 (kFloat32 also for no quantization)
  int block_rows, block_cols;    // activation block (0 = whole dim): tensor (0,0), row (1,0)
  int token_alignment;           // rows per group the GEMMs need: 16 FP8, 32 MXFP8, 128 NVFP4
  const char* rule;              // one-line summary
};

inline constexpr RecipeInfo kRecipeTable[] = {
    {"fp8_delayed", ScalingMode::kTensor, ScalingMode::kTensor, ElementFormat::kHybrid,
     DType::kFloat32, 0, 0, 16, "per-tensor FP32 scale from an amax history (max/most_recent, margin)"},
    {"fp8_current", ScalingMode::kTensor, ScalingMode::kTensor, ElementFormat::kHybrid,
     DType::kFloat32, 0, 0, 16, "per-tensor FP32 scale = fp8_max / amax of this tensor"},
    {"fp8_rowwise", ScalingMode::kRowwise, ScalingMode::kRowwise, ElementFormat::kE4M3,
     DType::kFloat32, 1, 0, 16, "FP32 scale per row (columnwise: per column)"},
    {"fp8_block", ScalingMode::kBlock1x128, ScalingMode::kBlock128x128, ElementFormat::kE4M3,
     DType::kFloat32, 1, 128, 16, "power-of-two FP32 scale per 1x128 block, 128x128 for weights"},
    {"mxfp8", ScalingMode::kMXFP8, ScalingMode::kMXFP8, ElementFormat::kE4M3, DType::kFloat8E8M0,
     1, 32, 32, "E8M0 scale per 1x32 (columnwise 32x1) block, exponent rounded up"},
    {"nvfp4", ScalingMode::kNVFP4, ScalingMode::kNVFP4_16x16, ElementFormat::kE2M1,
     DType::kFloat8E4M3, 1, 16, 128,
     "E2M1, E4M3 scale per 1x16 (16x16 weights) + FP32 global; RHT for wgrad, SR for grads"},
    {"bf16", ScalingMode::kNone, ScalingMode::kNone, ElementFormat::kNone, DType::kBFloat16, 0, 0,
     1, "no quantization, bfloat16 compute"},
    {"fp32", ScalingMode::kNone, ScalingMode::kNone, ElementFormat::kNone, DType::kFloat32, 0, 0, 1,
     "no quantization, float32 compute"},
};
std::span<const RecipeInfo> recipe_table();

using QuantizerFactory = std::function<QuantizerConfig(const QuantizerRole&)>;

// A recipe: a built-in row with its options, or a custom factory. config_for(role) is the one
// place roles become configs.
struct Recipe {
  std::string name = "fp8_current";
  ScalingMode activation_mode = ScalingMode::kTensor;
  ScalingMode weight_mode = ScalingMode::kTensor;
  ElementFormat format = ElementFormat::kHybrid;
  int token_alignment = 16;
  // Options of the built-in recipes (ignored by a custom factory).
  bool delayed = false;
  int amax_history_len = 1024;
  AmaxHistoryAlgo amax_algo = AmaxHistoryAlgo::kMax;
  int margin = 0;
  float amax_epsilon = 0.0f;
  bool power_of_two_scales = false;
  E8M0Rounding e8m0_rounding = E8M0Rounding::kRoundUp;
  ScaleLayout scale_layout = ScaleLayout::kCompact;
  bool weight_tiles = false;          // mxfp8: 32x32 weight tiles (nvfp4 weights are 16x16 anyway)
  bool random_hadamard = true;        // nvfp4: RHT on the columnwise copy of input / grad_output
  bool stochastic_rounding = true;    // nvfp4: SR for grad_output
  uint64_t rng_seed = 0;
  QuantizerFactory factory;           // set: a custom recipe

  bool quantized() const { return factory != nullptr || activation_mode != ScalingMode::kNone; }
  bool custom() const { return factory != nullptr; }
  // The config of `role`: element per format (HYBRID: E5M2 for gradients), mode per tensor type,
  // usages per tensor type (input, weight, grad_output: both; others rowwise). Throws for a
  // recipe that does not quantize.
  QuantizerConfig config_for(const QuantizerRole& role) const;
};

// A recipe whose factory decides every role's config (e.g. reproduce current scaling, or mix
// formats per layer). RecipeState calls the factory once per role.
struct CustomRecipe {
  QuantizerFactory factory;
  int token_alignment = 16;
  std::string name = "custom";
  Recipe to_recipe() const;
};

// "fp8_delayed", "fp8_current", "fp8_rowwise", "fp8_block", "mxfp8", "nvfp4", "bf16", "fp32",
// optionally with ":e4m3", ":e5m2" or ":hybrid" for the FP8 ones ("fp8_current:e4m3").
// Throws Error(kInvalidArgument) naming the accepted values (E5M2/E4M3 for NVFP4 included).
Recipe parse_recipe(std::string_view name);
const RecipeInfo& recipe_info(std::string_view name);  // throws like parse_recipe

// A recipe from its text form, the form bindings pass around (e.g. through a framework's op
// schemas), `;`-separated:
//   <built-in name>[:<format>][;amax_history_len=N][;amax_compute_algo=max|most_recent]
//                  [;margin=M][;weight_tiles=0|1 (mxfp8: 32x32 weight tiles)]
//   custom:<name>;input=<mode>/<element>;weight=<mode>/<element>;grad_output=<mode>/<element>
// (a custom recipe of the three roles of a linear step, each with make_config's defaults for
// its mode and element; other roles are refused). Throws Error(kInvalidArgument) naming the
// part it cannot read.
Recipe parse_recipe_spec(std::string_view spec);
// "max" / "most_recent" ↔ AmaxHistoryAlgo (throws naming the accepted names).
AmaxHistoryAlgo amax_algo_from_name(std::string_view name);

// One Quantizer per role, created on first request (the factory / config_for is called once per
// role) and kept when the role list changes, so delayed-scaling history survives.
class RecipeState {
 public:
  explicit RecipeState(Recipe recipe, Device device = Device::cpu());
  const Recipe& recipe() const { return recipe_; }
  // Quantizers for `roles`, in order (created as needed; other roles keep their state).
  std::vector<Quantizer*> set_roles(const std::vector<QuantizerRole>& roles);
  Quantizer& quantizer(const QuantizerRole& role);
  bool has(const QuantizerRole& role) const { return quantizers_.count(role) != 0; }
  // The delayed-scaling state of a role scaled per group member (a grouped layer's experts:
  // nn/linear_step.h LinearState): scale (members) ones and amax_history (amax_history_len,
  // members) zeros, FP32 on the device, made on first request (the role's quantizer gives the
  // config) and kept like the quantizers; the training step updates it (update() below does
  // not). Throws unless the role is delayed, or when asked again with another member count.
  DelayedScalingState member_state(const QuantizerRole& role, int64_t members);
  std::size_t size() const { return quantizers_.size(); }
  // update() of every delayed-scaling quantizer (after a training step).
  void update(Stream stream = {});

 private:
  Recipe recipe_;
  Device device_;
  std::map<QuantizerRole, std::unique_ptr<Quantizer>> quantizers_;
  struct MemberState {
    int64_t members = 0;
    Buffer scale, amax_history;
  };
  std::map<QuantizerRole, MemberState> member_states_;
};

}  // namespace tessera
