// `tessera demo` options: parsing and the checks that run before any training (a bad option is
// refused in one sentence before minutes of work, never after).
#pragma once

#include <string>
#include <vector>

#include "commands.h"
#include "demo_model.h"

namespace tessera::cli::demo {

struct DemoArgs {
  DemoConfig config;
  std::vector<std::string> recipes = demo_recipe_names();
  std::string out = "demo_out";
};

void print_demo_help();

// Parses and checks `args` (sizes, recipes against the widths, --device, host memory, --out
// writable; creates --out). Returns false when --help was asked for. Throws Error with a
// one-sentence message naming the option.
bool parse_demo_args(const Args& args, DemoArgs& d);

}  // namespace tessera::cli::demo
