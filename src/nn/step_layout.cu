// CUDA group starts and padded starts: one block scans the padded group sizes in chunks.
#include <cub/block/block_scan.cuh>

#include "nn/step_layout.h"
#include "tessera/core/cuda_check.h"

namespace tessera::nn::detail::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    group_starts_kernel(GroupOffsets groups, int64_t align, int64_t* starts, int64_t* padded) {
  using Scan = cub::BlockScan<int64_t, kThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int64_t carry;
  if (threadIdx.x == 0) {
    carry = 0;
    padded[0] = 0;
    starts[groups.groups] = groups.groups > 0 ? groups.end(groups.groups - 1) : 0;
  }
  __syncthreads();
  for (int64_t base = 0; base < groups.groups; base += kThreads) {
    const int64_t g = base + threadIdx.x;
    int64_t size = 0;
    if (g < groups.groups) {
      const int64_t b = groups.begin(g), e = groups.end(g);
      starts[g] = b;
      size = e > b ? (e - b + align - 1) / align * align : 0;
    }
    int64_t inclusive = 0, total = 0;
    Scan(temp).InclusiveSum(size, inclusive, total);
    if (g < groups.groups) padded[g + 1] = carry + inclusive;
    __syncthreads();
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
}

}  // namespace

void group_starts(const GroupOffsets& groups, int64_t align, int64_t* starts, int64_t* padded,
                  Stream stream) {
  group_starts_kernel<<<1, kThreads, 0, stream.as<cudaStream_t>()>>>(groups, align, starts,
                                                                      padded);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::nn::detail::cuda
