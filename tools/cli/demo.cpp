// `tessera demo`: trains a small MoE layer (router + GroupedMLP experts) on a synthetic
// regression task (imitating a fixed random teacher MoE) once per recipe, then prints a table
// (final loss, loss vs FP32, gradient SQNR vs FP32, bytes saved for backward, step time) and
// writes an SVG of the loss curves.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include <unistd.h>

#include "commands.h"
#include "demo_model.h"
#include "tessera/core/status.h"

namespace tessera::cli {
namespace {

using demo::DemoConfig;
using demo::RecipeRun;

struct DemoArgs {
  DemoConfig config;
  std::vector<std::string> recipes = demo::demo_recipe_names();
  std::string out = "demo_out";
};

void print_help() {
  std::printf(
      "usage: tessera demo [options]\n"
      "  Trains a small MoE layer (router + GroupedMLP: fc1 -> SwiGLU x routing prob -> fc2)\n"
      "  to imitate a fixed random teacher MoE, once per recipe, and reports final loss, loss\n"
      "  vs FP32, gradient SQNR vs FP32 (step 0, same weights and data), bytes saved for\n"
      "  backward and step time; writes the loss curves as an SVG.\n\n"
      "options:\n"
      "  --steps N      training steps per recipe (default 70)\n"
      "  --experts N    experts (default 8)\n"
      "  --hidden N     model width (default 256)\n"
      "  --ffn N        expert FFN width (default 512)\n"
      "  --topk N       experts per token (default 2)\n"
      "  --tokens N     tokens per step (default 256)\n"
      "  --recipes L    comma-separated subset of: ");
  for (const std::string& r : demo::demo_recipe_names()) std::printf("%s ", r.c_str());
  std::printf(
      "\n  --device D     cpu | cuda[:N] (default cpu)\n"
      "  --out DIR      output folder for demo_loss.svg (default demo_out)\n");
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

// Returns false when --help was asked for.
bool parse_args(const Args& args, DemoArgs& d) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") return false;
    TESSERA_CHECK(i + 1 < args.size(), "option ", a, " needs a value (see tessera demo --help)");
    const std::string& v = args[++i];
    if (a == "--steps") d.config.steps = parse_count(a, v);
    else if (a == "--experts") d.config.experts = parse_count(a, v);
    else if (a == "--hidden") d.config.hidden = parse_count(a, v);
    else if (a == "--ffn") d.config.ffn = parse_count(a, v);
    else if (a == "--topk") d.config.topk = parse_count(a, v);
    else if (a == "--tokens") d.config.tokens = parse_count(a, v);
    else if (a == "--recipes") d.recipes = split_list(v);
    else if (a == "--device") d.config.device = parse_device(v);
    else if (a == "--out") d.out = v;
    else TESSERA_FAIL(Status::kInvalidArgument, "unknown option '", a,
                      "' (see tessera demo --help)");
  }
  TESSERA_CHECK(d.config.topk <= d.config.experts, "--topk ", d.config.topk,
                " must not exceed --experts ", d.config.experts);
  TESSERA_CHECK(!d.recipes.empty(), "--recipes is empty");
  for (const std::string& r : d.recipes) demo::make_demo_recipe(r);  // validates the names
  return true;
}

struct Progress {
  std::string name;
  int64_t steps = 0;
  std::chrono::steady_clock::time_point start;
};

void show_progress(void* user, int64_t step, double loss) {
  const Progress& p = *static_cast<Progress*>(user);
  constexpr int kBar = 30;
  const int64_t done = step + 1;
  // Not a terminal (a log file): one line per 10% instead of carriage-return redraws.
  const bool tty = isatty(fileno(stderr)) != 0;
  if (!tty && done != p.steps && done % std::max<int64_t>(1, p.steps / 10) != 0) return;
  const int filled = static_cast<int>(kBar * done / p.steps);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count();
  std::fprintf(stderr, "%s  %-12s [%.*s%.*s] %4lld/%lld  loss %.4e  %5.1fs", tty ? "\r" : "",
               p.name.c_str(), filled, "##############################", kBar - filled,
               "..............................", static_cast<long long>(done),
               static_cast<long long>(p.steps), loss, secs);
  if (done == p.steps || !tty) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

void print_table(const std::vector<RecipeRun>& runs, const RecipeRun* fp32) {
  std::printf("\n%-12s %12s %11s %14s %14s %9s %10s\n", "recipe", "final loss", "vs FP32",
              "grad SQNR dB", "saved bytes", "vs BF16", "step ms");
  const RecipeRun* bf16 = nullptr;
  for (const RecipeRun& r : runs) {
    if (r.name == "bf16") bf16 = &r;
  }
  for (const RecipeRun& r : runs) {
    char vs[32] = "-", sq[32] = "-", vb[32] = "-";
    if (fp32) {
      std::snprintf(vs, sizeof vs, "%+.2f%%", 100.0 * (r.final_loss / fp32->final_loss - 1));
      const double s = demo::sqnr_db(fp32->step0_grads, r.step0_grads);
      if (std::isinf(s)) std::snprintf(sq, sizeof sq, "exact");
      else std::snprintf(sq, sizeof sq, "%.1f", s);
    }
    if (bf16) std::snprintf(vb, sizeof vb, "%.1f%%", 100.0 * r.saved_bytes / bf16->saved_bytes);
    std::printf("%-12s %12.5e %11s %14s %14lld %9s %10.1f\n", r.name.c_str(), r.final_loss, vs,
                sq, static_cast<long long>(r.saved_bytes), vb, r.step_ms);
  }
}

}  // namespace

int run_demo(const Args& args) {
  // OpenMP workers that spin while OpenBLAS threads work (and vice versa) starve each other on a
  // small machine (measured 7x slower steps on 2 cores). Unless the user chose a policy, run
  // again with passive OpenMP waiting; libgomp reads the variable only at start-up.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    std::vector<std::string> argv_s = {"tessera", "demo"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());  // returns only on failure: carry on as we are
  }
  DemoArgs d;
  if (!parse_args(args, d)) {
    print_help();
    return 0;
  }
  const DemoConfig& c = d.config;
  std::printf("tessera demo: MoE layer, %lld experts, hidden %lld, ffn %lld, top-%lld, %lld tokens "
              "per step, %lld steps, Adam lr %g, device %s\n",
              static_cast<long long>(c.experts), static_cast<long long>(c.hidden),
              static_cast<long long>(c.ffn), static_cast<long long>(c.topk),
              static_cast<long long>(c.tokens), static_cast<long long>(c.steps), c.lr,
              to_string(c.device).c_str());
  std::vector<RecipeRun> runs;
  std::vector<std::string> skipped;  // "recipe: reason" of recipes the device cannot run
  bool has_fp32 = false;
  for (const std::string& name : d.recipes) has_fp32 = has_fp32 || name == "fp32";
  std::vector<std::string> order = d.recipes;
  if (!has_fp32) order.insert(order.begin(), "fp32");  // the reference of the comparisons
  const demo::DemoData data = demo::make_demo_data(c);
  for (const std::string& name : order) {
    // The CUDA grouped GEMM takes BF16 or quantized operands only: the FP32 reference runs on
    // the host (same data, same initial weights).
    DemoConfig rc = c;
    if (name == "fp32" && c.device.is_cuda()) rc.device = Device::cpu();
    Progress p{name, c.steps, std::chrono::steady_clock::now()};
    try {
      runs.push_back(
          demo::train_recipe(rc, data, name, *demo::make_demo_recipe(name), show_progress, &p));
    } catch (const Error& e) {
      // A recipe the device cannot run yet (e.g. MXFP8 / NVFP4 GEMM operands on CUDA) is
      // reported and skipped; any other failure stops the demo.
      if (e.status() != Status::kUnsupported || name == "fp32") throw;
      skipped.push_back(name + ": " + e.what());
      std::fprintf(stderr, "%s%s: not supported on %s, skipped\n", isatty(2) ? "\n" : "",
                   name.c_str(), to_string(rc.device).c_str());
      continue;
    }
    if (rc.device != c.device) runs.back().name += " (cpu)";
  }
  const RecipeRun* fp32 = &runs.front();
  print_table(runs, fp32);
  for (const std::string& s : skipped) std::printf("skipped %s\n", s.c_str());
  std::filesystem::create_directories(d.out);
  const std::string path = (std::filesystem::path(d.out) / "demo_loss.svg").string();
  demo::write_loss_svg(path, runs, "tessera demo: MoE training loss per recipe");
  std::printf("\nloss curves: %s\n", std::filesystem::absolute(path).string().c_str());
  return 0;
}

}  // namespace tessera::cli
