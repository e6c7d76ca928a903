// Shared pieces of the grouped tests: every quantization recipe as a named config, random
// high-precision inputs, and byte comparison of views reporting the first mismatch.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/tensor_view.h"
#include "tessera/formats/half.h"
#include "tessera/quantize/types.h"

namespace tessera::testing {

struct NamedConfig {
  std::string name;
  QuantizerConfig config;
};

// Every recipe of docs/numerics.md (both FP8 elements, both scale layouts, the NVFP4 options), with
// rowwise + columnwise usages; callers narrow the usages.
inline std::vector<NamedConfig> all_recipes() {
  std::vector<NamedConfig> out;
  auto add = [&](const std::string& name, QuantizerConfig c) {
    c.rowwise = c.columnwise = true;
    out.push_back({name, c});
  };
  add("tensor_current_e4m3", make_config(ScalingMode::kTensor));
  add("tensor_current_e5m2", make_config(ScalingMode::kTensor, DType::kFloat8E5M2));
  QuantizerConfig delayed = make_config(ScalingMode::kTensor);
  delayed.delayed = true;
  delayed.amax_history_len = 4;
  add("tensor_delayed", delayed);
  add("rowwise", make_config(ScalingMode::kRowwise));
  add("block1x128", make_config(ScalingMode::kBlock1x128));
  add("block128x128", make_config(ScalingMode::kBlock128x128));
  add("mxfp8", make_config(ScalingMode::kMXFP8));
  QuantizerConfig mx_sw = make_config(ScalingMode::kMXFP8);
  mx_sw.scale_layout = ScaleLayout::kSwizzled;
  add("mxfp8_swizzled", mx_sw);
  QuantizerConfig mx_floor = make_config(ScalingMode::kMXFP8, DType::kFloat8E5M2);
  mx_floor.e8m0_rounding = E8M0Rounding::kFloor;
  add("mxfp8_e5m2_floor", mx_floor);
  add("mxfp8_32x32", make_config(ScalingMode::kMXFP8_32x32));
  add("nvfp4", make_config(ScalingMode::kNVFP4));
  QuantizerConfig nv_sw = make_config(ScalingMode::kNVFP4);
  nv_sw.scale_layout = ScaleLayout::kSwizzled;
  add("nvfp4_swizzled", nv_sw);
  QuantizerConfig nv_rht = make_config(ScalingMode::kNVFP4);
  nv_rht.random_hadamard = true;
  nv_rht.stochastic_rounding = true;
  nv_rht.rng_seed = 1234;
  nv_rht.rng_offset = 7;
  add("nvfp4_rht_sr", nv_rht);
  add("nvfp4_16x16", make_config(ScalingMode::kNVFP4_16x16));
  return out;
}

inline bool is_nvfp4_mode(ScalingMode m) {
  return m == ScalingMode::kNVFP4 || m == ScalingMode::kNVFP4_16x16;
}

// Random values spanning several binades, a few exact zeros and large outliers.
inline std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-6, 6);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng) * std::ldexp(1.0f, exp(rng));
  for (size_t i = 0; i < v.size(); i += 97) v[i] = 0.0f;
  return v;
}

// Host storage of a (rows, cols) input in float32 / bfloat16 / float16.
struct HostInput {
  Buffer buffer;
  TensorView view;
  HostInput(const std::vector<float>& values, int64_t rows, int64_t cols, DType dt)
      : buffer(static_cast<size_t>(dtype_bytes(dt, rows * cols)) + 1) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float x = values[static_cast<size_t>(i)];
      if (dt == DType::kFloat32) buffer.as<float>()[i] = x;
      if (dt == DType::kBFloat16) buffer.as<bf16>()[i] = bf16::from_float(x);
      if (dt == DType::kFloat16) buffer.as<fp16>()[i] = fp16::from_float(x);
    }
    view = TensorView::contiguous(buffer.data(), dt, {rows, cols});
  }
};

// Byte comparison of two host views of equal byte size; an assertion failure names the first
// differing byte.
inline void expect_same_bytes(const TensorView& got, const TensorView& want,
                              const std::string& label) {
  ASSERT_EQ(got.data == nullptr, want.data == nullptr) << label << ": presence differs";
  if (want.data == nullptr) return;
  ASSERT_EQ(got.nbytes(), want.nbytes()) << label << ": " << got.to_string() << " vs "
                                         << want.to_string();
  const auto* a = static_cast<const uint8_t*>(got.data);
  const auto* b = static_cast<const uint8_t*>(want.data);
  for (int64_t i = 0; i < want.nbytes(); ++i) {
    ASSERT_EQ(a[i], b[i]) << label << ": first mismatch at byte " << i << " of "
                          << want.nbytes() << " (" << want.to_string() << ")";
  }
}

inline void expect_same_quantized(const QuantizedTensorView& got, const QuantizedTensorView& want,
                                  const std::string& label) {
  expect_same_bytes(got.data, want.data, label + " data");
  expect_same_bytes(got.scale_inv, want.scale_inv, label + " scale_inv");
  expect_same_bytes(got.columnwise_data, want.columnwise_data, label + " columnwise_data");
  expect_same_bytes(got.columnwise_scale_inv, want.columnwise_scale_inv,
                    label + " columnwise_scale_inv");
  expect_same_bytes(got.amax, want.amax, label + " amax");
  expect_same_bytes(got.columnwise_amax, want.columnwise_amax, label + " columnwise_amax");
}

}  // namespace tessera::testing
