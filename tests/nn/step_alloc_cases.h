// Cases of the "a training step allocates nothing" tests (issue 14, docs/nn.md "Memory"), shared
// by the CPU test and the CUDA one. For one recipe, on one device:
//   1. the second forward + backward of a shape moves the process-wide Buffer allocation count
//      by exactly what the quantize backend allocates for itself (measured by running the same
//      quantizations alone; 0 unless that backend takes scratch): the layer adds nothing;
//   2. a larger shape afterwards (the storage grows), then a smaller one (no allocation either),
//      give bit for bit the outputs of a fresh layer that only ever saw that shape (the oracle:
//      nothing leaks from an earlier, larger shape through reused buffers).
// Stateful recipes (delayed scaling) check 1 only: a fresh layer has another amax history.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "nn_test_util.h"
#include "tessera/core/buffer.h"
#include "tessera/nn/grouped_linear.h"
#include "tessera/nn/grouped_mlp.h"
#include "tessera/nn/linear_step.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::nn::test::step_alloc {

// A float32 / int64 tensor on `dev` holding host values.
struct DeviceTensor {
  Buffer buf;
  TensorView view;
  template <class T>
  DeviceTensor(const std::vector<T>& host, std::initializer_list<int64_t> shape, Device dev)
      : buf(std::max<size_t>(host.size() * sizeof(T), 4), dev) {
    copy_bytes(buf.data(), dev, host.data(), Device::cpu(), host.size() * sizeof(T));
    view = TensorView::contiguous(
        buf.data(), std::is_same_v<T, float> ? DType::kFloat32 : DType::kInt64, shape, dev);
  }
  std::vector<float> to_host() const {
    std::vector<float> h(static_cast<size_t>(view.numel()));
    copy_bytes(h.data(), Device::cpu(), buf.data(), view.device, h.size() * sizeof(float));
    return h;
  }
};

inline std::vector<float> zeros(int64_t n) { return std::vector<float>(size_t(n), 0.0f); }

