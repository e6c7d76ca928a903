// GroupedLinear and GroupedMLP on CUDA against the same layers on the CPU (the independent
// oracle: the CPU quantizers and the CPU grouped GEMM), same weights, data and splits (ragged,
// an empty expert, sizes that are not multiples of 8 or 16), with the splits in host memory and
// in device memory, two training steps (the second uses delayed scaling's calibrated scale).
//
// What must match, and how closely:
// - The operands the GEMMs read (x, W, dy as quantized / cast by the recipe) must be IDENTICAL:
//   same inputs, bit-exact codecs and scale rules on both devices.
// - Outputs and gradients of GroupedLinear then differ only by the GEMMs' FP32 accumulation
//   order, plus the FP8 tensor cores' shortened accumulator alignment (torch's use_fast_accum):
//   per element |cuda - cpu| <= rel(k) · 1.25 · Σ|a||b| (+|bias|), Σ|a||b| from the unquantized
//   inputs (1.25 covers the quantized magnitudes: E5M2 rounds by <= 2^-3, E4M3 by <= 2^-4),
//   rel(k) = 2 (k + 4) 2^-24 (+ (k/32 + 1) 2^-12 for FP8), k = the pass's contraction length.
// - GroupedMLP adds SwiGLU (expf on the device vs std::exp on the host: ulp differences) whose
//   output is quantized again, so a code may move by one step: compared by SQNR (CUDA vs CPU)
//   >= 40 dB (BF16) / 30 dB (FP8); a wrong group or scale shows as ~0 dB.
// - fp8_delayed's state per expert (a scale and amax history per role and expert) must be
//   IDENTICAL after steps whose experts differ in magnitude (40 experts, history length 300).
// Recipes: every one the CUDA GEMM takes (bf16, fp8_current and fp8_delayed = HYBRID with E5M2
// gradients, their :e4m3 forms, fp8_rowwise, fp8_block, mxfp8, nvfp4); others must refuse with
// a clear error.
// Skips without an sm_90 GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include "nn_test_util.h"
#include "quantize/quantize_backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/status.h"
#include "tessera/formats/half.h"
#include "tessera/nn/grouped_linear.h"
#include "tessera/nn/grouped_mlp.h"
#include "tessera/nn/linear_step.h"

