// CUDA splits → offsets: one single-block kernel (cub::BlockScan) per batch of up to
// kScanOutputsPerLaunch outputs. It walks the splits tile by tile carrying the running total,
// so any N works; validation goes into an optional device error flag, never back to the host.
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "tessera/core/cuda_check.h"
#include "tessera/scan/splits_to_offsets.h"

namespace tessera::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kItemsLarge = 8;  // splits per thread and tile when N > kThreads
constexpr int64_t kSaturated = INT64_MAX;   // the scan saturates here (reported as overflow)

struct ScanOutputParams {
  void* data;
  int64_t stride;
  int64_t max_scan;  // largest scan value whose product with stride fits the dtype
  int32_t is_int64;
  int32_t leading;   // 1: out[0] = 0 and out[i + 1] = stride · scan[i]
  int32_t padded;    // 1: reads the scan of roundup(s, align)
};

struct ScanParams {
  const void* splits;  // (n) int32 or int64
  int64_t n;
  int64_t align;        // > 1: a second scan of roundup(s, align) for outputs with `padded`
  int64_t total_bound;  // -1: none
  int32_t* error_flag;  // nullable
  int32_t splits_is_int64;
  int32_t num_outputs;
  ScanOutputParams out[kScanOutputsPerLaunch];
};

// a + b for a, b in [0, 2^63 - 1], saturating at 2^63 - 1 (associative on that range).
struct SaturatingAdd {
  __device__ __forceinline__ int64_t operator()(int64_t a, int64_t b) const {
    const uint64_t r = static_cast<uint64_t>(a) + static_cast<uint64_t>(b);
    return r > static_cast<uint64_t>(kSaturated) ? kSaturated : static_cast<int64_t>(r);
  }
};

// Carries the running total between tiles; called by the first warp with each tile's total.
struct RunningPrefix {
  int64_t running = 0;
  __device__ __forceinline__ int64_t operator()(int64_t tile_total) {
    const int64_t prefix = running;
    running = SaturatingAdd{}(running, tile_total);
    return prefix;
  }
};

__device__ __forceinline__ int64_t round_up_saturating(int64_t v, int64_t align) {
  const auto a = static_cast<uint64_t>(align);
  const uint64_t r = static_cast<uint64_t>(v) + (a - 1);
  const uint64_t up = (a & (a - 1)) == 0 ? r & ~(a - 1) : r - r % a;  // powers of two: a mask
  return up > static_cast<uint64_t>(kSaturated) ? kSaturated : static_cast<int64_t>(up);
}

__device__ __forceinline__ void store_output(const ScanOutputParams& o, int64_t i, int64_t v) {
  // Wrapping multiply: values past max_scan are flagged, never undefined behaviour.
  const uint64_t prod = static_cast<uint64_t>(o.stride) * static_cast<uint64_t>(v);
  if (o.is_int64) {
    static_cast<int64_t*>(o.data)[i + o.leading] = static_cast<int64_t>(prod);
  } else {
    static_cast<int32_t*>(o.data)[i + o.leading] = static_cast<int32_t>(prod);
  }
}

