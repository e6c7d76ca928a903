// Expansion of NVFP4 / MXFP8 copies into BF16 (see expand_operand.h): one thread per 8 output
// elements (one 16-byte store) row-major; 32 x 32 tiles through shared memory transposed.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "gemm/cuda/expand_operand.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"

namespace tessera::gemm_cuda {
namespace {

enum class Code : int { kE2M1 = 0, kE4M3 = 1, kE5M2 = 2 };

// E2M1 code (low nibble) → FP32 from bits: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const uint32_t m = code & 7u;
  const uint32_t bits =
      m >= 2 ? (((m >> 1) + 126u) << 23) | ((m & 1u) << 22) : (m == 1 ? 0x3f000000u : 0u);
  return __uint_as_float(bits | ((code & 8u) << 28));
}

// FP32 value of a block's scale byte: E4M3 for E2M1 codes, E8M0 for FP8 codes.
template <Code kCode>
__device__ __forceinline__ float scale_value(uint8_t s) {
  if constexpr (kCode == Code::kE2M1) return formats::decode_e4m3(s);
  else return formats::decode_e8m0(s);
}

// Value of a code (E2M1: the low nibble) times its block's scale, in FP32 (exact).
template <Code kCode>
__device__ __forceinline__ float element_value(uint8_t code, float scale) {
  if constexpr (kCode == Code::kE2M1) return e2m1_value(code) * scale;
  else if constexpr (kCode == Code::kE4M3) return formats::decode_e4m3(code) * scale;
  else return formats::decode_e5m2(code) * scale;
}

// scale_rules::scale_index for block sizes that are powers of two (every NVFP4 / MXFP8
// geometry), by shifts.
struct ScaleIndex {
  int row_shift = 0, col_shift = 0;
  int64_t ld = 1;
  bool swizzled = false, transposed = false;
  __device__ int64_t operator()(int64_t r, int64_t c) const {
    const int64_t sr = r >> row_shift, sc = c >> col_shift;
    if (!swizzled) return sr * ld + sc;
    return transposed ? scale_rules::swizzled_scale_offset<int64_t>(sc, sr, ld)
                      : scale_rules::swizzled_scale_offset<int64_t>(sr, sc, ld);
  }
};

// Code of stored element (r, c).
template <Code kCode>
__device__ uint8_t code_at(const uint8_t* codes, int64_t row_bytes, int64_t r, int64_t c) {
  if constexpr (kCode == Code::kE2M1) {
    const uint8_t b = codes[r * row_bytes + c / 2];
    return c % 2 == 0 ? (b & 0xF) : (b >> 4);
  } else {
    return codes[r * row_bytes + c];
  }
}

constexpr int kThreads = 256;

// Thread i: row r = i / chunks, output columns [8j, 8j + 8), j = i % chunks. The chunk's scale
// is looked up once when a block covers whole chunks (block columns a multiple of 8: NVFP4 1x16,
// MXFP8 1x32); FP8 codes under one scale per column (MXFP8 columnwise copies, 32x1 blocks, compact
// scales) read the chunk's 8 scales in one word; else each element's. The codes come in one word
// where rows allow it.
template <Code kCode>
__global__ void expand_kernel(const uint8_t* __restrict__ codes, int64_t row_bytes,
                              const uint8_t* __restrict__ scales, ScaleIndex si, int64_t rows,
                              int64_t cols, uint4* __restrict__ out, int64_t ld) {
  const int64_t chunks = ld / 8, total = rows * chunks;
  const bool shared_scale = si.col_shift >= 3;
  // Rows whose 8-code chunks are aligned words (4 bytes E2M1, 8 bytes FP8).
  const int64_t chunk_bytes = kCode == Code::kE2M1 ? 4 : 8;
  const bool vector_loads = row_bytes % chunk_bytes == 0 &&
                            reinterpret_cast<uintptr_t>(codes) % chunk_bytes == 0;
  const bool column_scales = kCode != Code::kE2M1 && vector_loads && si.col_shift == 0 &&
                             !si.swizzled && si.ld % 8 == 0 &&
                             reinterpret_cast<uintptr_t>(scales) % 8 == 0;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / chunks, c0 = (i - r * chunks) * 8;
    __align__(16) __nv_bfloat162 v[4];
    float f[8];
    if (vector_loads && shared_scale && c0 + 8 <= cols) {  // the 8 codes in one aligned load
      const float s = scale_value<kCode>(scales[si(r, c0)]);
      if constexpr (kCode == Code::kE2M1) {
        const uint32_t w = *reinterpret_cast<const uint32_t*>(codes + r * row_bytes + c0 / 2);
#pragma unroll
        for (int e = 0; e < 8; ++e) f[e] = element_value<kCode>((w >> (4 * e)) & 0xF, s);
      } else {
        const uint2 w = *reinterpret_cast<const uint2*>(codes + r * row_bytes + c0);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          f[e] = element_value<kCode>(((e < 4 ? w.x : w.y) >> (8 * (e % 4))) & 0xFF, s);
      }
    } else if (column_scales && c0 + 8 <= cols) {  // 8 codes and their 8 scales, a word each
      if constexpr (kCode != Code::kE2M1) {
        const uint2 w = *reinterpret_cast<const uint2*>(codes + r * row_bytes + c0);
        const uint2 sw = *reinterpret_cast<const uint2*>(scales + si(r, c0));
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const uint32_t word = e < 4 ? w.x : w.y, sword = e < 4 ? sw.x : sw.y;
          f[e] = element_value<kCode>((word >> (8 * (e % 4))) & 0xFF,
                                      scale_value<kCode>((sword >> (8 * (e % 4))) & 0xFF));
        }
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int64_t c = c0 + e;
        f[e] = c < cols ? element_value<kCode>(code_at<kCode>(codes, row_bytes, r, c),
                                               scale_value<kCode>(scales[si(r, c)]))
                        : 0.0f;
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = __floats2bfloat162_rn(f[2 * e], f[2 * e + 1]);
    out[i] = *reinterpret_cast<const uint4*>(v);
  }
}

constexpr int kTile = 32;

// Block (32, 8), 32 x 32 tiles of the stored copy (tile t: row tile t / col_tiles over
// ceil(ld / 32) row tiles, so that out's padding columns [rows, ld) are written as zeros).
template <Code kCode>
__global__ void expand_transposed_kernel(const uint8_t* __restrict__ codes, int64_t row_bytes,
                                         const uint8_t* __restrict__ scales, ScaleIndex si,
                                         int64_t rows,
                                         int64_t cols, __nv_bfloat16* __restrict__ out,
                                         int64_t ld) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t col_tiles = (cols + kTile - 1) / kTile, row_tiles = (ld + kTile - 1) / kTile;
  for (int64_t t = blockIdx.x; t < row_tiles * col_tiles; t += gridDim.x) {
    const int64_t r0 = t / col_tiles * kTile, c0 = t % col_tiles * kTile;
    for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      float x = 0.0f;
      if (r < rows && c < cols)
        x = element_value<kCode>(code_at<kCode>(codes, row_bytes, r, c),
                                 scale_value<kCode>(scales[si(r, c)]));
      tile[i][threadIdx.x] = x;
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;  // out row c, column r
      if (c < cols && r < ld) out[c * ld + r] = __float2bfloat16_rn(tile[threadIdx.x][i]);
    }
    __syncthreads();
  }
}