namespace tessera::nn::test {
namespace {

bool has_sm90() {
  if (cuda_device_count() == 0) return false;
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9;
}

// kOut: a multiple of 128 (FP8 block dgrad's per-expert contraction), not of 256 (partial tiles).
constexpr int64_t kG = 4, kIn = 160, kOut = 384;
const std::vector<int64_t> kSplits = {37, 0, 101, 18};  // T = 156
constexpr int64_t kT = 156;

// A float32 / int64 tensor on `dev` holding a host vector (or zeros of `count`).
struct Tensor {
  Buffer buf;
  TensorView view;
  template <class T>
  Tensor(const std::vector<T>& host, std::initializer_list<int64_t> shape, Device dev)
      : buf(std::max<size_t>(host.size() * sizeof(T), 4), dev) {
    copy_bytes(buf.data(), dev, host.data(), Device::cpu(), host.size() * sizeof(T));
    view = TensorView::contiguous(buf.data(),
                                  std::is_same_v<T, float> ? DType::kFloat32
                                  : std::is_same_v<T, bf16> ? DType::kBFloat16
                                                            : DType::kInt64,
                                  shape, dev);
  }
  std::vector<float> to_host() const {
    std::vector<float> h(static_cast<size_t>(view.numel()));
    copy_bytes(h.data(), Device::cpu(), buf.data(), view.device, h.size() * sizeof(float));
    return h;
  }
};

std::vector<float> zeros(int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); }

// The low-precision recipes (FP8 kinds, and NVFP4's expanded BF16 GEMMs, whose operands are
// Hadamard-transformed and rounded to E2M1 far from the unquantized magnitudes): the looser
// bound and SQNR bar.
bool is_fp8(const std::string& recipe) {
  return recipe.find("fp8") != std::string::npos || recipe.find("fp4") != std::string::npos;
}

// The float values of the operands the GEMMs read, first `rows` rows of each.
struct Operands {
  std::vector<float> x_col, w_row, w_col, dy_row, dy_col;
};

std::vector<float> head(std::vector<float> v, int64_t count) {
  v.resize(static_cast<size_t>(std::min<int64_t>(count, static_cast<int64_t>(v.size()))));
  return v;
}

struct LinearStep {
  std::vector<float> y, dx, dw, db;
  Operands ops;
};

// Inputs of step s: x scaled by (1 + s/2) so delayed scaling's stale scale differs from the
// current amax (saturating on step 1 — the same on both devices).
std::vector<float> step_input(int step) {
  std::vector<float> x = random_normal(kT * kIn, 41);
  for (float& v : x) v *= 1.0f + 0.5f * static_cast<float>(step);
  return x;
}
std::vector<float> grad_output() { return random_normal(kT * kOut, 42, 0.05f); }

int64_t padded_total(int64_t align) {
  int64_t t = 0;
  for (int64_t s : kSplits) t += (s + align - 1) / align * align;
  return t;
}

// Two training steps of GroupedLinear(kG, kIn, kOut, bias) on `dev`.
std::vector<LinearStep> run_linear(const std::string& recipe_name, Device dev, bool device_splits) {
  const auto recipe = make_recipe(recipe_name);
  GroupedLinearOptions o = named("fc1");
  o.device = dev;
  GroupedLinear layer(kG, kIn, kOut, *recipe, true, o);
  layer.reset_parameters(7);
  reset_rng_offset(5);  // both devices' runs draw the same stochastic-rounding bits
  const int64_t tp = padded_total(layer.token_alignment());
  std::vector<int64_t> splits = kSplits;
  Tensor splits_t(splits, {kG}, device_splits ? dev : Device::cpu());
  std::vector<LinearStep> out;
  for (int step = 0; step < 2; ++step) {
    Tensor x(step_input(step), {kT, kIn}, dev), dy(grad_output(), {kT, kOut}, dev);
    Tensor y(zeros(kT * kOut), {kT, kOut}, dev), dx(zeros(kT * kIn), {kT, kIn}, dev);
    Tensor dw(zeros(kG * kOut * kIn), {kG, kOut, kIn}, dev), db(zeros(kG * kOut), {kG, kOut}, dev);
    GroupedLinearContext ctx = layer.forward(x.view, splits_t.view, y.view);
    layer.backward(ctx, dy.view, {dx.view, dw.view, db.view, false});
    LinearStep r{y.to_host(), dx.to_host(), dw.to_host(), db.to_host(), {}};
    r.ops.x_col = head(ctx.operand_value(SavedOperand::kInput, true), tp * kIn);
    r.ops.w_row = ctx.operand_value(SavedOperand::kWeight, false);
    r.ops.w_col = ctx.operand_value(SavedOperand::kWeight, true);
    r.ops.dy_row = head(ctx.operand_value(SavedOperand::kGradOutput, false), tp * kOut);
    r.ops.dy_col = head(ctx.operand_value(SavedOperand::kGradOutput, true), tp * kOut);
    out.push_back(std::move(r));
  }
  return out;
}

// Count of elements that differ at all (the operands must be identical).
int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += !(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])));
  return n;
}

double rel(int64_t k, bool fp8) {
  return 2.0 * double(k + 4) * std::exp2(-24.0) + (fp8 ? double(k / 32 + 1) * std::exp2(-12.0) : 0.0);
}

