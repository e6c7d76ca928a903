// FP8 rowwise (per-row current scaling, torchao's dynamic rowwise recipe), rowwise usage: one
// block per row reads the row once with 16-byte loads into registers (rows up to
// kCached * 256 * vector elements; longer rows re-read the rest, which L2 still holds), reduces
// the row amax, computes the scale exactly as the CPU does and writes the codes.
// Also the per-row / per-column amax pass used before a transposed (columnwise) cast, and its
// grouped variant on the generic driver of grouped_tiles.cuh.
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/grouped_tiles.cuh"
#include "quantize/cuda/launchers.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/core/dispatch.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant {
namespace {

constexpr int kThreads = 256;     // line amax kernel
constexpr int kRowThreads = 128;  // one block per row
constexpr int kCached = 8;        // vectors per thread kept in registers (bf16: rows <= 8192)

// One row: xr (K) → qr (K) codes and *sinv_of() = 1 / scale. Block-wide (kRowThreads threads).
// The first kCached vectors of each thread stay in registers as raw input (packed 16-bit
// pairs). sinv_of (float*()) runs in thread 0 after the row loads are issued, so a lookup it
// does (the grouped member search) overlaps their latency.
template <class In, DType DT, int kVec, class SinvOf>
__device__ __forceinline__ void rowwise_row(const In* __restrict__ xr, int64_t K, float fp8_max,
                                            float eps, bool pow2, uint8_t* __restrict__ qr,
                                            const SinvOf& sinv_of) {
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
  float* const sinv = threadIdx.x == 0 ? sinv_of() : nullptr;
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
  rowwise_row<In, DT, kVec>(x + row * K, K, fp8_max, eps, pow2, q + row * K,
                            [&] { return scale_inv + row; });
}

// Grouped (varying first): block b quantizes live row b of the contiguous (Σ rows, K) input;
// its member's scales start at scale_offsets[member]. Blocks past the live rows do nothing.
// Only the live-row bound is read before the row's loads; the member search (a binary search
// over tensor_offsets, L1-resident) runs while they are in flight.
template <class In, DType DT, int kVec>
__global__ __launch_bounds__(kRowThreads) void fp8_rowwise_grouped_kernel(
    const In* __restrict__ x, GroupedMeta g, float fp8_max, float eps, bool pow2,
    uint8_t* __restrict__ q, float* __restrict__ scale_inv) {
  if (grouped_noop(g)) return;
  const int64_t K = g.cols, row = blockIdx.x;
  if (row * K >= g.tensor_offsets[g.n]) return;
  rowwise_row<In, DT, kVec>(x + row * K, K, fp8_max, eps, pow2, q + row * K, [&] {
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
    return scale_inv + g.scale_offsets[lo] + (row - g.tensor_offsets[lo] / K);
  });
}

// Row and/or column amax over tiles of kLineTileRows x (32 kVec) elements: warp w reads rows
// w * kLineWarpRows + r (r < kLineWarpRows) of the tile, lane l the kVec columns l * kVec + e of
// each, all its loads issued before the first use (kVec = 16 bytes of input when K % kVec == 0
// and x is aligned, else 1). Row maxima: a warp reduction and one atomic per row and tile;
// column maxima: over the thread's rows in registers, over the warps in shared memory, then one
// atomic per column and tile. Tile (mb, kb) of the (M, K) tensor x: block-wide, called by the
// per-tensor kernel (tile = blockIdx) and by the grouped kernel (member-local tiles and amax
// arrays).
constexpr int kLineWarpRows = 8;
constexpr int kLineTileRows = kLineWarpRows * (kThreads / 32);  // 64
template <int kVec>
inline constexpr int kLineTileCols = 32 * kVec;

template <class In, int kVec>
__device__ __forceinline__ void line_amax_tile(const In* __restrict__ x, int64_t M, int64_t K,
                                               uint32_t* row_amax, uint32_t* col_amax,
                                               int64_t mb, int64_t kb) {
  constexpr int kCols = kLineTileCols<kVec>;
  constexpr int kPad = kVec + 1;  // per-lane stride of s_col: conflict-free writes
  __shared__ uint32_t s_col[kThreads / 32][32 * kPad];
  using V = Vec<In, kVec>;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int64_t m0 = mb * kLineTileRows + warp * kLineWarpRows;
  const int64_t k = kb * kCols + int64_t{lane} * kVec;
  V raw[kLineWarpRows];
#pragma unroll
  for (int r = 0; r < kLineWarpRows; ++r) {
    // K % kVec == 0: a vector starting inside the row ends inside it.
    if (m0 + r < M && k < K) {
      raw[r] = *reinterpret_cast<const V*>(x + (m0 + r) * K + k);
    } else {
      raw[r] = V{};
    }
  }
  uint32_t cm[kVec] = {};
  if constexpr (sizeof(In) == 2 && kVec % 2 == 0) {
    // 16-bit input, two elements per 32-bit word: |x| bits (sign cleared) compared two at a time
    // (__vmaxu2). In BF16 and FP16 alike the order of |x| bits is the order of |x| (NaN above
    // inf), so the max over them, widened to float abs bits once, is the float max — with a
    // fraction of the instructions and registers of widening every element.
    constexpr int kWords = kVec / 2;
    const auto widen = [](uint32_t half_bits) {
      In v;
      v.bits = static_cast<uint16_t>(half_bits);
      return abs_bits(load_float(v));
    };
    uint32_t cw[kWords] = {};
#pragma unroll
    for (int r = 0; r < kLineWarpRows; ++r) {
      const auto* w = reinterpret_cast<const uint32_t*>(&raw[r]);
      uint32_t rw = 0;
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        const uint32_t a = w[i] & 0x7fff7fffu;
        rw = __vmaxu2(rw, a);
        cw[i] = __vmaxu2(cw[i], a);
      }
      if (row_amax != nullptr) {
        const uint32_t rm = warp_max(max(widen(rw & 0xffffu), widen(rw >> 16)));
        if (lane == 0 && m0 + r < M) atomic_amax(&row_amax[m0 + r], rm);
      }
    }
#pragma unroll
    for (int i = 0; i < kWords; ++i) {  // element 2i is the low half of word i
      cm[2 * i] = widen(cw[i] & 0xffffu);
      cm[2 * i + 1] = widen(cw[i] >> 16);
    }
  } else {
#pragma unroll
    for (int r = 0; r < kLineWarpRows; ++r) {
      uint32_t rm = 0;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const uint32_t b = abs_bits(load_float(raw[r].v[e]));
        rm = max(rm, b);
        cm[e] = max(cm[e], b);
      }
      if (row_amax != nullptr) {
        rm = warp_max(rm);
        if (lane == 0 && m0 + r < M) atomic_amax(&row_amax[m0 + r], rm);
      }
    }
  }
  if (col_amax == nullptr) return;
