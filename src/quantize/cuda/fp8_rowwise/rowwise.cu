// FP8 rowwise (per-row current scaling, torchao's dynamic rowwise recipe), rowwise usage: one
// block per row reads the row once with 16-byte loads into registers (rows up to
// kCached * 256 * vector elements; longer rows re-read the rest, which L2 still holds), reduces
// the row amax, computes the scale exactly as the CPU does and writes the codes.
// Also the per-row / per-column amax pass used before a transposed (columnwise) cast, and its
// grouped variant on the generic driver of grouped_tiles.cuh.
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/grouped_tiles.cuh"
#include "quantize/cuda/kernels.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/core/dispatch.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant {
namespace {

constexpr int kThreads = 256;     // line amax kernel
constexpr int kRowThreads = 128;  // one block per row
constexpr int kCached = 8;        // vectors per thread kept in registers (bf16: rows <= 8192)

// One row: xr (K) → qr (K) codes and *sinv = 1 / scale. Block-wide (kRowThreads threads). The
// first kCached vectors of each thread stay in registers as raw input (packed 16-bit pairs).
template <class In, DType DT, int kVec>
__device__ __forceinline__ void rowwise_row(const In* __restrict__ xr, int64_t K, float fp8_max,
                                            float eps, bool pow2, uint8_t* __restrict__ qr,
                                            float* __restrict__ sinv) {
  __shared__ uint32_t scratch[kRowThreads / 32];
  using V = Vec<In, kVec>;
  const int64_t nvec = K / kVec;  // the dispatcher picks kVec dividing K
  V raw[kCached];
  uint32_t amax = 0;
#pragma unroll
  for (int i = 0; i < kCached; ++i) {
    const int64_t j = int64_t{i} * kRowThreads + threadIdx.x;
    if (j < nvec) raw[i] = *reinterpret_cast<const V*>(xr + j * kVec);
  }
#pragma unroll
  for (int i = 0; i < kCached; ++i) {
    const int64_t j = int64_t{i} * kRowThreads + threadIdx.x;
    if (j < nvec) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) amax = max(amax, abs_bits(load_float(raw[i].v[e])));
    }
  }
  for (int64_t j = int64_t{kCached} * kRowThreads + threadIdx.x; j < nvec; j += kRowThreads) {
    float w[kVec];
    load_vec<In, kVec>(xr + j * kVec, w);
#pragma unroll
    for (int e = 0; e < kVec; ++e) amax = max(amax, abs_bits(w[e]));
  }
  amax = block_max<kRowThreads>(amax, scratch);
  const float scale =
      scale_rules::current_scale(scale_rules::amax_from_abs_bits(amax), fp8_max, eps, pow2);
  if (threadIdx.x == 0) *sinv = scale_rules::reciprocal(scale);
#pragma unroll
  for (int i = 0; i < kCached; ++i) {
    const int64_t j = int64_t{i} * kRowThreads + threadIdx.x;
    if (j < nvec) {
      float f[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) f[e] = load_float(raw[i].v[e]);
      Vec<uint8_t, kVec> c;
      encode_fp8_vec<DT, kVec>(f, scale, c);
      *reinterpret_cast<Vec<uint8_t, kVec>*>(qr + j * kVec) = c;
    }
  }
  for (int64_t j = int64_t{kCached} * kRowThreads + threadIdx.x; j < nvec; j += kRowThreads) {
    float w[kVec];
    load_vec<In, kVec>(xr + j * kVec, w);
    Vec<uint8_t, kVec> c;
    encode_fp8_vec<DT, kVec>(w, scale, c);
    *reinterpret_cast<Vec<uint8_t, kVec>*>(qr + j * kVec) = c;
  }
}

template <class In, DType DT, int kVec>
__global__ __launch_bounds__(kRowThreads) void fp8_rowwise_kernel(const In* __restrict__ x,
                                                               int64_t K, float fp8_max,
                                                               float eps, bool pow2,
                                                               uint8_t* __restrict__ q,
                                                               float* __restrict__ scale_inv) {
  const int64_t row = blockIdx.x;
  rowwise_row<In, DT, kVec>(x + row * K, K, fp8_max, eps, pow2, q + row * K, scale_inv + row);
}