inline void expect_bitwise_equal(const std::vector<float>& fresh, const std::vector<float>& reused,
                                 const std::string& what) {
  ASSERT_EQ(fresh.size(), reused.size()) << what;
  for (size_t i = 0; i < fresh.size(); ++i) {
    if (std::memcmp(&fresh[i], &reused[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": first difference at element " << i << ": fresh layer "
                    << fresh[i] << ", reused layer " << reused[i];
      return;
    }
  }
}

// One quantization a step performs: role, shape, usages.
struct Quantization {
  const char* module;
  TensorType type;
  std::string name;
  int64_t rows, cols;
  bool rowwise, columnwise;
};

// Buffers the quantize backend allocates for itself running `qs` on `dev` alone (the CPU one
// takes float copies of xᵀ for some columnwise layouts); outputs are made before counting.
inline uint64_t quantize_backend_allocations(const Recipe& recipe,
                                             const std::vector<Quantization>& qs, Device dev) {
  if (!recipe.quantized()) return 0;
  auto state = std::make_shared<RecipeState>(recipe, dev);
  uint64_t total = 0;
  for (const Quantization& q : qs) {
    Quantizer& quantizer = state->quantizer({q.module, q.type, q.name});
    quantizer.set_usage(q.rowwise, q.columnwise);
    QuantizedTensor out = quantizer.allocate(q.rows, q.cols);
    const DeviceTensor x(random_normal(q.rows * q.cols, 3), {q.rows, q.cols}, dev);
    const uint64_t before = buffer_allocation_count();
    quantizer.quantize(x.view, out);
    if (quantizer.config().delayed) quantizer.update();
    total += buffer_allocation_count() - before;
  }
  return total;
}

// A batch: split sizes, plus `spare` capacity rows past the live ones.
struct Shape {
  std::vector<int64_t> splits;
  int64_t spare = 0;
  int64_t rows() const {
    int64_t t = spare;
    for (int64_t s : splits) t += s;
    return t;
  }
};

// ---- GroupedLinear -------------------------------------------------------------------------

struct LinearDims {
  int64_t groups, in, out;
};

struct LinearOutputs {
  std::vector<float> y, dx, dw, db;
  int64_t saved_bytes = 0;
};

// The quantizations of one step (linear_step.h): W both usages; x and dy rowwise on their T rows,
// columnwise on the wgrad's padded layout.
inline std::vector<Quantization> linear_quantizations(const GroupedLinear& l, const Recipe& r,
                                                      int64_t t) {
  const char* m = "grouped_linear";
  const int64_t g = l.num_groups(), in = l.in_features(), out = l.out_features();
  if (!r.quantized()) return {};
  const int64_t a = make_linear_spec(r, l.name(), g, in, out, false).wgrad_align;
  const int64_t tp = (t + g * (a - 1) + a - 1) / a * a;
  return {{m, TensorType::kWeight, l.name(), g * out, in, true, true},
          {m, TensorType::kInput, l.name(), t, in, true, false},
          {m, TensorType::kInput, l.name(), tp, in, false, true},
          {m, TensorType::kGradOutput, l.name(), t, out, true, false},
          {m, TensorType::kGradOutput, l.name(), tp, out, false, true}};
}

// One training step (forward + backward, context dropped at the end); *allocations receives the
// Buffers allocated during it.
inline LinearOutputs linear_step(GroupedLinear& layer, const Shape& shape, Device dev,
                                 uint64_t* allocations = nullptr) {
  const int64_t t = shape.rows(), g = layer.num_groups();
  const int64_t in = layer.in_features(), out = layer.out_features();
  std::vector<int64_t> splits = shape.splits;
  const DeviceTensor x(random_normal(t * in, 11), {t, in}, dev);
  const DeviceTensor dy(random_normal(t * out, 12, 0.1f), {t, out}, dev);
  const DeviceTensor y(zeros(t * out), {t, out}, dev), dx(zeros(t * in), {t, in}, dev);
  const DeviceTensor dw(zeros(g * out * in), {g, out, in}, dev), db(zeros(g * out), {g, out}, dev);
  LinearOutputs r;
  const uint64_t before = buffer_allocation_count();
  {
    GroupedLinearContext ctx = layer.forward(x.view, view_of(splits), y.view);
    layer.backward(ctx, dy.view, {dx.view, dw.view, db.view});
    r.saved_bytes = ctx.saved_bytes();
  }
  if (allocations != nullptr) *allocations = buffer_allocation_count() - before;
  r.y = y.to_host();
  r.dx = dx.to_host();
  r.dw = dw.to_host();
  r.db = db.to_host();
  return r;
}

inline void expect_same_linear(const LinearOutputs& fresh, const LinearOutputs& reused,
                               const std::string& what) {
  expect_bitwise_equal(fresh.y, reused.y, what + " y");
  expect_bitwise_equal(fresh.dx, reused.dx, what + " dx");
  expect_bitwise_equal(fresh.dw, reused.dw, what + " dW");
  expect_bitwise_equal(fresh.db, reused.db, what + " db");
  EXPECT_EQ(fresh.saved_bytes, reused.saved_bytes) << what << " saved_bytes";
}

// Shapes a, b (larger), c (smaller) through one layer; see the file comment.
inline void check_linear(const std::string& recipe_name, const LinearDims& d, Device dev,
                         bool save_original, const Shape& a, const Shape& b, const Shape& c) {
  const auto recipe = make_recipe(recipe_name);
  GroupedLinearOptions o = named("fc");
  o.device = dev;
  o.save_original_input = save_original;
  const auto make_layer = [&] { return GroupedLinear(d.groups, d.in, d.out, *recipe, true, o); };
  GroupedLinear reused = make_layer();
  const auto backend = [&](const Shape& s) {
    return quantize_backend_allocations(*recipe, linear_quantizations(reused, *recipe, s.rows()),
                                        dev);
  };
  const auto fresh = [&](const Shape& s) {
    GroupedLinear layer = make_layer();
    return linear_step(layer, s, dev);
  };
  const std::string what = recipe_name + (save_original ? " (save_original_input)" : "");
  linear_step(reused, a, dev);
  uint64_t second = 0, smaller = 0;
  // Every compared step starts from the same stochastic-rounding offset (NVFP4 gradients) as its
  // fresh counterpart.
  reset_rng_offset(1000);
  const LinearOutputs same = linear_step(reused, a, dev, &second);
  EXPECT_EQ(second, backend(a)) << what << ": Buffers allocated by the second step of a shape";
  reset_rng_offset(2000);
  const LinearOutputs grown = linear_step(reused, b, dev);
  reset_rng_offset(3000);
  const LinearOutputs shrunk = linear_step(reused, c, dev, &smaller);
  EXPECT_EQ(smaller, backend(c)) << what << ": Buffers allocated by a step of a smaller shape";
  std::printf("  %-34s linear: 2nd step %llu Buffers, smaller shape %llu (quantize backend's: "
              "%llu, %llu)\n", what.c_str(), (unsigned long long)second,
              (unsigned long long)smaller, (unsigned long long)backend(a),
              (unsigned long long)backend(c));
  if (recipe->delayed) return;
  reset_rng_offset(1000);
  expect_same_linear(fresh(a), same, what + ", 2nd step:");
  reset_rng_offset(2000);
  expect_same_linear(fresh(b), grown, what + ", larger shape:");
  reset_rng_offset(3000);
  expect_same_linear(fresh(c), shrunk, what + ", smaller shape:");
}

// ---- GroupedMLP ----------------------------------------------------------------------------

struct MlpDims {
  int64_t groups, hidden, ffn;
};

struct MlpOutputs {
  std::vector<float> y, dx, dprobs, dw1, db1, dw2, db2;
  int64_t saved_bytes = 0;
};

inline std::vector<Quantization> mlp_quantizations(GroupedMLP& mlp, const Recipe& r, int64_t t) {
  std::vector<Quantization> qs = linear_quantizations(mlp.fc1(), r, t);
  for (const Quantization& q : linear_quantizations(mlp.fc2(), r, t)) qs.push_back(q);
  return qs;
}

inline MlpOutputs mlp_step(GroupedMLP& mlp, const Shape& shape, Device dev,
                           uint64_t* allocations = nullptr) {
  const int64_t t = shape.rows(), g = mlp.num_groups(), h = mlp.hidden(), f = mlp.ffn();
  std::vector<int64_t> splits = shape.splits;
  const DeviceTensor x(random_normal(t * h, 21), {t, h}, dev);
  std::vector<float> p = random_normal(t, 22);
  for (float& v : p) v = 0.5f + 0.25f * std::tanh(v);
  const DeviceTensor probs(p, {t}, dev), dy(random_normal(t * h, 23, 0.1f), {t, h}, dev);
  const DeviceTensor y(zeros(t * h), {t, h}, dev), dx(zeros(t * h), {t, h}, dev);
  const DeviceTensor dprobs(zeros(t), {t}, dev);
  const DeviceTensor dw1(zeros(g * 2 * f * h), {g, 2 * f, h}, dev);
  const DeviceTensor db1(zeros(g * 2 * f), {g, 2 * f}, dev);
  const DeviceTensor dw2(zeros(g * h * f), {g, h, f}, dev), db2(zeros(g * h), {g, h}, dev);
  MlpOutputs r;
  const uint64_t before = buffer_allocation_count();
  {
    GroupedMLPContext ctx = mlp.forward(x.view, view_of(splits), probs.view, y.view);
    mlp.backward(ctx, dy.view,
                 {dx.view, dprobs.view, dw1.view, db1.view, dw2.view, db2.view, false});
    r.saved_bytes = ctx.saved_bytes();
  }
  if (allocations != nullptr) *allocations = buffer_allocation_count() - before;
  r.y = y.to_host();
  r.dx = dx.to_host();
  r.dprobs = dprobs.to_host();
  r.dw1 = dw1.to_host();
  r.db1 = db1.to_host();
  r.dw2 = dw2.to_host();
  r.db2 = db2.to_host();
  return r;
}

inline void expect_same_mlp(const MlpOutputs& fresh, const MlpOutputs& reused,
                            const std::string& what) {
  expect_bitwise_equal(fresh.y, reused.y, what + " y");
  expect_bitwise_equal(fresh.dx, reused.dx, what + " dx");
  expect_bitwise_equal(fresh.dprobs, reused.dprobs, what + " dprobs");
  expect_bitwise_equal(fresh.dw1, reused.dw1, what + " fc1 dW");
  expect_bitwise_equal(fresh.db1, reused.db1, what + " fc1 db");
  expect_bitwise_equal(fresh.dw2, reused.dw2, what + " fc2 dW");
  expect_bitwise_equal(fresh.db2, reused.db2, what + " fc2 db");
  EXPECT_EQ(fresh.saved_bytes, reused.saved_bytes) << what << " saved_bytes";
}

inline void check_mlp(const std::string& recipe_name, const MlpDims& d, Device dev,
                      const Shape& a, const Shape& b, const Shape& c) {
  const auto recipe = make_recipe(recipe_name);
  GroupedMLPOptions o;
  o.bias = true;
  o.device = dev;
  const auto make_mlp = [&] { return GroupedMLP(d.groups, d.hidden, d.ffn, *recipe, o); };
  GroupedMLP reused = make_mlp();
  const auto backend = [&](const Shape& s) {
    return quantize_backend_allocations(*recipe, mlp_quantizations(reused, *recipe, s.rows()),
                                        dev);
  };
  const auto fresh = [&](const Shape& s) {
    GroupedMLP mlp = make_mlp();
    return mlp_step(mlp, s, dev);
  };
  mlp_step(reused, a, dev);
  uint64_t second = 0, smaller = 0;
  reset_rng_offset(1000);
  const MlpOutputs same = mlp_step(reused, a, dev, &second);
  EXPECT_EQ(second, backend(a)) << recipe_name << ": Buffers allocated by the 2nd MLP step";
  reset_rng_offset(2000);
  const MlpOutputs grown = mlp_step(reused, b, dev);
  reset_rng_offset(3000);
  const MlpOutputs shrunk = mlp_step(reused, c, dev, &smaller);
  EXPECT_EQ(smaller, backend(c)) << recipe_name << ": Buffers allocated by a smaller MLP step";
  std::printf("  %-34s mlp:    2nd step %llu Buffers, smaller shape %llu (quantize backend's: "
              "%llu, %llu)\n", recipe_name.c_str(), (unsigned long long)second,
              (unsigned long long)smaller, (unsigned long long)backend(a),
              (unsigned long long)backend(c));
  if (recipe->delayed) return;
  reset_rng_offset(1000);
  expect_same_mlp(fresh(a), same, recipe_name + " MLP, 2nd step:");
  reset_rng_offset(2000);
  expect_same_mlp(fresh(b), grown, recipe_name + " MLP, larger shape:");
  reset_rng_offset(3000);
  expect_same_mlp(fresh(c), shrunk, recipe_name + " MLP, smaller shape:");
}

}  // namespace tessera::nn::test::step_alloc