// "" or the worst element of |cuda - cpu| > tol · bound[i]; *ratio = the worst error / bound.
std::string within(const char* what, const std::vector<float>& cuda, const std::vector<float>& cpu,
                   const std::vector<double>& bound, double tol, double* ratio_out) {
  *ratio_out = INFINITY;
  if (cuda.size() != cpu.size() || cpu.size() != bound.size()) return std::string(what) + ": sizes";
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double err = std::fabs(double(cuda[i]) - cpu[i]);
    const double ratio = std::isfinite(cuda[i]) ? err / (tol * bound[i] + 1e-30) : INFINITY;
    if (ratio > worst) worst = ratio, at = i;
  }
  *ratio_out = worst;
  if (worst <= 1.0) return "";
  char text[200];
  std::snprintf(text, sizeof text, "%s[%zu]: cuda %.8g cpu %.8g, error %.3g x the bound; ", what,
                at, cuda[at], cpu[at], worst);
  return text;
}

// Σ|a||b| bounds of every output element of the three passes, from the unquantized inputs.
struct Bounds {
  std::vector<double> y, dx, dw, db;
  int64_t k_wgrad = 0;
};

Bounds bounds(const std::vector<float>& x, const std::vector<float>& dy,
              const std::vector<float>& w, const std::vector<float>& bias) {
  Bounds b;
  b.y.assign(kT * kOut, 0.0);
  b.dx.assign(kT * kIn, 0.0);
  b.dw.assign(kG * kOut * kIn, 0.0);
  b.db.assign(kG * kOut, 0.0);
  int64_t start = 0;
  for (int64_t g = 0; g < kG; ++g) {
    b.k_wgrad = std::max(b.k_wgrad, kSplits[g]);
    for (int64_t t = start; t < start + kSplits[g]; ++t)
      for (int64_t o = 0; o < kOut; ++o) {
        const double d = std::fabs(dy[t * kOut + o]);
        double sy = std::fabs(bias[g * kOut + o]);
        for (int64_t i = 0; i < kIn; ++i) {
          const double wv = std::fabs(w[(g * kOut + o) * kIn + i]), xv = std::fabs(x[t * kIn + i]);
          sy += 1.25 * xv * wv;
          b.dx[t * kIn + i] += 1.25 * d * wv;
          b.dw[(g * kOut + o) * kIn + i] += 1.25 * d * xv;
        }
        b.y[t * kOut + o] = sy;
        b.db[g * kOut + o] += d;
      }
    start += kSplits[g];
  }
  return b;
}

std::string compare_linear_steps(const std::string& recipe, bool device_splits) {
  const std::vector<LinearStep> cpu = run_linear(recipe, Device::cpu(), false);
  const std::vector<LinearStep> gpu = run_linear(recipe, Device::cuda(0), device_splits);
  GroupedLinear ref(kG, kIn, kOut, *make_recipe(recipe), true);
  ref.reset_parameters(7);
  const std::vector<float> w(ref.weight().as<float>(), ref.weight().as<float>() + kG * kOut * kIn);
  const std::vector<float> bias(ref.bias().as<float>(), ref.bias().as<float>() + kG * kOut);
  const bool fp8 = is_fp8(recipe);
  std::string err;
  for (int step = 0; step < 2; ++step) {
    const LinearStep &c = cpu[step], &d = gpu[step];
    const std::string at = " (step " + std::to_string(step) + ")";
    const int64_t nx = differing(d.ops.x_col, c.ops.x_col), nwr = differing(d.ops.w_row, c.ops.w_row),
                  nwc = differing(d.ops.w_col, c.ops.w_col), ndr = differing(d.ops.dy_row, c.ops.dy_row),
                  ndc = differing(d.ops.dy_col, c.ops.dy_col);
    if (nx || nwr || nwc || ndr || ndc)
      err += "operands differ" + at + ": x col " + std::to_string(nx) + ", W row " +
             std::to_string(nwr) + ", W col " + std::to_string(nwc) + ", dy row " +
             std::to_string(ndr) + ", dy col " + std::to_string(ndc) + "; ";
    const Bounds b = bounds(step_input(step), grad_output(), w, bias);
    double r[4];
    err += within(("y" + at).c_str(), d.y, c.y, b.y, rel(kIn, fp8), &r[0]);
    err += within(("dx" + at).c_str(), d.dx, c.dx, b.dx, rel(kOut, fp8), &r[1]);
    err += within(("dw" + at).c_str(), d.dw, c.dw, b.dw, rel(b.k_wgrad + 16, fp8), &r[2]);
    err += within(("db" + at).c_str(), d.db, c.db, b.db, rel(kT, false), &r[3]);
    std::printf("  %-18s %-6s step %d: worst |cuda - cpu| / bound: y %.3g dx %.3g dw %.3g db %.3g; "
                "operands differing: %lld\n", recipe.c_str(), device_splits ? "device" : "host",
                step, r[0], r[1], r[2], r[3], (long long)(nx + nwr + nwc + ndr + ndc));
  }
  return err;
}

