// What a GroupedLinear / GroupedMLP step reuses instead of allocating (docs/nn.md "Memory"):
// growing per-role buffers (scratch and GEMM workspaces), pooled context slots, and group
// layouts written into storage a slot already owns. Every fill and copy here is ordered on the
// caller's stream; the only allocations are growth (a shape needing more bytes than any before)
// and a new slot (more contexts alive at once than ever before).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/nn/group_layout.h"

namespace tessera::nn::detail {

// Memory of one role that a layer reuses every call: grows to the largest request, never
// shrinks. Invariant: bytes() >= every size reserve() returned since. Reuse across calls is
// ordered by the stream the calls share (CUDA): a call on another stream must be ordered after
// the previous one by the caller, as for any stream-ordered memory.
class GrowingBuffer {
 public:
  // At least `bytes` on `device`. Allocates only when the buffer is smaller or on another
  // device (its contents are then lost); nullptr for 0 bytes.
  void* reserve(int64_t bytes, Device device);
  // A float32 (rows, cols) view of this memory, zero-filled on `stream`.
  TensorView zeroed_matrix(int64_t rows, int64_t cols, Device device, Stream stream);
  int64_t bytes() const { return static_cast<int64_t>(buffer_.bytes()); }
  // The bytes usable on `device` (0 when the buffer lives elsewhere) and where they start.
  int64_t bytes_on(Device device) const { return buffer_.device() == device ? bytes() : 0; }
  void* data() const { return buffer_.data(); }

 private:
  Buffer buffer_;
};

// Runs `problem` with its workspace taken from `workspace` (grown to the problem's need when
// smaller), validating it once when the workspace is large enough.
void run_grouped_gemm(const GroupedGemmProblem& problem, GrowingBuffer& workspace, Stream stream);

// A slot of `pool` that no context holds any more (use_count() == 1: only the pool), or a new
// one appended to the pool. The caller overwrites what the slot held.
template <class Slot>
std::shared_ptr<Slot> acquire_slot(std::vector<std::shared_ptr<Slot>>& pool) {
  for (const std::shared_ptr<Slot>& slot : pool) {
    if (slot.use_count() == 1) return slot;
  }
  pool.push_back(std::make_shared<Slot>());
  return pool.back();
}

// make_group_layout into `layout`, reusing layout.storage when nothing else holds it and it is
// large enough (no allocation then). The scan runs on `stream`.
void make_group_layout_into(GroupLayout& layout, const TensorView& splits, int64_t rows,
                            int64_t align, Device device, int32_t* error_flag, Stream stream);

// `dst` becomes a copy of `src` whose offsets live in dst's own storage (reused as above), so
// that dst does not keep src's storage alive. Two copies of (G+1) int64 on `stream`.
void copy_group_layout(const GroupLayout& src, GroupLayout& dst, Stream stream);

}  // namespace tessera::nn::detail