// Grouped (varying first): block b quantizes live row b of the contiguous (Σ rows, K) input;
// its member's scales start at scale_offsets[member]. Blocks past the live rows do nothing.
template <class In, DType DT, int kVec>
__global__ __launch_bounds__(kRowThreads) void fp8_rowwise_grouped_kernel(
    const In* __restrict__ x, GroupedMeta g, float fp8_max, float eps, bool pow2,
    uint8_t* __restrict__ q, float* __restrict__ scale_inv) {
  if (grouped_noop(g)) return;
  const int64_t K = g.cols, row = blockIdx.x;
  if (row * K >= g.tensor_offsets[g.n]) return;
  // Member: the last i with tensor_offsets[i] <= row * K < tensor_offsets[i+1].
  int64_t lo = 0, hi = g.n - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (g.tensor_offsets[mid] <= row * K) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t local = row - g.tensor_offsets[lo] / K;
  rowwise_row<In, DT, kVec>(x + row * K, K, fp8_max, eps, pow2, q + row * K,
                            scale_inv + g.scale_offsets[lo] + local);
}

// Row and/or column amax over 32 x 256 tiles: a thread reads 8 consecutive elements of one row
// per step; rows reduce through shared memory, columns through registers then shared atomics.
// Tile (mb, kb) of the (M, K) tensor x: block-wide, called by the per-tensor kernel (tile =
// blockIdx) and by the grouped kernel (member-local tiles and amax arrays).
constexpr int kLineTileRows = 32, kLineTileCols = 256;

template <class In>
__device__ __forceinline__ void line_amax_tile(const In* __restrict__ x, int64_t M, int64_t K,
                                               uint32_t* row_amax, uint32_t* col_amax,
                                               int64_t mb, int64_t kb) {
  constexpr int kTileRows = kLineTileRows, kTileCols = kLineTileCols;
  __shared__ uint32_t s_col[kTileCols];
  __shared__ uint32_t s_row[kTileRows];
  const int t = threadIdx.x;
  s_col[t] = 0;
  if (t < kTileRows) s_row[t] = 0;
  __syncthreads();
  const int64_t m0 = mb * kTileRows, k = kb * kTileCols + t;
  uint32_t cmax = 0;
  for (int r = 0; r < kTileRows; ++r) {
    const int64_t m = m0 + r;
    uint32_t a = 0;
    if (m < M && k < K) a = abs_bits(load_float(x[m * K + k]));
    cmax = max(cmax, a);
    if (row_amax != nullptr) {
      a = warp_max(a);
      if ((t % 32) == 0 && a != 0) atomicMax(&s_row[r], a);
    }
  }
  __syncthreads();
  if (col_amax != nullptr && k < K && cmax != 0) atomicMax(&col_amax[k], canonical_amax(cmax));
  if (row_amax != nullptr && t < kTileRows && m0 + t < M && s_row[t] != 0) {
    atomicMax(&row_amax[m0 + t], canonical_amax(s_row[t]));
  }
}

template <class In>
__global__ __launch_bounds__(kThreads) void line_amax_kernel(const In* __restrict__ x, int64_t M,
                                                             int64_t K, uint32_t* row_amax,
                                                             uint32_t* col_amax) {
  line_amax_tile<In>(x, M, K, row_amax, col_amax, blockIdx.y, blockIdx.x);
}

// Grouped: member i's tiles with its rows' amax at row_amax[first global row + r] and its
// column amax at col_amax[i * K + k].
struct LineTileCount {
  int64_t tiles_k = 0;
  __device__ int64_t operator()(int64_t rows) const {
    return ceil_div_device(rows, kLineTileRows) * tiles_k;
  }
};

template <class In>
__global__ __launch_bounds__(kThreads) void line_amax_grouped_kernel(const In* __restrict__ x,
                                                                     GroupedMeta g,
                                                                     LineTileCount count,
                                                                     uint32_t* row_amax,
                                                                     uint32_t* col_amax) {
  extern __shared__ int32_t prefix[];  // (n + 1)
  if (grouped_noop(g)) return;
  grouped_for_each_tile<kThreads>(g, count, prefix, [&](int64_t i, int64_t rows, int64_t local) {
    const int64_t off = g.tensor_offsets[i], K = g.cols;
    line_amax_tile<In>(x + off, rows, K, row_amax != nullptr ? row_amax + off / K : nullptr,
                       col_amax + i * K, local / count.tiles_k, local % count.tiles_k);
  });
}

