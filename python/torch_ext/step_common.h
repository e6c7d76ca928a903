// What the torch ops of the training step share: specs resolved once per (recipe, layer,
// shape), delayed-scaling state from the layer's buffers, weight copies from the cache tensor,
// the device guard and stream of a call.
#pragma once

#include <torch/csrc/stable/accelerator.h>

#include <memory>
#include <optional>
#include <string>

#include "torch_bridge.h"
#include "tessera/nn/linear_step.h"
#include "tessera/nn/mlp_step.h"

namespace tessera::torch_ext {

// The spec of layer `name` under the recipe text `recipe` (parse_recipe_spec) for a weight of
// `weight_dtype` (dense recipes compute in a 16-bit weight's own dtype), cached.
const nn::LinearSpec& linear_spec(const std::string& recipe, const std::string& name,
                                  int64_t groups, int64_t in, int64_t out, bool bias,
                                  DType weight_dtype);
// The MLP spec of fc1's and fc2's recipe texts (the same for built-in recipes).
const nn::MlpSpec& mlp_spec(const std::string& recipe1, const std::string& recipe2,
                            const std::string& prefix, int64_t groups, int64_t hidden,
                            int64_t ffn, bool bias, DType weight_dtype);

// The rows (0 input, 1 weight, 2 grad_output) of a layer's delayed state buffers, scale (3, G)
// and amax_history (3, L, G): per role scale (G) and amax_history (L, G) (nn::LinearState), each
// a view the step updates in place. Empty without state.
nn::LinearState linear_state(const OptTensor& scale, const OptTensor& history);

// The weight copies the step reads: made now (requantize; `made` receives the tensor to return)
// or viewed from the cache tensor the caller kept.
nn::WeightCopies weight_copies(const nn::LinearSpec& spec, const Tensor& weight,
                               const OptTensor& cache, bool requantize,
                               const nn::LinearState& state, nn::Allocator& alloc, Stream stream,
                               Tensor* made);

// The device of a call (CUDA: made current for its duration) and torch's stream on it.
class CallScope {
 public:
  explicit CallScope(const Tensor& t);
  Device device() const { return device_; }
  Stream stream() const { return stream_; }

 private:
  Device device_;
  Stream stream_;
  std::unique_ptr<torch::stable::accelerator::DeviceGuard> guard_;
};

// int32/int64 end offsets (G) of a torch op, as the step reads them.
TensorView offsets_view(const Tensor& offs, int64_t groups);
// dtype code of a ScalarType argument, as tessera's.
DType dtype_arg(torch::headeronly::ScalarType t, const char* arg);

}  // namespace tessera::torch_ext
