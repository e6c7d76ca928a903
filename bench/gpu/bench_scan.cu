// GPU splits → offsets and token padding timings (run on the device by bench_scan.sh).
// Validates every result against the CPU path first, then times with CUDA events: the median of
// 30 single launches, and the median of 30 replays of a CUDA graph of 100 launches (/ 100),
// which takes launch overhead out. Goal for 256 groups × 6 outputs: <= 4 µs per launch.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/nn/token_padding.h"
#include "tessera/scan/splits_to_offsets.h"

using namespace tessera;

namespace {

#define CHECK_CUDA(call)                                                                 \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

constexpr int kReps = 30;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median µs of kReps CUDA-event timings of `fn` on `stream` after warm-up.
double time_single(cudaStream_t stream, const std::function<void()>& fn) {
  for (int i = 0; i < 5; ++i) fn();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<double> us;
  for (int r = 0; r < kReps; ++r) {
    CHECK_CUDA(cudaEventRecord(a, stream));
    fn();
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(us);
}

// Median µs per call of kReps replays of a graph holding `per_graph` captured calls of `fn`.
double time_graph(cudaStream_t stream, const std::function<void()>& fn, int per_graph = 100) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < per_graph; ++i) fn();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const double us = time_single(stream, [&] { CHECK_CUDA(cudaGraphLaunch(exec, stream)); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return us / per_graph;
}

__global__ void empty_kernel() {}

// The floor: an empty single-block kernel timed the same way.
void bench_floor(cudaStream_t stream) {
  auto call = [&] { empty_kernel<<<1, 256, 0, stream>>>(); };
  std::printf("empty kernel (floor)                                        single %7.2f us"
              "  graph %7.2f us/call\n",
              time_single(stream, call), time_graph(stream, call));
}

std::vector<int32_t> make_splits(int64_t n, int max_split, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> s(static_cast<size_t>(n));
  for (auto& v : s) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(max_split + 1));
  return s;
}

std::vector<char> to_host(const TensorView& v) {
  std::vector<char> h(static_cast<size_t>(v.nbytes()));
  copy_bytes(h.data(), Device::cpu(), v.data, v.device, h.size());
  return h;
}

void bench_scan(cudaStream_t stream, int64_t n, int num_outputs) {
  const auto splits = make_splits(n, 64, 3);
  std::vector<OffsetsSpec> specs;
  const int64_t strides[] = {1, 1, 7168, 2048, 1, 4096, 3, 5};
  for (int k = 0; k < num_outputs; ++k) {
    specs.push_back({strides[k % 8], k % 2 == 0, k == 1 ? DType::kInt32 : DType::kInt64,
                     k == 4 ? 128 : 1});
  }
  Buffer dsplits(splits.size() * 4, Device::cuda(0));
  copy_bytes(dsplits.data(), Device::cuda(0), splits.data(), Device::cpu(), dsplits.bytes());
  Buffer flag(4, Device::cuda(0));
  flag.fill_bytes(0);
  ScanOptions options;
  options.total_bound = n * 64;
  options.error_flag = flag.as<int32_t>();
  const auto sv = TensorView::contiguous(dsplits.data(), DType::kInt32, {n}, Device::cuda(0));
  OffsetsBundle gpu = allocate_offsets(n, specs, Device::cuda(0));
  OffsetsBundle cpu = allocate_offsets(n, specs, Device::cpu());
  auto call = [&] { splits_to_offsets_multi(sv, specs, gpu.outputs, options, Stream{stream}); };
  call();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  splits_to_offsets_multi(TensorView::contiguous(const_cast<int32_t*>(splits.data()),
                                                 DType::kInt32, {n}),
                          specs, cpu.outputs);
  bool ok = true;
  for (size_t k = 0; k < specs.size(); ++k) {
    ok &= to_host(gpu.outputs[k]) == to_host(cpu.outputs[k]);
  }
  int32_t f = -1;
  copy_bytes(&f, Device::cpu(), flag.data(), flag.device(), 4);
  ok &= f == 0;
  const double single = time_single(stream, call);
  const double graphed = time_graph(stream, call);
  const int launches = (num_outputs + kScanOutputsPerLaunch - 1) / kScanOutputsPerLaunch;
  std::printf("splits_to_offsets_multi  N=%-7lld outputs=%-3d launches=%d  %-5s  single %7.2f us"
              "  graph %7.2f us/call%s\n",
              static_cast<long long>(n), num_outputs, launches, ok ? "ok" : "WRONG", single,
              graphed, n == 256 && num_outputs == 6 ? (graphed <= 4.0 ? "  (goal <= 4 us: met)"
                                                                      : "  (goal <= 4 us: MISSED)")
                                                    : "");
}

void bench_padding(cudaStream_t stream, int64_t groups, int64_t max_rows, int64_t k) {
  const auto s32 = make_splits(groups, static_cast<int>(max_rows), 5);
  std::vector<int64_t> splits(s32.begin(), s32.end());
  splits[0] = 0;
  int64_t rows = 0;
  for (int64_t s : splits) rows += s;
  const int64_t padded_cap = padded_rows_bound(rows, groups, 128);
  const int64_t rb = k * 2;
  std::vector<uint16_t> x(static_cast<size_t>(rows * k));
  std::mt19937 rng(1);
  for (auto& v : x) v = static_cast<uint16_t>(rng());
  const Device dev = Device::cuda(0);
  Buffer dx(rows * rb, dev), dxp(padded_cap * rb, dev), dback(rows * rb, dev);
  Buffer dsplits(groups * 8, dev), doff((groups + 1) * 8, dev), dpoff((groups + 1) * 8, dev);
  copy_bytes(dx.data(), dev, x.data(), Device::cpu(), dx.bytes());
  copy_bytes(dsplits.data(), dev, splits.data(), Device::cpu(), dsplits.bytes());
  const auto xv = TensorView::contiguous(dx.data(), DType::kBFloat16, {rows, k}, dev);
  const auto xpv = TensorView::contiguous(dxp.data(), DType::kBFloat16, {padded_cap, k}, dev);
  const auto bv = TensorView::contiguous(dback.data(), DType::kBFloat16, {rows, k}, dev);
  const auto sv = TensorView::contiguous(dsplits.data(), DType::kInt64, {groups}, dev);
  const auto ov = TensorView::contiguous(doff.data(), DType::kInt64, {groups + 1}, dev);
  const auto pov = TensorView::contiguous(dpoff.data(), DType::kInt64, {groups + 1}, dev);
  pad_tokens_from_splits(xv, sv, 128, xpv, ov, pov, nullptr, Stream{stream});
  unpad_tokens(xpv, ov, pov, bv, Stream{stream});
  CHECK_CUDA(cudaStreamSynchronize(stream));
  // Validate against the CPU.
  std::vector<uint16_t> xp_cpu(static_cast<size_t>(padded_cap * k), 0);
  std::vector<int64_t> off(groups + 1), poff(groups + 1);
  pad_tokens_from_splits(TensorView::contiguous(x.data(), DType::kBFloat16, {rows, k}),
                         TensorView::contiguous(splits.data(), DType::kInt64, {groups}), 128,
                         TensorView::contiguous(xp_cpu.data(), DType::kBFloat16, {padded_cap, k}),
                         TensorView::contiguous(off.data(), DType::kInt64, {groups + 1}),
                         TensorView::contiguous(poff.data(), DType::kInt64, {groups + 1}));
  const int64_t live = poff[groups];
  std::vector<uint16_t> xp_gpu(static_cast<size_t>(live * k)), back(x.size());
  copy_bytes(xp_gpu.data(), Device::cpu(), dxp.data(), dev, live * rb);
  copy_bytes(back.data(), Device::cpu(), dback.data(), dev, rows * rb);
  const bool ok = std::memcmp(xp_gpu.data(), xp_cpu.data(), live * rb) == 0 && back == x;
  const double pad_us = time_single(stream, [&] { pad_tokens(xv, ov, pov, xpv, Stream{stream}); });
  const double unpad_us =
      time_single(stream, [&] { unpad_tokens(xpv, ov, pov, bv, Stream{stream}); });
  const double all_us = time_graph(stream, [&] {
    pad_tokens_from_splits(xv, sv, 128, xpv, ov, pov, nullptr, Stream{stream});
  }, 20);
  const double bytes = static_cast<double>((rows + live) * rb);
  std::printf("pad_tokens  groups=%-4lld rows=%-6lld K=%-5lld bf16 align 128  %-5s  pad %8.2f us "
              "(%5.2f TB/s)  unpad %8.2f us (%5.2f TB/s)  scan+pad graph %8.2f us\n",
              static_cast<long long>(groups), static_cast<long long>(rows),
              static_cast<long long>(k), ok ? "ok" : "WRONG", pad_us, bytes / pad_us / 1e6,
              unpad_us, bytes / unpad_us / 1e6, all_us);
}

}  // namespace

int main() {
  if (cuda_device_count() == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  bench_floor(stream);
  bench_scan(stream, 256, 6);
  bench_scan(stream, 32, 6);
  bench_scan(stream, 257, 6);
  bench_scan(stream, 1024, 6);
  bench_scan(stream, 256, 1);
  bench_scan(stream, 256, 16);
  bench_scan(stream, 256, 40);
  bench_scan(stream, 100000, 6);
  bench_padding(stream, 32, 1024, 7168);   // DeepSeek-V3 fc1 input, ~512 tokens per expert
  bench_padding(stream, 128, 512, 2048);   // Qwen3-30B-A3B fc1 input, ~256 tokens per expert
  bench_padding(stream, 64, 64, 4096);     // decode-sized groups
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}