template <class In, DType DT>
void launch_rowwise_typed(const In* x, int64_t M, int64_t K, float fp8_max, float eps, bool pow2,
                          uint8_t* q, float* scale_inv, cudaStream_t stream) {
  constexpr int kV = kVec16<In>;
  const unsigned grid = static_cast<unsigned>(M);
  if (K % kV == 0 && aligned16(x) && aligned16(q)) {
    fp8_rowwise_kernel<In, DT, kV><<<grid, kRowThreads, 0, stream>>>(x, K, fp8_max, eps, pow2, q,
                                                                  scale_inv);
  } else {
    fp8_rowwise_kernel<In, DT, 1><<<grid, kRowThreads, 0, stream>>>(x, K, fp8_max, eps, pow2, q,
                                                                 scale_inv);
  }
}

}  // namespace

void launch_fp8_rowwise_grouped(const void* x, const GroupedMeta& g, DType in, DType element,
                                float eps, bool pow2, uint8_t* q, float* scale_inv,
                                cudaStream_t stream) {
  if (g.n == 0 || g.cols == 0 || g.rows_bound == 0) return;
  TESSERA_CHECK_STATUS(g.rows_bound <= 0x7fffffff, Status::kOutOfRange, "grouped quantize: ",
                       g.rows_bound, " rows; the rowwise FP8 kernel supports up to 2^31 - 1");
  const unsigned grid = static_cast<unsigned>(g.rows_bound);
  dispatch_input_fp8(in, element, "quantize: x", [&](auto tag, auto dt) {
    using In = typename decltype(tag)::type;
    constexpr DType DT = decltype(dt)::value;
    constexpr int kV = kVec16<In>;
    constexpr float fp8_max = formats::FormatTraits<DT>::kMax;
    const In* p = static_cast<const In*>(x);
    if (g.cols % kV == 0 && aligned16(p) && aligned16(q)) {
      fp8_rowwise_grouped_kernel<In, DT, kV><<<grid, kRowThreads, 0, stream>>>(p, g, fp8_max, eps,
                                                                           pow2, q, scale_inv);
    } else {
      fp8_rowwise_grouped_kernel<In, DT, 1><<<grid, kRowThreads, 0, stream>>>(p, g, fp8_max, eps,
                                                                          pow2, q, scale_inv);
    }
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_fp8_rowwise(const void* x, int64_t rows, int64_t cols, DType in, DType element,
                        float eps, bool pow2, uint8_t* q, float* scale_inv, cudaStream_t stream) {
  if (rows == 0) return;
  TESSERA_CHECK_STATUS(rows <= 0x7fffffff, Status::kOutOfRange, "quantize: x has ", rows,
                       " rows; the rowwise FP8 kernel supports up to 2^31 - 1");
  dispatch_input_fp8(in, element, "quantize: x", [&](auto tag, auto dt) {
    using In = typename decltype(tag)::type;
    constexpr DType DT = decltype(dt)::value;
    launch_rowwise_typed<In, DT>(static_cast<const In*>(x), rows, cols,
                                 formats::FormatTraits<DT>::kMax, eps, pow2, q, scale_inv, stream);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_line_amax_grouped(const void* x, DType in, const GroupedMeta& g, uint32_t* row_amax,
                              uint32_t* col_amax, cudaStream_t stream) {
  if (g.n == 0 || g.cols == 0) return;
  LineTileCount count;
  count.tiles_k = ceil_div(g.cols, kLineTileCols);
  const unsigned grid =
      grouped_grid(g, (ceil_div(g.rows_bound, kLineTileRows) + g.n) * count.tiles_k);
  dispatch_float_input(in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    line_amax_grouped_kernel<In><<<grid, kThreads, grouped_prefix_bytes(g), stream>>>(
        static_cast<const In*>(x), g, count, row_amax, col_amax);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_line_amax(const void* x, int64_t rows, int64_t cols, DType in, uint32_t* row_amax,
                      uint32_t* col_amax, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  TESSERA_CHECK_STATUS(ceil_div(rows, 32) <= 65535, Status::kOutOfRange, "quantize: x has ",
                       rows, " rows; the amax pass supports up to ", 65535 * 32);
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, 256)),
                  static_cast<unsigned>(ceil_div(rows, 32)));
  dispatch_float_input(in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    line_amax_kernel<In><<<grid, kThreads, 0, stream>>>(static_cast<const In*>(x), rows, cols,
                                                        row_amax, col_amax);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
