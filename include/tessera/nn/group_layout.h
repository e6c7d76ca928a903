// GroupLayout: where each group (expert) of a grouped activation lives, unpadded and padded to the
// recipe's token alignment, computed by ONE splits_to_offsets_multi call (docs/architecture.md,
// docs/nn.md) and kept in the contexts of GroupedLinear / GroupedMLP for backward.
//
// Invariants: offsets and padded_offsets are int64 (G+1), leading 0, on `device`;
// padded_offsets[g+1] - padded_offsets[g] = roundup(offsets[g+1] - offsets[g], align);
// rows >= offsets[G] (the token buffer's rows, capacity included); padded_rows >= padded_offsets[G]
// (exact padded total when the splits were on the host, padded_rows_bound rounded up to a
// multiple of align otherwise, so nothing ever waits for the device). align == 1: no padding (padded_offsets == offsets, padded_rows ==
// rows) and the layers use the caller's buffers directly.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"

namespace tessera::nn {

struct GroupLayout {
  int64_t num_groups = 0;
  int64_t align = 1;
  int64_t rows = 0;          // rows of the unpadded token buffer (T, capacity included)
  int64_t padded_rows = 0;   // rows of the padded buffers (Tp)
  TensorView offsets;        // int64 (G+1) group starts in the unpadded buffer
  TensorView padded_offsets; // int64 (G+1) group starts in the padded buffer
  Device device{};
  std::shared_ptr<Buffer> storage;  // owns both offset arrays (one allocation)

  bool padded() const { return align > 1; }
};

// splits: (G) int32/int64, on the host or on `device`; rows: the token buffer's first dim T
// (sum(splits) <= rows is checked: on the host it throws, on the device via error_flag).
// align >= 1: the recipe's token alignment. One splits_to_offsets_multi call.
GroupLayout make_group_layout(const TensorView& splits, int64_t rows, int64_t align,
                              Device device, int32_t* error_flag = nullptr, Stream stream = {});

// Host copy of offsets / padded_offsets (tests, demo; synchronizes when on the device).
std::vector<int64_t> host_offsets(const GroupLayout& layout, bool padded);

}  // namespace tessera::nn
