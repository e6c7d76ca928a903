// Built-in recipes, parsing, role → config, custom factories and RecipeState.
#include "tessera/quantize/recipe.h"

#include <sstream>

#include "tessera/core/status.h"

namespace tessera {
namespace {

std::string recipe_names() {
  std::ostringstream os;
  for (const RecipeInfo& r : kRecipeTable) os << (os.tellp() > 0 ? ", " : "") << r.name;
  return os.str();
}

bool is_fp8_mode(ScalingMode m) {
  const ScalingModeInfo& info = scaling_mode_info(m);
  return info.family != ScaleFamily::kNone && !info.fp4;
}

}  // namespace

const char* tensor_type_name(TensorType t) noexcept {
  switch (t) {
    case TensorType::kInput: return "input";
    case TensorType::kWeight: return "weight";
    case TensorType::kOutput: return "output";
    case TensorType::kGradOutput: return "grad_output";
    case TensorType::kGradInput: return "grad_input";
    case TensorType::kGradWeight: return "grad_weight";
  }
  return "unknown";
}

bool is_gradient(TensorType t) noexcept {
  return t == TensorType::kGradOutput || t == TensorType::kGradInput || t == TensorType::kGradWeight;
}

const char* element_format_name(ElementFormat f) noexcept {
  switch (f) {
    case ElementFormat::kE4M3: return "e4m3";
    case ElementFormat::kE5M2: return "e5m2";
    case ElementFormat::kHybrid: return "hybrid";
    case ElementFormat::kE2M1: return "e2m1";
    case ElementFormat::kNone: return "none";
  }
  return "unknown";
}

std::string QuantizerRole::to_string() const {
  return module_type + "/" + tensor_type_name(tensor_type) + "/" + name;
}

std::span<const RecipeInfo> recipe_table() { return kRecipeTable; }

const RecipeInfo& recipe_info(std::string_view name) {
  for (const RecipeInfo& r : kRecipeTable) {
    if (name == r.name) return r;
  }
  TESSERA_FAIL(Status::kInvalidArgument, "recipe: '", echo(name), "' is not known; expected one of ",
               recipe_names(), " (FP8 ones optionally with :e4m3, :e5m2 or :hybrid)");
}

Recipe parse_recipe(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view base = text.substr(0, colon);
  const RecipeInfo& info = recipe_info(base);
  Recipe r;
  r.name = std::string(text);
  r.activation_mode = info.activation_mode;
  r.weight_mode = info.weight_mode;
  r.format = info.default_format;
  r.token_alignment = info.token_alignment;
  r.delayed = base == "fp8_delayed";
  r.power_of_two_scales = scaling_mode_info(info.activation_mode).power_of_two_default;
  if (colon != std::string_view::npos) {
    const std::string_view fmt = text.substr(colon + 1);
    TESSERA_CHECK(is_fp8_mode(info.activation_mode), "recipe: '", echo(text), "': ", base,
                  " has fixed element formats (",
                  element_format_name(info.default_format),
                  "); a :format suffix is accepted for the FP8 recipes only");
    if (fmt == "e4m3") {
      r.format = ElementFormat::kE4M3;
    } else if (fmt == "e5m2") {
      r.format = ElementFormat::kE5M2;
    } else if (fmt == "hybrid") {
      r.format = ElementFormat::kHybrid;
    } else {
      TESSERA_FAIL(Status::kInvalidArgument, "recipe: '", echo(text), "': format '", echo(fmt),
                   "' is not known; expected e4m3, e5m2 or hybrid");
    }
  }
  return r;
}

QuantizerConfig Recipe::config_for(const QuantizerRole& role) const {
  if (factory) return factory(role);
  TESSERA_CHECK(activation_mode != ScalingMode::kNone, "recipe ", echo(name),
                " does not quantize; there is no quantizer for role ", echo(role.to_string()));
  const bool weight = role.tensor_type == TensorType::kWeight;
  const bool grad = is_gradient(role.tensor_type);
  QuantizerConfig c = make_config(weight ? weight_mode : activation_mode);
  if (c.mode == ScalingMode::kMXFP8 && weight && weight_tiles) c.mode = ScalingMode::kMXFP8_32x32;
  switch (format) {
    case ElementFormat::kE4M3: c.element = DType::kFloat8E4M3; break;
    case ElementFormat::kE5M2: c.element = DType::kFloat8E5M2; break;
    case ElementFormat::kHybrid: c.element = grad ? DType::kFloat8E5M2 : DType::kFloat8E4M3; break;
    case ElementFormat::kE2M1: c.element = DType::kFloat4E2M1; break;
    case ElementFormat::kNone: break;
  }
  c.rowwise = true;
  c.columnwise = role.tensor_type == TensorType::kInput || weight ||
                 role.tensor_type == TensorType::kGradOutput;
  c.delayed = delayed;
  c.amax_history_len = amax_history_len;
  c.amax_algo = amax_algo;
  c.margin = margin;
  c.amax_epsilon = amax_epsilon;
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  // Power-of-two scales exist for the FP32-scaled families.
  c.power_of_two_scales = power_of_two_scales && info.scale_dtype == DType::kFloat32;
  c.e8m0_rounding = e8m0_rounding;
  const bool nvfp4 = info.family == ScaleFamily::kNVFP4;
  c.scale_layout = info.swizzle ? scale_layout : ScaleLayout::kCompact;
  if (nvfp4 && !weight) {
    c.random_hadamard = random_hadamard && (role.tensor_type == TensorType::kInput ||
                                            role.tensor_type == TensorType::kGradOutput);
    c.stochastic_rounding = stochastic_rounding && role.tensor_type == TensorType::kGradOutput;
    c.rng_seed = rng_seed;
  }
  return c;
}

Recipe CustomRecipe::to_recipe() const {
  TESSERA_CHECK(factory != nullptr, "CustomRecipe: the factory is empty");
  TESSERA_CHECK(token_alignment >= 1, "CustomRecipe: token_alignment ", token_alignment,
                " must be >= 1");
  Recipe r;
  r.name = name;
  r.factory = factory;
  r.token_alignment = token_alignment;
  return r;
}

RecipeState::RecipeState(Recipe recipe, Device device) : recipe_(std::move(recipe)), device_(device) {}

Quantizer& RecipeState::quantizer(const QuantizerRole& role) {
  auto it = quantizers_.find(role);
  if (it == quantizers_.end()) {
    auto q = std::make_unique<Quantizer>(recipe_.config_for(role), device_);
    it = quantizers_.emplace(role, std::move(q)).first;
  }
  return *it->second;
}

std::vector<Quantizer*> RecipeState::set_roles(const std::vector<QuantizerRole>& roles) {
  std::vector<Quantizer*> out;
  out.reserve(roles.size());
  for (const QuantizerRole& r : roles) out.push_back(&quantizer(r));
  return out;
}

DelayedScalingState RecipeState::member_state(const QuantizerRole& role, int64_t members) {
  const QuantizerConfig& c = quantizer(role).config();
  TESSERA_CHECK(c.delayed, "member_state: role ", role.to_string(),
                " is not scaled with an amax history (delayed scaling)");
  TESSERA_CHECK(members >= 1, "member_state: ", members, " members; expected >= 1");
  auto it = member_states_.find(role);
  if (it == member_states_.end()) {
    MemberState st;
    st.members = members;
    const std::vector<float> ones(static_cast<size_t>(members), 1.0f);
    const std::vector<float> zeros(static_cast<size_t>(members * c.amax_history_len), 0.0f);
    st.scale = Buffer(ones.size() * sizeof(float), device_);
    st.amax_history = Buffer(zeros.size() * sizeof(float), device_);
    copy_bytes(st.scale.data(), device_, ones.data(), Device::cpu(), st.scale.bytes());
    copy_bytes(st.amax_history.data(), device_, zeros.data(), Device::cpu(),
               st.amax_history.bytes());
    it = member_states_.emplace(role, std::move(st)).first;
  }
  MemberState& st = it->second;
  TESSERA_CHECK(st.members == members, "member_state: role ", role.to_string(), " has state for ",
                st.members, " members, asked for ", members);
  return {TensorView::contiguous(st.scale.data(), DType::kFloat32, {members}, device_),
          TensorView::contiguous(st.amax_history.data(), DType::kFloat32,
                                 {int64_t{c.amax_history_len}, members}, device_)};
}

void RecipeState::update(Stream stream) {
  for (auto& [role, q] : quantizers_) {
    if (q->config().delayed) q->update(stream);
  }
}

}  // namespace tessera
