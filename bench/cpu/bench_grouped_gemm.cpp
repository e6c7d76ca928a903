// CPU grouped GEMM on a scaled-down MoE layer (8 experts × 256 tokens, K = 1024, N = 2048,
// forward y = x Wᵀ), in GFLOP/s of valid rows, next to the baseline measured in the same run: a
// plain loop of OpenBLAS cblas_sgemm over the experts on FP32 copies. Variants: FP32, BF16 (the
// native BF16 path where there is one, else converted to FP32 inside) and FP16 (converted)
// operands, the quantized recipes (dequantized to FP32 inside), balanced and imbalanced (skewed,
// one empty expert); BF16's native path against its FP32 path, alternating.
// Each variant validates its output against the baseline before timing.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "gemm/cpu/bf16_gemm.h"
#include "tessera/core/buffer.h"
#include "tessera/formats/format_table.h"
#include "tessera/formats/half.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/quantize/quantizer.h"

namespace {

using tessera::DType;
using tessera::TensorView;

constexpr int64_t kExperts = 8, kTokensPerExpert = 256, kK = 1024, kN = 2048;
constexpr int64_t kTokens = kExperts * kTokensPerExpert;

// Per-expert token counts: balanced, or skewed with one empty expert (same total).
std::vector<int64_t> expert_rows(bool imbalanced) {
  if (!imbalanced) return std::vector<int64_t>(kExperts, kTokensPerExpert);
  return {512, 384, 0, 320, 256, 288, 160, 128};  // multiples of 16, sum 2048
}

struct MoeInputs {
  std::vector<float> x;       // (tokens, K)
  std::vector<float> w;       // (experts, N, K)
  std::vector<int64_t> offs;  // (experts + 1), leading 0
};

const MoeInputs& inputs(bool imbalanced) {
  static MoeInputs sets[2];
  MoeInputs& in = sets[imbalanced ? 1 : 0];
  if (!in.x.empty()) return in;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // Values exact in BF16, so every variant multiplies the same numbers.
  auto draw = [&] { return tessera::bf16::from_float(dist(rng)).to_float(); };
  in.x.resize(kTokens * kK);
  in.w.resize(kExperts * kN * kK);
  for (auto& v : in.x) v = draw();
  for (auto& v : in.w) v = draw();
  in.offs.assign(1, 0);
  for (int64_t r : expert_rows(imbalanced)) in.offs.push_back(in.offs.back() + r);
  return in;
}

void sgemm_loop(const MoeInputs& in, float* y) {
  for (int64_t g = 0; g < kExperts; ++g) {
    const int64_t r0 = in.offs[g], rows = in.offs[g + 1] - r0;
    if (rows == 0) continue;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), kN, kK, 1.0f,
                in.x.data() + r0 * kK, kK, in.w.data() + g * kN * kK, kK, 0.0f, y + r0 * kN, kN);
  }
}

