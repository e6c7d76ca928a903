// Batched 16-bit transpose through a padded 32x32 shared-memory tile (see transpose_16bit.h).
#include <cuda_runtime.h>

#include "gemm/cuda/transpose_16bit.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/status.h"

namespace tessera::gemm_cuda {
namespace {

constexpr int kTile = 32;

// Block (32, 8): tile (blockIdx.y, blockIdx.x) of matrix blockIdx.z.
__global__ void transpose_16bit_kernel(const uint16_t* __restrict__ in, uint16_t* __restrict__ out,
                                       int64_t rows, int64_t cols, int64_t ld_out) {
  __shared__ uint16_t tile[kTile][kTile + 1];
  const int64_t b = blockIdx.z;
  in += b * rows * cols;
  out += b * cols * ld_out;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;  // out row c, column r
    if (r < rows && c < cols) out[c * ld_out + r] = tile[threadIdx.x][i];
  }
}

}  // namespace

void transpose_16bit(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
                     int64_t ld_out, void* stream) {
  if (batch == 0 || rows == 0 || cols == 0) return;
  TESSERA_CHECK_STATUS(batch <= 65535 && (rows + kTile - 1) / kTile <= 65535,
                       Status::kOutOfRange, "transpose: batch ", batch, " or rows ", rows,
                       " past the grid limits");
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>((rows + kTile - 1) / kTile), static_cast<unsigned>(batch));
  transpose_16bit_kernel<<<grid, dim3(kTile, 8), 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint16_t*>(in), static_cast<uint16_t*>(out), rows, cols, ld_out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::gemm_cuda
