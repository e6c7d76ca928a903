// CUDA part of the weight layout: the batched byte transpose (the 16-byte tiled kernel of the GEMM where the sizes
// allow it, else one thread per byte: the small E8M0 scale matrices).
#include <cuda_runtime.h>

#include "gemm/cuda/expand_operand.h"
#include "gemm/cuda/transpose_16bit.h"
#include "nn/weight_layout.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/half.h"

namespace tessera::nn::detail::cuda {
namespace {

__global__ void transpose_bytes_kernel(const uint8_t* in, uint8_t* out, int64_t rows,
                                       int64_t cols) {
  const int64_t b = blockIdx.y;
  const int64_t n = rows * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    out[b * n + c * rows + r] = in[b * n + i];
  }
}

}  // namespace

void transpose_bytes(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
                     Stream stream) {
  const auto aligned4 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
  if (rows % 4 == 0 && cols % 4 == 0 && aligned4(in) && aligned4(out) && batch <= 65535) {
    gemm_cuda::transpose_8bit(in, out, batch, rows, cols, rows, rows, stream.handle,
                              cols * rows);
    return;
  }
  TESSERA_CHECK_STATUS(batch <= 65535, Status::kOutOfRange, "transpose_bytes: batch ", batch,
                       " past the grid limit");
  const int64_t n = rows * cols;
  const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 1024 ? n / 256 + 1 : 1024);
  transpose_bytes_kernel<<<dim3(blocks, static_cast<unsigned>(batch)), 256, 0,
                           stream.as<cudaStream_t>()>>>(static_cast<const uint8_t*>(in),
                                                        static_cast<uint8_t*>(out), rows, cols);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void expand_rowwise(const QuantizedTensorView& q, const TensorView& out, Stream stream) {
  gemm_cuda::ExpandSource src;
  src.codes = q.data.data;
  src.scales = q.scale_inv.data;
  src.geometry = scale_geometry(q.config, q.rows, q.cols, false);
  src.rows = q.rows;
  src.cols = q.cols;
  src.element = q.config.element;
  gemm_cuda::expand_to_bf16(src, out.data, q.cols, stream.handle);
}

}  // namespace tessera::nn::detail::cuda
