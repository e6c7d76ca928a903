// Padded K-grouped transposes of dense 16-bit operands (see k_grouped_transpose.h): a one-block
// scan of the padded group lengths, then a 32x32 shared-memory tile transpose whose source row
// for each padded column is found by a binary search over the padded starts.
#include "gemm/cuda/k_grouped_transpose.h"

#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include "gemm/cuda/kernels/group_offsets.cuh"
#include "tessera/core/cuda_check.h"
#include "tessera/core/status.h"

namespace tessera::gemm_cuda {
namespace {

constexpr int kTile = 32;
// 256 threads under __launch_bounds__: unbounded, ptxas gave the scan 80 registers per thread and
// 1024 threads did not fit an SM's 64 K registers (cudaErrorLaunchOutOfResources on the H200).
constexpr int kScanThreads = 256;

// Start of group i in [0, G], clamped to [0, capacity] (the GEMM kernel's rule).
__device__ int64_t group_start(const DeviceGroupOffsets& o, int64_t i) {
  return device_group_start(o.data, o.int64, o.start_format, o.capacity, static_cast<int>(i));
}

__device__ int64_t group_len(const DeviceGroupOffsets& o, int64_t g) {
  const int64_t len = group_start(o, g + 1) - group_start(o, g);
  return len > 0 ? len : 0;
}

// One block: thread t scans a contiguous chunk of groups; q_{g+1} = q_g + roundup(len_g, 8).
__global__ void __launch_bounds__(kScanThreads) padded_starts_kernel(const DeviceGroupOffsets o,
                                                                     int64_t* q) {
  using Scan = cub::BlockScan<int64_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int64_t chunk = (o.groups + kScanThreads - 1) / kScanThreads;
  const int64_t first = threadIdx.x * chunk;
  const int64_t last = first + chunk < o.groups ? first + chunk : o.groups;
  constexpr int64_t a = kKGroupedAlignRows;
  int64_t sum = 0;
  for (int64_t g = first; g < last; ++g) sum += (group_len(o, g) + a - 1) / a * a;
  int64_t before = 0;
  Scan(temp).ExclusiveSum(sum, before);
  if (threadIdx.x == 0) q[0] = 0;
  for (int64_t g = first; g < last; ++g) {
    before += (group_len(o, g) + a - 1) / a * a;
    q[g + 1] = before;
  }
}

// Block (32, 8): padded columns [j0, j0 + 32) (blockIdx.x) x source columns [c0, c0 + 32)
// (blockIdx.y).
__global__ void k_grouped_transpose_kernel(const uint16_t* __restrict__ in, int64_t cols,
                                           const DeviceGroupOffsets o,
                                           const int64_t* __restrict__ q,
                                           uint16_t* __restrict__ out, int64_t ld_out) {
  __shared__ uint16_t tile[kTile][kTile + 1];
  __shared__ int64_t src_row[kTile];
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  if (threadIdx.y == 0) {
    const int64_t j = j0 + threadIdx.x;
    int64_t row = -1;
    if (j < q[o.groups]) {
      int64_t lo = 0, hi = o.groups - 1;  // largest g with q[g] <= j
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (q[mid] <= j) lo = mid;
        else hi = mid - 1;
      }
      const int64_t local = j - q[lo];
      if (local < group_len(o, lo)) row = group_start(o, lo) + local;
    }
    src_row[threadIdx.x] = row;
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t row = src_row[i], c = c0 + threadIdx.x;
    tile[i][threadIdx.x] = row >= 0 && c < cols ? in[row * cols + c] : uint16_t{0};
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t c = c0 + i, j = j0 + threadIdx.x;  // out row c, column j
    if (c < cols && j < ld_out) out[c * ld_out + j] = tile[threadIdx.x][i];
  }
}

}  // namespace

void k_grouped_padded_starts(const DeviceGroupOffsets& offsets, int64_t* padded_starts,
                             void* stream) {
  padded_starts_kernel<<<1, kScanThreads, 0, static_cast<cudaStream_t>(stream)>>>(offsets,
                                                                                  padded_starts);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void k_grouped_transpose_16bit(const void* in, int64_t cols, const DeviceGroupOffsets& offsets,
                               const int64_t* padded_starts, void* out, int64_t ld_out,
                               void* stream) {
  if (cols == 0 || ld_out == 0) return;
  TESSERA_CHECK_STATUS((cols + kTile - 1) / kTile <= 65535, Status::kOutOfRange,
                       "K-grouped transpose: ", cols, " columns past the grid limit");
  const dim3 grid(static_cast<unsigned>((ld_out + kTile - 1) / kTile),
                  static_cast<unsigned>((cols + kTile - 1) / kTile));
  k_grouped_transpose_kernel<<<grid, dim3(kTile, 8), 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint16_t*>(in), cols, offsets, padded_starts,
      static_cast<uint16_t*>(out), ld_out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::gemm_cuda
