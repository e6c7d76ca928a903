// The one device-side reading of grouped-GEMM group offsets, shared by the sm90 kernel's tile
// walker, the K-grouped tensor-map setup kernel and the padded K-grouped transposes.
#pragma once

#include <cstdint>

namespace tessera::gemm_cuda {

// Start of group i (i in [0, G]) clamped to [0, capacity]. offsets: int64 (int64 = true) or
// int32 device values, either G+1 starts with a leading 0 (starts = true) or G cumulative ends
// (torch's convention; the start of group 0 is then 0).
__device__ __forceinline__ int64_t device_group_start(const void* offsets, bool int64, bool starts,
                                                      int64_t capacity, int i) {
  int64_t v = 0;
  const int idx = starts ? i : i - 1;
  if (idx >= 0) {
    v = int64 ? __ldg(static_cast<const int64_t*>(offsets) + idx)
              : static_cast<int64_t>(__ldg(static_cast<const int32_t*>(offsets) + idx));
  }
  return v < 0 ? 0 : (v > capacity ? capacity : v);
}

}  // namespace tessera::gemm_cuda
