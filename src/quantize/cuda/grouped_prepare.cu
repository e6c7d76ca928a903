// Device-side set-up and wrap-up of the grouped quantize launches, so that the noop flag covers
// them too (a host memset would write even when the flag is set):
// - launch_grouped_prepare: zeroes the per-member amax arrays (atomic-max targets) and every
//   member's scale matrix, padding included (FP8 block and swizzled NVFP4 scales have entries no
//   tile writes), with a persistent loop on the generic driver of grouped_tiles.cuh. Scale slots
//   past a member's matrix and everything past the last member are not touched.
// - launch_grouped_line_scales: per-line FP8 (rowwise recipe with the columnwise usage) keeps
//   its row / column amaxes in the members' own scale_inv slots during the quantize (no
//   scratch); this last pass turns each slot into 1 / scale.
// - launch_grouped_last_amax: delayed scaling's history slot 0 = the last member's amax.
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/grouped_tiles.cuh"
#include "quantize/cuda/launchers.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kTileBytes = kThreads * 16;

__device__ __forceinline__ int64_t scale_bytes(const GroupedPrepare& p, int u, int64_t rows) {
  if (p.scales[u] == nullptr) return 0;
  const int64_t blocks = p.rows_per_block[u] == 0 ? 1 : ceil_div_device(rows, p.rows_per_block[u]);
  return p.elem_bytes[u] * p.per_block[u] * blocks;
}

// Tiles of kTileBytes bytes: usage 0's scale matrix first, then usage 1's.
struct PrepareTileCount {
  GroupedPrepare p;
  __device__ int64_t operator()(int64_t rows) const {
    return ceil_div_device(scale_bytes(p, 0, rows), kTileBytes) +
           ceil_div_device(scale_bytes(p, 1, rows), kTileBytes);
  }
};

// finalize == false: zero the amax arrays and every member's scale matrices (by words when
// aligned, else by bytes).
// finalize == true: each member's FP32 scale slots hold amax bits (per-line current scaling);
// replace each by 1 / scale of that amax (words; the scale matrices are whole words).
__global__ __launch_bounds__(kThreads) void grouped_prepare_kernel(PrepareTileCount count,
                                                                   GroupedMeta g, bool finalize,
                                                                   Fp8ScaleSource rule) {
  extern __shared__ int32_t table[];  // grouped_prefix_bytes(g)
  if (grouped_noop(g)) return;
  const GroupedPrepare& p = count.p;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < g.n && !finalize;
       i += int64_t{gridDim.x} * kThreads) {
    if (p.zero_amax[0] != nullptr) p.zero_amax[0][i] = 0u;
    if (p.zero_amax[1] != nullptr) p.zero_amax[1][i] = 0u;
  }
  grouped_for_each_tile<kThreads>(g, count, table, [&](int64_t i, int64_t rows, int64_t local) {
    const int64_t tiles0 = ceil_div_device(scale_bytes(p, 0, rows), kTileBytes);
    const int u = local < tiles0 ? 0 : 1;
    const int64_t tile = u == 0 ? local : local - tiles0;
    const int64_t bytes = scale_bytes(p, u, rows);
    uint8_t* base = p.scales[u] + p.offsets[u][i] * p.elem_bytes[u];
    const int64_t end = min(bytes, (tile + 1) * kTileBytes);
    if (finalize) {
      auto* words = reinterpret_cast<uint32_t*>(base);
      for (int64_t w = tile * (kTileBytes / 4) + threadIdx.x; w < end / 4; w += kThreads) {
        const float amax = scale_rules::amax_from_abs_bits(words[w]);
        const float scale = scale_rules::current_scale(amax, rule.fp8_max, rule.eps, rule.pow2);
        words[w] = __float_as_uint(scale_rules::reciprocal(scale));
      }
      return;
    }
    if (((reinterpret_cast<uintptr_t>(base) | static_cast<uintptr_t>(end)) & 3u) == 0) {
      auto* words = reinterpret_cast<uint32_t*>(base);  // FP32 scales: one store per word
      for (int64_t w = tile * (kTileBytes / 4) + threadIdx.x; w < end / 4; w += kThreads) {
        words[w] = 0u;
      }
      return;
    }
    for (int64_t b = tile * kTileBytes + threadIdx.x; b < end; b += kThreads) base[b] = 0;
  });
}

__global__ void grouped_last_amax_kernel(const uint32_t* src, float* dst, GroupedMeta g) {
  if (grouped_noop(g)) return;
  dst[0] = __uint_as_float(src[g.n - 1]);
}

}  // namespace

namespace {

void launch_prepare(const GroupedPrepare& p, const GroupedMeta& g, bool finalize,
                    const Fp8ScaleSource& rule, cudaStream_t stream) {
  if (g.n == 0) return;
  PrepareTileCount count{p};
  int64_t bound = g.n;  // the amax arrays: one thread per member
  for (int u = 0; u < 2; ++u) {
    if (p.scales[u] == nullptr) continue;
    TESSERA_CHECK(p.offsets[u] != nullptr, "grouped quantize: scale offsets missing");
    const int64_t blocks = p.rows_per_block[u] == 0
                               ? g.n
                               : ceil_div(g.rows_bound, p.rows_per_block[u]) + g.n;
    bound += ceil_div(p.elem_bytes[u] * p.per_block[u] * blocks, kTileBytes) + g.n;
  }
  const unsigned grid = grouped_grid(g, bound);
  grouped_prepare_kernel<<<grid, kThreads, grouped_prefix_bytes(g), stream>>>(count, g, finalize,
                                                                              rule);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_grouped_prepare(const GroupedPrepare& p, const GroupedMeta& g, cudaStream_t stream) {
  launch_prepare(p, g, false, Fp8ScaleSource{}, stream);
}

void launch_grouped_line_scales(const GroupedPrepare& p, const Fp8ScaleSource& rule,
                                const GroupedMeta& g, cudaStream_t stream) {
  for (int u = 0; u < 2; ++u) {
    TESSERA_CHECK(p.scales[u] == nullptr || p.elem_bytes[u] == 4, "grouped quantize: per-line "
                  "FP8 scales are float32");
  }
  launch_prepare(p, g, true, rule, stream);
}

void launch_grouped_last_amax(const uint32_t* src, float* dst, const GroupedMeta& g,
                              cudaStream_t stream) {
  if (g.n == 0) return;
  grouped_last_amax_kernel<<<1, 1, 0, stream>>>(src, dst, g);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