#pragma unroll
  for (int e = 0; e < kVec; ++e) s_col[warp][lane * kPad + e] = cm[e];
  __syncthreads();
  for (int c = t; c < kCols; c += kThreads) {
    uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) m = max(m, s_col[w][(c / kVec) * kPad + c % kVec]);
    const int64_t col = kb * kCols + c;
    if (col < K) atomic_amax(&col_amax[col], m);
  }
}

template <class In, int kVec>
__global__ __launch_bounds__(kThreads) void line_amax_kernel(const In* __restrict__ x, int64_t M,
                                                             int64_t K, uint32_t* row_amax,
                                                             uint32_t* col_amax) {
  line_amax_tile<In, kVec>(x, M, K, row_amax, col_amax, blockIdx.y, blockIdx.x);
}

// Grouped: member i's tiles with its rows' amax at row_amax[scale_offsets[i] + r] and its
// column amax at col_amax[col_scale_offsets[i] + k] (its own scale_inv slots).
struct LineTileCount {
  int32_t tiles_k = 0;
  __device__ int64_t operator()(int64_t rows) const {
    return ceil_div_device(rows, kLineTileRows) * tiles_k;
  }
};

template <class In, int kVec>
__global__ __launch_bounds__(kThreads) void line_amax_grouped_kernel(const In* __restrict__ x,
                                                                     GroupedMeta g,
                                                                     LineTileCount count,
                                                                     uint32_t* row_amax,
                                                                     uint32_t* col_amax) {
  extern __shared__ int32_t table[];  // grouped_prefix_bytes(g)
  if (grouped_noop(g)) return;
  grouped_for_each_member_tile<kThreads>(g, count, table, [&](const GroupedTile& w) {
    const int64_t K = g.cols;
    const uint32_t local = static_cast<uint32_t>(w.local);
    const uint32_t tk = static_cast<uint32_t>(count.tiles_k);
    uint32_t* rows = row_amax != nullptr ? row_amax + g.scale_offsets[w.member] : nullptr;
    line_amax_tile<In, kVec>(x + int64_t{w.row0} * K, w.rows, K, rows,
                             col_amax + g.col_scale_offsets[w.member], local / tk, local % tk);
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
  const size_t smem = grouped_prefix_bytes(g);
  dispatch_float_input(in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    constexpr int kV = kVec16<In>;
    const In* p = static_cast<const In*>(x);
    // Member offsets are multiples of K: with K % kV == 0 every member row starts aligned.
    const bool vec = g.cols % kV == 0 && aligned16(p);
    LineTileCount count;
    count.tiles_k =
        static_cast<int32_t>(ceil_div(g.cols, vec ? kLineTileCols<kV> : kLineTileCols<1>));
    const int64_t bound = (ceil_div(g.rows_bound, kLineTileRows) + g.n) * count.tiles_k;
    auto* kernel = vec ? line_amax_grouped_kernel<In, kV> : line_amax_grouped_kernel<In, 1>;
    const unsigned grid = grouped_grid(g, bound, resident_blocks_per_sm(kernel, kThreads, smem));
    kernel<<<grid, kThreads, smem, stream>>>(p, g, count, row_amax, col_amax);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_line_amax(const void* x, int64_t rows, int64_t cols, DType in, uint32_t* row_amax,
                      uint32_t* col_amax, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  TESSERA_CHECK_STATUS(ceil_div(rows, kLineTileRows) <= 65535, Status::kOutOfRange,
                       "quantize: x has ", rows, " rows; the amax pass supports up to ",
                       65535 * int64_t{kLineTileRows});
  dispatch_float_input(in, "quantize: x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    constexpr int kV = kVec16<In>;
    const In* p = static_cast<const In*>(x);
    const bool vec = cols % kV == 0 && aligned16(p);
    const dim3 grid(
        static_cast<unsigned>(ceil_div(cols, vec ? kLineTileCols<kV> : kLineTileCols<1>)),
        static_cast<unsigned>(ceil_div(rows, kLineTileRows)));
    if (vec) {
      line_amax_kernel<In, kV><<<grid, kThreads, 0, stream>>>(p, rows, cols, row_amax, col_amax);
    } else {
      line_amax_kernel<In, 1><<<grid, kThreads, 0, stream>>>(p, rows, cols, row_amax, col_amax);
    }
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
