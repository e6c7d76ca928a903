// CUDA kernels of the nn row ops (row_ops.h): per-group bias gradient and SwiGLU forward /
// backward on float32 / bfloat16 / float16 rows, FP32 arithmetic. Group offsets are read on the
// device (group_rows.h); nothing synchronizes.
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "nn/moe_row_io.cuh"
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

// SwiGLU rows: one warp per row (kThreads / 32 rows a CTA). Lane l takes the row's chunks of
// kVec elements l, l + 32, ..., read and written by the MoE row kernels' chunk I/O (16-byte
// accesses when `vec`: f a multiple of kVec and the buffers 16-byte aligned; element by element
// otherwise). Every load of a row is issued before its group is looked up, so the lookup's
// latency hides under them. Each element's arithmetic is the CPU loop's (row_ops.cpp); dprobs
// sums each lane's products in column order, then the 32 lanes by a butterfly (deterministic;
// not the CPU's double sum).
constexpr int kRowsPerCta = kThreads / 32;
namespace rows = ::tessera::detail::moe::rows;
using rows::kVec;
using rows::load_chunk;
using rows::store_chunk;

template <class H>
__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(const H* h, const float* probs,
                                                                  GroupOffsets groups, int64_t f,
                                                                  bool vec, H* a) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t r = int64_t{blockIdx.x} * kRowsPerCta + threadIdx.x / 32;
  if (r >= groups.rows) return;
  const H* gate = h + r * 2 * f;
  const float pr = probs ? probs[r] : 1.0f;
  const bool live = groups.group_of(r) >= 0;
  const float p = live ? pr : 0.0f;
  for (int64_t c = int64_t{lane} * kVec; c < f; c += 32 * kVec) {
    float g[kVec], u[kVec], out[kVec];
    load_chunk(gate, c, f, vec, g);
    load_chunk(gate + f, c, f, vec, u);
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = live ? g[i] / (1.0f + expf(-g[i])) * u[i] * p : 0.0f;
    store_chunk(a + r * f, c, f, vec, out);
  }
}

template <class H>
__global__ void __launch_bounds__(kThreads) swiglu_backward_kernel(
    const H* h, const float* probs, const H* da, GroupOffsets groups, int64_t f, bool vec, H* dh,
    float* dprobs) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t r = int64_t{blockIdx.x} * kRowsPerCta + threadIdx.x / 32;
  if (r >= groups.rows) return;  // warp-uniform: a whole warp is one row
  const H* gate = h + r * 2 * f;
  const float pr = probs ? probs[r] : 1.0f;
  const bool live = groups.group_of(r) >= 0;
  const float p = live ? pr : 0.0f;
  float dp = 0.0f;
  for (int64_t c = int64_t{lane} * kVec; c < f; c += 32 * kVec) {
    float g[kVec], u[kVec], dv[kVec], dg[kVec], du[kVec];
    load_chunk(gate, c, f, vec, g);
    load_chunk(gate + f, c, f, vec, u);
    load_chunk(da + r * f, c, f, vec, dv);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float sig = 1.0f / (1.0f + expf(-g[i]));
      const float s = g[i] * sig, d = live ? dv[i] : 0.0f;
      dp += d * s * u[i];
      dg[i] = d * p * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
      du[i] = d * p * s;
    }
    store_chunk(dh + r * 2 * f, c, f, vec, dg);
    store_chunk(dh + r * 2 * f + f, c, f, vec, du);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) dp += __shfl_xor_sync(0xffffffffu, dp, o);
  if (lane == 0 && dprobs) dprobs[r] = live ? dp : 0.0f;
}

// Whether the SwiGLU kernels may read and write rows of f elements a whole chunk at a time.
bool swiglu_vec(int64_t f, std::initializer_list<const void*> buffers) {
  if (f % kVec != 0) return false;
  for (const void* b : buffers)
    if (!rows::aligned16(b)) return false;
  return true;
}

unsigned swiglu_grid(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerCta - 1) / kRowsPerCta);
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
    const int64_t f = a.shape[1];
    swiglu_forward_kernel<<<swiglu_grid(groups.rows), kThreads, 0, stream.as<cudaStream_t>()>>>(
        h.as<const H>(), probs.as<const float>(), groups, f,
        swiglu_vec(f, {h.data, a.data}), a.as<H>());
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
    const int64_t f = da.shape[1];
    swiglu_backward_kernel<<<swiglu_grid(groups.rows), kThreads, 0, stream.as<cudaStream_t>()>>>(
        h.as<const H>(), probs.as<const float>(), da.as<const H>(), groups, f,
        swiglu_vec(f, {h.data, da.data, dh.data}), dh.as<H>(), dprobs.as<float>());
  });
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::nn::detail::cuda
