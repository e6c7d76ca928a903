// Shared pieces of the scan tests: split generators, the independent oracle loop and a runner
// that calls splits_to_offsets_multi on any device and returns every output as int64 host data.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/scan/splits_to_offsets.h"

namespace tessera::testing {

// Random splits in [0, max_split] with zero groups forced first, in the middle and last.
inline std::vector<int64_t> random_splits(int64_t n, int64_t max_split, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> s(static_cast<size_t>(n));
  for (auto& v : s) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(max_split + 1));
  if (n >= 1) s.front() = 0;
  if (n >= 3) s[static_cast<size_t>(n / 2)] = 0;
  if (n >= 2) s.back() = 0;
  return s;
}

// The oracle: out[k] = stride × running sum of roundup(s, align), written as plainly as possible.
inline std::vector<int64_t> oracle_offsets(const std::vector<int64_t>& splits,
                                           const OffsetsSpec& spec) {
  std::vector<int64_t> out;
  if (spec.leading_zero) out.push_back(0);
  int64_t sum = 0;
  for (int64_t s : splits) {
    int64_t padded = s;
    while (padded % spec.align != 0) ++padded;
    sum += padded;
    out.push_back(spec.stride * sum);
  }
  return out;
}

// Host data of `values` in dtype int32 or int64.
inline std::vector<char> encode_splits(const std::vector<int64_t>& values, DType dtype) {
  std::vector<char> bytes(values.size() * (dtype == DType::kInt32 ? 4 : 8));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kInt32) {
      reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(values[i]);
    } else {
      reinterpret_cast<int64_t*>(bytes.data())[i] = values[i];
    }
  }
  return bytes;
}

inline std::vector<int64_t> to_int64(const std::vector<char>& bytes, DType dtype) {
  const size_t width = dtype == DType::kInt32 ? 4 : 8;
  std::vector<int64_t> out(bytes.size() / width);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = dtype == DType::kInt32 ? reinterpret_cast<const int32_t*>(bytes.data())[i]
                                    : reinterpret_cast<const int64_t*>(bytes.data())[i];
  }
  return out;
}

// Runs splits_to_offsets_multi on `device` through the allocating (bulk) form and brings every
// output back to the host as int64.
inline std::vector<std::vector<int64_t>> run_scan(Device device, const std::vector<int64_t>& splits,
                                                  DType splits_dtype,
                                                  const std::vector<OffsetsSpec>& specs,
                                                  const ScanOptions& options = {}) {
  const std::vector<char> host = encode_splits(splits, splits_dtype);
  Buffer dev_splits(host.size(), device);
  copy_bytes(dev_splits.data(), device, host.data(), Device::cpu(), host.size());
  const auto n = static_cast<int64_t>(splits.size());
  // A zero-length view still needs a non-null pointer.
  static int64_t empty_splits = 0;
  void* sp = n == 0 ? static_cast<void*>(&empty_splits) : dev_splits.data();
  OffsetsBundle b = splits_to_offsets_multi(TensorView::contiguous(sp, splits_dtype, {n}, device),
                                            specs, options);
  std::vector<std::vector<int64_t>> outs;
  for (const TensorView& v : b.outputs) {
    std::vector<char> bytes(static_cast<size_t>(v.nbytes()));
    copy_bytes(bytes.data(), Device::cpu(), v.data, device, bytes.size());
    outs.push_back(to_int64(bytes, v.dtype));
  }
  return outs;
}

inline std::string describe(const OffsetsSpec& s) {
  return std::string(dtype_name(s.dtype)) + " stride " + std::to_string(s.stride) +
         (s.leading_zero ? " leading-zero" : " ends") + " align " + std::to_string(s.align);
}

// Strides of the spec: 0, 1, 7, K, K + 17 for a hidden size K.
inline std::vector<OffsetsSpec> mixed_specs(int64_t k) {
  std::vector<OffsetsSpec> specs;
  const int64_t strides[] = {0, 1, 7, k, k + 17};
  bool lead = false;
  for (int64_t stride : strides) {
    specs.push_back({stride, lead, DType::kInt64, 1});
    specs.push_back({stride, !lead, DType::kInt32, 1});
    lead = !lead;
  }
  specs.push_back({1, true, DType::kInt64, 16});
  specs.push_back({k, false, DType::kInt32, 16});
  return specs;
}

}  // namespace tessera::testing
