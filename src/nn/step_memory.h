// Memory plumbing of the training step (linear_step.cpp, mlp_step.cpp): carving one Allocation
// into 256-byte aligned pieces in a fixed order (so that a saved context can be re-viewed from
// its bytes alone), quantized copies placed in such memory, scratch from the caller's
// Allocator, and a GEMM run with its workspace from the Allocator.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/gemm/grouped_gemm.h"
#include "tessera/nn/allocator.h"
#include "tessera/nn/linear_step.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::nn::detail {

// Places pieces one after the other at 256-byte aligned offsets. Two passes over the same
// sequence of take() calls give the same offsets: a measuring pass (base == nullptr) sizes the
// Allocation, a placing pass hands out pointers into it.
class Carver {
 public:
  explicit Carver(void* base = nullptr, int64_t capacity = -1) : base_(base), capacity_(capacity) {}
  void* take(int64_t bytes);
  int64_t used() const { return used_; }
  // Whether take(bytes) fits the capacity (always, for a measuring pass).
  bool fits(int64_t bytes) const;

 private:
  void* base_;
  int64_t capacity_;
  int64_t used_ = 0;
};

// Views of the usages asked for of a (rows, cols) tensor quantized with `config`, carved from
// `carver` (data, scales, amax per usage, in that order). A usage the step scales per member
// (member_scaling.h: member_scaled) over `groups` members holds G times the scales (and G amax
// values).
QuantizedTensorView carve_quantized(const QuantizerConfig& config, int64_t rows, int64_t cols,
                                    bool rowwise, bool columnwise, Carver& carver, Device device,
                                    int64_t groups = 1);

// An Allocation of `bytes` with a Carver over it.
struct Scratch {
  Allocation memory;
  Carver carver;
};
Scratch scratch(Allocator& alloc, int64_t bytes, Device device, Stream stream);

// The first of n consecutive stochastic-rounding offsets of the process-wide counter
// (next_rng_offset n times): a quantization whose members each draw their own (NVFP4 members).
uint64_t take_rng_offsets(uint64_t n);

// The scratch of one direction of a step in one Allocation from the caller's Allocator, sized up
// front: `reserve` bytes (the step's own pieces, measured, plus call_allowance for its callees),
// taken at the first piece asked for (none when nothing is). The step carves its own pieces
// (take, carver), then the Allocator requests of what it calls (member kernels' scratch, GEMM
// workspaces) are carved after them, 256-byte aligned; a request past the reserve goes to the
// caller's Allocator (correct, one allocation more). Stream order: every piece serves work the
// call enqueues on `stream`, and the block goes back to the caller's Allocator when the arena and
// the pieces handed out are gone, as one Allocation per piece would. Memory the caller keeps
// (saved contexts, weight copies, kept gradient copies) never comes from an arena.
class StepArena final : public Allocator {
 public:
  StepArena(Allocator& parent, int64_t reserve, Device device, Stream stream)
      : parent_(parent), reserve_(reserve), device_(device), stream_(stream) {}
  Allocation allocate(int64_t bytes, Device device, Stream stream) override;
  // `bytes` of the step's own (nullptr for 0; throws when past the reserve: a sizing bug).
  void* take(int64_t bytes);
  // The carver of the step's own pieces (the block taken now).
  Carver& carver();

 private:
  void materialize();
  Allocator& parent_;
  int64_t reserve_;
  Device device_;
  Stream stream_;
  Allocation block_;
  Carver carver_;
  bool made_ = false;
};

// Bytes a StepArena keeps past the step's own pieces for the callees of one direction of a step
// over `groups` groups whose widest quantized matrix is (rows, cols): the CUDA GEMMs' per-group
// tables (a K-grouped GEMM's maps: 260 bytes a group; host offsets copied in) and the member
// kernels' slots (a float per member and column, one per row). Operand copies a GEMM makes in
// its workspace (MXFP8 columnwise transposes, the CPU's FP32 operands) are not counted: they
// come from the caller's Allocator.
int64_t call_allowance(int64_t groups, int64_t rows, int64_t cols);

// The role's quantizer for one call, producing the usages asked for: its config with those
// usages and the next stochastic-rounding offset when the config rounds stochastically. (Delayed
// scaling is not made here: the step scales it per member with the caller's state,
// member_scaling.h.)
Quantizer role_quantizer(const RoleFormat& format, bool rowwise, bool columnwise, Device device);

// Runs `problem` with a workspace from `alloc` (none when it needs no bytes); on the CPU, where
// the GEMM finishes before the call returns, from a block kept per thread instead (step_memory.cpp).
void run_gemm(const GroupedGemmProblem& problem, Allocator& alloc, Stream stream);

// A (rows, cols) view of `dtype` at `data`.
TensorView matrix(void* data, DType dtype, int64_t rows, int64_t cols, Device device);

}  // namespace tessera::nn::detail
