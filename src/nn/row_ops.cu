// CUDA kernels of the nn row ops (row_ops.h): per-group bias gradient and SwiGLU forward /
// backward on the padded layout. Group metadata is read on the device; nothing synchronizes.
#include <cuda_runtime.h>

#include "nn/row_ops.h"
#include "tessera/core/cuda_check.h"

namespace tessera::nn::detail::cuda {
namespace {

constexpr int kThreads = 256;

// Whether padded row r is a live row of its group (binary search of padded_offsets).
__device__ bool is_live_row(int64_t r, const int64_t* offsets, const int64_t* padded, int64_t g_n) {
  int64_t lo = 0, hi = g_n;  // find g with padded[g] <= r < padded[g+1]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (padded[mid] <= r) lo = mid; else hi = mid;
  }
  if (r < padded[lo] || r >= padded[lo + 1]) return false;
  return r - padded[lo] < offsets[lo + 1] - offsets[lo];
}

__global__ void row_sum_kernel(const float* dy, int64_t n, int64_t rows, const int64_t* padded,
                               float* db, bool accumulate) {
  const int64_t g = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= n) return;
  const int64_t end = padded[g + 1] < rows ? padded[g + 1] : rows;
  float acc = 0.0f;
  for (int64_t r = padded[g]; r < end; ++r) acc += dy[r * n + c];
  db[g * n + c] = accumulate ? db[g * n + c] + acc : acc;
}

__global__ void swiglu_forward_kernel(const float* h, const float* probs, const int64_t* offsets,
                                      const int64_t* padded, int64_t groups, int64_t rows,
                                      int64_t f, float* a) {
  const int64_t r = blockIdx.x;
  if (r >= rows) return;
  const bool live = is_live_row(r, offsets, padded, groups);
  const float p = live ? (probs ? probs[r] : 1.0f) : 0.0f;
  for (int64_t c = threadIdx.x; c < f; c += blockDim.x) {
    const float g = h[r * 2 * f + c], u = h[r * 2 * f + f + c];
    a[r * f + c] = g / (1.0f + expf(-g)) * u * p;
  }
}

__global__ void swiglu_backward_kernel(const float* h, const float* probs, const float* da,
                                       const int64_t* offsets, const int64_t* padded,
                                       int64_t groups, int64_t rows, int64_t f, float* dh,
                                       float* dprobs) {
  __shared__ float partial[kThreads];
  const int64_t r = blockIdx.x;
  if (r >= rows) return;
  const bool live = is_live_row(r, offsets, padded, groups);
  const float p = live ? (probs ? probs[r] : 1.0f) : 0.0f;
  float dp = 0.0f;
  for (int64_t c = threadIdx.x; c < f; c += blockDim.x) {
    const float g = h[r * 2 * f + c], u = h[r * 2 * f + f + c];
    const float sig = 1.0f / (1.0f + expf(-g));
    const float s = g * sig, d = da[r * f + c];
    dp += d * s * u;
    dh[r * 2 * f + c] = d * p * u * sig * (1.0f + g * (1.0f - sig));
    dh[r * 2 * f + f + c] = d * p * s;
  }
  partial[threadIdx.x] = dp;
  __syncthreads();
  for (int step = kThreads / 2; step > 0; step /= 2) {
    if (static_cast<int>(threadIdx.x) < step) partial[threadIdx.x] += partial[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0 && dprobs) dprobs[r] = live ? partial[0] : 0.0f;
}

}  // namespace

void grouped_row_sum(const TensorView& dy, const GroupLayout& layout, const TensorView& db,
                     bool accumulate, Stream stream) {
  const int64_t n = dy.shape[1];
  if (n == 0 || layout.num_groups == 0) return;
  TESSERA_CUDA_CHECK(cudaSetDevice(dy.device.index));
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                  static_cast<unsigned>(layout.num_groups));
  row_sum_kernel<<<grid, kThreads, 0, stream.as<cudaStream_t>()>>>(
      dy.as<const float>(), n, layout.padded_rows, layout.padded_offsets.as<const int64_t>(),
      db.as<float>(), accumulate);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void swiglu_forward(const TensorView& h, const TensorView& probs, const GroupLayout& layout,
                    const TensorView& a, Stream stream) {
  if (layout.padded_rows == 0) return;
  TESSERA_CUDA_CHECK(cudaSetDevice(h.device.index));
  swiglu_forward_kernel<<<static_cast<unsigned>(layout.padded_rows), kThreads, 0,
                          stream.as<cudaStream_t>()>>>(
      h.as<const float>(), probs.as<const float>(), layout.offsets.as<const int64_t>(),
      layout.padded_offsets.as<const int64_t>(), layout.num_groups, layout.padded_rows,
      a.shape[1], a.as<float>());
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(const TensorView& h, const TensorView& probs, const TensorView& da,
                     const GroupLayout& layout, const TensorView& dh, const TensorView& dprobs,
                     Stream stream) {
  if (layout.padded_rows == 0) return;
  TESSERA_CUDA_CHECK(cudaSetDevice(h.device.index));
  swiglu_backward_kernel<<<static_cast<unsigned>(layout.padded_rows), kThreads, 0,
                           stream.as<cudaStream_t>()>>>(
      h.as<const float>(), probs.as<const float>(), da.as<const float>(),
      layout.offsets.as<const int64_t>(), layout.padded_offsets.as<const int64_t>(),
      layout.num_groups, layout.padded_rows, da.shape[1], dh.as<float>(), dprobs.as<float>());
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::nn::detail::cuda
