// How often one direction of the linear step asks the caller's Allocator (linear_step.h,
// "Memory"): its scratch is one carved block per direction (step_memory.h StepArena), so a
// forward asks for the saved context and one block, a backward for one block; a GEMM workspace
// past the block's allowance (the CPU backend's FP32 copies of quantized operands, and of BF16
// operands where the CPU has no native BF16 GEMM) adds one ask per GEMM. Every recipe on the
// CPU, training and eval forwards, x's copy saved or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "nn_test_util.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/nn/allocator.h"
#include "tessera/nn/linear_step.h"
#include "tessera/quantize/recipe.h"

namespace tessera::nn::test {
namespace {

// Counts the asks of non-zero bytes, served by a pool.
class CountingAllocator final : public Allocator {
 public:
  Allocation allocate(int64_t bytes, Device device, Stream stream) override {
    if (bytes > 0) ++asks;
    return pool.allocate(bytes, device, stream);
  }
  PoolAllocator pool;
  int asks = 0;
};

TEST(GroupedNNStepScratch, OneScratchBlockPerDirection) {
  const int64_t g = 4, in = 64, out = 128;  // whole 128-row FP8 blocks per expert
  std::vector<int64_t> splits{30, 0, 41, 17};
  std::vector<int64_t> ends{30, 30, 71, 88};
  const int64_t t = 91;  // 3 capacity rows past the last group
  std::vector<float> x = random_normal(t * in, 1), w = random_normal(g * out * in, 2, 0.1f);
  std::vector<float> dy = random_normal(t * out, 3), y(t * out), dx(t * in), dw(g * out * in);
  std::printf("asks of the caller's Allocator per direction (CPU):\n");
  for (const std::string& name : recipe_names()) {
    SCOPED_TRACE(name);
    const std::shared_ptr<Recipe> recipe = make_recipe(name);
    const LinearSpec spec = make_linear_spec(*recipe, "", g, in, out, false);
    LinearState state;  // delayed scaling: a scale and an amax history per role and expert
    const int64_t len = std::max<int64_t>(1, spec.input.config.amax_history_len);
    std::vector<float> scale(3 * g, 1.0f), history(static_cast<size_t>(3 * len * g), 0.0f);
    if (spec.input.config.delayed) {
      int r = 0;
      for (DelayedScalingState* s : {&state.input, &state.weight, &state.grad_output}) {
        s->scale = TensorView::contiguous(scale.data() + r * g, DType::kFloat32, {g});
        s->amax_history =
            TensorView::contiguous(history.data() + r * len * g, DType::kFloat32, {len, g});
        ++r;
      }
    }
    CountingAllocator alloc;
    const WeightCopies wc = quantize_weight(spec, view_of(w, {g, out, in}), state, alloc);
    // GEMMs whose operands the CPU backend copies to FP32 in its workspace (past the
    // allowance): quantized ones, and BF16 ones on the FP32 path (no AVX512-BF16 / AMX here, a
    // build without oneDNN, or TESSERA_CPU_BF16_GEMM=fp32).
    const bool bf16_via_fp32 = cpu_bf16_gemm_path().rfind("fp32 ", 0) == 0;
    const bool dense_bf16 = !spec.quantized() && spec.input.dense_dtype == DType::kBFloat16;
    const int gemm_copies = spec.quantized() || (dense_bf16 && bf16_via_fp32) ? 1 : 0;
    for (const bool save : {true, false}) {
      LinearForwardArgs f{view_of(x, {t, in}), view_of(ends), GroupOffsetsFormat::kEndOffsets,
                          TensorView{}, view_of(y, {t, out}), save, {}};
      alloc.asks = 0;
      const LinearSaved saved = linear_forward(spec, wc, f, state, alloc);
      const int forward = alloc.asks;
      const int saved_asks = saved.storage.bytes > 0 ? 1 : 0;
      EXPECT_LE(forward, saved_asks + 1 + gemm_copies) << "forward, save_input " << save;
      LinearBackwardArgs b;
      b.dy = view_of(dy, {t, out});
      b.offsets = view_of(ends);
      b.x = view_of(x, {t, in});
      b.dx = view_of(dx, {t, in});
      b.dw = view_of(dw, {g, out, in});
      alloc.asks = 0;
      linear_backward(spec, wc, saved, b, state, alloc);
      EXPECT_LE(alloc.asks, 1 + 2 * gemm_copies) << "backward, save_input " << save;
      std::printf("  %-12s save_input %d: forward %d (saved context %d), backward %d\n",
                  name.c_str(), save, forward, saved_asks, alloc.asks);
    }
  }
}

}  // namespace
}  // namespace tessera::nn::test
