// NVFP4 quantization: E2M1 elements, one E4M3 scale per 1x16 block (or per 16x16 tile for
// weights), an FP32 global amax per copy; the columnwise copy is the quantization of xᵀ, optionally
// after the 16-point random Hadamard transform (along M), and stochastic rounding draws the same
// Philox bits as the CPU (element e of a copy's stream: rowwise e = r*K + k, columnwise
// e = M*K + k*M + m). Arithmetic: scale_rules (nvfp4_block_scale, nvfp4_encode_scale,
// nvfp4_clamp, e2m1_stochastic, rht16_forward's order of sums).
//
// One thread per (stripe, 16-column block) of a copy. Rowwise: lanes take consecutive blocks of a
// row (coalesced 32-byte reads); columnwise: lanes take consecutive k (for each m the warp reads
// 32 consecutive elements). A 16x16 tile reads its rows twice (amax, then encode; L1/L2 hits).
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/kernels.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/philox.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant {
namespace {

constexpr int kThreads = 256;
constexpr int kBlock = 16;

constexpr bool signs_match_rule() {
  for (int j = 0; j < 16; ++j) {
    if (rht_sign(j) != scale_rules::kRhtSigns[j]) return false;
  }
  return true;
}
static_assert(signs_match_rule(), "rht_sign must equal scale_rules::kRhtSigns");

// t = (1/4) H16 diag(s) b with scale_rules::rht16_forward's products and summation order.
__device__ __forceinline__ void rht16(float (&b)[kBlock]) {
  float t[kBlock];
#pragma unroll
  for (int i = 0; i < kBlock; ++i) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kBlock; ++j) {
      const float coef = scale_rules::hadamard_entry(i, j) * rht_sign(j);
      acc = __fadd_rn(acc, coef * b[j]);  // coef = ±1: the product is exact
    }
    t[i] = acc * 0.25f;
  }
#pragma unroll
  for (int i = 0; i < kBlock; ++i) b[i] = t[i];
}

// Row r, columns [c0, c0 + 16) of the copy (x or xᵀ), zero past `cols`; transformed when asked
// (full groups only, as the CPU).
template <class In>
__device__ __forceinline__ void load_copy_row(const Nvfp4Args& a, int64_t r, int64_t c0,
                                              int64_t cols, float (&v)[kBlock]) {
  const In* x = static_cast<const In*>(a.x);
#pragma unroll
  for (int j = 0; j < kBlock; ++j) {
    const int64_t c = c0 + j;
    float f = 0.0f;
    if (c < cols) f = load_float(a.columnwise ? x[c * a.cols + r] : x[r * a.cols + c]);
    v[j] = f;
  }
  if (a.rht && c0 + kBlock <= cols) rht16(v);
}

template <class In>
__global__ __launch_bounds__(kThreads) void nvfp4_kernel(Nvfp4Args a) {
  const int64_t rows = a.columnwise ? a.cols : a.rows;  // of the copy
  const int64_t cols = a.columnwise ? a.rows : a.cols;
  const int64_t nb = ceil_div_device(cols, kBlock), bh = a.tile16 ? kBlock : 1;
  const int64_t ns = ceil_div_device(rows, bh), row_bytes = ceil_div_device(cols, 2);
  const float s_enc =
      scale_rules::nvfp4_global_encode_scale(scale_rules::amax_from_abs_bits(*a.amax));
  for (int64_t w = blockIdx.x * int64_t{kThreads} + threadIdx.x; w < ns * nb;
       w += int64_t{gridDim.x} * kThreads) {
    const int64_t s = a.columnwise ? w % ns : w / nb, b = a.columnwise ? w / ns : w % nb;
    const int64_t r0 = s * bh, r1 = min(rows, r0 + bh), c0 = b * kBlock;
    float v[kBlock];
    uint32_t m = 0;
    for (int64_t r = r0; r < r1; ++r) {
      load_copy_row<In>(a, r, c0, cols, v);
#pragma unroll
      for (int j = 0; j < kBlock; ++j) m = max(m, abs_bits(v[j]));
    }
    const uint8_t s_b = scale_rules::nvfp4_block_scale(scale_rules::amax_from_abs_bits(m), s_enc);
    const float enc = scale_rules::nvfp4_encode_scale(s_b, s_enc);
    for (int64_t r = r0; r < r1; ++r) {
      if (bh > 1) load_copy_row<In>(a, r, c0, cols, v);
      uint32_t packed[2] = {0u, 0u};
#pragma unroll
      for (int j = 0; j < kBlock; ++j) {
        if (c0 + j >= cols) continue;
        const float y = scale_rules::nvfp4_clamp(v[j] * enc);
        uint32_t code;
        if (a.stochastic) {
          const uint64_t e = a.stream_base + static_cast<uint64_t>(r * cols + c0 + j);
          code = scale_rules::e2m1_stochastic(y, philox::random_bits(a.seed, a.offset, e));
        } else {
          code = formats::encode_e2m1(y);
        }
        packed[j / 8] |= code << (4 * (j % 8));
      }
      uint8_t* d = a.data + r * row_bytes + c0 / 2;
      if (c0 + kBlock <= cols && row_bytes % 8 == 0) {
        *reinterpret_cast<uint2*>(d) = make_uint2(packed[0], packed[1]);
      } else {
        for (int64_t j = 0; j < kBlock / 2 && c0 / 2 + j < row_bytes; ++j) {
          d[j] = static_cast<uint8_t>(packed[j / 4] >> (8 * (j % 4)));
        }
      }
      a.scale[a.padded_cols != 0 ? swizzled_offset(r, b, a.padded_cols) : r * nb + b] = s_b;
    }
  }
}

// amax of the Hadamard-transformed xᵀ: one thread per (k, group of 16 m).
template <class In>
__global__ __launch_bounds__(kThreads) void rht_amax_kernel(Nvfp4Args a, uint32_t* amax) {
  __shared__ uint32_t scratch[kThreads / 32];
  const int64_t rows = a.cols, cols = a.rows, ng = ceil_div_device(cols, kBlock);
  uint32_t m = 0;
  for (int64_t w = blockIdx.x * int64_t{kThreads} + threadIdx.x; w < rows * ng;
       w += int64_t{gridDim.x} * kThreads) {
    float v[kBlock];
    load_copy_row<In>(a, w % rows, (w / rows) * kBlock, cols, v);
#pragma unroll
    for (int j = 0; j < kBlock; ++j) m = max(m, abs_bits(v[j]));
  }
  m = canonical_amax(block_max<kThreads>(m, scratch));
  if (threadIdx.x == 0 && m != 0) atomicMax(amax, m);
}

}  // namespace

void launch_nvfp4(const Nvfp4Args& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  const int64_t rows = a.columnwise ? a.cols : a.rows, cols = a.columnwise ? a.rows : a.cols;
  const int64_t bh = a.tile16 ? kBlock : 1;
  const int64_t work = ceil_div(rows, bh) * ceil_div(cols, kBlock);
  const unsigned grid = grid_stride_blocks(work, kThreads, 16);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    nvfp4_kernel<In><<<grid, kThreads, 0, stream>>>(a);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_rht_amax(const Nvfp4Args& a, uint32_t* amax, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  const unsigned grid = grid_stride_blocks(a.cols * ceil_div(a.rows, kBlock), kThreads, 8);
  dispatch_float_input(a.in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    rht_amax_kernel<In><<<grid, kThreads, 0, stream>>>(a, amax);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
