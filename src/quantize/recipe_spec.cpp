// parse_recipe_spec: a Recipe from the text form bindings pass around (recipe.h).
#include <string>
#include <vector>

#include "tessera/core/status.h"
#include "tessera/quantize/recipe.h"

namespace tessera {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t at = 0;
  while (true) {
    const size_t next = s.find(sep, at);
    parts.push_back(s.substr(at, next == std::string_view::npos ? s.npos : next - at));
    if (next == std::string_view::npos) return parts;
    at = next + 1;
  }
}

int64_t parse_int(std::string_view v, const char* what, int64_t lo, int64_t hi) {
  int64_t n = 0;
  bool neg = false;
  size_t i = 0;
  if (!v.empty() && v[0] == '-') { neg = true; i = 1; }
  TESSERA_CHECK(i < v.size(), what, ": '", echo(v), "' is not an integer");
  for (; i < v.size(); ++i) {
    TESSERA_CHECK(v[i] >= '0' && v[i] <= '9' && n < (int64_t{1} << 40), what, ": '", echo(v),
                  "' is not an integer in [", lo, ", ", hi, "]");
    n = n * 10 + (v[i] - '0');
  }
  n = neg ? -n : n;
  TESSERA_CHECK(n >= lo && n <= hi, what, ": ", n, " is outside [", lo, ", ", hi, "]");
  return n;
}

// "<mode>/<element>" → make_config(mode, element).
QuantizerConfig role_config(std::string_view text, std::string_view spec) {
  const size_t slash = text.find('/');
  TESSERA_CHECK(slash != std::string_view::npos, "recipe '", echo(spec), "': role config '",
                echo(text), "' must read <mode>/<element>");
  const std::string mode(text.substr(0, slash));
  const DType element = parse_dtype(text.substr(slash + 1));
  return make_config(scaling_mode_from_name(mode.c_str()), element);
}

Recipe parse_custom(std::string_view spec, const std::vector<std::string_view>& parts) {
  // parts[0] = "custom:<name>"
  QuantizerConfig configs[3];
  bool seen[3] = {false, false, false};
  static constexpr std::string_view kRoles[3] = {"input", "weight", "grad_output"};
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string_view key = parts[i].substr(0, eq);
    int r = -1;
    for (int k = 0; k < 3; ++k) {
      if (key == kRoles[k]) r = k;
    }
    TESSERA_CHECK(r >= 0 && eq != std::string_view::npos, "recipe '", echo(spec), "': '",
                  echo(parts[i]), "' is not input=, weight= or grad_output=<mode>/<element>");
    TESSERA_CHECK(!seen[r], "recipe '", echo(spec), "': role ", kRoles[r], " is given twice");
    configs[r] = role_config(parts[i].substr(eq + 1), spec);
    seen[r] = true;
  }
  for (int k = 0; k < 3; ++k) {
    TESSERA_CHECK(seen[k], "recipe '", echo(spec), "': no config for role ", kRoles[k]);
  }
  CustomRecipe c;
  c.name = std::string(spec);  // messages name it by the part after "custom:" (its own name)
  c.factory = [configs, spec = std::string(spec)](const QuantizerRole& role) {
    switch (role.tensor_type) {
      case TensorType::kInput: return configs[0];
      case TensorType::kWeight: return configs[1];
      case TensorType::kGradOutput: return configs[2];
      default:
        TESSERA_FAIL(Status::kInvalidArgument, "recipe '", echo(spec), "' has no config for role ",
                     role.to_string());
    }
  };
  return c.to_recipe();
}

}  // namespace

AmaxHistoryAlgo amax_algo_from_name(std::string_view name) {
  if (name == "max") return AmaxHistoryAlgo::kMax;
  if (name == "most_recent") return AmaxHistoryAlgo::kMostRecent;
  TESSERA_FAIL(Status::kInvalidArgument, "amax_compute_algo: '", echo(name),
               "' is not known; expected max or most_recent");
}

Recipe parse_recipe_spec(std::string_view spec) {
  const std::vector<std::string_view> parts = split(spec, ';');
  if (parts[0].substr(0, 7) == "custom:") return parse_custom(spec, parts);
  Recipe r = parse_recipe(parts[0]);
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string_view key = parts[i].substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : parts[i].substr(eq + 1);
    for (size_t j = 1; j < i; ++j) {  // one value per option: a second one is not a silent override
      TESSERA_CHECK(parts[j].substr(0, parts[j].find('=')) != key, "recipe '", echo(spec),
                    "': option '", echo(key), "' is given twice");
    }
    if (key == "amax_history_len") {
      r.amax_history_len = static_cast<int>(parse_int(value, "amax_history_len", 1, 1 << 24));
    } else if (key == "amax_compute_algo") {
      r.amax_algo = amax_algo_from_name(value);
    } else if (key == "margin") {
      r.margin = static_cast<int>(parse_int(value, "margin", -126, 126));
    } else if (key == "weight_tiles") {
      TESSERA_CHECK(r.activation_mode == ScalingMode::kMXFP8, "recipe '", echo(spec),
                    "': option 'weight_tiles' (32x32 weight tiles) is for mxfp8 only");
      r.weight_tiles = parse_int(value, "weight_tiles", 0, 1) == 1;
    } else {
      TESSERA_FAIL(Status::kInvalidArgument, "recipe '", echo(spec), "': option '", echo(key),
                   "' is not known; expected amax_history_len, amax_compute_algo, margin or "
                   "weight_tiles (mxfp8)");
    }
  }
  return r;
}

}  // namespace tessera
