// Bulk FP32→E4M3 and BF16→E4M3 encode throughput (GB/s of input read) on 1 and 2 threads,
// next to memcpy of the same input bytes. Validates one element of each run before timing.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/convert.h"

namespace {

constexpr int64_t kElems = int64_t{64} << 20;  // 64 Mi elements: 256 MB of FP32, far past L2/L3

template <class In>
std::vector<In> make_input() {
  std::vector<In> v(kElems);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  for (auto& x : v) x = tessera::from_float<In>(dist(rng));
  return v;
}

template <class In>
void BM_Encode(benchmark::State& state, tessera::DType in_dtype) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  static const std::vector<In> in = make_input<In>();
  std::vector<uint8_t> out(kElems);
  const auto src = tessera::TensorView::contiguous(const_cast<In*>(in.data()), in_dtype, {kElems});
  const auto dst = tessera::TensorView::contiguous(out.data(), tessera::DType::kFloat8E4M3, {kElems});
  tessera::encode(src, dst);
  if (out[12345] != tessera::formats::encode_e4m3(tessera::to_float(in[12345]))) {
    state.SkipWithError("encode produced a wrong value");
  }
  for (auto _ : state) {
    tessera::encode(src, dst);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElems * static_cast<int64_t>(sizeof(In)));
}

void BM_Memcpy(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t bytes = state.range(1);
  std::vector<uint8_t> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const int64_t chunk = bytes / threads;
      std::memcpy(dst.data() + t * chunk, src.data() + t * chunk,
                  t == threads - 1 ? bytes - t * chunk : chunk);
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

void BM_EncodeFp32ToE4m3(benchmark::State& s) { BM_Encode<float>(s, tessera::DType::kFloat32); }
void BM_EncodeBf16ToE4m3(benchmark::State& s) {
  BM_Encode<tessera::bf16>(s, tessera::DType::kBFloat16);
}

BENCHMARK(BM_EncodeFp32ToE4m3)
    ->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeBf16ToE4m3)
    ->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Memcpy)
    ->Args({1, kElems * 4})->Args({2, kElems * 4})->Args({1, kElems * 2})->Args({2, kElems * 2})
    ->ArgNames({"threads", "bytes"})->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
