// MXFP8, rowwise usage alone (1x32 blocks), for K % 32 == 0 and 16-byte aligned input and codes:
// the (M, K) input is a flat sequence of 8-element chunks (a 32-element block never crosses a
// row). A warp takes kUnroll x 32 consecutive chunks per step (lane l: chunks base + 32 u + l,
// kUnroll independent 16-byte loads in flight); the 4 lanes of a block split the kUnroll block
// amaxes among themselves (reduce-scatter), so each lane computes and stores kUnroll / 4 scales
// and every lane writes its 8 codes per chunk with one 8-byte store. Compact scales are the flat
// block index, swizzled ones take (row, block) from a division without a divide instruction.
// Warps walk the chunks grid-stride.
#include <cstdint>

#include "quantize/cuda/launch_config.h"
#include "quantize/cuda/mxfp8/mxfp8_launch.h"
#include "quantize/cuda/mxfp8/mxfp8_tile.cuh"
#include "tessera/core/dispatch.h"

namespace tessera::detail::cuda_quant {
namespace {

using mx::Chunk;
using mx::MxTensor;

constexpr int kThreads = 256;
// Chunks per lane per step (independent 16-byte loads in flight). Measured on the H200
// (16384 x 7168 BF16): 2 → 3.6 TB/s, 4 → 4.0, 8 → 4.0 (more registers); a grid-stride loop
// capped at 4 or 8 blocks per multiprocessor 3.3-3.7 instead of one step per warp.
constexpr int kUnroll = 4;

// chunks = M * K / 8; nb = K / 32 as a divider (M * nb < 2^31).
template <class In, DType DT>
__global__ __launch_bounds__(kThreads) void mxfp8_rowwise_kernel(MxTensor<In> t, bool floor_rule,
                                                                 bool swizzled, DivMod31 nb,
                                                                 int64_t chunks) {
  const int lane = threadIdx.x % 32;
  const int64_t warp0 = (int64_t{blockIdx.x} * kThreads + threadIdx.x) / 32;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t base = warp0 * 32 * kUnroll; base < chunks; base += warps * 32 * kUnroll) {
    Chunk<In> raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * 32 + lane;
      if (c < chunks) {
        raw[u].load(t.x + c * mx::kChunk);
      } else {
        raw[u].zero();
      }
    }
    // Block amaxes: lane group g = lane / 4 holds block base / 4 + 8 u + g at step u; a
    // reduce-scatter leaves steps [q U/4, (q+1) U/4) (q = lane % 4) with this lane, which
    // computes and stores their scales; gather4 hands every lane its multipliers back.
    uint32_t part[kUnroll], mine[kUnroll / 4];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) part[u] = raw[u].row_acc();
    mx::reduce_scatter4<kUnroll>(part, mine, 2, 1,
                                 [](uint32_t x, uint32_t y) { return Chunk<In>::acc_max(x, y); });
    float mult_mine[kUnroll / 4], mult[kUnroll];
#pragma unroll
    for (int i = 0; i < kUnroll / 4; ++i) {
      const int u = (lane % 4) * (kUnroll / 4) + i;
      const uint8_t e = mx::mx_scale<DT>(Chunk<In>::acc_word_bits(mine[i]), floor_rule);
      mult_mine[i] = scale_rules::e8m0_multiplier(e);
      if (base + u * 32 + (lane & ~3) < chunks) {
        const uint32_t b = static_cast<uint32_t>(base / 4) + u * 8 + lane / 4;
        if (swizzled) {
          const uint32_t r = nb.div(b), kb = b - r * nb.d;
          t.s_row[swizzled_offset32(r, kb, static_cast<uint32_t>(t.row_pad))] = e;
        } else {
          t.s_row[b] = e;
        }
      }
    }
    mx::gather4<kUnroll>(mult_mine, mult, 2, 1);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * 32 + lane;  // chunks % 4 == 0: a block is all in or all out
      if (c < chunks) {
        *reinterpret_cast<Vec<uint8_t, mx::kChunk>*>(t.q_row + c * mx::kChunk) =
            mx::encode_chunk<DT>(raw[u], mult[u]);
      }
    }
  }
  if (swizzled) {
    mx::zero_swizzle_padding(t.s_row, t.M, t.K / mx::kBlock, t.row_pad, warp0 * 32 + lane,
                             warps * 32);
  }
}

template <class In, DType DT>
void launch_typed(const MxArgs& a, cudaStream_t stream) {
  const MxTensor<In> t{static_cast<const In*>(a.x), a.rows, a.cols, a.q_row, a.s_row,
                       nullptr, nullptr, a.s_row_padded_cols, 0, LayoutRows{}};
  const int64_t chunks = a.rows * a.cols / mx::kChunk;
  const int64_t blocks = ceil_div(chunks, int64_t{kThreads} * kUnroll);  // one step per warp
  const DivMod31 nb = DivMod31::make(static_cast<uint32_t>(a.cols / mx::kBlock));
  mxfp8_rowwise_kernel<In, DT><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      t, a.floor_rule, a.swizzled, nb, chunks);
}

}  // namespace

void launch_mxfp8_rowwise_stream(const MxArgs& a, cudaStream_t stream) {
  dispatch_input_fp8(a.in, a.element, "quantize: x", [&](auto tag, auto dt) {
    launch_typed<typename decltype(tag)::type, decltype(dt)::value>(a, stream);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
