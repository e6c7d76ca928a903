// Shared pieces of the token padding tests: a case (splits, align, K, dtype, capacities), random
// row bytes, the oracle loop, and a runner for pad/unpad on any device.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/nn/token_padding.h"

namespace tessera::testing {

constexpr uint8_t kSentinel = 0xAB;

struct PaddingCase {
  std::vector<int64_t> splits;
  int64_t align = 16;
  int64_t k = 64;
  DType dtype = DType::kBFloat16;
  int64_t extra_rows = 3;  // x capacity past the live rows
  std::string name() const {
    return "N=" + std::to_string(splits.size()) + " align " + std::to_string(align) + " K " +
           std::to_string(k) + " " + dtype_name(dtype);
  }
  int64_t total() const {
    int64_t t = 0;
    for (int64_t s : splits) t += s;
    return t;
  }
  int64_t rows_cap() const { return total() + extra_rows; }
  int64_t padded_cap() const {
    return padded_rows_bound(rows_cap(), static_cast<int64_t>(splits.size()), align);
  }
  int64_t row_bytes() const { return dtype_bytes(dtype, k); }
};

inline std::vector<uint8_t> random_bytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (auto& b : v) b = static_cast<uint8_t>(rng() & 0xFF);
  return v;
}

// The oracle: group by group, real rows then zero rows up to a multiple of align; rows past the
// padded end keep the sentinel.
inline std::vector<uint8_t> oracle_pad(const PaddingCase& c, const std::vector<uint8_t>& x) {
  const int64_t rb = c.row_bytes();
  std::vector<uint8_t> out(static_cast<size_t>(c.padded_cap() * rb), kSentinel);
  int64_t src = 0, dst = 0;
  for (int64_t m : c.splits) {
    int64_t padded = m;
    while (padded % c.align != 0) ++padded;
    for (int64_t r = 0; r < padded; ++r, ++dst) {
      for (int64_t b = 0; b < rb; ++b) {
        out[static_cast<size_t>(dst * rb + b)] =
            r < m ? x[static_cast<size_t>((src + r) * rb + b)] : uint8_t{0};
      }
    }
    src += m;
  }
  return out;
}

// Device-side arrays of one case.
struct PaddingBuffers {
  Buffer x, x_padded, x_back, splits, offsets, padded_offsets;
  TensorView xv, xpv, xbv, sv, ov, pov;
  PaddingBuffers(const PaddingCase& c, Device dev, Device splits_device,
                 const std::vector<uint8_t>& x_bytes) {
    const int64_t n = static_cast<int64_t>(c.splits.size());
    const int64_t rb = c.row_bytes();
    x = Buffer(static_cast<size_t>(c.rows_cap() * rb), dev);
    x_padded = Buffer(static_cast<size_t>(c.padded_cap() * rb), dev);
    x_back = Buffer(static_cast<size_t>(c.rows_cap() * rb), dev);
    splits = Buffer(static_cast<size_t>(n * 8), splits_device);
    offsets = Buffer(static_cast<size_t>((n + 1) * 8), dev);
    padded_offsets = Buffer(static_cast<size_t>((n + 1) * 8), dev);
    copy_bytes(x.data(), dev, x_bytes.data(), Device::cpu(), x_bytes.size());
    x_padded.fill_bytes(kSentinel);
    x_back.fill_bytes(kSentinel);
    copy_bytes(splits.data(), splits_device, c.splits.data(), Device::cpu(), splits.bytes());
    xv = TensorView::contiguous(x.data(), c.dtype, {c.rows_cap(), c.k}, dev);
    xpv = TensorView::contiguous(x_padded.data(), c.dtype, {c.padded_cap(), c.k}, dev);
    xbv = TensorView::contiguous(x_back.data(), c.dtype, {c.rows_cap(), c.k}, dev);
    static int64_t no_splits = 0;
    sv = TensorView::contiguous(n == 0 ? &no_splits : splits.data(), DType::kInt64, {n},
                                splits_device);
    ov = TensorView::contiguous(offsets.data(), DType::kInt64, {n + 1}, dev);
    pov = TensorView::contiguous(padded_offsets.data(), DType::kInt64, {n + 1}, dev);
  }
  static std::vector<uint8_t> host(const Buffer& b) {
    std::vector<uint8_t> v(b.bytes());
    copy_bytes(v.data(), Device::cpu(), b.data(), b.device(), v.size());
    return v;
  }
  static std::vector<int64_t> host_i64(const Buffer& b) {
    std::vector<int64_t> v(b.bytes() / 8);
    copy_bytes(v.data(), Device::cpu(), b.data(), b.device(), b.bytes());
    return v;
  }
};

// Random group sizes in [0, max_rows] with empty groups first, in the middle and last.
inline std::vector<int64_t> random_group_sizes(int64_t n, int64_t max_rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> s(static_cast<size_t>(n));
  for (auto& v : s) v = static_cast<int64_t>(rng() % static_cast<uint32_t>(max_rows + 1));
  if (n >= 1) s.front() = 0;
  if (n >= 3) s[static_cast<size_t>(n / 2)] = 0;
  if (n >= 2) s.back() = 0;
  return s;
}

// Expects `got` to equal `want` byte for byte, reporting the first differing row.
inline ::testing::AssertionResult same_rows(const std::vector<uint8_t>& got,
                                            const std::vector<uint8_t>& want, int64_t row_bytes) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure()
             << "first difference at row " << static_cast<int64_t>(i) / row_bytes << " byte "
             << static_cast<int64_t>(i) % row_bytes << ": " << int(got[i]) << " vs "
             << int(want[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::testing