// One recipe's comparison; an exception becomes the failure text (the other recipes still run).
std::string compare_linear(const std::string& recipe, bool device_splits) {
  try {
    return compare_linear_steps(recipe, device_splits);
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
}

// Recipes the CUDA grouped GEMM takes. "nvfp4" draws its stochastic rounding from the stream
// position of each stored element, and a columnwise copy's stored width is the padded token
// count — exact with host splits, a bound with device splits (group_layout.h) — so with device
// splits its SR'd gradient copies are another (equally valid) draw than the CPU's: those runs
// use "nvfp4:nosr", which must match bit for bit.
std::vector<std::string> cuda_recipes(bool device_splits = false) {
  return {"bf16", "fp8_current", "fp8_delayed", "fp8_rowwise", "fp8_current:e4m3",
          "fp8_delayed:e4m3", "fp8_block", "mxfp8", device_splits ? "nvfp4:nosr" : "nvfp4"};
}

TEST(GroupedLinearCuda, MatchesCpuWithHostSplits) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const std::string& r : cuda_recipes()) EXPECT_EQ(compare_linear(r, false), "") << r;
}

TEST(GroupedLinearCuda, MatchesCpuWithDeviceSplits) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const std::string& r : cuda_recipes(true)) EXPECT_EQ(compare_linear(r, true), "") << r;
}

// v rounded to BF16 (RNE).
std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16::from_float(v[i]);
  return out;
}

