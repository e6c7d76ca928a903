// Shared helpers of the nn tests: random tensors, host-owned float matrices, SQNR, the recipes
// under test by name, and an FP64 grouped GEMM on dequantized operands (the oracle).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/tensor_view.h"
#include "tessera/nn/grouped_linear.h"
#include "tessera/quantize/recipe.h"

namespace tessera::nn::test {

inline std::vector<float> random_normal(int64_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

inline TensorView view_of(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::kFloat32, shape);
}
inline TensorView view_of(std::vector<int64_t>& v) {
  return TensorView::contiguous(v.data(), DType::kInt64, {static_cast<int64_t>(v.size())});
}

// 10 log10(Σ ref² / Σ (ref − test)²); +inf when equal.
inline double sqnr_db(const std::vector<float>& ref, const std::vector<float>& test) {
  double s = 0, n = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    s += double(ref[i]) * ref[i];
    n += (double(ref[i]) - test[i]) * (double(ref[i]) - test[i]);
  }
  return n == 0 ? INFINITY : 10.0 * std::log10(s / n);
}

inline bool all_finite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

inline GroupedLinearOptions named(const std::string& name) {
  GroupedLinearOptions o;
  o.name = name;
  return o;
}

// Names of the built-in recipes under test, FP32 first.
std::vector<std::string> recipe_names();
std::shared_ptr<Recipe> make_recipe(const std::string& name);

}  // namespace tessera::nn::test
