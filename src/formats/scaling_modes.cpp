// Look-ups in the scaling-mode table (formats/scaling_modes.h).
#include "tessera/formats/scaling_modes.h"

#include <string>
#include <vector>

#include "tessera/core/status.h"

namespace tessera {
namespace {

std::string join_names(bool with_none) {
  std::vector<ScalingMode> modes;
  for (const ScalingModeInfo& r : kScalingModeTable)
    if (r.family != ScaleFamily::kNone || with_none) modes.push_back(r.mode);
  return scaling_mode_names(modes);
}

}  // namespace

const ScalingModeInfo& scaling_mode_info(ScalingMode m) {
  const ScalingModeInfo* r = find_scaling_mode(m);
  TESSERA_CHECK(r != nullptr, "scaling mode: value ", static_cast<int>(m),
                " is not a ScalingMode; expected one of ", scaling_mode_names(true));
  return *r;
}

std::span<const ScalingModeInfo> scaling_mode_table() { return kScalingModeTable; }

std::string scaling_mode_names(std::span<const ScalingMode> modes) {
  std::string s;
  for (ScalingMode m : modes) {
    if (!s.empty()) s += ", ";
    s += scaling_mode_info(m).name;
  }
  return s;
}

const char* scaling_mode_names(bool with_none) {
  static const std::string kWith = join_names(true), kWithout = join_names(false);
  return with_none ? kWith.c_str() : kWithout.c_str();
}

}  // namespace tessera
