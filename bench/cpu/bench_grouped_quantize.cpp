// CPU grouped quantize throughput for the DeepSeek-V3 fc1 activation: 32 members of 512 x 7168,
// BF16 in, one GroupedTensor out (grouped_quantize_contiguous), next to the baseline of
// quantizing the 32 members one by one into 32 standalone QuantizedTensors, timed alternately
// in the same run. GB/s counts bytes read (BF16 input) plus bytes written (data + scales).
// Validates (grouped member bytes == one-by-one bytes) before timing.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/formats/half.h"
#include "tessera/grouped/grouped_quantize.h"

namespace {

using namespace tessera;

constexpr int64_t kMembers = 32, kRows = 512, kCols = 7168;

const Buffer& input() {  // (32 x 512, 7168) BF16, random normal
  static const Buffer buf = [] {
    Buffer b(static_cast<size_t>(kMembers * kRows * kCols) * 2);
    std::mt19937 rng(17);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    for (int64_t i = 0; i < kMembers * kRows * kCols; ++i) b.as<bf16>()[i] = bf16::from_float(dist(rng));
    return b;
  }();
  return buf;
}

bool same_bytes(const TensorView& a, const TensorView& b) {
  if (a.data == nullptr || b.data == nullptr) return a.data == b.data;
  return a.nbytes() == b.nbytes() &&
         std::memcmp(a.data, b.data, static_cast<size_t>(a.nbytes())) == 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void BM_GroupedQuantize(benchmark::State& state, ScalingMode mode) {
  QuantizerConfig c = make_config(mode);
  const TensorView x = TensorView::contiguous(input().data(), DType::kBFloat16,
                                              {kMembers * kRows, kCols});
  std::vector<std::array<int64_t, 2>> shapes(kMembers, {kRows, kCols});
  GroupedTensorOptions o;
  o.config = c;
  o.mode = GroupedShapeMode::kVaryingFirst;
  GroupedTensor grouped = GroupedTensor::from_shapes(shapes, o);
  std::vector<QuantizedTensor> alone;
  std::vector<TensorView> members;
  for (int64_t g = 0; g < kMembers; ++g) {
    alone.emplace_back(c, kRows, kCols, Device::cpu());
    members.push_back(TensorView::contiguous(static_cast<bf16*>(x.data) + g * kRows * kCols,
                                             DType::kBFloat16, {kRows, kCols}));
  }
  Quantizer q(c);
  auto run_grouped = [&] { grouped_quantize_contiguous(q, x, grouped); };
  auto run_one_by_one = [&] {
    for (int64_t g = 0; g < kMembers; ++g) q.quantize(members[g], alone[g]);
  };
  run_grouped();
  run_one_by_one();
  for (int64_t g : {int64_t{0}, kMembers - 1}) {
    const QuantizedTensorView m = grouped.quantized_member(g);
    if (!same_bytes(m.data, alone[g].view().data) ||
        !same_bytes(m.scale_inv, alone[g].view().scale_inv)) {
      state.SkipWithError("grouped quantize differs from quantizing the member alone");
      return;
    }
  }
  const double bytes = static_cast<double>(x.nbytes() + grouped.storage_bytes());
  std::vector<double> t_grouped, t_alone;
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = clock::now();
    run_grouped();
    const auto t1 = clock::now();
    run_one_by_one();
    const auto t2 = clock::now();
    t_grouped.push_back(std::chrono::duration<double>(t1 - t0).count());
    t_alone.push_back(std::chrono::duration<double>(t2 - t1).count());
    state.SetIterationTime(t_grouped.back());
  }
  const double g = median(t_grouped), a = median(t_alone);
  state.counters["grouped_GBps"] = bytes / g / 1e9;
  state.counters["one_by_one_GBps"] = bytes / a / 1e9;
  state.counters["grouped_x_one_by_one"] = a / g;
}

BENCHMARK_CAPTURE(BM_GroupedQuantize, fp8_tensor, ScalingMode::kTensor)
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GroupedQuantize, fp8_rowwise, ScalingMode::kRowwise)
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GroupedQuantize, fp8_block1x128, ScalingMode::kBlock1x128)
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GroupedQuantize, mxfp8, ScalingMode::kMXFP8)
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GroupedQuantize, nvfp4, ScalingMode::kNVFP4)
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