// Activation copies on members that span many of the kernels' 128-row chunks (x and dy in FP32:
// the chunked kernels; in BF16, `bf16_inputs`: the wide kernels, with 256-column slabs, where
// each chunk's encode takes the multipliers from the members' maxima, the warp holding a member's
// first row stores its scales and the chunk-0 CTAs those of members with no rows): x's and dy's
// row and column copies on CUDA equal the CPU's bit for bit, and the weight gradient of every
// member with no rows is exactly zero on both (a scale left unwritten or non-finite would make
// it NaN or garbage). Stochastic rounding (NVFP4's dy) draws the same bits on both: the stream
// offset is reset before each device's step.
std::string compare_member_operands(const std::string& recipe_name,
                                    const std::vector<int64_t>& splits, int64_t k, int64_t n,
                                    bool bf16_inputs = false) {
  const int64_t experts = static_cast<int64_t>(splits.size());
  int64_t t = 0;
  for (int64_t s : splits) t += s;
  std::vector<std::vector<float>> ops[2];
  std::vector<float> dws[2];
  for (int d = 0; d < 2; ++d) {
    const Device dev = d == 0 ? Device::cpu() : Device::cuda(0);
    const auto recipe = make_recipe(recipe_name);
    GroupedLinearOptions o = named("fc1");
    o.device = dev;
    GroupedLinear layer(experts, k, n, *recipe, false, o);
    layer.reset_parameters(3);
    reset_rng_offset(5);  // NVFP4's stochastic rounding of dy: the same draw on both devices
    std::vector<int64_t> sp = splits;
    Tensor splits_t(sp, {experts}, Device::cpu());  // host splits: one padded layout on both
    const std::vector<float> xs = random_normal(t * k, 51), dys = random_normal(t * n, 52);
    Tensor x = bf16_inputs ? Tensor(to_bf16(xs), {t, k}, dev) : Tensor(xs, {t, k}, dev);
    Tensor dy = bf16_inputs ? Tensor(to_bf16(dys), {t, n}, dev) : Tensor(dys, {t, n}, dev);
    Tensor y(zeros(t * n), {t, n}, dev), dx(zeros(t * k), {t, k}, dev);
    Tensor dw(zeros(experts * n * k), {experts, n, k}, dev);
    GroupedLinearContext ctx = layer.forward(x.view, splits_t.view, y.view);
    layer.backward(ctx, dy.view, {dx.view, dw.view, {}, false});
    for (SavedOperand op : {SavedOperand::kInput, SavedOperand::kGradOutput})
      for (bool col : {false, true}) ops[d].push_back(ctx.operand_value(op, col));
    dws[d] = dw.to_host();
  }
  std::string err;
  const char* names[4] = {"x row", "x col", "dy row", "dy col"};
  for (int i = 0; i < 4; ++i) {
    // The CUDA copies may hold more padding rows than the CPU's (device splits): the CPU's
    // leading elements are the layout both share.
    const std::vector<float>& cpu = ops[0][i];
    const int64_t diff = differing(head(ops[1][i], static_cast<int64_t>(cpu.size())), cpu);
    if (diff != 0) err += std::string(names[i]) + ": " + std::to_string(diff) + " elements differ; ";
  }
  for (int64_t g = 0; g < experts; ++g) {
    if (splits[g] != 0) continue;
    for (int d = 0; d < 2; ++d) {
      const auto first = dws[d].begin() + g * n * k, last = first + n * k;
      const auto bad = std::find_if(first, last, [](float v) { return v != 0.0f; });
      if (bad != last) {
        err += std::string(d ? "cuda" : "cpu") + " dW of empty expert " + std::to_string(g) +
               " is " + std::to_string(*bad) + "; ";
        break;
      }
    }
  }
  return err;
}

TEST(GroupedLinearCuda, RowwiseCopiesOfLargeMembersMatchCpu) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  // A member larger than the others by 100x, an empty one, a 3-row one and a partial slab
  // (1040 = 4·256 + 16 columns).
  for (const std::string r : {"fp8_rowwise", "fp8_current"})
    EXPECT_EQ(compare_member_operands(r, {16, 2900, 0, 700, 3}, 1040, 528), "") << r;
}

// BF16 inputs take the wide kernels (the FP32 inputs above take the chunked ones): a matrix
// whose 128 x 256 tiles fit on the device at once in one cooperative launch, a larger one in the
// separate amax and encode kernels. The second case has more tiles than a Hopper GPU holds at
// two per SM (7065 rows, 56+ row bands: x, k = 1296, six column slabs; dy, n = 1040, five; the
// last slab of each partial), a member of 2500 rows, empty members and members of sizes that
// are not multiples of 16.
TEST(GroupedLinearCuda, WideCopiesOfBf16InputsMatchCpu) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::vector<int64_t> big = {16, 2500, 0, 700, 3};
  for (int i = 0; i < 20; ++i) big.push_back(i % 7 == 0 ? 0 : 97 + 13 * i);
  for (const std::string r : {"fp8_rowwise", "fp8_current"}) {
    EXPECT_EQ(compare_member_operands(r, {16, 2900, 0, 700, 3}, 1040, 528, true), "") << r;
    EXPECT_EQ(compare_member_operands(r, big, 1296, 1040, true), "") << r << " (large)";
  }
}

