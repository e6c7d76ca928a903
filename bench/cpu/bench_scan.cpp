// CPU splits → offsets (6 outputs of one scan, as GroupedMLP asks for) and token padding
// throughput. Each benchmark validates its result against a plain loop once before timing.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/nn/token_padding.h"
#include "tessera/scan/splits_to_offsets.h"

namespace {

using tessera::DType;
using tessera::OffsetsSpec;
using tessera::TensorView;

std::vector<int32_t> make_splits(int64_t n, int max_split) {
  std::mt19937 rng(7);
  std::vector<int32_t> s(static_cast<size_t>(n));
  for (auto& v : s) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(max_split + 1));
  return s;
}

// The six offsets a GroupedMLP layer keeps: token starts/ends, fc1 and fc2 element offsets,
// padded starts for a 128-row alignment, and int32 ends for torch-style `offs`.
std::vector<OffsetsSpec> mlp_specs() {
  return {{1, true, DType::kInt64, 1},     {1, false, DType::kInt32, 1},
          {7168, true, DType::kInt64, 1},  {2048, true, DType::kInt64, 1},
          {1, true, DType::kInt64, 128},   {4096, false, DType::kInt64, 1}};
}

void BM_SplitsToOffsetsMulti(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto splits = make_splits(n, 64);
  const auto specs = mlp_specs();
  tessera::OffsetsBundle b = tessera::allocate_offsets(n, specs, tessera::Device::cpu());
  const auto sv = TensorView::contiguous(const_cast<int32_t*>(splits.data()), DType::kInt32, {n});
  tessera::splits_to_offsets_multi(sv, specs, b.outputs);
  int64_t sum = 0;
  for (int32_t s : splits) sum += s;
  if (b.outputs[2].as<int64_t>()[n] != 7168 * sum) state.SkipWithError("wrong offsets");
  for (auto _ : state) {
    tessera::splits_to_offsets_multi(sv, specs, b.outputs);
    benchmark::DoNotOptimize(b.storage.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_SplitsToOffsetsMulti)->Arg(256)->Arg(1024)->Arg(100000);

// Pads a (tokens, K) bf16 activation to 128-row groups: bytes read + written per second.
void BM_PadTokens(benchmark::State& state) {
  const int64_t groups = state.range(0), k = state.range(1);
  const auto s32 = make_splits(groups, 512);
  std::vector<int64_t> splits(s32.begin(), s32.end());
  int64_t rows = 0;
  for (int64_t s : splits) rows += s;
  const int64_t padded_cap = tessera::padded_rows_bound(rows, groups, 128);
  std::vector<uint16_t> x(static_cast<size_t>(rows * k), 0x3f80), xp(static_cast<size_t>(padded_cap * k));
  std::vector<int64_t> off(static_cast<size_t>(groups + 1)), poff(static_cast<size_t>(groups + 1));
  const auto xv = TensorView::contiguous(x.data(), DType::kBFloat16, {rows, k});
  const auto xpv = TensorView::contiguous(xp.data(), DType::kBFloat16, {padded_cap, k});
  const auto sv = TensorView::contiguous(splits.data(), DType::kInt64, {groups});
  const auto ov = TensorView::contiguous(off.data(), DType::kInt64, {groups + 1});
  const auto pov = TensorView::contiguous(poff.data(), DType::kInt64, {groups + 1});
  tessera::pad_tokens_from_splits(xv, sv, 128, xpv, ov, pov);
  for (int64_t g = 0; g < groups; ++g) {  // first real row copied, first padding row zero
    const bool real_ok = splits[g] == 0 || xp[static_cast<size_t>(poff[g] * k)] == 0x3f80;
    const bool pad_ok = poff[g + 1] - poff[g] == splits[g] ||
                        xp[static_cast<size_t>((poff[g] + splits[g]) * k)] == 0;
    if (!real_ok || !pad_ok) state.SkipWithError("wrong padding");
  }
  for (auto _ : state) {
    tessera::pad_tokens(xv, ov, pov, xpv);
    benchmark::DoNotOptimize(xp.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (rows + poff[groups]) * k * 2);
}
BENCHMARK(BM_PadTokens)->Args({32, 7168})->Args({128, 2048})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