__global__ void nvfp4_factors_kernel(const float* __restrict__ amax, int64_t count,
                                     float* __restrict__ out) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < count) out[i] = 1.0f / scale_rules::nvfp4_global_encode_scale(amax[i]);
}

// Calls f(std::integral_constant<Code, c>) for the element's code c.
template <class F>
void dispatch_code(DType e, F&& f) {
  if (e == DType::kFloat4E2M1) return f(std::integral_constant<Code, Code::kE2M1>{});
  if (e == DType::kFloat8E4M3) return f(std::integral_constant<Code, Code::kE4M3>{});
  TESSERA_CHECK(e == DType::kFloat8E5M2, "expand_to_bf16: element ", dtype_name(e),
                "; expected E2M1, E4M3 or E5M2");
  f(std::integral_constant<Code, Code::kE5M2>{});
}

int log2_exact(int64_t v, const char* what) {
  int s = 0;
  while ((int64_t{1} << s) < v) ++s;
  TESSERA_CHECK(v >= 1 && (int64_t{1} << s) == v, "expand_to_bf16: ", what, " ", v,
                " is not a power of two");
  return s;
}

ScaleIndex scale_index_of(const scale_rules::ScaleGeometry& g) {
  ScaleIndex i;
  i.row_shift = log2_exact(g.block_rows, "scale block rows");
  i.col_shift = log2_exact(g.block_cols, "scale block columns");
  i.ld = g.ld;
  i.swizzled = g.swizzled;
  i.transposed = g.swizzle_transposed;
  return i;
}

