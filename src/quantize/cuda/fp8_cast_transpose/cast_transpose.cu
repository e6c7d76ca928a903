// FP8 cast with optional transpose (per-tensor current/delayed scaling, and per-row/per-column
// scaling of the rowwise recipe): ONE read of x produces the rowwise codes (M, K) and/or the
// transposed columnwise codes (K, M).
//
// Tiling: a block of 256 threads owns a 128 x 128 tile; a thread owns a 4 x 16 patch (lanes
// l % 8 side by side along K, lane groups and warps along M). It loads the patch with 16-byte
// loads, stores 16 rowwise codes per row (16-byte stores) and, for each of its 16 columns, the 4
// codes of its rows as one 4-byte store into the transposed copy. When both copies
// share one scale (per-tensor) the columnwise codes are the rowwise ones, transposed in registers
// by byte permutes. Edge patches (shapes not multiples of 4 x 16, unaligned views) take a
// per-element path with bounds checks.
#include <algorithm>
#include <cstdint>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/grouped_tiles.cuh"
#include "quantize/cuda/launchers.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/core/dispatch.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail::cuda_quant {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 128;
constexpr int kPatchRows = 4;
constexpr int kPatchCols = 16;

__device__ __forceinline__ float source_scale(const Fp8ScaleSource& s, int64_t line) {
  if (s.scale != nullptr) return s.scale[0];
  const float amax = scale_rules::amax_from_abs_bits(s.amax[line * s.stride]);
  return scale_rules::current_scale(amax, s.fp8_max, s.eps, s.pow2);
}

// Scales of the tile's lines into smem; the first tile along the other dim writes scale_inv.
__device__ __forceinline__ void tile_scales(const Fp8ScaleSource& s, int64_t first, int64_t count,
                                            bool writer, int t, float* out) {
  const int64_t line = first + t;
  const bool per_tensor = s.stride == 0;
  // A per-tensor scale exists (and is written) even for an empty tensor, as on the CPU.
  const bool live = per_tensor ? line == 0 : line < count;
  float v = 1.0f;
  if (live || line < count) v = source_scale(s, line);
  if (writer && live) {
    const float inv = scale_rules::reciprocal(v);
    if (s.scale_inv_out != nullptr) s.scale_inv_out[per_tensor ? 0 : line] = inv;
    if (per_tensor && s.scale_inv_out2 != nullptr) s.scale_inv_out2[0] = inv;
    if (per_tensor && s.scale == nullptr) {
      const float amax = scale_rules::amax_from_abs_bits(s.amax[0]);
      if (s.amax_out != nullptr) s.amax_out[0] = amax;
      if (s.amax_out2 != nullptr) s.amax_out2[0] = amax;
    }
  }
  out[t] = v;
}

// 4 words (rows) of 4 codes each → 4 words (columns) of 4 codes each.
__device__ __forceinline__ void transpose4x4(const uint32_t (&r)[4], uint32_t (&c)[4]) {
  const uint32_t lo01 = __byte_perm(r[0], r[1], 0x5140), hi01 = __byte_perm(r[0], r[1], 0x7362);
  const uint32_t lo23 = __byte_perm(r[2], r[3], 0x5140), hi23 = __byte_perm(r[2], r[3], 0x7362);
  c[0] = __byte_perm(lo01, lo23, 0x5410);
  c[1] = __byte_perm(lo01, lo23, 0x7632);
  c[2] = __byte_perm(hi01, hi23, 0x5410);
  c[3] = __byte_perm(hi01, hi23, 0x7632);
}

// FP8 block scaling: the tile's row / column / whole-tile amaxes → scales in s_row / s_col and
// the scale_inv outputs. v is the thread's 4 x 16 patch at tile offset (lm, lk).
struct BlockScratch {
  uint32_t row_part[8][kTile + 1];   // [lane % 8][row]: max over that lane's 16 columns
  uint32_t col_part[32][kTile + 1];  // [warp * 4 + lane / 8][col]: max over its 4 rows
};