void set_flops(benchmark::State& state) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * kTokens * kN * kK * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_SgemmLoopBaseline(benchmark::State& state) {
  const MoeInputs& in = inputs(state.range(0) != 0);
  std::vector<float> y(kTokens * kN);
  for (auto _ : state) {
    sgemm_loop(in, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_flops(state);
}

template <class T>
std::vector<T> converted(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = tessera::from_float<T>(v[i]);
  return out;
}

// tessera grouped GEMM with operands and output of type T.
template <class T>
void BM_GroupedGemm(benchmark::State& state, DType dtype) {
  const MoeInputs& in = inputs(state.range(0) != 0);
  const std::vector<T> x = converted<T>(in.x), w = converted<T>(in.w);
  std::vector<T> y(kTokens * kN);
  std::vector<int64_t> offs = in.offs;
  tessera::GroupedGemmProblem p;
  p.kind = tessera::GroupedGemmKind::kMGrouped;
  p.num_groups = kExperts;
  p.a = tessera::GemmOperand::from_dense(
      TensorView::contiguous(const_cast<T*>(x.data()), dtype, {kTokens, kK}));
  p.b = tessera::GemmOperand::from_dense(
      TensorView::contiguous(const_cast<T*>(w.data()), dtype, {kExperts, kN, kK}));
  p.transpose_b = true;
  p.d = TensorView::contiguous(y.data(), dtype, {kTokens, kN});
  p.group_offsets = TensorView::contiguous(offs.data(), DType::kInt64, {kExperts + 1});
  const int64_t ws_bytes = tessera::workspace_size(p);
  tessera::Buffer ws(static_cast<size_t>(ws_bytes));
  const TensorView ws_view = TensorView::contiguous(ws.data(), DType::kUInt8, {ws_bytes});

  // Validate against the baseline before timing.
  tessera::run(p, ws_view);
  std::vector<float> ref(kTokens * kN);
  sgemm_loop(in, ref.data());
  const double out_u = tessera::format_info(dtype).unit_roundoff();
  for (int64_t i = 0; i < kTokens * kN; i += 997) {
    const double got = tessera::to_float(y[i]);
    if (!(std::fabs(got - ref[i]) <= 2 * out_u * std::fabs(ref[i]) + 1e-3)) {
      state.SkipWithError("grouped GEMM disagrees with the sgemm loop");
      return;
    }
  }
  for (auto _ : state) {
    tessera::run(p, ws_view);
    benchmark::DoNotOptimize(y.data());
  }
  set_flops(state);
}

// FP32 grouped GEMM and the sgemm loop timed alternately in each iteration (robust against a
// shared, noisy machine): reports both medians and their ratio (goal ≥ 0.95).
void BM_Fp32RatioToSgemmLoop(benchmark::State& state) {
  const MoeInputs& in = inputs(state.range(0) != 0);
  std::vector<float> y(kTokens * kN), ref(kTokens * kN);
  std::vector<int64_t> offs = in.offs;
  tessera::GroupedGemmProblem p;
  p.num_groups = kExperts;
  p.a = tessera::GemmOperand::from_dense(
      TensorView::contiguous(const_cast<float*>(in.x.data()), DType::kFloat32, {kTokens, kK}));
  p.b = tessera::GemmOperand::from_dense(
      TensorView::contiguous(const_cast<float*>(in.w.data()), DType::kFloat32, {kExperts, kN, kK}));
  p.d = TensorView::contiguous(y.data(), DType::kFloat32, {kTokens, kN});
  p.group_offsets = TensorView::contiguous(offs.data(), DType::kInt64, {kExperts + 1});
  tessera::run(p, TensorView{});
  sgemm_loop(in, ref.data());
  for (int64_t i = 0; i < kTokens * kN; ++i) {
    if (!(std::fabs(y[i] - ref[i]) <= 1e-3f)) {
      state.SkipWithError("grouped GEMM disagrees with the sgemm loop");
      return;
    }
  }
  std::vector<double> base_s, ours_s;
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = clock::now();
    sgemm_loop(in, ref.data());
    const auto t1 = clock::now();
    tessera::run(p, TensorView{});
    const auto t2 = clock::now();
    base_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    ours_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    state.SetIterationTime(ours_s.back());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double gflop = 2.0 * kTokens * kN * kK * 1e-9;
  state.counters["sgemm_loop_GFLOP/s"] = gflop / median(base_s);
  state.counters["tessera_GFLOP/s"] = gflop / median(ours_s);
  state.counters["ratio"] = median(base_s) / median(ours_s);
}

// BF16 in and out, the native path (oneDNN's BF16 matmul, where this build and CPU have it) and
// the FP32 path (convert + sgemm, forced) timed alternately in each iteration: both medians and
// the speed-up of the native path. tessera.bench cpu times the same against torch._grouped_mm.
void BM_Bf16NativeRatioToFp32Path(benchmark::State& state) {
  if (!tessera::detail::cpu::bf16_support().native) {
    state.SkipWithError(tessera::cpu_bf16_gemm_path().c_str());
    return;
  }
  const MoeInputs& in = inputs(state.range(0) != 0);
  const std::vector<tessera::bf16> x = converted<tessera::bf16>(in.x);
  const std::vector<tessera::bf16> w = converted<tessera::bf16>(in.w);
  std::vector<tessera::bf16> y(kTokens * kN), y_fp32_path(kTokens * kN);
  std::vector<int64_t> offs = in.offs;
  tessera::GroupedGemmProblem p;
  p.num_groups = kExperts;
  p.a = tessera::GemmOperand::from_dense(TensorView::contiguous(
      const_cast<tessera::bf16*>(x.data()), DType::kBFloat16, {kTokens, kK}));
  p.b = tessera::GemmOperand::from_dense(TensorView::contiguous(
      const_cast<tessera::bf16*>(w.data()), DType::kBFloat16, {kExperts, kN, kK}));
  p.group_offsets = TensorView::contiguous(offs.data(), DType::kInt64, {kExperts + 1});
  tessera::GroupedGemmProblem q = p;
  p.d = TensorView::contiguous(y.data(), DType::kBFloat16, {kTokens, kN});
  q.d = TensorView::contiguous(y_fp32_path.data(), DType::kBFloat16, {kTokens, kN});
  auto run_fp32_path = [&] {
    tessera::detail::cpu::set_bf16_native_allowed(false);
    tessera::grouped_gemm(q);
    tessera::detail::cpu::set_bf16_native_allowed(true);
  };
  tessera::grouped_gemm(p);  // validate: the two paths agree within twice the BF16 rounding
  run_fp32_path();
  for (int64_t i = 0; i < kTokens * kN; ++i) {
    const float a = y[i].to_float(), b = y_fp32_path[i].to_float();
    if (!(std::fabs(a - b) <= 2 * 0x1p-8f * std::fabs(b) + 1e-3f)) {
      state.SkipWithError("the native BF16 path disagrees with the FP32 path");
      return;
    }
  }
  std::vector<double> fp32_s, native_s;
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = clock::now();
    run_fp32_path();
    const auto t1 = clock::now();
    tessera::grouped_gemm(p);
    const auto t2 = clock::now();
    fp32_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    native_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    state.SetIterationTime(native_s.back());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double gflop = 2.0 * kTokens * kN * kK * 1e-9;
  state.counters["fp32_path_GFLOP/s"] = gflop / median(fp32_s);
  state.counters["native_GFLOP/s"] = gflop / median(native_s);
  state.counters["speedup"] = median(fp32_s) / median(native_s);
}

void BM_GroupedGemmFp32(benchmark::State& s) { BM_GroupedGemm<float>(s, DType::kFloat32); }
void BM_GroupedGemmBf16(benchmark::State& s) { BM_GroupedGemm<tessera::bf16>(s, DType::kBFloat16); }
void BM_GroupedGemmFp16(benchmark::State& s) { BM_GroupedGemm<tessera::fp16>(s, DType::kFloat16); }

// Quantized operands (x and W quantized rowwise once, outside the timing): the CPU backend
// dequantizes both into FP32 and runs the same sgemm loop; FP32 output.
void BM_GroupedGemmQuantized(benchmark::State& state, tessera::ScalingMode mode,
                             tessera::ScalingMode weight_mode) {
  const MoeInputs& in = inputs(state.range(0) != 0);
  tessera::QuantizerConfig cx = tessera::make_config(mode), cw = tessera::make_config(weight_mode);
  tessera::QuantizedTensor qx(cx, kTokens, kK, tessera::Device::cpu());
  tessera::QuantizedTensor qw(cw, kExperts * kN, kK, tessera::Device::cpu());
  tessera::Quantizer(cx).quantize(
      TensorView::contiguous(const_cast<float*>(in.x.data()), DType::kFloat32, {kTokens, kK}), qx);
  tessera::Quantizer(cw).quantize(TensorView::contiguous(const_cast<float*>(in.w.data()),
                                                         DType::kFloat32, {kExperts * kN, kK}),
                                  qw);
  std::vector<float> y(kTokens * kN), ref(kTokens * kN);
  std::vector<int64_t> offs = in.offs;
  tessera::GroupedGemmProblem p;
  p.num_groups = kExperts;
  p.a = tessera::GemmOperand::from_quantized(qx.view(), false);
  p.b = tessera::GemmOperand::from_quantized(qw.view(), false);
  p.d = TensorView::contiguous(y.data(), DType::kFloat32, {kTokens, kN});
  p.group_offsets = TensorView::contiguous(offs.data(), DType::kInt64, {kExperts + 1});
  const int64_t ws_bytes = tessera::workspace_size(p);
  tessera::Buffer ws(static_cast<size_t>(ws_bytes));
  const TensorView ws_view = TensorView::contiguous(ws.data(), DType::kUInt8, {ws_bytes});
  tessera::run(p, ws_view);
  sgemm_loop(in, ref.data());  // unquantized result: the quantization error must stay small
  double err = 0, norm = 0;
  for (int64_t i = 0; i < kTokens * kN; ++i) {
    err += (y[i] - ref[i]) * double{y[i] - ref[i]};
    norm += ref[i] * double{ref[i]};
  }
  const double rel = std::sqrt(err / norm);
  if (!(rel < 0.2)) {
    state.SkipWithError("quantized grouped GEMM is far from the FP32 result");
    return;
  }
  for (auto _ : state) {
    tessera::run(p, ws_view);
    benchmark::DoNotOptimize(y.data());
  }
  set_flops(state);
  state.counters["rel_err_vs_fp32"] = rel;
}

void BM_QuantFp8Tensor(benchmark::State& s) {
  BM_GroupedGemmQuantized(s, tessera::ScalingMode::kTensor, tessera::ScalingMode::kTensor);
}
void BM_QuantFp8Rowwise(benchmark::State& s) {
  BM_GroupedGemmQuantized(s, tessera::ScalingMode::kRowwise, tessera::ScalingMode::kRowwise);
}
void BM_QuantFp8Block(benchmark::State& s) {
  BM_GroupedGemmQuantized(s, tessera::ScalingMode::kBlock1x128, tessera::ScalingMode::kBlock128x128);
}
void BM_QuantMxfp8(benchmark::State& s) {
  BM_GroupedGemmQuantized(s, tessera::ScalingMode::kMXFP8, tessera::ScalingMode::kMXFP8);
}
void BM_QuantNvfp4(benchmark::State& s) {
  BM_GroupedGemmQuantized(s, tessera::ScalingMode::kNVFP4, tessera::ScalingMode::kNVFP4_16x16);
}

// Arg 0 = balanced, 1 = imbalanced. Real time (BLAS runs on its own threads); medians of 5.
#define TESSERA_GEMM_BENCH(fn)                                                              \
  BENCHMARK(fn)->ArgName("imbalanced")->Arg(0)->Arg(1)->UseRealTime()->Unit(               \
      benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true)

BENCHMARK(BM_Fp32RatioToSgemmLoop)->ArgName("imbalanced")->Arg(0)->Arg(1)->UseManualTime()
    ->Unit(benchmark::kMillisecond)->Iterations(31);
BENCHMARK(BM_Bf16NativeRatioToFp32Path)->ArgName("imbalanced")->Arg(0)->Arg(1)->UseManualTime()
    ->Unit(benchmark::kMillisecond)->Iterations(15);
TESSERA_GEMM_BENCH(BM_SgemmLoopBaseline);
TESSERA_GEMM_BENCH(BM_GroupedGemmFp32);
TESSERA_GEMM_BENCH(BM_GroupedGemmBf16);
TESSERA_GEMM_BENCH(BM_GroupedGemmFp16);
TESSERA_GEMM_BENCH(BM_QuantFp8Tensor);
TESSERA_GEMM_BENCH(BM_QuantFp8Rowwise);
TESSERA_GEMM_BENCH(BM_QuantFp8Block);
TESSERA_GEMM_BENCH(BM_QuantMxfp8);
TESSERA_GEMM_BENCH(BM_QuantNvfp4);

}  // namespace

BENCHMARK_MAIN();
