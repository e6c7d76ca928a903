// `tessera demo` internals: a small mixture-of-experts layer (top-k softmax router + GroupedMLP)
// trained to imitate a fixed random teacher MoE, once per recipe; the loss-curve SVG writer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/quantize/recipe.h"

namespace tessera::cli::demo {

struct DemoConfig {
  int64_t steps = 70;
  int64_t experts = 8;
  int64_t hidden = 256;
  int64_t ffn = 512;
  int64_t topk = 2;
  int64_t tokens = 256;  // tokens per step (rows routed = tokens * topk)
  float lr = 2e-3f;      // Adam
  uint64_t seed = 1234;
  Device device = Device::cpu();
};

// Gradients of every trainable parameter after one backward, flattened (router first).
using GradientSnapshot = std::vector<float>;

// How much of a run to do: `steps` training steps (<= config.steps) and the gradient probe, one
// forward + backward at the initial weights on the first `probe_tokens` tokens of batch 0 (all
// of them: the gradients of training step 0; fewer: a separate layer with the same weights).
struct RunPlan {
  int64_t steps = 0;
  int64_t probe_tokens = 0;
};

// Result of training one recipe.
struct RecipeRun {
  std::string name;
  std::vector<double> losses;        // one per step run
  double final_loss = 0;             // mean of the last min(10, steps) losses
  GradientSnapshot probe_grads;      // gradients of the probe (same weights and data for all)
  double grad_sqnr_db = 0;           // of probe_grads against the FP32 reference's (caller sets)
  int64_t saved_bytes = 0;           // bytes the MoE layer's contexts keep for backward (step 0)
  double step_ms = 0;                // median wall time of a training step
};

// Names accepted by --recipes, in the default order.
std::vector<std::string> demo_recipe_names();
// The recipe behind a name ("fp32", "bf16", "fp8_current", "fp8_delayed", "fp8_rowwise",
// "fp8_block", "mxfp8", "nvfp4", "custom"); throws naming the accepted names otherwise.
std::shared_ptr<Recipe> make_demo_recipe(const std::string& name);

// The synthetic task, the same for every recipe: per step a batch x (tokens, hidden) ~ N(0, 1)
// and a fixed random teacher MoE's output on it as the regression target. The teacher runs on
// config.device: FP32 on the CPU, BF16 GEMMs on CUDA (a data generator; every recipe, the FP32
// reference included, sees the same targets).
struct DemoData {
  std::vector<std::vector<float>> x, target;  // [step] (tokens, hidden)
};
DemoData make_demo_data(const DemoConfig& config);

// Floating-point operations of one training step (forward + backward) per token.
double train_flops_per_token(const DemoConfig& config);

using ProgressFn = void (*)(void* user, int64_t step, double loss);

// Trains the student under `recipe` as `plan` says; `progress(step, loss)` is called after every
// step.
RecipeRun train_recipe(const DemoConfig& config, const DemoData& data, const std::string& name,
                       const Recipe& recipe, const RunPlan& plan, ProgressFn progress,
                       void* user);

// SNR of `test` against `ref` in dB: 10 log10(Σ ref² / Σ (ref − test)²).
double sqnr_db(const std::vector<float>& ref, const std::vector<float>& test);

// Writes the loss curves (log-scale loss vs step) and, when runs[reference] has losses, each
// curve relative to it on a second panel, as a self-contained SVG file.
void write_loss_svg(const std::string& path, const std::vector<RecipeRun>& runs,
                    size_t reference, const std::string& title);

}  // namespace tessera::cli::demo
