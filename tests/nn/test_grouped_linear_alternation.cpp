// Train / eval alternation (the stale-columnwise bug of TransformerEngine #2929 must be
// impossible): stage sequences [train, eval]x2 and [eval, train]x2, 3 steps per stage, fresh
// weights before every train step, every recipe. After every backward:
//   * the weight copy dgrad read is the CURRENT weights' quantization, bit-equal to a fresh
//     quantization of each W_g alone where the recipe has no state, and for delayed scaling to
//     a standalone delayed Quantizer per expert that quantized (and updated) W_g alone at every
//     forward of the sequence (one scale and amax history per expert: nn/member_scaling.h);
//   * dX and dW equal an FP64 recompute from the dequantized operands the GEMMs read.
#include <gtest/gtest.h>

#include <cstdio>

#include "nn_test_util.h"
#include "tessera/formats/convert.h"
#include "tessera/formats/scaling_modes.h"
#include "tessera/nn/grouped_linear.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::nn::test {
namespace {

constexpr int64_t kG = 3, kIn = 64, kOut = 128, kT = 200;

// dx (T, in) = dy_g W_g, dW_g = dy_gᵀ x_g over the group rows given by `offsets` (FP64).
void recompute(const std::vector<float>& dy, const std::vector<float>& w,
               const std::vector<float>& x, const std::vector<int64_t>& offsets,
               std::vector<double>& dx, std::vector<double>& dw) {
  dx.assign(static_cast<size_t>(offsets.back() * kIn), 0.0);
  dw.assign(static_cast<size_t>(kG * kOut * kIn), 0.0);
  for (int64_t g = 0; g < kG; ++g) {
    for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r) {
      for (int64_t o = 0; o < kOut; ++o) {
        const double d = dy[r * kOut + o];
        if (d == 0) continue;
        const float* wr = &w[(g * kOut + o) * kIn];
        for (int64_t i = 0; i < kIn; ++i) {
          dx[r * kIn + i] += d * wr[i];
          dw[(g * kOut + o) * kIn + i] += d * x[r * kIn + i];
        }
      }
    }
  }
}

double max_rel_err(const std::vector<double>& ref, const std::vector<float>& got) {
  double worst = 0, scale = 0;
  for (double v : ref) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(ref[i] - got[i]));
  return scale == 0 ? worst : worst / scale;
}

struct Step {
  bool train;
};

