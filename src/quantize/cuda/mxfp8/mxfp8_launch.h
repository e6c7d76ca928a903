// Launchers internal to the MXFP8 folder (the public ones are in quantize/cuda/launchers.h).
#pragma once

#include <cuda_runtime_api.h>

#include "quantize/cuda/launchers.h"

namespace tessera::detail::cuda_quant {

// mxfp8_rowwise.cu: the rowwise usage alone (q_col null, 1x32 blocks) for K % 32 == 0, 16-byte
// aligned x and q_row, and a padded scale matrix below 2^31 bytes; launch_mxfp8 checks these.
void launch_mxfp8_rowwise_stream(const MxArgs& a, cudaStream_t stream);

}  // namespace tessera::detail::cuda_quant
