// Subcommands of the `tessera` program. Each takes the arguments after its name and returns the
// process exit code. Registered in main.cpp's table.
#pragma once

#include <exception>
#include <string>
#include <vector>

namespace tessera::cli {

using Args = std::vector<std::string>;

// The sentence of a tessera error for a command-line user: its message without the
// "tessera <status>: " prefix and the " [file:line, check ...]" suffix.
std::string user_message(const std::exception& e);

int run_info(const Args& args);
int run_demo(const Args& args);
int run_bench(const Args& args);

}  // namespace tessera::cli