// FP8 block, MXFP8 and NVFP4 with x and dy read through the padded layout (detail::layout_reads
// on, the default: their kernels find each row of the layout in x themselves, no padded copy is
// made) and from a padded copy (off): the step against the CPU with host and device splits, and
// the copies of ragged members (an empty one, a 1-row one, sizes off the 16-, 32- and 128-row
// grids; BF16 and FP32) equal to the CPU's bit for bit.
std::string compare_block_recipes(bool layout_reads) {
  const bool was = ::tessera::detail::layout_reads();
  ::tessera::detail::set_layout_reads(layout_reads);
  std::string err;
  for (const std::string r : {"fp8_block", "mxfp8", "nvfp4"}) {
    for (const std::string& e :
         {compare_linear(r, false), compare_linear(r == "nvfp4" ? "nvfp4:nosr" : r, true),
          compare_member_operands(r, {300, 0, 129, 1, 640}, 256, 384, true),
          compare_member_operands(r, {5, 250, 0, 131}, 192, 256)}) {
      if (!e.empty()) err += r + ": " + e + "\n";
    }
  }
  ::tessera::detail::set_layout_reads(was);
  return err;
}

TEST(GroupedLinearCuda, CopiesReadThroughTheLayoutMatchCpu) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  EXPECT_EQ(compare_block_recipes(true), "");
}

TEST(GroupedLinearCuda, PaddedCopiesMatchCpu) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  EXPECT_EQ(compare_block_recipes(false), "");
}

// Skewed routing over many experts: most have no rows (more than one CTA's 256 members, so the
// empty members are found in several rounds), some non-empty ones lie past them.
TEST(GroupedLinearCuda, ManyEmptyMembersMatchCpu) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::vector<int64_t> splits(300, 0);
  const int64_t live[][2] = {{1, 700}, {2, 300}, {5, 48}, {40, 16}, {97, 5}, {255, 130},
                             {256, 64}, {270, 1}};
  for (const auto& l : live) splits[l[0]] = l[1];
  for (const std::string r : {"fp8_rowwise", "fp8_current"})
    EXPECT_EQ(compare_member_operands(r, splits, 272, 48), "") << r;
}

// Recipes without a CUDA GEMM path stop with an error naming the refusal, never garbage.
TEST(GroupedLinearCuda, RecipesWithoutACudaGemmRefuseClearly) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const std::string name : {"fp32"}) {
    GroupedLinearOptions o = named("fc1");
    o.device = Device::cuda(0);
    GroupedLinear layer(kG, kIn, kOut, *make_recipe(name), false, o);
    std::vector<int64_t> splits = kSplits;
    Tensor s(splits, {kG}, Device::cpu());
    Tensor x(step_input(0), {kT, kIn}, o.device), y(zeros(kT * kOut), {kT, kOut}, o.device);
    try {
      layer.forward(x.view, s.view, y.view);
      ADD_FAILURE() << name << ": forward ran on CUDA";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kUnsupported) << name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
    }
  }
}

