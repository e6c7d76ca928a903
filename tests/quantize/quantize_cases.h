// Shared pieces of the quantize tests: the named configs of every recipe, input generators
// (Gaussian, zeros, dtype max, NaN/inf in a block, subnormals) and a byte comparison of two
// quantized tensors that reports the first mismatch's coordinates.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tessera/formats/half.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::test {

struct NamedConfig {
  std::string name;
  QuantizerConfig config;
};

inline std::vector<NamedConfig> all_configs() {
  std::vector<NamedConfig> v;
  auto add = [&](std::string name, QuantizerConfig c) {
    c.rowwise = true;
    c.columnwise = true;
    v.push_back({std::move(name), c});
  };
  for (DType e : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    const std::string en = e == DType::kFloat8E4M3 ? "e4m3" : "e5m2";
    add("tensor_current_" + en, make_config(ScalingMode::kTensor, e));
    add("rowwise_" + en, make_config(ScalingMode::kRowwise, e));
    add("block1x128_" + en, make_config(ScalingMode::kBlock1x128, e));
    add("block128x128_" + en, make_config(ScalingMode::kBlock128x128, e));
    add("mxfp8_" + en, make_config(ScalingMode::kMXFP8, e));
    add("mxfp8_32x32_" + en, make_config(ScalingMode::kMXFP8_32x32, e));
  }
  QuantizerConfig c = make_config(ScalingMode::kTensor);
  c.power_of_two_scales = true;
  c.amax_epsilon = 1e-3f;
  add("tensor_current_pow2_eps", c);
  c = make_config(ScalingMode::kBlock1x128);
  c.power_of_two_scales = false;
  add("block1x128_no_pow2", c);
  c = make_config(ScalingMode::kBlock128x128);
  c.power_of_two_scales = false;
  add("block128x128_no_pow2", c);
  c = make_config(ScalingMode::kMXFP8);
  c.e8m0_rounding = E8M0Rounding::kFloor;
  add("mxfp8_floor", c);
  c.scale_layout = ScaleLayout::kSwizzled;
  add("mxfp8_floor_swizzled", c);
  c = make_config(ScalingMode::kMXFP8);
  c.scale_layout = ScaleLayout::kSwizzled;
  add("mxfp8_swizzled", c);
  c = make_config(ScalingMode::kMXFP8_32x32, DType::kFloat8E5M2);
  c.scale_layout = ScaleLayout::kSwizzled;
  add("mxfp8_32x32_e5m2_swizzled", c);
  add("nvfp4", make_config(ScalingMode::kNVFP4));
  add("nvfp4_16x16", make_config(ScalingMode::kNVFP4_16x16));
  c = make_config(ScalingMode::kNVFP4);
  c.scale_layout = ScaleLayout::kSwizzled;
  add("nvfp4_swizzled", c);
  c.stochastic_rounding = true;
  c.rng_seed = 1234;
  c.rng_offset = 7;
  add("nvfp4_swizzled_sr", c);
  c = make_config(ScalingMode::kNVFP4_16x16);
  c.random_hadamard = true;
  c.stochastic_rounding = true;
  c.rng_seed = 99;
  add("nvfp4_16x16_rht_sr", c);
  c = make_config(ScalingMode::kNVFP4);
  c.random_hadamard = true;
  add("nvfp4_rht", c);
  return v;
}

// all_configs() plus delayed scaling (E5M2) and rowwise with epsilon and power-of-two scales.
inline std::vector<NamedConfig> configs_with_delayed() {
  std::vector<NamedConfig> v = all_configs();
  QuantizerConfig c = make_config(ScalingMode::kTensor, DType::kFloat8E5M2);
  c.delayed = true;
  c.rowwise = c.columnwise = true;
  v.push_back({"tensor_delayed_e5m2", c});
  c = make_config(ScalingMode::kRowwise);
  c.amax_epsilon = 3e-2f;
  c.power_of_two_scales = true;
  c.rowwise = c.columnwise = true;
  v.push_back({"rowwise_eps_pow2", c});
  return v;
}

// Bytes of the buffers of both usages of a (rows, cols) tensor quantized with `c`.
inline int64_t output_bytes(const QuantizerConfig& c, int64_t rows, int64_t cols) {
  int64_t total = 0;
  for (bool cw : {false, true})
    total += data_shape(c, rows, cols, cw).bytes() + scale_shape(c, rows, cols, cw).bytes();
  return total;
}

enum class InputKind { kGaussian, kZeros, kDtypeMax, kSpecials, kTiny };