__device__ __forceinline__ void block_scales(const Fp8CastArgs& a,
                                             const float (&v)[kPatchRows][kPatchCols], int lm,
                                             int lk, int64_t mb, int64_t kb, BlockScratch& bs,
                                             uint32_t* scratch, float* s_row, float* s_col) {
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  uint32_t cm[kPatchCols] = {};
#pragma unroll
  for (int r = 0; r < kPatchRows; ++r) {
    uint32_t rm = 0;
#pragma unroll
    for (int c = 0; c < kPatchCols; ++c) {
      const uint32_t b = abs_bits(v[r][c]);
      rm = max(rm, b);
      cm[c] = max(cm[c], b);
    }
    bs.row_part[lane % 8][lm + r] = rm;
  }
#pragma unroll
  for (int c = 0; c < kPatchCols; ++c) bs.col_part[warp * 4 + lane / 8][lk + c] = cm[c];
  __syncthreads();
  uint32_t line = 0;  // thread t < 128: row t of the tile; else column t - 128
  if (t < kTile) {
#pragma unroll
    for (int w = 0; w < 8; ++w) line = max(line, bs.row_part[w][t]);
  } else {
#pragma unroll 8
    for (int l = 0; l < 32; ++l) line = max(line, bs.col_part[l][t - kTile]);
  }
  const Fp8ScaleSource& r = a.row_scale;
  const int64_t m0 = mb * kTile, k0 = kb * kTile;
  if (a.block == Fp8Block::k128x128) {
    const uint32_t tile = block_max<kThreads>(t < kTile ? line : 0u, scratch);
    const float s = scale_rules::current_scale(scale_rules::amax_from_abs_bits(tile), r.fp8_max,
                                               r.eps, r.pow2);
    if (t < kTile) {
      s_row[t] = s;
    } else {
      s_col[t - kTile] = s;
    }
    if (t == 0 && a.row_block_sinv != nullptr) {
      a.row_block_sinv[mb * a.row_block_ld + kb] = scale_rules::reciprocal(s);
    }
    if (t == 0 && a.col_block_sinv != nullptr) {
      a.col_block_sinv[kb * a.col_block_ld + mb] = scale_rules::reciprocal(s);
    }
  } else {
    const float s = scale_rules::current_scale(scale_rules::amax_from_abs_bits(line), r.fp8_max,
                                               r.eps, r.pow2);
    if (t < kTile) {
      s_row[t] = s;
      if (a.row_block_sinv != nullptr && m0 + t < a.rows) {
        a.row_block_sinv[(m0 + t) * a.row_block_ld + kb] = scale_rules::reciprocal(s);
      }
    } else {
      s_col[t - kTile] = s;
      if (a.col_block_sinv != nullptr && k0 + t - kTile < a.cols) {
        a.col_block_sinv[(k0 + t - kTile) * a.col_block_ld + mb] = scale_rules::reciprocal(s);
      }
    }
  }
  __syncthreads();
}