// fp8_delayed's state per expert (RecipeState::member_state: scale (G), amax_history (H, G) per
// role) after three training steps whose experts differ in magnitude by up to 2^6: the CUDA
// layer's equals the CPU layer's bit for bit (the per-member amax, history slot 0 and update
// kernels), with more experts than one CTA of the update takes (32) and a history longer than
// one roll tile (128 slots), neither a multiple of its tile, some experts empty.
std::string compare_delayed_state(const std::string& spec) {
  constexpr int64_t kExperts = 40, kK = 64, kN = 128;
  std::vector<int64_t> splits(kExperts);
  int64_t t = 0;
  for (int64_t g = 0; g < kExperts; ++g) t += splits[g] = g % 9 == 4 ? 0 : 16 + g % 3;
  const Recipe recipe = parse_recipe_spec(spec);
  const auto magnitude = [](int64_t g) { return std::ldexp(1.0f, static_cast<int>(g % 7) - 3); };
  const auto run = [&](Device dev) {
    auto state = std::make_shared<RecipeState>(recipe, dev);
    GroupedLinearOptions o = named("fc1");
    o.device = dev;
    o.recipe_state = state;
    GroupedLinear layer(kExperts, kK, kN, recipe, false, o);
    std::vector<float> w = random_normal(kExperts * kN * kK, 51, 0.1f);
    for (int64_t i = 0; i < kExperts * kN * kK; ++i) w[i] *= magnitude(i / (kN * kK));
    copy_bytes(layer.weight().data, dev, w.data(), Device::cpu(), w.size() * sizeof(float));
    Tensor splits_t(splits, {kExperts}, Device::cpu());
    for (int step = 0; step < 3; ++step) {
      std::vector<float> x = random_normal(t * kK, 52 + step), dy = random_normal(t * kN, 60);
      for (int64_t g = 0, r0 = 0; g < kExperts; r0 += splits[g++]) {
        const float f = magnitude(g + step) * (1.0f + static_cast<float>(step));
        for (int64_t i = r0 * kK; i < (r0 + splits[g]) * kK; ++i) x[i] *= f;
        for (int64_t i = r0 * kN; i < (r0 + splits[g]) * kN; ++i) dy[i] /= f;
      }
      Tensor xt(x, {t, kK}, dev), dyt(dy, {t, kN}, dev), y(zeros(t * kN), {t, kN}, dev);
      Tensor dx(zeros(t * kK), {t, kK}, dev), dw(zeros(kExperts * kN * kK), {kExperts, kN, kK}, dev);
      GroupedLinearContext ctx = layer.forward(xt.view, splits_t.view, y.view);
      layer.backward(ctx, dyt.view, {dx.view, dw.view, {}, false});
    }
    std::vector<float> all;  // per role: scale (G), then amax_history (H, G)
    for (TensorType r : {TensorType::kInput, TensorType::kWeight, TensorType::kGradOutput}) {
      const DelayedScalingState st = state->member_state({"grouped_linear", r, "fc1"}, kExperts);
      for (const TensorView& v : {st.scale, st.amax_history}) {
        std::vector<float> h(static_cast<size_t>(v.numel()));
        copy_bytes(h.data(), Device::cpu(), v.data, dev, h.size() * sizeof(float));
        all.insert(all.end(), h.begin(), h.end());
      }
    }
    return all;
  };
  const std::vector<float> cpu = run(Device::cpu()), gpu = run(Device::cuda(0));
  const int64_t n = differing(gpu, cpu);
  const auto moved = std::count_if(cpu.begin(), cpu.end(), [](float v) { return v != 0 && v != 1; });
  std::printf("  %-60s state values differing CUDA vs CPU: %lld of %zu (%lld set)\n",
              spec.c_str(), (long long)n, cpu.size(), (long long)moved);
  if (moved < 3 * 2 * kExperts) return "the state hardly moved: the test checks nothing";
  return n == 0 ? "" : std::to_string(n) + " state values differ";
}

TEST(GroupedLinearCuda, DelayedStatePerExpertMatchesCpu) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const std::string spec : {"fp8_delayed;amax_history_len=300",
                                 "fp8_delayed;amax_history_len=300;amax_compute_algo=most_recent;"
                                 "margin=1"}) {
    try {
      EXPECT_EQ(compare_delayed_state(spec), "") << spec;
    } catch (const std::exception& e) {
      ADD_FAILURE() << spec << " threw: " << e.what();
    }
  }
}

struct MlpStep {
  std::vector<float> y, dx, dp, dw1, dw2;
};

// fc2's output (hidden) and fc1's (2·ffn) are multiples of 128 (FP8 block dgrad contractions).
constexpr int64_t kHidden = 384, kFfn = 192;

