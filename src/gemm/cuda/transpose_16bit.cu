// Transposes of 16-bit (32x32 tiles) and 8-bit (64x64 tiles, 32-bit words) matrices through
// shared memory (see transpose_16bit.h).
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

constexpr int kByteTile = 64;

// Block (16, 16): the 64 x 64 byte tile (blockIdx.y, blockIdx.x) of matrix blockIdx.z; each
// thread moves 4 words in (rows ty + 16i, columns 4tx..4tx+3; zeros past the matrix) and 4 words
// out (out rows ty + 16i, columns 4tx..4tx+3 of the matrix's rows_pad columns).
__global__ void transpose_8bit_kernel(const uint8_t* __restrict__ in, uint8_t* __restrict__ out,
                                      int64_t rows, int64_t cols, int64_t ld_out,
                                      int64_t rows_pad) {
  __shared__ uint8_t tile[kByteTile][kByteTile + 4];
  in += static_cast<int64_t>(blockIdx.z) * rows * cols;
  out += static_cast<int64_t>(blockIdx.z) * rows_pad;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kByteTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kByteTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = r0 + ty + 16 * i, c = c0 + 4 * tx;
    uint32_t w = 0;
    if (r < rows && c < cols) w = *reinterpret_cast<const uint32_t*>(in + r * cols + c);
    *reinterpret_cast<uint32_t*>(&tile[ty + 16 * i][4 * tx]) = w;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t c = c0 + ty + 16 * i, r = r0 + 4 * tx;  // out row c, columns r..r+3
    if (c >= cols || r >= rows_pad) continue;
    const int lc = ty + 16 * i, lr = 4 * tx;
    const uint32_t w = uint32_t{tile[lr][lc]} | uint32_t{tile[lr + 1][lc]} << 8 |
                       uint32_t{tile[lr + 2][lc]} << 16 | uint32_t{tile[lr + 3][lc]} << 24;
    *reinterpret_cast<uint32_t*>(out + c * ld_out + r) = w;
  }
}

}  // namespace

void transpose_8bit(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
                    int64_t ld_out, int64_t rows_pad, void* stream) {
  if (batch == 0 || rows_pad == 0 || cols == 0) return;
  TESSERA_CHECK_STATUS(cols % 4 == 0 && ld_out % 4 == 0 && rows_pad % 4 == 0 &&
                           rows_pad >= rows && batch * rows_pad <= ld_out &&
                           reinterpret_cast<uintptr_t>(in) % 4 == 0 &&
                           reinterpret_cast<uintptr_t>(out) % 4 == 0,
                       Status::kMisaligned, "transpose_8bit: cols ", cols, ", rows_pad ",
                       rows_pad, " and ld_out ", ld_out, " must be multiples of 4 (rows_pad >= ",
                       "rows ", rows, ", batch·rows_pad <= ld_out) with 4-byte aligned bases");
  TESSERA_CHECK_STATUS((rows_pad + kByteTile - 1) / kByteTile <= 65535 && batch <= 65535,
                       Status::kOutOfRange, "transpose_8bit: rows ", rows_pad, " or batch ",
                       batch, " past the grid limits");
  const dim3 grid(static_cast<unsigned>((cols + kByteTile - 1) / kByteTile),
                  static_cast<unsigned>((rows_pad + kByteTile - 1) / kByteTile),
                  static_cast<unsigned>(batch));
  transpose_8bit_kernel<<<grid, dim3(16, 16), 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out), rows, cols, ld_out, rows_pad);
  TESSERA_CUDA_CHECK_LAUNCH();
}

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
