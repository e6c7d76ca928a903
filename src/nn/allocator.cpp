// PoolAllocator: blocks made by tessera::Buffer, returned to a free list when their last owner is
// gone and reused by the next request they fit.
#include "tessera/nn/allocator.h"

#include <algorithm>

#include "tessera/core/buffer.h"
#include "tessera/core/status.h"

namespace tessera::nn {

// Invariants: every Buffer in `free` is owned by no Allocation; `reserved` is the sum of the
// bytes of every block the pool made and still holds (free or in use).
struct PoolAllocator::State {
  mutable std::mutex mutex;
  std::vector<std::unique_ptr<Buffer>> free;
  int64_t reserved = 0;
  bool closed = false;  // the pool is gone: returned blocks are freed, not kept
};

PoolAllocator::PoolAllocator() : state_(std::make_shared<State>()) {}

PoolAllocator::~PoolAllocator() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->closed = true;  // Allocations still alive free their blocks when they die
  state_->free.clear();
}

Allocation PoolAllocator::allocate(int64_t bytes, Device device, Stream /*stream*/) {
  TESSERA_CHECK(bytes >= 0, "PoolAllocator: bytes ", bytes, " must be >= 0");
  Allocation a;
  a.device = device;
  if (bytes == 0) return a;
  std::unique_ptr<Buffer> block;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto best = state_->free.end();
    for (auto it = state_->free.begin(); it != state_->free.end(); ++it) {
      const Buffer& b = **it;
      if (b.device() != device || static_cast<int64_t>(b.bytes()) < bytes) continue;
      if (best == state_->free.end() || b.bytes() < (*best)->bytes()) best = it;
    }
    if (best != state_->free.end()) {
      block = std::move(*best);
      state_->free.erase(best);
    }
  }
  if (!block) {
    block = std::make_unique<Buffer>(static_cast<size_t>(bytes), device);
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->reserved += bytes;
  }
  a.data = block->data();
  a.bytes = static_cast<int64_t>(block->bytes());
  std::weak_ptr<State> pool = state_;
  Buffer* raw = block.release();
  a.owner = std::shared_ptr<void>(raw, [pool](void* p) {
    std::unique_ptr<Buffer> returned(static_cast<Buffer*>(p));
    if (const std::shared_ptr<State> s = pool.lock()) {
      std::lock_guard<std::mutex> lock(s->mutex);
      if (!s->closed) {
        s->free.push_back(std::move(returned));
        return;
      }
      s->reserved -= static_cast<int64_t>(returned->bytes());
    }
  });
  return a;
}

int64_t PoolAllocator::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->reserved;
}

}  // namespace tessera::nn