std::vector<MlpStep> run_mlp(const std::string& recipe_name, Device dev, bool device_splits) {
  GroupedMLPOptions o;
  o.device = dev;
  GroupedMLP mlp(kG, kHidden, kFfn, *make_recipe(recipe_name), o);
  mlp.reset_parameters(5);
  reset_rng_offset(5);  // both devices' runs draw the same stochastic-rounding bits
  std::vector<int64_t> splits = kSplits;
  Tensor splits_t(splits, {kG}, device_splits ? dev : Device::cpu());
  std::vector<MlpStep> out;
  for (int step = 0; step < 2; ++step) {
    Tensor x(random_normal(kT * kHidden, 31 + step), {kT, kHidden}, dev);
    Tensor dy(random_normal(kT * kHidden, 32), {kT, kHidden}, dev);
    Tensor p(random_normal(kT, 33, 0.3f), {kT}, dev), y(zeros(kT * kHidden), {kT, kHidden}, dev);
    Tensor dx(zeros(kT * kHidden), {kT, kHidden}, dev), dp(zeros(kT), {kT}, dev);
    Tensor dw1(zeros(kG * 2 * kFfn * kHidden), {kG, 2 * kFfn, kHidden}, dev);
    Tensor dw2(zeros(kG * kHidden * kFfn), {kG, kHidden, kFfn}, dev);
    GroupedMLPContext ctx = mlp.forward(x.view, splits_t.view, p.view, y.view);
    GroupedMLPGrads g;
    g.dx = dx.view;
    g.dprobs = dp.view;
    g.fc1_dw = dw1.view;
    g.fc2_dw = dw2.view;
    mlp.backward(ctx, dy.view, g);
    out.push_back({y.to_host(), dx.to_host(), dp.to_host(), dw1.to_host(), dw2.to_host()});
  }
  return out;
}

TEST(GroupedMLPCuda, MatchesCpu) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::printf("GroupedMLP G=%lld hidden=%lld ffn=%lld splits 37,0,101,18: SQNR dB CUDA vs CPU "
              "(step 1)\n  %-18s %-6s %8s %8s %8s %8s %8s\n", (long long)kG, (long long)kHidden,
              (long long)kFfn, "recipe", "splits", "y", "dX", "dprobs", "fc1 dW", "fc2 dW");
  std::vector<std::string> recipes = cuda_recipes();
  recipes.push_back("nvfp4:nosr");
  for (const std::string& r : recipes) {
    const double bar = is_fp8(r) ? 30.0 : 40.0;
    const std::vector<MlpStep> cpu = run_mlp(r, Device::cpu(), false);
    for (bool device_splits : {false, true}) {
      if (device_splits && r == "nvfp4") continue;  // another SR draw there (cuda_recipes)
      std::vector<MlpStep> gpu;
      try {
        gpu = run_mlp(r, Device::cuda(0), device_splits);
      } catch (const std::exception& e) {
        ADD_FAILURE() << r << (device_splits ? " device" : " host") << " splits threw: " << e.what();
        continue;
      }
      for (int step = 0; step < 2; ++step) {
        const MlpStep &c = cpu[step], &d = gpu[step];
        const double s[5] = {sqnr_db(c.y, d.y), sqnr_db(c.dx, d.dx), sqnr_db(c.dp, d.dp),
                             sqnr_db(c.dw1, d.dw1), sqnr_db(c.dw2, d.dw2)};
        if (step == 1)
          std::printf("  %-18s %-6s %8.1f %8.1f %8.1f %8.1f %8.1f\n", r.c_str(),
                      device_splits ? "device" : "host", s[0], s[1], s[2], s[3], s[4]);
        for (double v : s)
          EXPECT_GE(v, bar) << r << (device_splits ? " device" : " host") << " splits, step "
                            << step;
        EXPECT_TRUE(all_finite(d.y) && all_finite(d.dx) && all_finite(d.dw1) && all_finite(d.dw2))
            << r;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::nn::test
