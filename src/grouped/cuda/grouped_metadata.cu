// CUDA kernel filling the per-member metadata that is not a scan of the split sizes: first_dims
// (the splits widened to int64) and constant-slot scale offsets (g × step). One launch, async.
#include <cuda_runtime.h>

#include "grouped/grouped_backend.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"

namespace tessera::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxArange = 2;

struct ArangeArgs {
  int64_t* out[kMaxArange];
  int64_t step[kMaxArange];
  int count;
};

template <class In>
__global__ void grouped_fill_metadata_kernel(const In* splits, int64_t n, int64_t* first_dims,
                                             ArangeArgs arange) {
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g <= n;
       g += int64_t{gridDim.x} * blockDim.x) {
    if (g < n && first_dims != nullptr) first_dims[g] = static_cast<int64_t>(splits[g]);
    for (int k = 0; k < arange.count; ++k) arange.out[k][g] = g * arange.step[k];
  }
}

}  // namespace

void grouped_fill_metadata_cuda(const TensorView& splits, int64_t* first_dims,
                                std::span<int64_t* const> arange_out,
                                std::span<const int64_t> arange_step, Stream stream) {
  TESSERA_CHECK_STATUS(arange_out.size() <= kMaxArange && arange_out.size() == arange_step.size(),
                       Status::kInternal, "grouped_fill_metadata_cuda: ", arange_out.size(),
                       " outputs (at most ", kMaxArange, ")");
  ArangeArgs args{};
  args.count = static_cast<int>(arange_out.size());
  for (size_t k = 0; k < arange_out.size(); ++k) {
    args.out[k] = arange_out[k];
    args.step[k] = arange_step[k];
  }
  const int64_t n = splits.shape[0];
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads) / kThreads, 1024));
  int previous = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&previous));
  TESSERA_CUDA_CHECK(cudaSetDevice(splits.device.index));
  dispatch_index_dtype(splits.dtype, "grouped: splits", [&](auto tag) {
    using In = typename decltype(tag)::type;
    grouped_fill_metadata_kernel<In><<<blocks, kThreads, 0, stream.as<cudaStream_t>()>>>(
        splits.as<const In>(), n, first_dims, args);
  });
  const cudaError_t launch = cudaGetLastError();
  (void)cudaSetDevice(previous);
  TESSERA_CHECK_STATUS(launch == cudaSuccess, Status::kDeviceError,
                       "grouped_fill_metadata_kernel launch: ", cudaGetErrorString(launch));
}

}  // namespace tessera::detail
