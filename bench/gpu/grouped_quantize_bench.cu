// Grouped quantization benchmark (docs/architecture.md shapes, DeepSeek-V3 fc1 activations: 32
// experts x 512 tokens, K = 7168, BF16; balanced, and imbalanced: 30 experts of 16-368 rows, one
// empty, the last one the remaining 10832 rows). For each recipe, three timings of the same bytes (median
// of 50 CUDA-event timings after 5 warm-ups):
//   grouped    — grouped_quantize_contiguous on a tensor made from DEVICE split sizes (one
//                persistent launch per pass over all members, no host metadata);
//   per-member — grouped_quantize_list on a tensor with host metadata (one Quantizer::quantize
//                per member: the path these recipes took before the grouped kernels);
//   one tensor — Quantizer::quantize of the whole (16384, 7168) input (the ceiling: same bytes,
//                one tensor, no member boundaries).
// Validated first: the grouped output equals the per-member output byte for byte (both
// zero-filled before; see same_bytes). TB/s = bytes read + written per quantize (every pass
// counted: e.g. NVFP4 both = amax read + one read and one write per copy) / time. One JSON line
// per case on stdout.
// GQ_PROFILE=1: no timing and no validation; each selected case runs the grouped quantize and
// the one-tensor quantize once per split (for a profiler such as Nsight Compute).
// GQ_CASES=a,b: only the cases whose name contains one of the comma-separated words.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_cuda.cuh"
#include "tessera/core/buffer.h"
#include "tessera/core/device.h"
#include "tessera/grouped/grouped_quantize.h"
#include "tessera/grouped/grouped_tensor.h"
#include "tessera/quantize/quantizer.h"

namespace {

using namespace tessera;

constexpr int64_t kExperts = 32, kTokens = 512, kCols = 7168, kRows = kExperts * kTokens;
constexpr int kWarmup = 5, kReps = 50;

struct Case {
  std::string name;
  QuantizerConfig config;
  double bytes_per_elem;  // bytes moved per input element, every pass counted
  double bytes_per_row;   // per-row FP32 scale bytes
};

std::vector<Case> cases() {
  std::vector<Case> v;
  auto cfg = [](ScalingMode m, bool row, bool col) {
    QuantizerConfig c = make_config(m);
    c.rowwise = row;
    c.columnwise = col;
    return c;
  };
  v.push_back({"fp8_rowwise rowwise", cfg(ScalingMode::kRowwise, true, false), 3.0, 4.0});
  v.push_back({"fp8_rowwise both", cfg(ScalingMode::kRowwise, true, true), 6.0, 8.0});
  v.push_back({"fp8_current rowwise", cfg(ScalingMode::kTensor, true, false), 5.0, 0});
  v.push_back({"fp8_current both", cfg(ScalingMode::kTensor, true, true), 6.0, 0});
  QuantizerConfig d = cfg(ScalingMode::kTensor, true, true);
  d.delayed = true;
  v.push_back({"fp8_delayed both", d, 4.0, 0});
  v.push_back({"fp8_block1x128 both", cfg(ScalingMode::kBlock1x128, true, true), 4.0 + 8.0 / 128,
               0});
  v.push_back({"fp8_block128x128 both", cfg(ScalingMode::kBlock128x128, true, true), 4.0, 0});
  v.push_back({"mxfp8 both", cfg(ScalingMode::kMXFP8, true, true), 4.0 + 2.0 / 32, 0});
  v.push_back({"nvfp4 rowwise", cfg(ScalingMode::kNVFP4, true, false), 4.5 + 1.0 / 16, 0});
  v.push_back({"nvfp4 both", cfg(ScalingMode::kNVFP4, true, true), 7.0 + 2.0 / 16, 0});
  return v;
}

double median_us(const std::function<void()>& f) {
  return bench_cuda::median_us(f, kWarmup, kReps);
}

std::vector<TensorView> fields(const GroupedTensorView& v) {
  return {v.data, v.columnwise_data, v.scale_inv, v.columnwise_scale_inv, v.amax,
          v.columnwise_amax};
}

void zero(const GroupedTensorView& v) {
  for (const TensorView& f : fields(v)) {
    if (f.data == nullptr) continue;
    BENCH_CHECK_CUDA(cudaMemset(f.data, 0, static_cast<size_t>(f.nbytes())));
  }
}

// Every field of two grouped tensors of the same member layout, byte for byte. A tensor made
// from device split sizes sizes its scale buffers for the worst case of its capacity
// (grouped_scale_capacity), one made from host shapes exactly: the common prefix must match and
// the rest of the longer buffer must still be zero (both are zero-filled first).
bool same_bytes(const GroupedTensorView& a, const GroupedTensorView& b) {
  const std::vector<TensorView> fa = fields(a), fb = fields(b);
  for (size_t i = 0; i < fa.size(); ++i) {
    if ((fa[i].data == nullptr) != (fb[i].data == nullptr)) return false;
    if (fa[i].data == nullptr) continue;
    std::vector<uint8_t> ha(static_cast<size_t>(fa[i].nbytes()));
    std::vector<uint8_t> hb(static_cast<size_t>(fb[i].nbytes()));
    copy_bytes(ha.data(), Device::cpu(), fa[i].data, Device::cuda(0), ha.size());
    copy_bytes(hb.data(), Device::cpu(), fb[i].data, Device::cuda(0), hb.size());
    const size_t common = std::min(ha.size(), hb.size());
    if (std::memcmp(ha.data(), hb.data(), common) != 0) return false;
    const std::vector<uint8_t>& longer = ha.size() > hb.size() ? ha : hb;
    if (std::any_of(longer.begin() + static_cast<std::ptrdiff_t>(common), longer.end(),
                    [](uint8_t v) { return v != 0; })) {
      return false;
    }
  }
  return true;
}

// GQ_CASES filter (see the file comment).
bool selected(const std::string& name) {
  const char* env = std::getenv("GQ_CASES");
  if (env == nullptr || *env == 0) return true;
  std::string list(env);
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const std::string word = list.substr(pos, end - pos);
    if (!word.empty() && name.find(word) != std::string::npos) return true;
    pos = end + 1;
  }
  return false;
}

