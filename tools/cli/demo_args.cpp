// `tessera demo` options: parsing and the up-front checks.
//
// Parsed by hand, not with an argument library: Debian ships CLI11 (libcli11-dev) and cxxopts,
// but the `tessera` program is built by every build of tessera, `pip install .` on any machine
// and the offline GPU machines included (tools/gpu/fetch_deps.sh), and each of those would need
// one more system package for a loop over nine `--name value` options. What a library would add
// is here already and tested (tests/cli): every refusal names the option and its value, before
// any work; --help is written out below. Revisit when a command grows subcommands or flags
// beyond `--name value`.
#include "demo_args.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <system_error>

#include <unistd.h>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/status.h"

namespace tessera::cli::demo {
namespace {

constexpr const char* kValueOptions[] = {"--steps", "--experts", "--hidden", "--ffn", "--topk",
                                         "--tokens", "--recipes", "--device", "--out"};

bool known_option(const std::string& a) {
  for (const char* o : kValueOptions) {
    if (a == o) return true;
  }
  return false;
}

int64_t parse_count(const std::string& flag, const std::string& v) {
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TESSERA_CHECK(used == v.size() && n >= 1, flag, " expects a positive integer, got '", v, "'");
  return n;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Device parse_device_option(const std::string& v) {
  try {
    return parse_device(v);
  } catch (const Error&) {
    TESSERA_FAIL(Status::kInvalidArgument, "--device expects cpu, cuda or cuda:N, got '", v, "'");
  }
}

// True when some tensor of `recipe` is stored in a sub-byte (packed) element format.
bool packs_sub_byte(const Recipe& recipe) {
  if (!recipe.quantized()) return false;
  for (int t = 0; t <= static_cast<int>(TensorType::kGradWeight); ++t) {
    const QuantizerRole role{"grouped_linear", static_cast<TensorType>(t), "demo"};
    if (dtype_bits(recipe.config_for(role).element) < 8) return true;
  }
  return false;
}

void check_recipes(const DemoArgs& d) {
  TESSERA_CHECK(!d.recipes.empty(), "--recipes is empty");
  const DemoConfig& c = d.config;
  for (const std::string& r : d.recipes) {
    std::shared_ptr<Recipe> recipe;
    try {
      recipe = make_demo_recipe(r);
    } catch (const Error&) {
      std::string names;
      for (const std::string& n : demo_recipe_names()) names += (names.empty() ? "" : ", ") + n;
      TESSERA_FAIL(Status::kInvalidArgument, "--recipes: '", r, "' is not a recipe; expected a "
                   "comma-separated list of ", names, " (FP8 ones optionally with :e4m3, :e5m2 "
                   "or :hybrid)");
    }
    // Packed E2M1 rows hold two values per byte: the GEMM operands of widths hidden and ffn
    // must have an even number of columns.
    TESSERA_CHECK(!packs_sub_byte(*recipe) || (c.hidden % 2 == 0 && c.ffn % 2 == 0),
                  "--recipes ", r, " stores 4-bit values two per byte, so --hidden and --ffn must "
                  "be even (got --hidden ", c.hidden, " and --ffn ", c.ffn, ")");
  }
}

void check_device(const Device& device) {
  if (!device.is_cuda()) return;
  TESSERA_CHECK(cuda_compiled(), "--device ", to_string(device),
                ": this tessera was built without CUDA; use --device cpu");
  const int n = cuda_device_count();
  TESSERA_CHECK_STATUS(n > 0, Status::kNoDevice, "--device ", to_string(device),
                       ": no CUDA device is present on this machine; use --device cpu");
  TESSERA_CHECK(device.index < n, "--device ", to_string(device), ": ", n,
                " CUDA device(s) found; use --device cpu or cuda:0..cuda:", n - 1);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (b >= 1000 && u < 6) b /= 1000, ++u;
  char s[64];
  std::snprintf(s, sizeof s, "%.3g %s", b, units[u]);
  return s;
}

// Host memory of a run, roughly: the data of every step (x and target), the layer's parameters
// with gradients, Adam moments and the reference gradients, the routed activations of a step.
double host_bytes_estimate(const DemoConfig& c) {
  const double h = double(c.hidden), f = double(c.ffn), e = double(c.experts);
  const double params = e * h + 3.0 * e * f * h;
  const double rows = double(c.tokens) * double(c.topk);
  return 8.0 * double(c.steps) * double(c.tokens) * h + 32.0 * params + 4.0 * rows * (5 * h + 6 * f);
}

void check_memory(const DemoConfig& c) {
  const double need = host_bytes_estimate(c);
  const double have = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  TESSERA_CHECK_STATUS(
      need <= have, Status::kOutOfMemory, "these sizes (--tokens ", c.tokens, ", --hidden ",
      c.hidden, ", --ffn ", c.ffn, ", --experts ", c.experts, ", --topk ", c.topk, ", --steps ",
      c.steps, ") need about ", human_bytes(need), " of host memory, more than this machine's ",
      human_bytes(have), "; choose smaller ones");
}

// Creates --out and makes sure a file can be written there, before any training.
void check_out(const std::string& out) {
  const std::filesystem::path p(out);
  std::error_code ec;
  std::filesystem::create_directories(p, ec);
  TESSERA_CHECK(!ec, "--out '", out, "': cannot create the directory (", ec.message(), ")");
  TESSERA_CHECK(std::filesystem::is_directory(p, ec), "--out '", out, "' is not a directory");
  TESSERA_CHECK(access(out.c_str(), W_OK) == 0, "--out '", out, "' is not writable");
}

}  // namespace

void print_demo_help() {
  std::printf(
      "usage: tessera demo [options]\n"
      "  Trains a small MoE layer (router + GroupedMLP: fc1 -> SwiGLU x routing prob -> fc2)\n"
      "  to imitate a fixed random teacher MoE, once per recipe plus an FP32 reference run, and\n"
      "  reports final loss, loss vs FP32, gradient SQNR vs FP32 (initial weights, same data),\n"
      "  bytes saved for backward and step time; writes the loss curves as an SVG.\n"
      "  With --device cuda the FP32 reference runs on the host (the CUDA GEMM takes no FP32\n"
      "  operands) within a fixed budget of host work: at large sizes it trains fewer steps and\n"
      "  the gradient comparison uses the first tokens of the first batch (the table says so).\n\n"
      "options:\n"
      "  --steps N      training steps per recipe (default 70)\n"
      "  --experts N    experts (default 8)\n"
      "  --hidden N     model width (default 256)\n"
      "  --ffn N        expert FFN width (default 512)\n"
      "  --topk N       experts per token (default 2)\n"
      "  --tokens N     tokens per step (default 256)\n"
      "  --recipes L    comma-separated subset of: ");
  for (const std::string& r : demo_recipe_names()) std::printf("%s ", r.c_str());
  std::printf(
      "\n  --device D     cpu | cuda[:N] (default cpu)\n"
      "  --out DIR      output folder for demo_loss.svg (default demo_out)\n");
}

bool parse_demo_args(const Args& args, DemoArgs& d) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") return false;
    TESSERA_CHECK(known_option(a), "unknown option '", a, "' (see tessera demo --help)");
    TESSERA_CHECK(i + 1 < args.size(), "option ", a, " needs a value (see tessera demo --help)");
    const std::string& v = args[++i];
    if (a == "--steps") d.config.steps = parse_count(a, v);
    else if (a == "--experts") d.config.experts = parse_count(a, v);
    else if (a == "--hidden") d.config.hidden = parse_count(a, v);
    else if (a == "--ffn") d.config.ffn = parse_count(a, v);
    else if (a == "--topk") d.config.topk = parse_count(a, v);
    else if (a == "--tokens") d.config.tokens = parse_count(a, v);
    else if (a == "--recipes") d.recipes = split_list(v);
    else if (a == "--device") d.config.device = parse_device_option(v);
    else d.out = v;
  }
  TESSERA_CHECK(d.config.topk <= d.config.experts, "--topk ", d.config.topk,
                " must not exceed --experts ", d.config.experts);
  check_memory(d.config);
  check_recipes(d);
  check_device(d.config.device);
  check_out(d.out);
  return true;
}

}  // namespace tessera::cli::demo
