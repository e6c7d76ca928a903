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

// Block 256 threads: the 64 x 64 byte tile (blockIdx.y, blockIdx.x) of matrix blockIdx.z,
// through a padded shared tile (68-byte rows). kVec = 16: each thread reads one 16-byte chunk of
// a row (row t / 4, bytes 16·(t % 4)..) and writes one 16-byte chunk of an out row (row t / 4,
// columns 16·(t % 4)..), gathered byte by byte; kVec = 4: four 4-byte chunks each way. Rows and
// columns past the matrix read as zeros; out columns past rows_pad are not written.
template <int kVec>
__global__ void transpose_8bit_kernel(const uint8_t* __restrict__ in, uint8_t* __restrict__ out,
                                      int64_t rows, int64_t cols, int64_t ld_out,
                                      int64_t rows_pad, int64_t out_batch_stride) {
  constexpr int kStride = kByteTile + 4;
  constexpr int kPerThread = 16 / kVec;  // chunks per thread each way
  constexpr int kChunksPerRow = kByteTile / kVec;
  __shared__ alignas(16) uint8_t tile[kByteTile * kStride];
  in += static_cast<int64_t>(blockIdx.z) * rows * cols;
  out += static_cast<int64_t>(blockIdx.z) * out_batch_stride;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kByteTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kByteTile;
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int chunk = t + 256 * i;
    const int lr = chunk / kChunksPerRow, lc = (chunk % kChunksPerRow) * kVec;
    const int64_t r = r0 + lr, c = c0 + lc;
    uint32_t w[kVec / 4] = {};
    if (r < rows && c < cols) {
      if constexpr (kVec == 16) {
        const uint4 v = *reinterpret_cast<const uint4*>(in + r * cols + c);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
      } else {
        w[0] = *reinterpret_cast<const uint32_t*>(in + r * cols + c);
      }
    }
#pragma unroll
    for (int j = 0; j < kVec / 4; ++j)
      *reinterpret_cast<uint32_t*>(&tile[lr * kStride + lc + 4 * j]) = w[j];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int chunk = t + 256 * i;
    const int lc = chunk / kChunksPerRow, lr = (chunk % kChunksPerRow) * kVec;  // out row lc
    const int64_t c = c0 + lc, r = r0 + lr;
    if (c >= cols || r >= rows_pad) continue;
    uint32_t w[kVec / 4];
#pragma unroll
    for (int j = 0; j < kVec / 4; ++j)
      w[j] = uint32_t{tile[(lr + 4 * j) * kStride + lc]} |
             uint32_t{tile[(lr + 4 * j + 1) * kStride + lc]} << 8 |
             uint32_t{tile[(lr + 4 * j + 2) * kStride + lc]} << 16 |
             uint32_t{tile[(lr + 4 * j + 3) * kStride + lc]} << 24;
    if constexpr (kVec == 16)
      *reinterpret_cast<uint4*>(out + c * ld_out + r) = make_uint4(w[0], w[1], w[2], w[3]);
    else
      *reinterpret_cast<uint32_t*>(out + c * ld_out + r) = w[0];
  }
}

}  // namespace

void transpose_8bit(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
                    int64_t ld_out, int64_t rows_pad, void* stream, int64_t out_batch_stride) {
  const bool side_by_side = out_batch_stride < 0;
  if (side_by_side) out_batch_stride = rows_pad;
  TESSERA_CHECK_STATUS(!side_by_side || batch * rows_pad <= ld_out, Status::kOutOfRange,
                       "transpose_8bit: ", batch, " matrices of ", rows_pad, " columns side by "
                       "side need ld_out >= ", batch * rows_pad, ", got ", ld_out);
  if (batch == 0 || rows_pad == 0 || cols == 0) return;
  TESSERA_CHECK_STATUS(cols % 4 == 0 && ld_out % 4 == 0 && rows_pad % 4 == 0 &&
                           rows_pad >= rows && rows_pad <= ld_out &&
                           reinterpret_cast<uintptr_t>(in) % 4 == 0 &&
                           reinterpret_cast<uintptr_t>(out) % 4 == 0,
                       Status::kMisaligned, "transpose_8bit: cols ", cols, ", rows_pad ",
                       rows_pad, " and ld_out ", ld_out, " must be multiples of 4 (rows ", rows,
                       " <= rows_pad <= ld_out) with 4-byte aligned bases");
  TESSERA_CHECK_STATUS((rows_pad + kByteTile - 1) / kByteTile <= 65535 && batch <= 65535,
                       Status::kOutOfRange, "transpose_8bit: rows ", rows_pad, " or batch ",
                       batch, " past the grid limits");
  const dim3 grid(static_cast<unsigned>((cols + kByteTile - 1) / kByteTile),
                  static_cast<unsigned>((rows_pad + kByteTile - 1) / kByteTile),
                  static_cast<unsigned>(batch));
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  auto s = static_cast<cudaStream_t>(stream);
  // 16-byte chunks where rows, out rows and the 16-byte column chunks stay aligned.
  if (cols % 16 == 0 && ld_out % 16 == 0 && rows_pad % 16 == 0 && out_batch_stride % 16 == 0 &&
      reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0)
    transpose_8bit_kernel<16><<<grid, 256, 0, s>>>(src, dst, rows, cols, ld_out, rows_pad,
                                                   out_batch_stride);
  else
    transpose_8bit_kernel<4><<<grid, 256, 0, s>>>(src, dst, rows, cols, ld_out, rows_pad,
                                                  out_batch_stride);
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