bool profile_mode() {
  const char* env = std::getenv("GQ_PROFILE");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

void run_case(const Case& c, const std::string& split_name, const std::vector<int32_t>& splits,
              const TensorView& x) {
  const Device gpu = Device::cuda(0);
  Buffer dsplits(splits.size() * 4, gpu);
  copy_bytes(dsplits.data(), gpu, splits.data(), Device::cpu(), splits.size() * 4);
  GroupedTensorOptions o;
  o.config = c.config;
  o.device = gpu;
  o.capacity_rows = kRows;
  GroupedTensor grouped = GroupedTensor::from_device_splits(
      TensorView::contiguous(dsplits.data(), DType::kInt32, {kExperts}, gpu), kCols, o);
  std::vector<std::array<int64_t, 2>> shapes;
  std::vector<TensorView> inputs;
  int64_t row = 0;
  for (int32_t r : splits) {
    shapes.push_back({r, kCols});
    inputs.push_back(TensorView::contiguous(x.as<uint16_t>() + row * kCols, DType::kBFloat16,
                                            {r, kCols}, gpu));
    row += r;
  }
  GroupedTensorOptions so = o;
  so.capacity_rows = -1;
  so.mode = GroupedShapeMode::kVaryingFirst;
  GroupedTensor members = GroupedTensor::from_shapes(shapes, so);
  Quantizer qa(c.config, gpu), qb(c.config, gpu);
  if (profile_mode()) {
    Quantizer qt(c.config, gpu);
    QuantizedTensor whole = qt.allocate(kRows, kCols);
    grouped_quantize_contiguous(qa, x, grouped);
    qt.quantize(x, whole);
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    std::printf("{\"name\": \"%s\", \"split\": \"%s\", \"profiled\": 1}\n", c.name.c_str(),
                split_name.c_str());
    return;
  }
  std::string valid;
  try {
    zero(grouped.view());
    zero(members.view());
    grouped_quantize_contiguous(qa, x, grouped);
    grouped_quantize_list(qb, inputs, members);
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    valid = same_bytes(grouped.view(), members.view()) ? "ok" : "MISMATCH";
  } catch (const std::exception& e) {
    valid = std::string("error: ") + std::string(e.what()).substr(0, 100);
  }
  const double bytes = c.bytes_per_elem * static_cast<double>(row * kCols) +
                       c.bytes_per_row * static_cast<double>(row);
  const double g = median_us([&] { grouped_quantize_contiguous(qa, x, grouped); });
  const double m = median_us([&] { grouped_quantize_list(qb, inputs, members); });
  Quantizer qt(c.config, gpu);
  QuantizedTensor whole = qt.allocate(kRows, kCols);
  const double t = median_us([&] { qt.quantize(x, whole); });
  std::printf("{\"name\": \"%s\", \"split\": \"%s\", \"grouped_us\": %.2f, \"grouped_tbps\": %.3f, "
              "\"per_member_us\": %.2f, \"per_member_tbps\": %.3f, \"one_tensor_us\": %.2f, "
              "\"one_tensor_tbps\": %.3f, \"valid\": \"%s\"}\n",
              c.name.c_str(), split_name.c_str(), g, bytes / g / 1e6, m, bytes / m / 1e6, t,
              kRows * (c.bytes_per_elem * kCols + c.bytes_per_row) / t / 1e6, valid.c_str());
  std::fflush(stdout);
}

}  // namespace

int main() {
  const int64_t n = kRows * kCols;
  Buffer xbuf(static_cast<size_t>(n) * 2, Device::cuda(0));
  bench_cuda::fill_bf16(xbuf.as<uint16_t>(), n, kCols, 12345u);
  const TensorView x =
      TensorView::contiguous(xbuf.data(), DType::kBFloat16, {kRows, kCols}, Device::cuda(0));
  const std::vector<int32_t> balanced(kExperts, static_cast<int32_t>(kTokens));
  // Skewed, one empty expert, multiples of 16, Σ = 16384.
  std::vector<int32_t> skewed(kExperts);
  int64_t left = kRows;
  for (int64_t e = 0; e < kExperts; ++e) {
    int32_t r = e == 7 ? 0 : static_cast<int32_t>(((e * 37) % 23 + 1) * 16);
    if (e == kExperts - 1) r = static_cast<int32_t>(left);
    skewed[static_cast<size_t>(e)] = r;
    left -= r;
  }
  for (const Case& c : cases()) {
    if (!selected(c.name)) continue;
    run_case(c, "balanced", balanced, x);
    run_case(c, "imbalanced", skewed, x);
  }
  return 0;
}
