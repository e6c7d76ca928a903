// CUDA group starts and padded starts: one block scans the padded group sizes in chunks (and
// the launch's other blocks zero the range the caller asks for).
#include <algorithm>

#include <cub/block/block_scan.cuh>

#include "nn/step_layout.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/status.h"

namespace tessera::nn::detail::cuda {
namespace {

constexpr int kThreads = 256;

// Block 0 scans the group sizes; the other blocks (if any) zero `zero` (16-byte aligned) for the
// step's next kernels, in the same launch.
__global__ void __launch_bounds__(kThreads)
    group_starts_kernel(GroupOffsets groups, int64_t align, int64_t* starts, int64_t* padded,
                        uint8_t* zero, int64_t zero_bytes) {
  if (blockIdx.x > 0) {
    const int64_t words = zero_bytes / 16;
    const int64_t stride = int64_t{gridDim.x - 1} * kThreads;
    for (int64_t i = int64_t{blockIdx.x - 1} * kThreads + threadIdx.x; i < words; i += stride)
      reinterpret_cast<uint4*>(zero)[i] = make_uint4(0, 0, 0, 0);
    if (blockIdx.x == 1 && threadIdx.x < zero_bytes % 16) zero[words * 16 + threadIdx.x] = 0;
    return;
  }
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
                  ZeroRange zero, Stream stream) {
  TESSERA_CHECK(reinterpret_cast<uintptr_t>(zero.data) % 16 == 0 && zero.bytes >= 0,
                "group_starts: the range to zero must start on 16 bytes");
  // Zeroing blocks: 64 KiB each (16 B per thread per pass), at most 128.
  const int64_t zero_blocks = std::min<int64_t>((zero.bytes + 65535) / 65536, 128);
  group_starts_kernel<<<static_cast<unsigned>(1 + zero_blocks), kThreads, 0,
                        stream.as<cudaStream_t>()>>>(groups, align, starts, padded,
                                                     static_cast<uint8_t*>(zero.data),
                                                     zero.bytes);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::nn::detail::cuda
