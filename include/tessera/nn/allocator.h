// Allocator: where the training step (linear_step.h, mlp_step.h) takes its memory — workspaces
// that die with the call, and the weight copies and saved contexts it hands back to the caller.
// A framework binding passes its own (tessera.torch: PyTorch's caching allocator, so a step's
// memory is the framework's tensors); C++ callers use PoolAllocator.
//
// Contract (stream-ordered memory, as cudaMallocAsync and PyTorch's caching allocator define
// it): an Allocation is usable by work enqueued on the stream it was made for; once its last
// owner is gone the allocator may hand the bytes to a later allocate() on that stream, which
// orders the new user's work after the old user's. Work on another stream must be ordered by
// the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/stream.h"

namespace tessera::nn {

// Memory from an Allocator. Invariants: data is at least 64-byte aligned (256 on a device;
// nullptr iff bytes == 0);
// the bytes stay valid while `owner` (or a copy of it) lives; `owner` may be the framework's
// object behind the memory (a binding recovers its tensor from it).
struct Allocation {
  void* data = nullptr;
  int64_t bytes = 0;
  Device device{};
  std::shared_ptr<void> owner;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // `bytes` (>= 0) on `device`, for work on `stream`. Throws tessera::Error (kOutOfMemory) when
  // the memory cannot be had.
  virtual Allocation allocate(int64_t bytes, Device device, Stream stream) = 0;
};

// An Allocator that keeps the blocks it made and hands a returned block to the next request it
// fits (best fit by size), so that a repeated step allocates nothing after its first call.
// One stream per pool (reuse is ordered by that stream); thread-safe.
class PoolAllocator final : public Allocator {
 public:
  PoolAllocator();
  ~PoolAllocator() override;
  Allocation allocate(int64_t bytes, Device device, Stream stream) override;
  // Bytes held by the pool (in use and free).
  int64_t reserved_bytes() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace tessera::nn