// kItems = 1: one split per thread, no staging (N <= kThreads). kItems > 1: tiles of
// kThreads · kItems splits, loaded and stored striped (coalesced) through shared memory and
// scanned blocked (thread t owns splits [t·kItems, (t+1)·kItems) of the tile).
template <int kItems>
__global__ void __launch_bounds__(kThreads)
    splits_to_offsets_kernel(const __grid_constant__ ScanParams p) {
  constexpr int kTile = kThreads * kItems;
  constexpr bool kStaged = kItems > 1;
  using BlockScan = cub::BlockScan<int64_t, kThreads>;
  __shared__ typename BlockScan::TempStorage scan_storage;
  __shared__ int64_t tile[kStaged ? kTile : 1];         // splits, then their inclusive scan
  __shared__ int64_t tile_padded[kStaged ? kTile : 1];  // the scan of roundup(s, align)
  const int tid = static_cast<int>(threadIdx.x);
  const bool with_padded = p.align > 1;

  if (tid == 0) {
    for (int k = 0; k < p.num_outputs; ++k) {
      if (p.out[k].leading) store_output(p.out[k], -1, 0);
    }
  }
  RunningPrefix prefix, prefix_padded;
  bool negative = false;
  for (int64_t base = 0; base < p.n; base += kTile) {
    const int tile_n = static_cast<int>(p.n - base < kTile ? p.n - base : kTile);
    int64_t items[kItems];
    int64_t padded[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {  // striped loads; a negative split counts as 0
      int64_t v = 0;
      if (j * kThreads + tid < tile_n) {
        const int64_t i = base + j * kThreads + tid;
        v = p.splits_is_int64 ? static_cast<const int64_t*>(p.splits)[i]
                              : static_cast<const int32_t*>(p.splits)[i];
      }
      negative |= v < 0;
      items[j] = v < 0 ? 0 : v;
      if constexpr (kStaged) tile[j * kThreads + tid] = items[j];
    }
    if constexpr (kStaged) {
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kItems; ++j) items[j] = tile[tid * kItems + j];
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      padded[j] = with_padded ? round_up_saturating(items[j], p.align) : 0;
    }
    BlockScan(scan_storage).InclusiveScan(items, items, SaturatingAdd{}, prefix);
    if (with_padded) {
      __syncthreads();  // scan_storage is reused
      BlockScan(scan_storage).InclusiveScan(padded, padded, SaturatingAdd{}, prefix_padded);
    }
    if constexpr (kStaged) {
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        tile[tid * kItems + j] = items[j];
        if (with_padded) tile_padded[tid * kItems + j] = padded[j];
      }
      __syncthreads();
      // Striped (coalesced) stores of every output, live entries only.
      for (int k = 0; k < p.num_outputs; ++k) {
        const ScanOutputParams& o = p.out[k];
        for (int idx = tid; idx < tile_n; idx += kThreads) {
          store_output(o, base + idx, o.padded ? tile_padded[idx] : tile[idx]);
        }
      }
      __syncthreads();  // the next tile overwrites `tile`
    } else {
      if (tid < tile_n) {
        for (int k = 0; k < p.num_outputs; ++k) {
          store_output(p.out[k], base + tid, p.out[k].padded ? padded[0] : items[0]);
        }
      }
      if (base + kTile < p.n) __syncthreads();  // scan_storage is reused by the next tile
    }
  }

  negative = __syncthreads_or(negative);
  if (tid != 0 || p.error_flag == nullptr) return;
  // Thread 0 is in the first warp, so its prefix functors hold the totals.
  const int64_t total = prefix.running;
  const int64_t total_padded = prefix_padded.running;
  int32_t bits = negative ? static_cast<int32_t>(ScanError::kNegativeSplit) : 0;
  if (p.total_bound >= 0 && total > p.total_bound) {
    bits |= static_cast<int32_t>(ScanError::kTotalPastBound);
  }
  bool overflow = total == kSaturated || (with_padded && total_padded == kSaturated);
  for (int k = 0; k < p.num_outputs; ++k) {
    overflow |= (p.out[k].padded ? total_padded : total) > p.out[k].max_scan;
  }
  if (overflow) bits |= static_cast<int32_t>(ScanError::kOverflow);
  if (bits != 0) atomicOr(p.error_flag, bits);
}

}  // namespace

void splits_to_offsets_cuda(const TensorView& splits, std::span<const OffsetsSpec> specs,
                            std::span<const TensorView> outputs, std::span<const int64_t> max_scan,
                            const ScanOptions& options, Stream stream) {
  ScanParams p{};
  p.splits = splits.data;
  p.n = splits.shape[0];
  p.align = 1;
  p.total_bound = options.total_bound;
  p.error_flag = options.error_flag;
  p.splits_is_int64 = splits.dtype == DType::kInt64 ? 1 : 0;
  p.num_outputs = static_cast<int32_t>(specs.size());
  TESSERA_CHECK_STATUS(specs.size() <= kScanOutputsPerLaunch, Status::kInternal,
                       "splits_to_offsets_cuda: batch of ", specs.size(), " outputs");
  for (size_t k = 0; k < specs.size(); ++k) {
    ScanOutputParams& o = p.out[k];
    o.data = outputs[k].data;
    o.stride = specs[k].stride;
    o.max_scan = max_scan[k];
    o.is_int64 = specs[k].dtype == DType::kInt64 ? 1 : 0;
    o.leading = specs[k].leading_zero ? 1 : 0;
    o.padded = specs[k].align > 1 ? 1 : 0;
    if (specs[k].align > 1) {
      TESSERA_CHECK_STATUS(p.align == 1 || p.align == specs[k].align, Status::kInternal,
                           "splits_to_offsets_cuda: two aligns in one batch");
      p.align = specs[k].align;
    }
  }
  int current = -1;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != splits.device.index) TESSERA_CUDA_CHECK(cudaSetDevice(splits.device.index));
  auto s = stream.as<cudaStream_t>();
  if (p.n <= kThreads) {
    splits_to_offsets_kernel<1><<<1, kThreads, 0, s>>>(p);
  } else {
    splits_to_offsets_kernel<kItemsLarge><<<1, kThreads, 0, s>>>(p);
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail
