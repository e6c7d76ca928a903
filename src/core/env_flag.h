// A process-wide switch read from the environment: "1" turns it on, "0" off, anything else (or
// unset) leaves the default. The switches that choose between two equivalent paths (A/B runs,
// probes) read it once, at their first use.
#pragma once

#include <cstdlib>
#include <cstring>

namespace tessera::detail {

inline bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v != nullptr && std::strcmp(v, "1") == 0) return true;
  if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  return fallback;
}

}  // namespace tessera::detail
