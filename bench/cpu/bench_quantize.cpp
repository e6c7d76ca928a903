// Quantize throughput (GB/s of BF16 input read) of every recipe on a 4096x7168 BF16 matrix, rowwise
// usage and rowwise+columnwise ("both"; NVFP4 without the Hadamard transform), 1 and 2 threads,
// next to memcpy of the same input bytes in the same run. Each run first checks the CPU output
// against the reference backend on a small slice (validate, then time). On a shared machine read
// the CPU column (the main thread's CPU time) as well as the wall time: bytes / CPU time next to
// memcpy's gives the ratio without the time other processes took.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tessera/formats/half.h"
#include "tessera/quantize/quantizer.h"
#include "tessera/quantize/recipe.h"

namespace {

constexpr int64_t kRows = 4096, kCols = 7168;

const std::vector<tessera::bf16>& input() {
  static const std::vector<tessera::bf16> v = [] {
    std::vector<tessera::bf16> x(static_cast<size_t>(kRows * kCols));
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 3.0f);
    for (auto& e : x) e = tessera::bf16::from_float(dist(rng));
    return x;
  }();
  return v;
}

tessera::TensorView view_rows(int64_t rows) {
  return tessera::TensorView::contiguous(const_cast<tessera::bf16*>(input().data()),
                                         tessera::DType::kBFloat16, {rows, kCols});
}

// CPU == reference on the first 256 rows (bytes of data and scales).
bool validate(tessera::Quantizer& q) {
  tessera::QuantizedTensor a = q.allocate(256, kCols), b = q.allocate(256, kCols);
  q.quantize(view_rows(256), a.view(), tessera::Backend::kCPU);
  q.quantize(view_rows(256), b.view(), tessera::Backend::kReference);
  const auto& va = a.view();
  const auto& vb = b.view();
  for (auto [x, y] : {std::pair{va.data, vb.data}, std::pair{va.scale_inv, vb.scale_inv},
                      std::pair{va.columnwise_data, vb.columnwise_data}}) {
    if (x.data != nullptr && std::memcmp(x.data, y.data, static_cast<size_t>(x.nbytes())) != 0) return false;
  }
  return true;
}

// The recipe's config for `role` (the input's unless named: NVFP4's weight role quantizes 16x16
// tiles, its grad_output role with stochastic rounding), both usages when `columnwise`, without
// the Hadamard transform.
void BM_Quantize(benchmark::State& state, std::string recipe, bool columnwise,
                 tessera::TensorType role = tessera::TensorType::kInput) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  tessera::QuantizerConfig c = tessera::parse_recipe(recipe).config_for({"bench", role, ""});
  c.rowwise = true;
  c.columnwise = columnwise;
  c.random_hadamard = false;
  tessera::Quantizer q(c);
  if (!validate(q)) {
    state.SkipWithError("CPU output differs from the reference");
    return;
  }
  tessera::QuantizedTensor out = q.allocate(kRows, kCols);
  const tessera::TensorView x = view_rows(kRows);
  q.quantize(x, out);
  for (auto _ : state) {
    q.quantize(x, out);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kRows * kCols * 2);
}

void BM_Memcpy(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t bytes = kRows * kCols * 2;
  std::vector<uint8_t> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes));
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const int64_t chunk = bytes / threads;
      std::memcpy(dst.data() + t * chunk, src.data() + t * chunk,
                  static_cast<size_t>(t == threads - 1 ? bytes - t * chunk : chunk));
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

#define TESSERA_QUANTIZE_BENCH(name, recipe, ...)                                              \
  BENCHMARK_CAPTURE(BM_Quantize, name, recipe, __VA_ARGS__)                                   \
      ->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->MinTime(0.5)                      \
      ->Unit(benchmark::kMillisecond)

TESSERA_QUANTIZE_BENCH(fp8_current_rowwise, "fp8_current:e4m3", false);
TESSERA_QUANTIZE_BENCH(fp8_current_both, "fp8_current:e4m3", true);
TESSERA_QUANTIZE_BENCH(fp8_delayed_rowwise, "fp8_delayed:e4m3", false);
TESSERA_QUANTIZE_BENCH(fp8_rowwise_rowwise, "fp8_rowwise", false);
TESSERA_QUANTIZE_BENCH(fp8_rowwise_both, "fp8_rowwise", true);
TESSERA_QUANTIZE_BENCH(fp8_block_1x128_rowwise, "fp8_block", false);
TESSERA_QUANTIZE_BENCH(fp8_block_1x128_both, "fp8_block", true);
TESSERA_QUANTIZE_BENCH(mxfp8_rowwise, "mxfp8", false);
TESSERA_QUANTIZE_BENCH(mxfp8_both, "mxfp8", true);
TESSERA_QUANTIZE_BENCH(nvfp4_rowwise, "nvfp4", false);
TESSERA_QUANTIZE_BENCH(nvfp4_both, "nvfp4", true);
TESSERA_QUANTIZE_BENCH(nvfp4_weight_both, "nvfp4", true, tessera::TensorType::kWeight);
TESSERA_QUANTIZE_BENCH(nvfp4_grad_both, "nvfp4", true, tessera::TensorType::kGradOutput);
BENCHMARK(BM_Memcpy)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->MinTime(0.5)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