// Runs one stage sequence for a recipe; returns the number of backward checks done.
int run_sequence(const std::string& name, const std::vector<Step>& stages) {
  const auto recipe = make_recipe(name);
  GroupedLinear layer(kG, kIn, kOut, *recipe, false, named("fc1"));
  const bool stateful = name == "fp8_delayed";
  RecipeState fresh_state(*recipe);
  // Delayed scaling: expert g's own quantizer (its own scale and history), fed W_g at every
  // forward as the layer re-quantizes its weights at every forward.
  std::vector<Quantizer> experts;
  if (stateful) {
    QuantizerConfig c = fresh_state.quantizer({"grouped_linear", TensorType::kWeight, "fc1"}).config();
    c.rowwise = c.columnwise = true;
    for (int64_t g = 0; g < kG; ++g) experts.emplace_back(c);
  }
  std::vector<float> expert_copies(kG * kOut * kIn);  // the experts' last columnwise copies
  std::vector<int64_t> splits = {70, 0, 130};
  std::vector<float> y(kT * kOut), dx(kT * kIn), dw(kG * kOut * kIn);
  uint64_t seed = 100;
  int checks = 0;
  for (const Step& stage : stages) {
    for (int s = 0; s < 3; ++s, ++seed) {
      std::vector<float> x = random_normal(kT * kIn, seed);
      if (stage.train) {  // fresh weights before every train step
        const std::vector<float> w = random_normal(kG * kOut * kIn, seed + 1000, 0.1f);
        std::copy(w.begin(), w.end(), layer.weight().as<float>());
      }
      for (int64_t g = 0; g < static_cast<int64_t>(experts.size()); ++g) {
        const TensorView wg = TensorView::contiguous(layer.weight().as<float>() + g * kOut * kIn,
                                                     DType::kFloat32, {kOut, kIn});
        QuantizedTensor out = experts[g].allocate(kOut, kIn);
        experts[g].quantize(wg, out);
        experts[g].update();
        dequantize(out.view(),
                   TensorView::contiguous(expert_copies.data() + g * kOut * kIn,
                                          DType::kFloat32, {kOut, kIn}),
                   true);
      }
      GroupedLinearContext ctx = layer.forward(view_of(x, {kT, kIn}), view_of(splits),
                                               view_of(y, {kT, kOut}), {stage.train, true});
      if (!stage.train) continue;
      std::vector<float> dy = random_normal(kT * kOut, seed + 2000);
      layer.backward(ctx, view_of(dy, {kT, kOut}),
                     {view_of(dx, {kT, kIn}), view_of(dw, {kG, kOut, kIn}), {}});
      const std::vector<float> w_used = ctx.operand_value(SavedOperand::kWeight, true);
      const std::vector<float> master(layer.weight().as<float>(),
                                      layer.weight().as<float>() + kG * kOut * kIn);
      if (stateful) {
        // Per-tensor delayed scaling: both copies come from one quantization with one scale
        // per expert, so they hold the same values, those of the experts' own quantizers.
        EXPECT_EQ(ctx.operand_value(SavedOperand::kWeight, false), w_used) << name;
        EXPECT_EQ(expert_copies, w_used) << name << ": not each expert's own delayed quantizer";
      } else {
        // The current weights' copy, made afresh: quantized (both usages in one pass) or cast
        // to the dense compute dtype.
        std::vector<float> expect(master.size());
        const TensorView w2 = TensorView::contiguous(layer.weight().data, DType::kFloat32,
                                                     {kG * kOut, kIn});
        if (recipe->quantized()) {
          Quantizer& q = fresh_state.quantizer({"grouped_linear", TensorType::kWeight, "fc1"});
          q.set_usage(true, true);
          // The rowwise family scales each expert's columns on their own (its dgrad copy is
          // Wᵀ per expert), per-tensor current scaling each expert on its own, NVFP4 with
          // one global amax per expert (out % 16 == 0; nn/member_scaling.h): the oracle
          // quantizes each W_g alone.
          const bool per_expert = is_family(q.config().mode, ScaleFamily::kRowwise) ||
                                  is_family(q.config().mode, ScaleFamily::kTensor) ||
                                  (is_family(q.config().mode, ScaleFamily::kNVFP4) &&
                                   kOut % 16 == 0);
          const int64_t parts = per_expert ? kG : 1, rows = kG * kOut / parts;
          for (int64_t g = 0; g < parts; ++g) {
            const TensorView wg = TensorView::contiguous(
                layer.weight().as<float>() + g * rows * kIn, DType::kFloat32, {rows, kIn});
            QuantizedTensor out = q.allocate(rows, kIn);
            q.quantize(wg, out);
            dequantize(out.view(),
                       TensorView::contiguous(expect.data() + g * rows * kIn, DType::kFloat32,
                                              {rows, kIn}),
                       true);
          }
        } else if (name == "bf16") {
          std::vector<uint16_t> bits(master.size());
          encode(w2, TensorView::contiguous(bits.data(), DType::kBFloat16, {kG * kOut, kIn}));
          decode(TensorView::contiguous(bits.data(), DType::kBFloat16, {kG * kOut, kIn}),
                 view_of(expect, {kG * kOut, kIn}));
        } else {
          expect = master;
        }
        EXPECT_EQ(expect, w_used) << name << ": dgrad's weight copy is not the current one";
      }
      // The saved operands, as the GEMMs read them: the copies of dy and x in the step's padded
      // layout (the dgrad's padded dx rows are then moved back to the groups' rows).
      const std::vector<int64_t> o = host_offsets(ctx.layout(), false);
      const std::vector<int64_t> po = host_offsets(ctx.layout(), true);
      const std::vector<float> dyq = ctx.operand_value(SavedOperand::kGradOutput, false);
      const std::vector<float> dyc = ctx.operand_value(SavedOperand::kGradOutput, true);
      const std::vector<float> xc = ctx.operand_value(SavedOperand::kInput, true);
      std::vector<double> dx_ref, dw_ref, unused;
      recompute(dyq, w_used, std::vector<float>(dyq.size() / kOut * kIn), po, dx_ref, unused);
      recompute(dyc, w_used, xc, po, unused, dw_ref);
      std::vector<double> dx_rows(static_cast<size_t>(kT * kIn), 0.0);
      for (int64_t g = 0; g < kG; ++g) {
        for (int64_t r = 0; r < o[g + 1] - o[g]; ++r) {
          std::copy_n(dx_ref.begin() + (po[g] + r) * kIn, kIn, dx_rows.begin() + (o[g] + r) * kIn);
        }
      }
      EXPECT_LT(max_rel_err(dx_rows, dx), 1e-5) << name << " dX";
      EXPECT_LT(max_rel_err(dw_ref, dw), 1e-5) << name << " dW";
      ++checks;
    }
  }
  return checks;
}

TEST(GroupedLinearAlternation, TrainEvalInAnyOrderNeverReadsStaleOperands) {
  const std::vector<Step> train_first = {{true}, {false}, {true}, {false}};
  const std::vector<Step> eval_first = {{false}, {true}, {false}, {true}};
  std::printf("train/eval alternation, 3 steps per stage, fresh weights per train step:\n");
  for (const std::string& name : recipe_names()) {
    const int a = run_sequence(name, train_first);
    const int b = run_sequence(name, eval_first);
    std::printf("  %-12s [train,eval]x2: %d backward checks  [eval,train]x2: %d backward checks\n",
                name.c_str(), a, b);
    EXPECT_EQ(a, 6);
    EXPECT_EQ(b, 6);
  }
}

}  // namespace
}  // namespace tessera::nn::test
