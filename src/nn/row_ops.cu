// CUDA kernels of the nn row ops (row_ops.h): per-group bias gradient and SwiGLU forward /
// backward on float32 / bfloat16 / float16 rows, FP32 arithmetic. Group offsets are read on the
// device (group_rows.h); nothing synchronizes.
#include <cuda_runtime.h>

#include "nn/row_ops.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/half.h"

namespace tessera::nn::detail::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per column of group g (blockIdx.y); FP32 sums down the group's rows.
template <class In, class Out>
__global__ void row_sum_kernel(const In* dy, int64_t n, GroupOffsets groups, Out* db,
                               bool accumulate) {
  const int64_t g = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= n) return;
  float acc = 0.0f;
  const int64_t end = groups.end(g);
  for (int64_t r = groups.begin(g); r < end; ++r) acc += to_float(dy[r * n + c]);
  if (accumulate) acc += to_float(db[g * n + c]);
  db[g * n + c] = from_float<Out>(acc);
}

template <class H>
__global__ void swiglu_forward_kernel(const H* h, const float* probs, GroupOffsets groups,
                                      int64_t f, H* a) {
  const int64_t r = blockIdx.x;
  const bool live = groups.group_of(r) >= 0;
  const float p = live ? (probs ? to_float(probs[r]) : 1.0f) : 0.0f;
  for (int64_t c = threadIdx.x; c < f; c += blockDim.x) {
    const float g = to_float(h[r * 2 * f + c]), u = to_float(h[r * 2 * f + f + c]);
    a[r * f + c] = from_float<H>(live ? g / (1.0f + expf(-g)) * u * p : 0.0f);
  }
}

template <class H>
__global__ void swiglu_backward_kernel(const H* h, const float* probs, const H* da,
                                       GroupOffsets groups, int64_t f, H* dh, float* dprobs) {
  __shared__ float partial[kThreads];
  const int64_t r = blockIdx.x;
  const bool live = groups.group_of(r) >= 0;
  const float p = live ? (probs ? to_float(probs[r]) : 1.0f) : 0.0f;
  float dp = 0.0f;
  for (int64_t c = threadIdx.x; c < f; c += blockDim.x) {
    const float g = to_float(h[r * 2 * f + c]), u = to_float(h[r * 2 * f + f + c]);
    const float sig = 1.0f / (1.0f + expf(-g));
    const float s = g * sig, d = live ? to_float(da[r * f + c]) : 0.0f;
    dp += d * s * u;
    dh[r * 2 * f + c] = from_float<H>(d * p * u * sig * (1.0f + g * (1.0f - sig)));
    dh[r * 2 * f + f + c] = from_float<H>(d * p * s);
  }
  partial[threadIdx.x] = dp;
  __syncthreads();
  for (int step = kThreads / 2; step > 0; step /= 2) {
    if (static_cast<int>(threadIdx.x) < step) partial[threadIdx.x] += partial[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0 && dprobs) dprobs[r] = live ? partial[0] : 0.0f;
}

template <class F>
decltype(auto) dispatch(const TensorView& v, const char* arg, F&& f) {
  return dispatch_float_input(v.dtype, arg, std::forward<F>(f));
}

// probs / dprobs are float32 (the step casts other dtypes first): one instantiation per
// activation dtype.
void check_float32(const TensorView& v, const char* arg) {
  TESSERA_CHECK_STATUS(v.data == nullptr || v.dtype == DType::kFloat32, Status::kDTypeMismatch,
                       arg, ": expected float32, got ", dtype_name(v.dtype));
}

}  // namespace

void grouped_row_sum(const TensorView& dy, const GroupOffsets& groups, const TensorView& db,
                     bool accumulate, Stream stream) {
  const int64_t n = dy.shape[1];
  if (n == 0 || groups.groups == 0) return;
  TESSERA_CUDA_CHECK(cudaSetDevice(dy.device.index));
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                  static_cast<unsigned>(groups.groups));
  // db is float32 or dy's dtype (the caller's bias dtype): 6 instantiations, not 9.
  TESSERA_CHECK_STATUS(db.dtype == DType::kFloat32 || db.dtype == dy.dtype, Status::kDTypeMismatch,
                       "grouped_row_sum: db (", dtype_name(db.dtype), ") must be float32 or dy's ",
                       dtype_name(dy.dtype));
  dispatch(dy, "dy", [&](auto in) {
    using In = typename decltype(in)::type;
    if (db.dtype == DType::kFloat32) {
      row_sum_kernel<<<grid, kThreads, 0, stream.as<cudaStream_t>()>>>(
          dy.as<const In>(), n, groups, db.as<float>(), accumulate);
    } else {
      row_sum_kernel<<<grid, kThreads, 0, stream.as<cudaStream_t>()>>>(
          dy.as<const In>(), n, groups, db.as<In>(), accumulate);
    }
  });
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void swiglu_forward(const TensorView& h, const TensorView& probs, const GroupOffsets& groups,
                    const TensorView& a, Stream stream) {
  if (groups.rows == 0) return;
  TESSERA_CUDA_CHECK(cudaSetDevice(h.device.index));
  TESSERA_CHECK_STATUS(h.dtype == a.dtype, Status::kDTypeMismatch, "swiglu_forward: h (",
                       dtype_name(h.dtype), ") and a (", dtype_name(a.dtype), ") must share a dtype");
  check_float32(probs, "swiglu_forward: probs");
  dispatch(h, "h", [&](auto ht) {
    using H = typename decltype(ht)::type;
    swiglu_forward_kernel<<<static_cast<unsigned>(groups.rows), kThreads, 0,
                            stream.as<cudaStream_t>()>>>(
        h.as<const H>(), probs.as<const float>(), groups, a.shape[1], a.as<H>());
  });
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(const TensorView& h, const TensorView& probs, const TensorView& da,
                     const GroupOffsets& groups, const TensorView& dh, const TensorView& dprobs,
                     Stream stream) {
  if (groups.rows == 0) return;
  TESSERA_CUDA_CHECK(cudaSetDevice(h.device.index));
  TESSERA_CHECK_STATUS(da.dtype == dh.dtype, Status::kDTypeMismatch, "swiglu_backward: da (",
                       dtype_name(da.dtype), ") and dh (", dtype_name(dh.dtype),
                       ") must share a dtype");
  TESSERA_CHECK_STATUS(h.dtype == da.dtype, Status::kDTypeMismatch, "swiglu_backward: h (",
                       dtype_name(h.dtype), ") and da (", dtype_name(da.dtype),
                       ") must share a dtype");
  check_float32(probs, "swiglu_backward: probs");
  check_float32(dprobs, "swiglu_backward: dprobs");
  dispatch(h, "h", [&](auto ht) {
    using H = typename decltype(ht)::type;
    swiglu_backward_kernel<<<static_cast<unsigned>(groups.rows), kThreads, 0,
                             stream.as<cudaStream_t>()>>>(
        h.as<const H>(), probs.as<const float>(), da.as<const H>(), groups, da.shape[1],
        dh.as<H>(), dprobs.as<float>());
  });
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::nn::detail::cuda
