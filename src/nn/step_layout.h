// The group layout of a training step's wgrad operands: the start offsets of the caller's groups
// and the starts of the same groups padded to `align` rows (the columnwise copies of x and dy are
// quantized in that padded layout, so that every group starts on an aligned row and no scaling
// block of the token dimension spans two groups). One launch on CUDA, no host sync.
#pragma once

#include <cstdint>

#include "nn/group_rows.h"
#include "tessera/core/device.h"
#include "tessera/core/stream.h"

namespace tessera::nn::detail {

// starts (G+1) int64 = [begin(0), …, begin(G-1), end(G-1)]; padded (G+1) int64 =
// [0, roundup(M_0, align), …] prefix sums; both on `device`.
void group_starts(const GroupOffsets& groups, int64_t align, int64_t* starts, int64_t* padded,
                  Device device, Stream stream);

// Rows the padded layout of a (rows)-row buffer can need, known on the host: every group padded
// (rows + groups·(align − 1)), rounded up to a multiple of align.
int64_t padded_rows_for(int64_t rows, int64_t groups, int64_t align);

namespace cuda {
void group_starts(const GroupOffsets& groups, int64_t align, int64_t* starts, int64_t* padded,
                  Stream stream);
}  // namespace cuda

}  // namespace tessera::nn::detail
