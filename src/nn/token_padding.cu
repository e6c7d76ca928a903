// CUDA token padding: one row-regrouping kernel serves pad and unpad. A warp owns a destination
// row, finds its group by binary search in the (N+1) offsets, then copies the source row or
// writes zeros with the widest vector the row size and pointers allow. The grid covers the
// destination capacity and stops at the live end read on the device: no host sync.
#include <cstdint>

#include "tessera/core/cuda_check.h"
#include "tessera/nn/token_padding.h"

namespace tessera::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kMaxBlocks = 4096;

// Index g of the last offset <= row (offsets[0] = 0 <= row < offsets[n]); with empty groups,
// the non-empty one that holds the row.
__device__ __forceinline__ int64_t group_of(const int64_t* offsets, int64_t num_groups,
                                            int64_t row) {
  int64_t lo = 0, hi = num_groups;  // invariant: offsets[lo] <= row < offsets[hi]
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (offsets[mid] <= row) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

template <class V>
__global__ void __launch_bounds__(kThreads) regroup_rows_kernel(const RegroupRows r) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warp = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int64_t num_warps = int64_t{gridDim.x} * kWarpsPerBlock;
  const int64_t live_end = r.dst_offsets[r.num_groups];
  const int64_t rows = live_end < r.dst_rows && !r.zero_tail ? live_end : r.dst_rows;
  const int64_t words = r.row_bytes / static_cast<int64_t>(sizeof(V));
  for (int64_t row = warp; row < rows; row += num_warps) {
    const int64_t g = group_of(r.dst_offsets, r.num_groups, row);
    const int64_t local = row - r.dst_offsets[g];
    const int64_t src_row = r.src_offsets[g] + local;
    const bool inside = row < live_end && local < r.src_offsets[g + 1] - r.src_offsets[g] &&
                        src_row >= 0 && src_row < r.src_rows;
    V* out = reinterpret_cast<V*>(static_cast<char*>(r.dst) + row * r.row_bytes);
    if (inside) {
      const V* in = reinterpret_cast<const V*>(static_cast<const char*>(r.src) +
                                               src_row * r.row_bytes);
      for (int64_t w = lane; w < words; w += 32) out[w] = in[w];
    } else {
      const V zero{};
      for (int64_t w = lane; w < words; w += 32) out[w] = zero;
    }
  }
}

}  // namespace

void regroup_rows_cuda(const RegroupRows& r, Device device, Stream stream) {
  if (r.dst_rows == 0 || r.row_bytes == 0) return;
  int current = -1;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
  const int64_t blocks_needed = (r.dst_rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int grid = static_cast<int>(blocks_needed < kMaxBlocks ? blocks_needed : kMaxBlocks);
  auto s = stream.as<cudaStream_t>();
  // The widest word dividing the row size and both base addresses (rows are >= 2 bytes apart).
  const uint64_t align_bits = static_cast<uint64_t>(r.row_bytes) |
                              reinterpret_cast<uintptr_t>(r.src) |
                              reinterpret_cast<uintptr_t>(r.dst);
  if (align_bits % 16 == 0) {
    regroup_rows_kernel<uint4><<<grid, kThreads, 0, s>>>(r);
  } else if (align_bits % 8 == 0) {
    regroup_rows_kernel<uint2><<<grid, kThreads, 0, s>>>(r);
  } else if (align_bits % 4 == 0) {
    regroup_rows_kernel<uint32_t><<<grid, kThreads, 0, s>>>(r);
  } else {
    TESSERA_CHECK_STATUS(align_bits % 2 == 0, Status::kMisaligned,
                         "token padding: rows of ", r.row_bytes,
                         " bytes or base pointers not 2-byte aligned");
    regroup_rows_kernel<uint16_t><<<grid, kThreads, 0, s>>>(r);
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

void upload_async(void* dst, const void* src, int64_t bytes, Device device, Stream stream) {
  if (bytes == 0) return;
  int current = -1;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                     cudaMemcpyHostToDevice, stream.as<cudaStream_t>()));
}

}  // namespace tessera::detail