// Tile (mb, kb) of the (a.rows, a.cols) tensor `a`: block-wide (kThreads threads), called by
// the per-tensor kernel (tile = blockIdx) and by the grouped kernel (member-local tiles).
template <class In, DType DT, bool kRow, bool kCol>
__device__ __forceinline__ void cast_transpose_tile(const Fp8CastArgs& a, int64_t mb, int64_t kb,
                                                    bool vec_ok) {
  __shared__ float s_row[kTile], s_col[kTile];
  __shared__ uint32_t scratch[kThreads / 32];
  __shared__ BlockScratch bs;
  const int64_t M = a.rows, K = a.cols;
  const int64_t m0 = mb * kTile, k0 = kb * kTile;
  const int t = threadIdx.x;
  const bool blocked = a.block != Fp8Block::kNone;
  const int warp = t / 32, lane = t % 32;
  // Patch origin inside the tile: 8 lanes side by side cover a 128-column row segment (256
  // contiguous bytes of BF16 per load), 4 lane groups x 8 warps cover the 128 rows.
  const int lm = kPatchRows * (warp * 4 + lane / 8), lk = kPatchCols * (lane % 8);
  const int64_t m = m0 + lm, k = k0 + lk;
  const In* x = static_cast<const In*>(a.x);
  const bool fast = vec_ok && m < M && k < K;  // vec_ok: M % 4 == 0, K % 16 == 0, aligned
  // x's row of each patch row, -1 for a zero row (rows < 2^31: the launchers' tile limits).
  // Through a layout the 4 rows lie in one group (its starts are multiples of 4): one search
  // gives the first and where the group's rows of x end.
  int32_t src[kPatchRows];
  if (a.layout.dst != nullptr) {
    int64_t end = 0;
    const int64_t s0 = a.layout.source_row(m, &end);
#pragma unroll
    for (int r = 0; r < kPatchRows; ++r) {
      src[r] = s0 >= 0 && s0 + r < end ? static_cast<int32_t>(s0 + r) : -1;
    }
  } else {
#pragma unroll
    for (int r = 0; r < kPatchRows; ++r) src[r] = m + r < M ? static_cast<int32_t>(m + r) : -1;
  }

  float v[kPatchRows][kPatchCols];
  if (fast) {
    constexpr int kVec = kVec16<In>;
#pragma unroll
    for (int r = 0; r < kPatchRows; ++r) {
#pragma unroll
      for (int c = 0; c < kPatchCols; c += kVec) {
        float tmp[kVec];
        if (src[r] >= 0) {
          load_vec<In, kVec>(x + int64_t{src[r]} * K + k + c, tmp);
        } else {
#pragma unroll
          for (int j = 0; j < kVec; ++j) tmp[j] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kVec; ++j) v[r][c + j] = tmp[j];
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < kPatchRows; ++r) {
#pragma unroll
      for (int c = 0; c < kPatchCols; ++c) {
        const bool in = m + r < M && src[r] >= 0 && k + c < K;
        v[r][c] = in ? load_float(x[int64_t{src[r]} * K + k + c]) : 0.0f;
      }
    }
  }

  // Scales only after the patch loads are issued: the amax / scale reads they need are global
  // loads too, and waiting for them first would leave the block idle for a full latency.
  if (blocked) {
    block_scales(a, v, lm, lk, mb, kb, bs, scratch, s_row, s_col);
  } else {
    if (kRow && t < kTile) tile_scales(a.row_scale, m0, M, kb == 0, t, s_row);
    if (kCol && t >= kTile) tile_scales(a.col_scale, k0, K, mb == 0, t - kTile, s_col);
    __syncthreads();
  }

  uint32_t rw[kPatchRows][kPatchCols / 4];  // rowwise codes, 4 per word
  if (kRow) {
#pragma unroll
    for (int r = 0; r < kPatchRows; ++r) {
      const float s = s_row[lm + r];
#pragma unroll
      for (int c = 0; c < kPatchCols; c += 4) {
        rw[r][c / 4] =
            encode_fp8x4<DT>(v[r][c] * s, v[r][c + 1] * s, v[r][c + 2] * s, v[r][c + 3] * s);
      }
      if (fast) {
        *reinterpret_cast<uint4*>(a.q_row + (m + r) * K + k) =
            make_uint4(rw[r][0], rw[r][1], rw[r][2], rw[r][3]);
      } else {
#pragma unroll
        for (int c = 0; c < kPatchCols; ++c) {
          if (m + r < M && k + c < K) {
            a.q_row[(m + r) * K + k + c] = static_cast<uint8_t>(rw[r][c / 4] >> (8 * (c % 4)));
          }
        }
      }
    }
  }
  if (kCol) {
    uint32_t cw[kPatchCols];  // column c: codes of rows m..m+3
    if (kRow && a.same_scale) {
#pragma unroll
      for (int g = 0; g < kPatchCols / 4; ++g) {
        const uint32_t rows4[4] = {rw[0][g], rw[1][g], rw[2][g], rw[3][g]};
        uint32_t cols4[4];
        transpose4x4(rows4, cols4);
#pragma unroll
        for (int j = 0; j < 4; ++j) cw[4 * g + j] = cols4[j];
      }
    } else {
#pragma unroll
      for (int c = 0; c < kPatchCols; ++c) {
        const float s = s_col[lk + c];
        cw[c] = encode_fp8x4<DT>(v[0][c] * s, v[1][c] * s, v[2][c] * s, v[3][c] * s);
      }
    }
#pragma unroll
    for (int c = 0; c < kPatchCols; ++c) {
      if (fast) {
        *reinterpret_cast<uint32_t*>(a.q_col + (k + c) * M + m) = cw[c];
      } else if (k + c < K) {
#pragma unroll
        for (int r = 0; r < kPatchRows; ++r) {
          if (m + r < M) a.q_col[(k + c) * M + m + r] = static_cast<uint8_t>(cw[c] >> (8 * r));
        }
      }
    }
  }
  if (a.amax_accum != nullptr) {
    uint32_t mx = 0;
#pragma unroll
    for (int r = 0; r < kPatchRows; ++r) {
#pragma unroll
      for (int c = 0; c < kPatchCols; ++c) mx = max(mx, abs_bits(v[r][c]));
    }
    mx = block_max<kThreads>(mx, scratch);
    if (t == 0) {
      atomic_amax(a.amax_accum, mx);
      if (a.amax_accum2 != nullptr) atomic_amax(a.amax_accum2, mx);
    }
  }
}

template <class In, DType DT, bool kRow, bool kCol>
__global__ __launch_bounds__(kThreads) void fp8_cast_transpose_kernel(Fp8CastArgs a, bool vec_ok) {
  cast_transpose_tile<In, DT, kRow, kCol>(a, blockIdx.y, blockIdx.x, vec_ok);
}

// ---- grouped: member i's arguments from the whole-buffer ones (Fp8GroupedCastArgs) ----------

template <class T>
__device__ __forceinline__ void shift(T*& p, int64_t d) {
  if (p != nullptr) p += d;
}

template <class In>
__device__ __forceinline__ Fp8CastArgs member_cast_args(const Fp8GroupedCastArgs& G,
                                                        const GroupedMeta& g,
                                                        const GroupedTile& w) {
  Fp8CastArgs m = G.cast;
  const int64_t i = w.member, K = g.cols, off = int64_t{w.row0} * K;
  m.x = static_cast<const In*>(G.cast.x) + off;
  m.rows = w.rows;
  m.cols = K;
  shift(m.q_row, off);
  shift(m.q_col, off);
  const int64_t so = g.scale_offsets != nullptr ? g.scale_offsets[i] : 0;
  const int64_t cso = g.col_scale_offsets != nullptr ? g.col_scale_offsets[i] : 0;
  shift(m.row_scale.scale_inv_out, so);
  shift(m.row_scale.scale_inv_out2, cso);
  shift(m.col_scale.scale_inv_out, cso);
  shift(m.row_block_sinv, so);
  shift(m.col_block_sinv, cso);
  switch (G.scales) {
    case Fp8GroupedScales::kTensor:  // one amax / amax target per member
      shift(m.row_scale.amax, i);
      shift(m.col_scale.amax, i);
      shift(m.row_scale.amax_out2, i);
      shift(m.amax_accum, i);
      shift(m.amax_accum2, i);
      break;
    case Fp8GroupedScales::kLine:  // amax bits in the member's own scale_inv slots
      shift(m.row_scale.amax, so);
      shift(m.col_scale.amax, cso);
      break;
    case Fp8GroupedScales::kBlock: {  // the columnwise scale matrix's width follows the rows
      const int64_t mb = (w.rows + kTile - 1) / kTile;
      m.col_block_ld = m.block == Fp8Block::k128x128 ? (mb + 3) / 4 * 4 : mb;
      break;
    }
  }
  return m;
}

// Tiles of a member of `rows` rows: 128 x 128 tiles; per-tensor scales also give an empty member
// one row of tiles (its scale_inv is written as for an empty tensor alone; per-line scale_inv
// come from launch_grouped_line_scales).
struct CastTileCount {
  int32_t tiles_k = 0;
  int32_t min_row_tiles = 0;
  __device__ int64_t operator()(int64_t rows) const {
    return max(int64_t{min_row_tiles}, ceil_div_device(rows, kTile)) * tiles_k;
  }
};

// At least 2 blocks per multiprocessor (at most 128 registers), as the per-tensor kernel gets:
// measured on the H200, the both-usages body at 152 registers (1 block, 8 warps per
// multiprocessor) ran at 31-40 % of DRAM bandwidth against 57-71 % for the per-tensor kernel.
template <class In, DType DT, bool kRow, bool kCol>
__global__ __launch_bounds__(kThreads, 2) void fp8_cast_transpose_grouped_kernel(
    Fp8GroupedCastArgs G, GroupedMeta g, CastTileCount count, bool vec_ok) {
  extern __shared__ int32_t table[];  // grouped_prefix_bytes(g)
  if (grouped_noop(g)) return;
  const uint32_t tk = static_cast<uint32_t>(count.tiles_k);
  grouped_for_each_member_tile<kThreads>(g, count, table, [&](const GroupedTile& w) {
    const Fp8CastArgs m = member_cast_args<In>(G, g, w);
    const uint32_t local = static_cast<uint32_t>(w.local);
    cast_transpose_tile<In, DT, kRow, kCol>(m, local / tk, local % tk,
                                            vec_ok && w.rows % kPatchRows == 0);
  });
}

template <class In, DType DT, bool kRow, bool kCol>
void launch_grouped_kernel(const Fp8GroupedCastArgs& G, const GroupedMeta& g,
                           const CastTileCount& count, bool vec_ok, int64_t tiles_bound,
                           cudaStream_t stream) {
  auto* kernel = fp8_cast_transpose_grouped_kernel<In, DT, kRow, kCol>;
  const size_t smem = grouped_prefix_bytes(g);
  // Persistent: as many blocks as fit at once (more would only recompute the member table).
  const unsigned grid =
      grouped_grid(g, tiles_bound, resident_blocks_per_sm(kernel, kThreads, smem));
  kernel<<<grid, kThreads, smem, stream>>>(G, g, count, vec_ok);
}

template <class In, DType DT>
void launch_grouped_typed(const Fp8GroupedCastArgs& G, const GroupedMeta& g, cudaStream_t stream) {
  const Fp8CastArgs& a = G.cast;
  // Member offsets are multiples of K: with K % 16 == 0 every member row starts aligned.
  const bool vec_ok = g.cols % kPatchCols == 0 && aligned16(a.x) && aligned16(a.q_row) &&
                      aligned16(a.q_col);
  TESSERA_CHECK_STATUS(ceil_div(g.cols, kTile) <= kMaxGroupedTiles, Status::kOutOfRange,
                       "grouped quantize: K = ", g.cols, " is too large for the FP8 cast");
  CastTileCount count;
  count.tiles_k = static_cast<int32_t>(ceil_div(g.cols, kTile));
  count.min_row_tiles = G.scales == Fp8GroupedScales::kTensor ? 1 : 0;
  const int64_t bound = (ceil_div(g.rows_bound, kTile) + g.n) * count.tiles_k;
  if (a.q_row != nullptr && a.q_col != nullptr) {
    launch_grouped_kernel<In, DT, true, true>(G, g, count, vec_ok, bound, stream);
  } else if (a.q_row != nullptr) {
    launch_grouped_kernel<In, DT, true, false>(G, g, count, vec_ok, bound, stream);
  } else {
    launch_grouped_kernel<In, DT, false, true>(G, g, count, vec_ok, bound, stream);
  }
}

template <class In, DType DT>
void launch_typed(const Fp8CastArgs& a, cudaStream_t stream) {
  const bool vec_ok = a.rows % kPatchRows == 0 && a.cols % kPatchCols == 0 && aligned16(a.x) &&
                      aligned16(a.q_row) && aligned16(a.q_col);
  // rows, cols >= 1: an empty input never gets here (quantize_empty_cuda writes its output).
  const dim3 grid(static_cast<unsigned>(ceil_div(a.cols, kTile)),
                  static_cast<unsigned>(ceil_div(a.rows, kTile)));
  if (a.q_row != nullptr && a.q_col != nullptr) {
    fp8_cast_transpose_kernel<In, DT, true, true><<<grid, kThreads, 0, stream>>>(a, vec_ok);
  } else if (a.q_row != nullptr) {
    fp8_cast_transpose_kernel<In, DT, true, false><<<grid, kThreads, 0, stream>>>(a, vec_ok);
  } else {
    fp8_cast_transpose_kernel<In, DT, false, true><<<grid, kThreads, 0, stream>>>(a, vec_ok);
  }
}

}  // namespace

void launch_fp8_cast_transpose(const Fp8CastArgs& a, cudaStream_t stream) {
  if (a.block != Fp8Block::kNone && (a.rows == 0 || a.cols == 0)) return;  // no block exists
  TESSERA_CHECK_STATUS(ceil_div(a.rows, kTile) <= 65535, Status::kOutOfRange,
                       "quantize: x has ", a.rows, " rows; the FP8 cast supports up to ",
                       65535 * int64_t{kTile});
  dispatch_input_fp8(a.in, a.element, "quantize: x", [&](auto tag, auto dt) {
    launch_typed<typename decltype(tag)::type, decltype(dt)::value>(a, stream);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_fp8_cast_transpose_grouped(const Fp8GroupedCastArgs& G, const GroupedMeta& g,
                                       cudaStream_t stream) {
  if (g.n == 0 || g.cols == 0) return;
  dispatch_input_fp8(G.cast.in, G.cast.element, "quantize: x", [&](auto tag, auto dt) {
    launch_grouped_typed<typename decltype(tag)::type, decltype(dt)::value>(G, g, stream);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::detail::cuda_quant
