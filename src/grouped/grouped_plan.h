// Internal: the host-side layout plan of a grouped tensor (shapes, mode, offsets, field sizes)
// that creation builds before allocating, and the placement of its metadata arrays.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/grouped/grouped_tensor.h"

namespace tessera::detail {

// Invariants: n >= 1; host_known ⇔ rows/cols/offsets hold n (n+1) entries; scale_offsets[u]
// hold n+1 entries iff host_known and quantized; data_elems == logical_rows × logical_cols.
struct GroupedPlan {
  int64_t n = 0;
  GroupedShapeMode mode = GroupedShapeMode::kAllSame;
  int64_t logical_rows = 0, logical_cols = 0;
  int64_t uniform_rows = 0, uniform_cols = 0;
  bool host_known = false;
  bool quantized = false;
  std::vector<int64_t> rows, cols;                   // (n) member shapes
  std::vector<int64_t> offsets;                      // (n+1) element offsets
  std::array<std::vector<int64_t>, 2> scale_offsets; // (n+1) per usage (rowwise, columnwise)
  int64_t data_elems = 0;
  std::array<int64_t, 2> scale_elems{};              // scale buffer elements per usage
};

// Element offsets (int64 units, 16-byte aligned) of each metadata array in one allocation.
// -1 = absent. total = int64 elements of the allocation.
struct GroupedMetaPlacement {
  int64_t first_dims = -1, last_dims = -1, offsets = -1;
  std::array<int64_t, 2> scale_offsets{-1, -1};
  int64_t total = 0;
};

GroupedMetaPlacement place_grouped_meta(const GroupedPlan& plan);

// Builds the plan of members with the given host shapes (checks every argument).
GroupedPlan plan_from_shapes(std::span<const std::array<int64_t, 2>> shapes,
                             const GroupedTensorOptions& options);
// Plan of a varying-first tensor whose split sizes live on the device (host_known = false).
GroupedPlan plan_from_device_splits(int64_t n, int64_t cols, const GroupedTensorOptions& options);

// Host shapes of member g of a view with host metadata (kUnsupported without; kOutOfRange for g).
std::array<int64_t, 2> grouped_member_shape(const GroupedTensorView& t, int64_t g,
                                            const char* what);

}  // namespace tessera::detail
