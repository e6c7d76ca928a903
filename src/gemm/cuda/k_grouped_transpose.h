// The dense (BF16/FP16) K-grouped operands of the public API in the layout the sm90 kernel reads:
// A (T, M) and B (T, N), tokens grouped by the device offsets, transposed to K-major (M, Tp) and
// (N, Tp) with every group's token columns starting at a multiple of 8 (16 bytes: TMA's rule for
// a contraction start), the gaps filled with zeros. The group starts in that padded layout,
// q_0 = 0, q_{g+1} = q_g + roundup(len_g, 8), are derived on the device (no host ever reads the
// offsets), so any group sizes work — host or device offsets, captured in a CUDA graph or not.
// Zero columns add exact zeros to the FP32 accumulators: the product is the unpadded one.
#pragma once

#include <cstdint>

#include "tessera/core/checked_math.h"

namespace tessera::gemm_cuda {

inline constexpr int64_t kKGroupedAlignRows = 8;  // 16 bytes of a 16-bit element

// Columns of the padded layout for `capacity` token rows in `groups` groups (a host bound of
// q_G, itself a multiple of 8): roundup(capacity + 7 groups, 8), groups <= 65535.
// Error(kOutOfRange) when that passes INT64_MAX.
inline int64_t k_grouped_padded_cols(int64_t capacity, int64_t groups) {
  const int64_t a = kKGroupedAlignRows;
  const char* what = "workspace: K-grouped padded token columns (capacity + 7 per group)";
  return checked_round_up(checked_add(capacity, (a - 1) * groups, what), a, what);
}

// The group offsets as the kernel reads them (KernelParams conventions).
struct DeviceGroupOffsets {
  const void* data = nullptr;
  bool int64 = true;
  bool start_format = true;  // G+1 starts with a leading 0, else G cumulative ends
  int64_t groups = 0;
  int64_t capacity = 0;      // starts are clamped to [0, capacity]
};

// padded_starts (G+1 int64, device): q_g as above; one block, asynchronous.
void k_grouped_padded_starts(const DeviceGroupOffsets& offsets, int64_t* padded_starts,
                             void* stream);

// out (cols, ld_out) = the padded transposed layout of in (capacity, cols) (16-bit elements):
// out[c][q_g + i] = in[start_g + i][c] for i < len_g, zeros elsewhere (every column < ld_out is
// written). ld_out ≥ k_grouped_padded_cols(capacity, G); rows of `in` outside the groups are
// never read.
void k_grouped_transpose_16bit(const void* in, int64_t cols, const DeviceGroupOffsets& offsets,
                               const int64_t* padded_starts, void* out, int64_t ld_out,
                               void* stream);

}  // namespace tessera::gemm_cuda
