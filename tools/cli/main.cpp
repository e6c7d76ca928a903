// Entry point of the `tessera` program: dispatches to a subcommand, turns errors into messages.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "commands.h"
#include "tessera/config.h"
#include "tessera/core/status.h"

namespace tessera::cli {

std::string user_message(const std::exception& e) {
  std::string m = e.what();
  if (dynamic_cast<const Error*>(&e) == nullptr) {
    if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return "out of host memory";
    return m;
  }
  if (m.rfind("tessera ", 0) == 0) {  // "tessera <status>: " prefix
    const size_t colon = m.find(": ");
    if (colon != std::string::npos) m.erase(0, colon + 2);
  }
  const size_t where = m.rfind(" [");
  if (where != std::string::npos && m.back() == ']') m.erase(where);
  return m;
}

}  // namespace tessera::cli

namespace {

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(const tessera::cli::Args&);
};

constexpr Command kCommands[] = {
    {"info", "print the format table, build options and CUDA devices", tessera::cli::run_info},
    {"demo", "train a small MoE layer under every recipe: loss, gradient error, memory, speed",
     tessera::cli::run_demo},
    {"bench", "time a grouped-linear training step (bf16, fp8_rowwise) through the C++ API on CUDA",
     tessera::cli::run_bench},
};

int usage(std::FILE* out) {
  std::fprintf(out, "usage: tessera <command> [options]\n\ncommands:\n");
  for (const Command& c : kCommands) {
    std::fprintf(out, "  %-8.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                 static_cast<int>(c.summary.size()), c.summary.data());
  }
  std::fprintf(out, "\n`tessera <command> --help` describes a command's options; "
                   "`tessera --version` prints the version.\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string_view name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") return usage(stdout);
  if (name == "--version" || name == "-V") {
    std::printf("tessera %s\n", TESSERA_VERSION_STRING);  // the file VERSION's, through CMake
    return 0;
  }
  for (const Command& c : kCommands) {
    if (c.name != name) continue;
    try {
      return c.run(tessera::cli::Args(argv + 2, argv + argc));
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "tessera %s: %s\n", argv[1], tessera::cli::user_message(e).c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "tessera: unknown command '%s'\n\n", argv[1]);
  return usage(stderr);
}
