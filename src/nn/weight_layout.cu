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

constexpr int kColThreads = 256;  // 8 warps
constexpr int kColWarps = kColThreads / 32;
constexpr int kColCols = 64;      // columns of W_g per CTA: two per lane
constexpr int kColRows = 32;      // rows per staging step of pass 2
constexpr int kTileStride = 36;   // bytes per staged column: 4-byte aligned, few bank conflicts

// One CTA per (64 columns of W_g, g): lane l holds columns 2l and 2l + 1 (a warp reads 64
// consecutive elements of a row), the 8 warps stride the out rows, 4 rows in flight each.
// Pass 1: the columns' abs-bits maxima (NaN wins) and their scales; pass 2: the codes, 32 rows
// at a time through shared memory, then each Wᵀ row's 32 new bytes written 8 at a time.
template <class In>
__global__ void __launch_bounds__(kColThreads) member_columns_kernel(MemberColumnsArgs a) {
  __shared__ uint32_t part[kColWarps][kColCols];
  __shared__ float mult[kColCols];
  __shared__ alignas(16) uint8_t tile[kColCols][kTileStride];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t g = blockIdx.y, k0 = int64_t{blockIdx.x} * kColCols;
  const int64_t c0 = k0 + 2 * lane, c1 = c0 + 1;
  const bool ok0 = c0 < a.in, ok1 = c1 < a.in;
  const In* w = static_cast<const In*>(a.w) + g * a.out * a.in;
  uint32_t m0 = 0, m1 = 0;
#pragma unroll 4
  for (int64_t r = warp; r < a.out; r += kColWarps) {
    const In* row = w + r * a.in;
    if (ok0) m0 = max(m0, scale_rules::abs_bits(to_float(row[c0])));
    if (ok1) m1 = max(m1, scale_rules::abs_bits(to_float(row[c1])));
  }
  part[warp][2 * lane] = m0;
  part[warp][2 * lane + 1] = m1;
  __syncthreads();
  if (threadIdx.x < kColCols) {
    const int c = static_cast<int>(threadIdx.x);
    uint32_t m = part[0][c];
    for (int i = 1; i < kColWarps; ++i) m = part[i][c] > m ? part[i][c] : m;
    float sink = 0.0f;
    mult[c] = k0 + c < a.in ? moe::block_multiplier(a.quant, m, a.scale_inv, g * a.in + k0 + c)
                            : moe::block_multiplier(a.quant, 0, &sink, 0);
  }
  __syncthreads();
  const float f0 = mult[2 * lane], f1 = mult[2 * lane + 1];
  // Writer of pass 2: column wc of the CTA, bytes [8·wp, 8·wp + 8) of the 32 staged rows.
  const int wc = static_cast<int>(threadIdx.x) / 4, wp = static_cast<int>(threadIdx.x) % 4;
  const bool vec = a.out % 8 == 0 && reinterpret_cast<uintptr_t>(a.data) % 8 == 0;
  for (int64_t r0 = 0; r0 < a.out; r0 += kColRows) {
#pragma unroll
    for (int i = warp; i < kColRows; i += kColWarps) {
      const int64_t r = r0 + i;
      const bool live = r < a.out;
      const In* row = w + r * a.in;
      tile[2 * lane][i] = ok0 && live ? moe::encode_element(a.quant, __fmul_rn(to_float(row[c0]), f0))
                                      : uint8_t{0};
      tile[2 * lane + 1][i] =
          ok1 && live ? moe::encode_element(a.quant, __fmul_rn(to_float(row[c1]), f1)) : uint8_t{0};
    }
    __syncthreads();
    if (k0 + wc < a.in) {
      uint8_t* dst = a.data + (g * a.in + k0 + wc) * a.out + r0 + 8 * wp;
      const uint8_t* src = &tile[wc][8 * wp];
      if (vec && r0 + 8 * wp + 8 <= a.out) {
        const auto* s4 = reinterpret_cast<const uint32_t*>(src);
        *reinterpret_cast<uint2*>(dst) = make_uint2(s4[0], s4[1]);
      } else {
        for (int j = 0; j < 8 && r0 + 8 * wp + j < a.out; ++j) dst[j] = src[j];
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
  const dim3 grid(static_cast<unsigned>((a.in + kColCols - 1) / kColCols),
                  static_cast<unsigned>(a.groups));
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
