// A process-wide switch read from the environment: "1" turns it on, "0" off, anything else (or
// unset) leaves the default. The switches that choose between two equivalent paths (A/B runs,
// probes) read it once, at their first use.
#pragma once

#include <cstdlib>
#include <cstring>

namespace tessera::detail {

// 1 for "1", 0 for "0", else `fallback` (a switch with a third, automatic state passes that).
inline int env_switch(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v != nullptr && std::strcmp(v, "1") == 0) return 1;
  if (v != nullptr && std::strcmp(v, "0") == 0) return 0;
  return fallback;
}

inline bool env_flag(const char* name, bool fallback) {
  return env_switch(name, fallback ? 1 : 0) == 1;
}

}  // namespace tessera::detail
