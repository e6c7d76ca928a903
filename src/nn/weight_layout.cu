// CUDA part of the weight layout: the per-expert columnwise quantization into Wᵀ (rowwise
// family) and the batched byte transpose (the 16-byte tiled kernel of the GEMM where the sizes
// allow it, else one thread per byte: the small E8M0 scale matrices).
#include <cuda_runtime.h>

#include "gemm/cuda/transpose_16bit.h"
#include "nn/weight_layout.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/half.h"

namespace tessera::nn::detail::cuda {
namespace {

constexpr int kColThreads = 256;           // 8 warps
constexpr int kColWarps = kColThreads / 32;

// One CTA per (32 columns of W_g, g): lane = column, warps stride the out rows. Pass 1: the
// columns' abs-bits maxima (NaN wins) and their scales; pass 2: the codes, 32 rows at a time
// through shared memory, so that each Wᵀ row gets 32 consecutive bytes per step.
template <class In>
__global__ void __launch_bounds__(kColThreads) member_columns_kernel(MemberColumnsArgs a) {
  __shared__ uint32_t part[kColWarps][32];
  __shared__ float mult[32];
  __shared__ uint8_t tile[32][33];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t g = blockIdx.y, k0 = int64_t{blockIdx.x} * 32, k = k0 + lane;
  const bool col_ok = k < a.in;
  const In* w = static_cast<const In*>(a.w) + g * a.out * a.in;
  uint32_t m = 0;
  if (col_ok) {
    for (int64_t r = warp; r < a.out; r += kColWarps) {
      const uint32_t v = scale_rules::abs_bits(to_float(w[r * a.in + k]));
      m = v > m ? v : m;
    }
  }
  part[warp][lane] = m;
  __syncthreads();
  if (warp == 0) {
    for (int i = 1; i < kColWarps; ++i) m = part[i][lane] > m ? part[i][lane] : m;
    float sink = 0.0f;
    mult[lane] = col_ok ? moe::block_multiplier(a.quant, m, a.scale_inv, g * a.in + k)
                        : moe::block_multiplier(a.quant, 0, &sink, 0);
  }
  __syncthreads();
  const int wc = static_cast<int>(threadIdx.x) / 8, wp = static_cast<int>(threadIdx.x) % 8;
  for (int64_t r0 = 0; r0 < a.out; r0 += 32) {
    for (int i = warp; i < 32; i += kColWarps) {
      const int64_t r = r0 + i;
      tile[lane][i] = col_ok && r < a.out
                          ? moe::encode_element(a.quant, __fmul_rn(to_float(w[r * a.in + k]),
                                                                   mult[lane]))
                          : uint8_t{0};
    }
    __syncthreads();
    if (k0 + wc < a.in) {
      uint8_t* row = a.data + (g * a.in + k0 + wc) * a.out;
      for (int j = 0; j < 4; ++j) {
        const int64_t r = r0 + wp * 4 + j;
        if (r < a.out) row[r] = tile[wc][wp * 4 + j];
      }
    }
    __syncthreads();
  }
}

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

void quantize_member_columns(const MemberColumnsArgs& a, Stream stream) {
  TESSERA_CHECK_STATUS(a.groups <= 65535, Status::kOutOfRange, "quantize_member_columns: ",
                       a.groups, " groups past the grid limit 65535");
  const dim3 grid(static_cast<unsigned>((a.in + 31) / 32), static_cast<unsigned>(a.groups));
  dispatch_float_input(a.w_dtype, "weight", [&](auto tag) {
    member_columns_kernel<typename decltype(tag)::type>
        <<<grid, kColThreads, 0, stream.as<cudaStream_t>()>>>(a);
    TESSERA_CUDA_CHECK(cudaGetLastError());
  });
}

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

}  // namespace tessera::nn::detail::cuda
