// Launch-shape helpers shared by the quantization launchers (host only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tessera/core/cuda_check.h"

namespace tessera::detail::cuda_quant {

// Multiprocessors of the current device (queried once per device).
inline int sm_count() {
  static int cached[64] = {};
  int dev = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && cached[dev] > 0) return cached[dev];
  int n = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  if (dev < 64) cached[dev] = n;
  return n;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Grid of a grid-stride loop over `work` items of `per_block` each, capped at `waves` blocks
// per multiprocessor.
inline unsigned grid_stride_blocks(int64_t work, int64_t per_block, int waves = 8) {
  int64_t b = ceil_div(work, per_block);
  const int64_t cap = int64_t{sm_count()} * waves;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

}  // namespace tessera::detail::cuda_quant
