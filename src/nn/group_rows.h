// Which rows of a grouped activation belong to group g, read from the caller's group offsets in
// either form the step takes (GroupOffsetsFormat): shared by the CPU loops and the CUDA kernels
// of the nn row ops. Offsets are clamped into [0, rows] and made non-decreasing, so a corrupt
// offset array can never send a kernel outside the buffer (it computes garbage groups instead;
// host offsets are checked before they get here).
#pragma once

#include <cstdint>

#include "tessera/core/macros.h"

namespace tessera::nn::detail {

// Offsets as the row ops read them: int32 or int64 values, `ends` (G values: group g ends at
// v[g]) or starts (G+1 values, v[0] == 0).
struct GroupOffsets {
  const void* values = nullptr;
  bool int64 = false;
  bool ends = true;
  int64_t groups = 0;
  int64_t rows = 0;  // rows of the token buffer (T, capacity included)

  TESSERA_HD int64_t raw(int64_t i) const {
    const int64_t v = int64 ? static_cast<const int64_t*>(values)[i]
                            : static_cast<const int32_t*>(values)[i];
    return v < 0 ? 0 : (v > rows ? rows : v);
  }
  // End of group g (clamped; never below the previous group's end when read in order by
  // group_of / begin).
  TESSERA_HD int64_t end(int64_t g) const { return raw(ends ? g : g + 1); }
  TESSERA_HD int64_t begin(int64_t g) const {
    if (g == 0) return ends ? 0 : raw(0);
    const int64_t b = end(g - 1);
    return b;
  }
  // The group that owns row r, or -1 for a row in no group (past the last end, or in a gap of
  // start offsets). Binary search over the ends.
  TESSERA_HD int64_t group_of(int64_t r) const {
    int64_t lo = 0, hi = groups;  // first g with end(g) > r
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (end(mid) > r) hi = mid; else lo = mid + 1;
    }
    if (lo >= groups) return -1;
    return r >= begin(lo) ? lo : -1;
  }
};

}  // namespace tessera::nn::detail
