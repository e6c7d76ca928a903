// Subcommands of the `tessera` program. Each takes the arguments after its name and returns the
// process exit code. Registered in main.cpp's table.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

using Args = std::vector<std::string>;

int run_info(const Args& args);
int run_demo(const Args& args);
int run_bench(const Args& args);

}  // namespace tessera::cli
