// `tessera demo`: trains a small MoE layer (router + GroupedMLP experts) on a synthetic
// regression task (imitating a fixed random teacher MoE) once per recipe and once in FP32, the
// reference of every comparison whatever --recipes lists, then prints a table (final loss, loss
// vs FP32, gradient SQNR vs FP32, bytes saved for backward, step time) and writes an SVG of the
// loss curves.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "commands.h"
#include "demo_args.h"
#include "demo_model.h"
#include "tessera/core/status.h"

namespace tessera::cli {
namespace {

using demo::DemoConfig;
using demo::RecipeRun;
using demo::RunPlan;

// Host work the FP32 reference may cost when the recipes run on CUDA (about seconds on a
// multi-core host): training steps up to this budget, the gradient probe up to a tenth of it.
// TESSERA_DEMO_REFERENCE_FLOPS sets another budget and applies it on the CPU too (for tests).
double reference_budget(const DemoConfig& c) {
  const char* env = std::getenv("TESSERA_DEMO_REFERENCE_FLOPS");
  if (env != nullptr && *env != '\0') return std::atof(env);
  return c.device.is_cpu() ? INFINITY : 2e12;
}

struct Plans {
  RunPlan reference, recipes;
  double budget = INFINITY;
};

Plans make_plans(const DemoConfig& c) {
  Plans p;
  p.recipes = p.reference = {c.steps, c.tokens};
  p.budget = reference_budget(c);
  if (std::isinf(p.budget)) return p;  // all on the CPU: the reference costs as any recipe
  const double per_token = demo::train_flops_per_token(c);
  const double per_step = per_token * double(c.tokens);
  p.reference.steps = std::min<int64_t>(c.steps, static_cast<int64_t>(p.budget / per_step));
  const int64_t probe = std::clamp<int64_t>(static_cast<int64_t>(p.budget / 10 / per_token), 1,
                                            c.tokens);
  p.reference.probe_tokens = p.recipes.probe_tokens = probe;
  return p;
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

// Mean loss of steps [from, to) of a run, or NaN when it did not run them all.
double mean_loss(const RecipeRun& r, size_t from, size_t to) {
  if (to == 0 || r.losses.size() < to) return NAN;
  double s = 0;
  for (size_t i = from; i < to; ++i) s += r.losses[i];
  return s / double(to - from);
}

void print_table(const std::vector<RecipeRun>& runs, const RecipeRun& ref) {
  const size_t to = ref.losses.size(), from = to - std::min<size_t>(10, to);
  const double ref_loss = mean_loss(ref, from, to);
  std::printf("\n%-12s %12s %11s %14s %14s %9s %10s\n", "recipe", "final loss", "vs FP32",
              "grad SQNR dB", "saved bytes", "vs BF16", "step ms");
  const RecipeRun* bf16 = nullptr;
  for (const RecipeRun& r : runs) {
    if (r.name == "bf16") bf16 = &r;
  }
  for (const RecipeRun& r : runs) {
    char fl[32] = "-", vs[32] = "-", sq[32] = "exact", vb[32] = "-", ms[32] = "-";
    if (!r.losses.empty()) std::snprintf(fl, sizeof fl, "%.5e", r.final_loss);
    const double loss = mean_loss(r, from, to);
    if (std::isfinite(loss) && std::isfinite(ref_loss)) {
      std::snprintf(vs, sizeof vs, "%+.2f%%", 100.0 * (loss / ref_loss - 1));
    }
    if (!std::isinf(r.grad_sqnr_db)) std::snprintf(sq, sizeof sq, "%.1f", r.grad_sqnr_db);
    if (bf16 && bf16->saved_bytes > 0 && !r.losses.empty()) {
      std::snprintf(vb, sizeof vb, "%.1f%%", 100.0 * double(r.saved_bytes) / double(bf16->saved_bytes));
    }
    if (!r.losses.empty()) std::snprintf(ms, sizeof ms, "%.1f", r.step_ms);
    std::printf("%-12s %12s %11s %14s %14lld %9s %10s\n", r.name.c_str(), fl, vs, sq,
                static_cast<long long>(r.saved_bytes), vb, ms);
  }
}

// The lines under the table that say what a reduced reference measured.
void print_reference_notes(const DemoConfig& c, const Plans& p) {
  const int64_t rs = p.reference.steps;
  if (rs < c.steps) {
    const double tflop = demo::train_flops_per_token(c) * double(c.tokens) / 1e12;
    if (rs == 0) {
      std::printf("vs FP32: not measured: one FP32 training step on the host is %.2g TFLOP, over "
                  "the demo's %.2g TFLOP budget (--device cpu runs everything in full)\n",
                  tflop, p.budget / 1e12);
    } else {
      const int64_t first = rs - std::min<int64_t>(10, rs) + 1;
      char steps[64];
      if (first == rs) std::snprintf(steps, sizeof steps, "loss of step %lld", (long long)rs);
      else std::snprintf(steps, sizeof steps, "mean loss of steps %lld-%lld", (long long)first, (long long)rs);
      std::printf("vs FP32: %s; the FP32 reference ran %lld of %lld steps on the host (%.2g "
                  "TFLOP each, budget %.2g TFLOP)\n", steps, (long long)rs, (long long)c.steps,
                  tflop, p.budget / 1e12);
    }
  }
  if (p.recipes.probe_tokens < c.tokens) {
    std::printf("grad SQNR: gradients at the initial weights on the first %lld of the %lld "
                "tokens of batch 1\n",
                static_cast<long long>(p.recipes.probe_tokens), static_cast<long long>(c.tokens));
  }
}

// Trains one recipe; returns false (and notes why) when the device cannot run it.
// `name` is the recipe's name as shown, e.g. "fp32 (cpu)": the recipe is its first word.
bool run_one(const DemoConfig& c, const demo::DemoData& data, const std::string& name,
             const RunPlan& plan, RecipeRun& out, std::vector<std::string>& skipped) {
  const std::string recipe = name.substr(0, name.find(' '));
  Progress progress{name, plan.steps, std::chrono::steady_clock::now()};
  if (plan.steps == 0) {
    std::fprintf(stderr, "  %-12s gradient probe on %lld tokens\n", name.c_str(),
                 static_cast<long long>(plan.probe_tokens));
  }
  try {
    out = demo::train_recipe(c, data, name, *demo::make_demo_recipe(recipe), plan,
                             show_progress, &progress);
  } catch (const Error& e) {
    // A recipe the device cannot run yet (e.g. NVFP4 GEMM operands on CUDA) is
    // reported and skipped; any other failure stops the demo.
    if (e.status() != Status::kUnsupported || recipe == "fp32") throw;
    skipped.push_back(name + ": " + user_message(e));
    std::fprintf(stderr, "%s%s: not supported on %s, skipped\n", isatty(2) ? "\n" : "",
                 name.c_str(), to_string(c.device).c_str());
    return false;
  }
  return true;
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
  demo::DemoArgs d;
  if (!demo::parse_demo_args(args, d)) {
    demo::print_demo_help();
    return 0;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines appear as they are printed, even in a pipe
  const DemoConfig& c = d.config;
  std::printf("tessera demo: MoE layer, %lld experts, hidden %lld, ffn %lld, top-%lld, %lld tokens "
              "per step, %lld steps, Adam lr %g, device %s\n",
              static_cast<long long>(c.experts), static_cast<long long>(c.hidden),
              static_cast<long long>(c.ffn), static_cast<long long>(c.topk),
              static_cast<long long>(c.tokens), static_cast<long long>(c.steps), c.lr,
              to_string(c.device).c_str());
  const Plans plans = make_plans(c);
  std::fprintf(stderr, "  generating %lld batches (teacher on %s)\n",
               static_cast<long long>(c.steps), to_string(c.device).c_str());
  const demo::DemoData data = demo::make_demo_data(c);
  // The FP32 reference first. The CUDA grouped GEMM takes BF16 or quantized operands only: on
  // CUDA it runs on the host (same data, same initial weights).
  DemoConfig ref_config = c;
  ref_config.device = Device::cpu();
  const std::string ref_name = c.device.is_cpu() ? "fp32" : "fp32 (cpu)";
  RecipeRun ref;
  std::vector<std::string> skipped;
  run_one(ref_config, data, ref_name, plans.reference, ref, skipped);
  ref.grad_sqnr_db = INFINITY;
  std::vector<RecipeRun> runs;
  auto without_grads = [](const RecipeRun& r) {
    RecipeRun copy;
    copy.name = r.name, copy.losses = r.losses, copy.final_loss = r.final_loss;
    copy.grad_sqnr_db = r.grad_sqnr_db, copy.saved_bytes = r.saved_bytes, copy.step_ms = r.step_ms;
    return copy;
  };
  if (std::find(d.recipes.begin(), d.recipes.end(), "fp32") == d.recipes.end()) {
    runs.push_back(without_grads(ref));
  }
  for (const std::string& name : d.recipes) {
    RecipeRun r;
    if (name == "fp32") {
      r = without_grads(ref);
    } else if (!run_one(c, data, name, plans.recipes, r, skipped)) {
      continue;
    } else {
      r.grad_sqnr_db = demo::sqnr_db(ref.probe_grads, r.probe_grads);
    }
    r.probe_grads = {};  // compared: free it (it holds every parameter's gradient)
    runs.push_back(std::move(r));
  }
  print_table(runs, ref);
  print_reference_notes(c, plans);
  for (const std::string& s : skipped) std::printf("skipped %s\n", s.c_str());
  size_t ref_index = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].name == ref_name) ref_index = i;
  }
  const std::string path = (std::filesystem::path(d.out) / "demo_loss.svg").string();
  demo::write_loss_svg(path, runs, ref_index, "tessera demo: MoE training loss per recipe");
  std::printf("\nloss curves: %s\n", std::filesystem::absolute(path).string().c_str());
  return 0;
}

}  // namespace tessera::cli