inline const char* input_kind_name(InputKind k) {
  switch (k) {
    case InputKind::kGaussian: return "gaussian";
    case InputKind::kZeros: return "zeros";
    case InputKind::kDtypeMax: return "dtype_max";
    case InputKind::kSpecials: return "nan_inf";
    case InputKind::kTiny: return "tiny";
  }
  return "?";
}

// Host input of `dtype` (float32/bfloat16/float16) and (rows, cols): raw bytes.
struct HostInput {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  TensorView view() { return TensorView::contiguous(bytes.data(), dtype, {rows, cols}); }
};

inline double dtype_max(DType d) {
  return d == DType::kFloat16 ? 65504.0 : (d == DType::kBFloat16 ? 3.3895313892515355e38 : 3.4028234663852886e38);
}

inline HostInput make_input(DType dtype, int64_t rows, int64_t cols, InputKind kind, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) {
    // Row-dependent magnitudes so block scales differ.
    const float mag = std::ldexp(1.0f, static_cast<int>((i / 7) % 11) - 5);
    switch (kind) {
      case InputKind::kGaussian: v[i] = normal(rng) * mag; break;
      case InputKind::kZeros: v[i] = (i % 3 == 0) ? -0.0f : 0.0f; break;
      case InputKind::kDtypeMax:
        v[i] = static_cast<float>(dtype_max(dtype)) * ((i % 2) ? -1.0f : 1.0f) * ((i % 5 == 0) ? 0.5f : 1.0f);
        break;
      case InputKind::kSpecials: v[i] = normal(rng) * mag; break;
      case InputKind::kTiny: v[i] = normal(rng) * 1e-6f * mag; break;
    }
  }
  if (kind == InputKind::kSpecials) {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = 0; i < v.size(); i += 97) v[i] = (i / 97) % 3 == 0 ? nan : ((i / 97) % 3 == 1 ? inf : -inf);
    v[v.size() / 2] = -nan;
  }
  HostInput in{dtype, rows, cols, {}};
  in.bytes.resize(static_cast<size_t>(dtype_bytes(dtype, rows * cols)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kFloat32) std::memcpy(&in.bytes[i * 4], &v[i], 4);
    if (dtype == DType::kBFloat16) {
      const uint16_t b = formats::encode_bf16(v[i]);
      std::memcpy(&in.bytes[i * 2], &b, 2);
    }
    if (dtype == DType::kFloat16) {
      const uint16_t h = formats::encode_fp16(v[i]);
      std::memcpy(&in.bytes[i * 2], &h, 2);
    }
  }
  return in;
}

// "" when equal, else where the first differing byte is.
inline std::string first_mismatch(const char* field, const TensorView& a, const TensorView& b) {
  if ((a.data == nullptr) != (b.data == nullptr)) return std::string(field) + ": presence differs";
  if (a.data == nullptr) return "";
  if (a.nbytes() != b.nbytes()) return std::string(field) + ": sizes differ";
  const auto* pa = a.as<const uint8_t>();
  const auto* pb = b.as<const uint8_t>();
  const int64_t elem_bytes = a.dtype == DType::kFloat32 ? 4 : 1;
  const int64_t row_bytes = a.ndim == 2 ? a.nbytes() / std::max<int64_t>(a.shape[0], 1) : a.nbytes();
  for (int64_t i = 0; i < a.nbytes(); ++i) {
    if (pa[i] != pb[i]) {
      return std::string(field) + ": first mismatch at byte " + std::to_string(i) + " (row " +
             std::to_string(i / std::max<int64_t>(row_bytes, 1)) + ", element " +
             std::to_string((i % std::max<int64_t>(row_bytes, 1)) / elem_bytes) + "): " +
             std::to_string(pa[i]) + " vs " + std::to_string(pb[i]);
    }
  }
  return "";
}

inline std::string compare_quantized(const QuantizedTensorView& a, const QuantizedTensorView& b) {
  std::string m;
  for (auto [name, fa, fb] : {std::tuple{"data", a.data, b.data},
                              std::tuple{"scale_inv", a.scale_inv, b.scale_inv},
                              std::tuple{"columnwise_data", a.columnwise_data, b.columnwise_data},
                              std::tuple{"columnwise_scale_inv", a.columnwise_scale_inv, b.columnwise_scale_inv},
                              std::tuple{"amax", a.amax, b.amax},
                              std::tuple{"columnwise_amax", a.columnwise_amax, b.columnwise_amax}}) {
    m = first_mismatch(name, fa, fb);
    if (!m.empty()) return m;
  }
  return "";
}

}  // namespace tessera::test