int64_t row_bytes_of(const ExpandSource& s) {
  return s.element == DType::kFloat4E2M1 ? (s.cols + 1) / 2 : s.cols;
}

// Enough blocks to fill the device; grid-stride loops cover the rest.
unsigned blocks_for(int64_t work, int64_t per_block) {
  return static_cast<unsigned>(std::clamp<int64_t>((work + per_block - 1) / per_block, 1, 8192));
}

}  // namespace

void expand_to_bf16(const ExpandSource& s, void* out, int64_t ld, void* stream) {
  TESSERA_CHECK(ld % 8 == 0 && ld >= s.cols && reinterpret_cast<uintptr_t>(out) % 16 == 0,
                "expand_to_bf16: ld ", ld, " must be a multiple of 8 and >= cols ", s.cols,
                ", out 16-byte aligned");
  if (s.rows == 0 || ld == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  const auto* codes = static_cast<const uint8_t*>(s.codes);
  const auto* scales = static_cast<const uint8_t*>(s.scales);
  const int64_t rb = row_bytes_of(s);
  const ScaleIndex si = scale_index_of(s.geometry);
  const unsigned blocks = blocks_for(s.rows * (ld / 8), kThreads);
  auto* o = static_cast<uint4*>(out);
  dispatch_code(s.element, [&](auto code) {
    expand_kernel<decltype(code)::value><<<blocks, kThreads, 0, st>>>(codes, rb, scales, si,
                                                                      s.rows, s.cols, o, ld);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void expand_to_bf16_transposed(const ExpandSource& s, void* out, int64_t ld, void* stream) {
  TESSERA_CHECK(ld >= s.rows, "expand_to_bf16_transposed: ld ", ld, " must be >= rows ", s.rows);
  if (s.cols == 0 || ld == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  const auto* codes = static_cast<const uint8_t*>(s.codes);
  const auto* scales = static_cast<const uint8_t*>(s.scales);
  const int64_t rb = row_bytes_of(s);
  const ScaleIndex si = scale_index_of(s.geometry);
  const int64_t tiles = ((ld + kTile - 1) / kTile) * ((s.cols + kTile - 1) / kTile);
  const unsigned blocks = blocks_for(tiles, 1);
  const dim3 block(kTile, 8);
  auto* o = static_cast<__nv_bfloat16*>(out);
  dispatch_code(s.element, [&](auto code) {
    expand_transposed_kernel<decltype(code)::value><<<blocks, block, 0, st>>>(
        codes, rb, scales, si, s.rows, s.cols, o, ld);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void nvfp4_decode_factors(const float* amax, int64_t count, float* out, void* stream) {
  if (count == 0) return;
  nvfp4_factors_kernel<<<blocks_for(count, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      amax, count, out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::gemm_cuda
