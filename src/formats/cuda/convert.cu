// CUDA bulk encode/decode: one grid-stride kernel per (input type, format) pair, sharing the
// host/device codecs of formats/codecs.h with the CPU path.
#include <cstdint>

#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/convert.h"

namespace tessera::detail {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 4096 ? (b < 1 ? 1 : b) : 4096);
}

template <class In, DType D>
__global__ void encode_kernel(const In* __restrict__ in, uint8_t* __restrict__ out, int64_t n) {
  using Traits = formats::FormatTraits<D>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = Traits::encode(to_float(in[i]));
  }
}

template <class In>
__global__ void encode_e2m1_kernel(const In* __restrict__ in, uint8_t* __restrict__ out,
                                   int64_t n) {
  const int64_t bytes = (n + 1) / 2;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < bytes;
       j += int64_t{gridDim.x} * blockDim.x) {
    const uint8_t lo = formats::encode_e2m1(to_float(in[2 * j]));
    const uint8_t hi = 2 * j + 1 < n ? formats::encode_e2m1(to_float(in[2 * j + 1])) : 0;
    out[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

template <class In, class Out>
__global__ void encode_half_kernel(const In* __restrict__ in, Out* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<Out>(to_float(in[i]));
  }
}

template <DType D>
__global__ void decode_kernel(const uint8_t* __restrict__ in, float* __restrict__ out, int64_t n) {
  using Traits = formats::FormatTraits<D>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (D == DType::kFloat4E2M1) {
      out[i] = Traits::decode(static_cast<uint8_t>((in[i / 2] >> (4 * (i % 2))) & 0xF));
    } else {
      out[i] = Traits::decode(in[i]);
    }
  }
}

template <class In>
__global__ void decode_half_kernel(const In* __restrict__ in, float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = to_float(in[i]);
  }
}

}  // namespace

void encode_cuda(const TensorView& src, const TensorView& dst, Stream stream) {
  const int64_t n = src.numel();
  if (n == 0) return;
  TESSERA_CUDA_CHECK(cudaSetDevice(src.device.index));
  auto s = stream.as<cudaStream_t>();
  const int grid = blocks_for(dst.dtype == DType::kFloat4E2M1 ? (n + 1) / 2 : n);
  dispatch_float_input(src.dtype, "encode: src", [&](auto tag) {
    using In = typename decltype(tag)::type;
    const In* in = src.as<const In>();
    switch (dst.dtype) {
      case DType::kBFloat16:
        encode_half_kernel<In, bf16><<<grid, kThreads, 0, s>>>(in, dst.as<bf16>(), n);
        break;
      case DType::kFloat16:
        encode_half_kernel<In, fp16><<<grid, kThreads, 0, s>>>(in, dst.as<fp16>(), n);
        break;
      case DType::kFloat4E2M1:
        encode_e2m1_kernel<In><<<grid, kThreads, 0, s>>>(in, dst.as<uint8_t>(), n);
        break;
      default:
        dispatch_quantized_dtype(dst.dtype, "encode: dst", [&](auto fmt) {
          encode_kernel<In, decltype(fmt)::value><<<grid, kThreads, 0, s>>>(
              in, dst.as<uint8_t>(), n);
        });
    }
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void decode_cuda(const TensorView& src, const TensorView& dst, Stream stream) {
  const int64_t n = src.numel();
  if (n == 0) return;
  TESSERA_CUDA_CHECK(cudaSetDevice(src.device.index));
  auto s = stream.as<cudaStream_t>();
  const int grid = blocks_for(n);
  float* out = dst.as<float>();
  switch (src.dtype) {
    case DType::kFloat32:
    case DType::kBFloat16:
    case DType::kFloat16:
      dispatch_float_input(src.dtype, "decode: src", [&](auto tag) {
        using In = typename decltype(tag)::type;
        decode_half_kernel<In><<<grid, kThreads, 0, s>>>(src.as<const In>(), out, n);
      });
      break;
    default:
      dispatch_quantized_dtype(src.dtype, "decode: src", [&](auto fmt) {
        decode_kernel<decltype(fmt)::value><<<grid, kThreads, 0, s>>>(src.as<const uint8_t>(),
                                                                      out, n);
      });
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail
