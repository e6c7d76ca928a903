// The wide form of the activation passes of the per-member scaling (member_scaling.h): 16-bit x
// on the 16-row grid, both copies (the columnwise copy per (member, column), and x's rowwise copy
// when asked for) from an amax pass and an encode pass over 128 x 256 tiles: one cooperative
// launch where the tiles fit on the device at once, else the separate kernels. Per-tensor
// scaling (current or delayed) takes the same kernels (member_tensor_wide). Same rules and bits
// as the CPU loops. The per-member and chunked forms are in member_scaling.cu.
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "core/env_flag.h"
#include "nn/member_columns.cuh"
#include "nn/member_scaling.h"
#include "nn/member_scaling_device.cuh"
#include "quantize/cuda/device_io.cuh"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/half.h"

namespace tessera::nn::detail::cuda {
namespace {

namespace cg = cooperative_groups;

// The member owning row r (the same r in every lane), found by the whole warp: a 32-way search
// over the starts, each round one load per lane (two rounds up to 1024 members), instead of
// log2(G) dependent loads in every lane; the same answer as Members::member_of.
__device__ __forceinline__ int64_t warp_member_of(const Members& m, int64_t r, int lane) {
  if (m.starts == nullptr) return m.member_of(r);
  const int64_t last_end = m.starts[m.groups];  // issued with the first round's loads
  int64_t lo = 0, n = m.groups;  // the answer: the last g in [lo, lo + n) with starts[g] <= r
  while (n > 1) {
    const int64_t step = (n + 31) / 32;
    const int64_t g = lo + lane * step;
    const bool le = lane * step < n && m.starts[g] <= r;
    const unsigned b = __ballot_sync(0xffffffffu, le);
    const int last = b == 0 ? 0 : 31 - __clz(static_cast<int>(b));
    const int64_t next = lo + last * step;
    n = (lo + n - next) < step ? (lo + n - next) : step;
    lo = next;
  }
  return r >= last_end ? -1 : lo;
}

// The 16 rows [r0, r0 + 16) of a warp in a layout whose members start on multiples of 16 rows
// (Members::aligned16): one member (or none: past the last), looked up once by the warp.
// source(i): the row of x holding row r0 + i, or -1 (padding, or no member).
struct WarpRows {
  int64_t g = -1, first = -1, live = 0;  // rows r0 + i, i < live, read x row first + i
  __device__ WarpRows(const Members& m, int64_t r0, int64_t rows, int lane) {
    if (r0 >= rows) return;
    g = warp_member_of(m, r0, lane);
    if (g < 0) {
      if (m.sources == nullptr) first = r0, live = rows - r0;  // the matrix's own tail rows
      return;
    }
    const int64_t off = r0 - m.begin(g);
    const int64_t n = m.sources ? m.sources[g + 1] - m.sources[g] : m.end(g) - m.begin(g);
    first = (m.sources ? m.sources[g] : m.begin(g)) + off;
    live = n - off;
    if (r0 + live > rows) live = rows - r0;
  }
  __device__ int64_t source(int i) const { return i < live ? first + i : -1; }
};

// The wide form of the activation passes (16-bit x, cols % 8 == 0, aligned): lane l takes
// columns [8l, 8l + 8) of the CTA's 256 with one 16-byte load per row, so a warp reads 512
// contiguous bytes of a row; the row maxima (for the rowwise copy, when asked for) are warp
// reductions folded into row_amax[r] by atomicMax (one per row and column tile). Pass 2
// (chunk_scales_kernel) turns the slots' and the rows' maxima into multipliers. Pass 3 writes
// the row's codes 8 bytes per lane and stages the columns' codes as 4-row words per column.
constexpr int kWideCols = 256;
constexpr int kWideWords = kChunkRows / 4 + 1;  // 4-byte words per staged column (+1: banks)

constexpr int kBatch = 8;  // rows whose loads a lane issues before it uses the first (amax)

// The input kind of x given as E4M3 codes of a kRowwise copy (MemberColumnsArgs::
// x_row_scale_inv): a lane's 8 elements are 8 bytes, and their values decode(code) · the row's
// scale_inv (dequantize()'s FP32 product).
struct E4M3Rows {};

// A lane's 8 elements of x's row `row` from column c0 (E4M3Rows: one 8-byte load, the row's
// scale_inv bits in the third word).
__device__ __forceinline__ uint4 load_codes8(const MemberColumnsArgs& a, int64_t row, int64_t c0) {
  const uint2 v =
      *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(a.x) + row * a.cols + c0);
  return make_uint4(v.x, v.y, __float_as_uint(a.x_row_scale_inv[row]), 0u);
}

// Element e (a compile-time index once unrolled) of 8 bf16/fp16 values in a 16-byte word (or of
// 8 codes and their row scale, E4M3Rows), as a float, from registers (no address taken: the
// word stays out of local memory). A zero word is 8 zeros.
template <class In>
__device__ __forceinline__ float elem_of(const uint4& v, int e) {
  if constexpr (std::is_same_v<In, E4M3Rows>) {
    // The hardware's exact E4M3 -> FP16 conversion (every E4M3 value is an FP16 value), then
    // FP16 -> FP32: the values formats::decode_e4m3 gives, without its bit arithmetic.
    const uint32_t w = e < 4 ? v.x : v.y;
    const auto code8 = static_cast<__nv_fp8_storage_t>(w >> (8 * (e % 4)));
    const float code = __half2float(__half(__nv_cvt_fp8_to_halfraw(code8, __NV_E4M3)));
    return __fmul_rn(code, __uint_as_float(v.z));
  } else {
    const uint32_t w = e < 2 ? v.x : (e < 4 ? v.y : (e < 6 ? v.z : v.w));
    const uint32_t h = e % 2 ? w >> 16 : w & 0xffffu;
    if constexpr (std::is_same_v<In, bf16>) return __uint_as_float(h << 16);
    else return formats::decode_fp16(static_cast<uint16_t>(h));
  }
}

// Pass 1 of the wide form on tile (bx: kWideCols columns, by: kChunkRows rows): the (member,
// column) maxima into the zeroed slots, the rows' into the zeroed row_amax (when not null).
template <class In>
__device__ __forceinline__ void wide_amax_tile(const MemberColumnsArgs& a, uint32_t* slots,
                                               uint32_t* row_amax, int64_t bx, int64_t by) {
  __shared__ uint32_t part[kColWarps][kWideCols];  // each warp's column maxima
  __shared__ int64_t part_g[kColWarps];            // and its member
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t c0 = bx * kWideCols + 8 * lane;
  const bool ok = c0 < a.cols;  // cols % 8 == 0: the lane's 8 columns are all in or all out
  const int64_t r_begin = by * kChunkRows + warp * kWarpRows;
  const In* x = static_cast<const In*>(a.x);
  const WarpRows span(a.members, r_begin, a.rows, lane);  // kWarpRows == 16 rows, one member
  uint32_t m[8] = {};
  for (int b = 0; b < kWarpRows; b += kBatch) {
    uint4 raw[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t src = span.source(b + j);
      if constexpr (std::is_same_v<In, E4M3Rows>) {
        raw[j] = ok && src >= 0 ? load_codes8(a, src, c0) : make_uint4(0, 0, 0, 0);
      } else {
        raw[j] = ok && src >= 0 ? *reinterpret_cast<const uint4*>(x + src * a.cols + c0)
                                : make_uint4(0, 0, 0, 0);
      }
    }
    // Rows past the matrix were loaded as zeros: they change no maximum. The row maxima of
    // each 4 rows over the warp take 6 shuffles (not 4 x 5): the exchanges over lane bits 16
    // and 8 halve the rows a lane keeps, bits 4, 2 and 1 finish the one left; lane l then holds
    // row 2·bit4(l) + bit3(l) of the four.
#pragma unroll
    for (int q = 0; q < kBatch; q += 4) {
      uint32_t rm[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        rm[j] = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint32_t v = scale_rules::abs_bits(elem_of<In>(raw[q + j], i));
          m[i] = max(m[i], v);
          rm[j] = max(rm[j], v);
        }
      }
      if (row_amax == nullptr) continue;
      const bool hi16 = lane & 16, hi8 = lane & 8;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint32_t keep = hi16 ? rm[i + 2] : rm[i], give = hi16 ? rm[i] : rm[i + 2];
        rm[i] = max(keep, __shfl_xor_sync(0xffffffffu, give, 16));
      }
      uint32_t v = max(hi8 ? rm[1] : rm[0], __shfl_xor_sync(0xffffffffu, hi8 ? rm[0] : rm[1], 8));
#pragma unroll
      for (int sh = 4; sh > 0; sh /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, sh));
      const int64_t r = r_begin + b + q + (hi16 ? 2 : 0) + (hi8 ? 1 : 0);
      if (lane % 8 == 0 && v != 0 && r < a.rows) atomicMax(row_amax + r, v);
    }
  }
  // One atomic per (member, column) run of warps: the CTA's 8 warps hold 16 rows each, mostly
  // of one member, so this folds 8 warps' maxima before they reach global memory.
#pragma unroll
  for (int i = 0; i < 8; ++i) part[warp][8 * lane + i] = m[i];
  if (lane == 0) part_g[warp] = span.g;
  __syncthreads();
  const int c = static_cast<int>(threadIdx.x);  // kColThreads == kWideCols: one column each
  if (bx * kWideCols + c >= a.cols) return;
  uint32_t run = 0;
  int64_t g = -1;
  for (int w = 0; w < kColWarps; ++w) {
    if (part_g[w] != g) {
      if (g >= 0 && run != 0) atomicMax(slots + g * a.cols + bx * kWideCols + c, run);
      g = part_g[w];
      run = 0;
    }
    run = max(run, part[w][c]);
  }
  if (g >= 0 && run != 0) atomicMax(slots + g * a.cols + bx * kWideCols + c, run);
}
template <class In>
__global__ void __launch_bounds__(kColThreads) wide_amax_kernel(MemberColumnsArgs a,
                                                                uint32_t* slots,
                                                                uint32_t* row_amax) {
  wide_amax_tile<In>(a, slots, row_amax, blockIdx.x, blockIdx.y);
}
static_assert(kColThreads == kWideCols, "wide_amax_kernel folds one column per thread");

// The stored scales of the (member, column) slots no warp owns in the folded wide encode: a
// member with no rows, or whose first row lies past the matrix (wide_encode_kernel's owner is
// the warp whose first row is the member's first). No amax pass row reaches such a member, so
// its slots keep the memset's 0: each of its scales is amax 0's, computed once. The CTAs of
// chunk 0 write them for their columns [k0, k0 + kWideCols), one column per thread, the
// members found 256 at a time (a check per thread, a ballot). Called by every thread of the
// CTA (it synchronizes).
__device__ __forceinline__ void fold_empty_member_scales(const MemberColumnsArgs& a, int64_t k0) {
  __shared__ uint32_t empty[kColWarps];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t c = k0 + threadIdx.x;  // kColThreads == kWideCols
  const moe::BlockScale zero = moe::block_scale(a.quant, 0u);
  for (int64_t base = 0; base < a.members.groups; base += kColThreads) {
    const int64_t g = base + threadIdx.x;
    bool none = false;
    if (g < a.members.groups) {
      const int64_t begin = a.members.begin(g);
      none = !(begin < a.members.end(g) && begin < a.rows);
    }
    const uint32_t vote = __ballot_sync(0xffffffffu, none);
    __syncthreads();  // the previous round's reads of `empty` are done
    if (lane == 0) empty[warp] = vote;
    __syncthreads();
    if (c >= a.cols) continue;
    for (int w = 0; w < kColWarps; ++w) {
      for (uint32_t bits = empty[w]; bits != 0; bits &= bits - 1) {
        const int64_t m = base + 32 * w + (__ffs(static_cast<int>(bits)) - 1);
        moe::store_block_scale(a.quant, zero, a.scale_inv, m * a.cols + c);
      }
    }
  }
}

// The FP8 codes of four products, byte i: y_i (the hardware cvt.rn.satfinite in pairs; the
// same bits as code()).
template <bool kE5M2>
__device__ __forceinline__ uint32_t codes4(float y0, float y1, float y2, float y3) {
  using namespace ::tessera::detail::cuda_quant;
  return kE5M2 ? encode_fp8x4<DType::kFloat8E5M2>(y0, y1, y2, y3)
               : encode_fp8x4<DType::kFloat8E4M3>(y0, y1, y2, y3);
}

// Pass 3 of the wide form. Each warp loads its 16 rows (one member) in two batches of 8 (one
// 16-byte load per lane and row, all 8 issued before the first is used), writes each row's
// codes and stages its columns' codes as 4-row words. The CTA then writes its columns: per
// store, 8 lanes write one column's 128 bytes (a whole line) and a warp four columns.
// Per (member, column) scaling (!kPerMember): `mult` holds the slots' abs-bits maxima and
// `row_mult` the rows', and the multipliers are taken from them here (the scales pass folded
// in): the warp holding a member's first row stores the member's column scales, lane j of
// column tile 0 row j's, fold_empty_member_scales those of members with no rows. kPerMember
// (per-tensor scaling, MemberTensorArgs): mult holds one multiplier per member for both copies,
// and rows in no member or past a member's source rows (padding) get code 0 in both.
template <class In, bool kE5M2, bool kPerMember>
__device__ __forceinline__ void wide_encode_tile(const MemberColumnsArgs& a, const uint32_t* mult,
                                                 const uint32_t* row_mult, int64_t bx,
                                                 int64_t by) {
  __shared__ uint32_t tile[kWideCols][kWideWords];
  __shared__ int64_t piece_g[kColWarps];  // the member of each warp's 16 rows
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t k0 = bx * kWideCols;
  const int64_t c0 = k0 + 8 * lane;
  const bool ok = c0 < a.cols;
  const int64_t chunk0 = by * kChunkRows;
  const int64_t r_begin = chunk0 + warp * kWarpRows;
  const bool rows_out = a.row_data != nullptr;
  const WarpRows span(a.members, r_begin, a.rows, lane);  // kWarpRows == 16 rows, one member
  const int64_t g = span.g;
  if (lane == 0) piece_g[warp] = g;
  float f[8] = {};  // the lane's column multipliers (16-byte aligned: cols % 8 == 0)
  if (kPerMember && g >= 0) {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = __uint_as_float(mult[g]);
  } else if (!kPerMember && g >= 0 && ok) {
    const uint4 lo = *reinterpret_cast<const uint4*>(mult + g * a.cols + c0);
    const uint4 hi = *reinterpret_cast<const uint4*>(mult + g * a.cols + c0 + 4);
    const uint32_t bits[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    // The warp holding the member's first row stores its scales (one per slot).
    const bool owner = a.members.begin(g) == r_begin;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const moe::BlockScale bs = moe::block_scale(a.quant, bits[e]);
      if (owner) moe::store_block_scale(a.quant, bs, a.scale_inv, g * a.cols + c0 + e);
      f[e] = bs.multiplier;
    }
  }
  if (!kPerMember && by == 0) fold_empty_member_scales(a, k0);
  const In* src = static_cast<const In*>(a.x) + (span.first >= 0 ? span.first : 0) * a.cols + c0;
  const int64_t rows_here = a.rows - r_begin;  // rows of the matrix among the warp's 16
  constexpr int kBatchRows = 8;
#pragma unroll
  for (int b = 0; b < kWarpRows; b += kBatchRows) {
    uint4 raw[kBatchRows];
#pragma unroll
    for (int j = 0; j < kBatchRows; ++j) {
      const bool in = ok && b + j < span.live;
      if constexpr (std::is_same_v<In, E4M3Rows>) {
        raw[j] = in ? load_codes8(a, span.first + b + j, c0) : make_uint4(0, 0, 0, 0);
      } else {
        raw[j] = in ? *reinterpret_cast<const uint4*>(src + (b + j) * a.cols)
                    : make_uint4(0, 0, 0, 0);
      }
    }
    // The batch's 8 row multipliers, or the member's (kPerMember). Lane j < 8 takes row j's
    // from its amax bits (and, in column tile 0, stores its scale); the others read it from
    // that lane.
    float rf[kBatchRows];
    if (kPerMember) {
#pragma unroll
      for (int j = 0; j < kBatchRows; ++j) rf[j] = f[0];
    } else {
      const int64_t r = r_begin + b + lane;
      const bool mine = rows_out && lane < kBatchRows && r < a.rows;
      const moe::BlockScale bs = moe::block_scale(a.row_quant, mine ? row_mult[r] : 0u);
      if (mine && bx == 0) moe::store_block_scale(a.row_quant, bs, a.row_scale_inv, r);
#pragma unroll
      for (int j = 0; j < kBatchRows; ++j) rf[j] = __shfl_sync(0xffffffffu, bs.multiplier, j);
    }
    if (rows_out && ok) {  // every row of the matrix, as the standalone rowwise quantizer
#pragma unroll
      for (int j = 0; j < kBatchRows; ++j) {
        if (b + j >= rows_here) break;  // warp-uniform
        float y[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) y[e] = __fmul_rn(elem_of<In>(raw[j], e), rf[j]);
        uint2 out = make_uint2(codes4<kE5M2>(y[0], y[1], y[2], y[3]),
                               codes4<kE5M2>(y[4], y[5], y[6], y[7]));
        if (kPerMember && (g < 0 || b + j >= span.live)) out = make_uint2(0, 0);
        *reinterpret_cast<uint2*>(a.row_data + (r_begin + b + j) * a.cols + c0) = out;
      }
    }
    // Column 8·lane + e, rows [4q, 4q + 4) of the batch: one word, staged at tile row
    // 32·e + lane (a warp's stores hit 32 banks); rows in no member (the layout's tail): 0.
#pragma unroll
    for (int q = 0; q < kBatchRows / 4; ++q) {
      const int word = (warp * kWarpRows + b) / 4 + q;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float y[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          y[j] = __fmul_rn(elem_of<In>(raw[4 * q + j], e), f[e]);
          if (kPerMember && b + 4 * q + j >= span.live) y[j] = 0.0f;  // padding: code 0
        }
        tile[32 * e + lane][word] = g >= 0 ? codes4<kE5M2>(y[0], y[1], y[2], y[3]) : 0u;
      }
    }
  }
  __syncthreads();
  // Store i of warp w: lane l writes bytes [16·p, 16·p + 16) (piece p = l % 8: rows 16p..16p+15
  // of the chunk) of column 8·(4w + l / 8) + i, staged at tile row 32·i + 4w + l / 8: 8 lanes
  // one column's 128 bytes, the warp's 32 reads on 32 banks. Piece p of an activation copy sits
  // at its own rows; of a weight's Wᵀ per member (keep_rows == 0), at member g's block, rows
  // counted from the member's first.
  const int64_t live = a.rows - chunk0 < kChunkRows ? a.rows - chunk0 : int64_t{kChunkRows};
  const int p = lane % 8, l = 4 * warp + lane / 8;
  if (16 * p >= live) return;
  const int64_t gp = piece_g[p];
  if (gp < 0 && a.keep_rows == 0) return;  // a weight has no rows outside its members
  const int64_t at = chunk0 + 16 * p - (a.keep_rows == 0 ? a.members.begin(gp) : 0);
  uint8_t* base = a.data + (gp >= 0 ? gp * a.g_stride : 0) + at;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int c = 8 * l + i;
    if (k0 + c >= a.cols) break;  // columns in order: the rest are out too
    const uint32_t* t4 = &tile[32 * i + l][4 * p];
    const uint4 v = make_uint4(t4[0], t4[1], t4[2], t4[3]);
    uint8_t* dst = base + (k0 + c) * a.k_stride;
    if (16 * p + 16 <= live) {
      *reinterpret_cast<uint4*>(dst) = v;
    } else {
      for (int e = 0; 16 * p + e < live; ++e) {  // word e / 4 picked by value: no local array
        const uint32_t w = e < 4 ? v.x : (e < 8 ? v.y : (e < 12 ? v.z : v.w));
        dst[e] = static_cast<uint8_t>(w >> (8 * (e % 4)));
      }
    }
  }
}

template <class In, bool kE5M2, bool kPerMember>
__global__ void __launch_bounds__(kColThreads, 3) wide_encode_kernel(MemberColumnsArgs a,
                                                                  const uint32_t* mult,
                                                                  const uint32_t* row_mult) {
  wide_encode_tile<In, kE5M2, kPerMember>(a, mult, row_mult, blockIdx.x, blockIdx.y);
}

// Per-tensor scaling through the wide kernels: member g's amax is the maximum of its (member,
// column) slots (wide_amax_kernel's abs bits; NaN wins, as member_amax_kernel's rows), then its
// multiplier and the values member_encode_kernel's block 0 writes (write_member_scales). One CTA
// per member.
__device__ __forceinline__ void member_slot_scales_of(const MemberTensorArgs& a,
                                                      const uint32_t* slots, uint32_t* mult,
                                                      int64_t g) {
  __shared__ uint32_t part[8];
  uint32_t m = 0;
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) m = max(m, slots[g * a.cols + c]);
#pragma unroll
  for (int sh = 16; sh > 0; sh /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, sh));
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < 8; ++w) m = max(m, part[w]);
  mult[g] = __float_as_uint(write_member_scales(a, m, g));
}

__global__ void __launch_bounds__(256) member_slot_scales_kernel(MemberTensorArgs a,
                                                                  const uint32_t* slots,
                                                                  uint32_t* mult) {
  member_slot_scales_of(a, slots, mult, blockIdx.x);
}

// The wide form's passes in one cooperative launch: the scratch zeroed (`zero_bytes` of it
// from `slots`), the (member, column) maxima (pass 1), for
// kPerMember the members' multipliers (`t`, into `mult`), then the codes; a grid-wide barrier
// between them. Launched with one CTA per tile (wide_passes); a CTA loops over tiles otherwise,
// the encode newest first. The same tile functions as the separate launches: the same bits.
// Two CTAs per SM (not the encode kernel's three): with both passes in one function, 80
// registers a thread spill.
template <class In, bool kE5M2, bool kPerMember>
__global__ void __launch_bounds__(kColThreads, 2)
    wide_fused_kernel(MemberColumnsArgs a, MemberTensorArgs t, uint32_t* slots,
                      uint32_t* row_amax, uint32_t* mult, int64_t zero_bytes) {
  cg::grid_group grid = cg::this_grid();
  const int64_t nx = (a.cols + kWideCols - 1) / kWideCols;
  const int64_t tiles = nx * ((a.rows + kChunkRows - 1) / kChunkRows);
  if (zero_bytes > 0) {
    auto* z = reinterpret_cast<uint8_t*>(slots);
    const int64_t words = zero_bytes / 16, stride = int64_t{gridDim.x} * blockDim.x;
    for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < words; i += stride)
      reinterpret_cast<uint4*>(z)[i] = make_uint4(0, 0, 0, 0);
    if (blockIdx.x == 0 && threadIdx.x < zero_bytes % 16) z[words * 16 + threadIdx.x] = 0;
    grid.sync();
  }
  for (int64_t i = blockIdx.x; i < tiles; i += gridDim.x) {
    wide_amax_tile<In>(a, slots, row_amax, i % nx, i / nx);
    __syncthreads();  // this tile's shared memory read before the next tile writes it
  }
  grid.sync();
  if constexpr (kPerMember) {
    for (int64_t g = blockIdx.x; g < t.members.groups; g += gridDim.x) {
      member_slot_scales_of(t, slots, mult, g);
      __syncthreads();
    }
    grid.sync();
  }
  for (int64_t i = blockIdx.x; i < tiles; i += gridDim.x) {
    const int64_t u = tiles - 1 - i;
    wide_encode_tile<In, kE5M2, kPerMember>(a, kPerMember ? mult : slots, row_amax, u % nx,
                                            u / nx);
    __syncthreads();
  }
}

// Whether the wide passes run as one cooperative launch: the device supports it, and
// TESSERA_FUSED_QUANT is not "0" (a diagnostic switch: the separate launches, same bits).
bool cooperative_wide(int device) {
  static const bool allowed = ::tessera::detail::env_flag("TESSERA_FUSED_QUANT", true);
  static std::atomic<int> supported[64];  // per device: 0 unknown, 1 yes, 2 no
  if (!allowed || device < 0 || device >= 64) return false;
  int known = supported[device].load(std::memory_order_relaxed);
  if (known == 0) {
    int attr = 0;
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&attr, cudaDevAttrCooperativeLaunch, device));
    known = attr ? 1 : 2;
    supported[device].store(known, std::memory_order_relaxed);
  }
  return known == 1;
}

// CTAs of wide_fused_kernel the device holds at once (the occupancy, read once per device).
template <class In, bool kE5M2, bool kPerMember>
int64_t wide_fused_resident(int device) {
  static std::atomic<int> resident[64];
  int cap = resident[device].load(std::memory_order_relaxed);
  if (cap == 0) {
    int per_sm = 0, sms = 0;
    TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, wide_fused_kernel<In, kE5M2, kPerMember>, kColThreads, 0));
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    cap = std::max(1, per_sm * sms);
    resident[device].store(cap, std::memory_order_relaxed);
  }
  return cap;
}

// One cooperative launch of wide_fused_kernel: one CTA per tile (the caller checked that they
// fit on the device at once).
template <class In, bool kE5M2, bool kPerMember>
void launch_wide_fused(const MemberColumnsArgs& a, const MemberTensorArgs& t, uint32_t* slots,
                       uint32_t* row_amax, uint32_t* mult, int64_t zero_bytes, int64_t tiles,
                       cudaStream_t s) {
  auto* kernel = wide_fused_kernel<In, kE5M2, kPerMember>;
  MemberColumnsArgs ca = a;
  MemberTensorArgs ta = t;
  void* args[] = {&ca, &ta, &slots, &row_amax, &mult, &zero_bytes};
  TESSERA_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel),
                                                 dim3(static_cast<unsigned>(tiles)),
                                                 dim3(kColThreads), args, 0, s));
}

// The wide form's passes on s: the (member, column) maxima into the slots (and the rows' into
// row_amax, when not null) — the first `zero_bytes` of the scratch at `slots` zeroed first — then
// the codes. kPerMember: `scales()` (the launch that turns the
// slots into one multiplier per member, in `mult`; in the cooperative form, the same per member
// from `t`) runs between them. Per (member, column): the encode takes the multipliers from the
// maxima itself (mult = slots), and `scales()` (writing every stored scale) runs only for a
// matrix of no rows, where no encode CTA does.
template <bool kPerMember, class Scales>
void wide_passes(const MemberColumnsArgs& a, const MemberTensorArgs& t, uint32_t* slots,
                 uint32_t* row_amax, uint32_t* mult, int64_t zero_bytes, const char* what,
                 Scales scales, cudaStream_t s) {
  const dim3 wgrid(static_cast<unsigned>((a.cols + kWideCols - 1) / kWideCols),
                   chunk_grid_rows(a, what));
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t tiles = int64_t{wgrid.x} * wgrid.y;
  if (a.x_row_scale_inv != nullptr) {  // x as E4M3 codes (columns_from_codes): separate kernels
    if constexpr (!kPerMember) {
      if (zero_bytes > 0) TESSERA_CUDA_CHECK(cudaMemsetAsync(slots, 0, zero_bytes, s));
      if (a.rows > 0) {
        wide_amax_kernel<E4M3Rows><<<wgrid, kColThreads, 0, s>>>(a, slots, row_amax);
        wide_encode_kernel<E4M3Rows, false, false><<<wgrid, kColThreads, 0, s>>>(a, mult,
                                                                               row_amax);
      } else {
        scales();
      }
      TESSERA_CUDA_CHECK(cudaGetLastError());
    }
    return;
  }
  dispatch_float_input(a.x_dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    if constexpr (sizeof(In) == 2) {  // wide_columns: 16-bit input only
      // One launch where the tiles fit on the device at once (a small matrix: the launches,
      // not the bytes, are the cost); above, the separate kernels, whose more CTAs per SM keep
      // more loads in flight (a loop over tiles in the fused kernel measured slower).
      const bool e5m2 = a.quant.e5m2;
      if (a.rows > 0 && cooperative_wide(device) &&
          tiles <= (e5m2 ? wide_fused_resident<In, true, kPerMember>(device)
                         : wide_fused_resident<In, false, kPerMember>(device))) {
        (e5m2 ? launch_wide_fused<In, true, kPerMember>
              : launch_wide_fused<In, false, kPerMember>)(a, t, slots, row_amax, mult,
                                                          zero_bytes, tiles, s);
        return;
      }
      if (zero_bytes > 0) TESSERA_CUDA_CHECK(cudaMemsetAsync(slots, 0, zero_bytes, s));
      if (a.rows > 0) wide_amax_kernel<In><<<wgrid, kColThreads, 0, s>>>(a, slots, row_amax);
      if (kPerMember || a.rows == 0) scales();
      auto* encode = a.quant.e5m2 ? wide_encode_kernel<In, true, kPerMember>
                                  : wide_encode_kernel<In, false, kPerMember>;
      if (a.rows > 0) encode<<<wgrid, kColThreads, 0, s>>>(a, mult, row_amax);
      TESSERA_CUDA_CHECK(cudaGetLastError());
    }
  });
}
}  // namespace

void wide_member_columns(const MemberColumnsArgs& a, uint32_t* slots, uint32_t* row_amax,
                         int64_t zero_bytes, cudaStream_t s) {
  const int64_t n = a.members.groups * a.cols + (row_amax != nullptr ? a.rows : 0);
  const unsigned sgrid = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  wide_passes<false>(a, MemberTensorArgs{}, slots, row_amax, slots, zero_bytes,
                     "quantize_member_columns",
                     [&] { chunk_scales_kernel<<<sgrid, 256, 0, s>>>(a, slots, row_amax); }, s);
}

namespace {
// The wide kernels' view of a per-tensor quantization: the columnwise copy (cols, rows) as an
// activation's, the rowwise copy as the fused row codes; uniform members of a multiple of 16
// rows (a weight's experts) lie on the 16-row grid as the step's padded layouts do.
MemberColumnsArgs wide_tensor_args(const MemberTensorArgs& t) {
  MemberColumnsArgs a{t.x, t.x_dtype, t.rows, t.cols, t.members, t.quant, t.col_codes,
                      0, t.rows, 1, nullptr};
  if (a.members.starts == nullptr && a.members.uniform % 16 == 0) a.members.aligned16 = true;
  a.row_data = t.row_codes;
  a.row_quant = t.quant;
  return a;
}
}  // namespace

bool member_tensor_wide(const MemberTensorArgs& t) {
  return t.col_codes != nullptr && wide_columns(wide_tensor_args(t));
}

int64_t member_tensor_wide_scratch_bytes(const MemberTensorArgs& t) {
  return slot_bytes(wide_tensor_args(t)) + 4 * t.members.groups;
}

void quantize_member_tensor_wide(const MemberTensorArgs& t, void* scratch, Stream stream) {
  const auto s = stream.as<cudaStream_t>();
  const MemberColumnsArgs a = wide_tensor_args(t);
  TESSERA_CHECK(member_tensor_wide(t) && scratch != nullptr, "quantize_member_tensor_wide: "
                "the arguments do not qualify, or no scratch");
  TESSERA_CHECK_STATUS(t.members.groups <= 2147483647, Status::kOutOfRange,
                       "quantize_member_tensor_wide: ", t.members.groups, " members");
  auto* slots = static_cast<uint32_t*>(scratch);
  auto* mult = reinterpret_cast<uint32_t*>(static_cast<char*>(scratch) + slot_bytes(a));
  const auto groups = static_cast<unsigned>(t.members.groups);
  wide_passes<true>(a, t, slots, nullptr, mult, 4 * t.members.groups * t.cols,
                    "quantize_member_tensor_wide",
                    [&] { member_slot_scales_kernel<<<groups, 256, 0, s>>>(t, slots, mult); }, s);
}

}  // namespace tessera::nn::detail::cuda
