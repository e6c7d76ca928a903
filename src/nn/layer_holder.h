// What the C++ layers (GroupedLinear, GroupedMLP) keep around the one training step: FP32 master
// parameters, the recipe state (quantizers with their delayed-scaling history), the weight copies
// of the last quantization, a memory pool, and the group layout of a step. Shared by
// grouped_linear.cpp and grouped_mlp.cpp.
#pragma once

#include <memory>
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/nn/grouped_linear.h"
#include "tessera/nn/linear_step.h"

namespace tessera::nn::detail {

// Invariants: weight holds G*out*in FP32, bias G*out FP32 (or is empty); copies are the weight
// copies of the last quantization (null before the first forward); contexts share them, so a
// later re-quantization never changes what an earlier context reads.
struct LinearParams {
  LinearSpec spec;
  GroupedLinearOptions options;
  Buffer weight;  // FP32 (G, out, in)
  Buffer bias;    // FP32 (G, out)
  std::shared_ptr<RecipeState> recipe_state;
  std::shared_ptr<PoolAllocator> pool;
  std::shared_ptr<const WeightCopies> copies;
  uint64_t forwards = 0;  // forwards run (a context on the master weights themselves checks it)

  TensorView weight_view() const;
  TensorView bias_view() const;
  LinearState state() const;
  // The copies this forward reads: re-made when asked (or when there are none yet). The old
  // copies are released first when no context holds them, so their memory is reused.
  std::shared_ptr<const WeightCopies> refresh(bool requantize, Stream stream);
};

// The start offsets (G+1) int64 of `splits` (G) int32/int64, host or device, for a buffer of
// `rows` rows, in memory from `alloc` (kept in `keep`): one scan.
GroupLayout layout_from_splits(const TensorView& splits, int64_t groups, int64_t rows,
                               Device device, Allocator& alloc, Allocation& keep, Stream stream);

// The linear step's delayed-scaling state of layer `name` from its recipe state.
LinearState linear_state(RecipeState& state, const LinearSpec& spec, const std::string& name);

// A new LinearParams: checked sizes, FP32 parameters on options.device, the spec of `recipe`.
std::unique_ptr<LinearParams> make_linear_params(int64_t groups, int64_t in, int64_t out,
                                                 const Recipe& recipe, bool bias,
                                                 const GroupedLinearOptions& options);

// A copy of x in pool memory (the layer's context keeps it: dense recipes and
// save_original_input read x in backward).
TensorView keep_copy(const TensorView& x, Allocator& alloc, Allocation& keep, Stream stream);

}  // namespace tessera::nn::detail
