// CUDA kernels of the per-member scaling (member_scaling.h): the per-(member, column) rowwise
// quantization of a weight's Wᵀ per expert, and the chunked form of an activation's columnwise
// copy in the step's padded layout (any input dtype). The wide form (16-bit input on the 16-row
// grid, both copies from two passes), which per-tensor scaling also takes where the input allows
// (member_tensor_wide), is in member_scaling_wide.cu; the per-tensor row kernels and the
// delayed-state update are in member_tensor.cu. Same rules and bits as the CPU loops (the shared
// moe:: block_multiplier / encode_element; products by __fmul_rn).
#include <cuda_runtime.h>

#include <algorithm>

#include "nn/member_columns.cuh"
#include "nn/member_scaling.h"
#include "nn/member_scaling_device.cuh"
#include "quantize/cuda/device_io.cuh"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/half.h"

namespace tessera::nn::detail::cuda {
namespace {

constexpr int kColCols = 64;      // columns of a member per CTA: two per lane
constexpr int kColRows = 32;      // rows per staging step of pass 2
constexpr int kTileStride = 36;   // bytes per staged column: 4-byte aligned, few bank conflicts

// One CTA per (64 columns, member g): lane l holds columns 2l and 2l + 1 (a warp reads 64
// consecutive elements of a row), the 8 warps stride the member's rows. Pass 1: the columns'
// abs-bits maxima (NaN wins) and their scales; pass 2: the codes, 32 rows at a time through
// shared memory, then each output row's 32 new bytes written 8 at a time.
template <class In>
__global__ void __launch_bounds__(kColThreads) member_columns_kernel(MemberColumnsArgs a) {
  __shared__ uint32_t part[kColWarps][kColCols];
  __shared__ float mult[kColCols];
  __shared__ alignas(16) uint8_t tile[kColCols][kTileStride];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t g = blockIdx.y, k0 = int64_t{blockIdx.x} * kColCols;
  const int64_t c0 = k0 + 2 * lane, c1 = c0 + 1;
  const bool ok0 = c0 < a.cols, ok1 = c1 < a.cols;
  int64_t r_begin = a.members.begin(g), r_end = a.members.end(g);
  r_end = r_end > a.rows ? a.rows : r_end;  // a corrupt start never leaves the matrix
  r_begin = r_begin < 0 ? 0 : (r_begin > r_end ? r_end : r_begin);
  const int64_t n = r_end - r_begin;
  const In* x = static_cast<const In*>(a.x) + r_begin * a.cols;
  uint32_t m0 = 0, m1 = 0;
#pragma unroll 4
  for (int64_t r = warp; r < n; r += kColWarps) {
    const In* row = x + r * a.cols;
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
    mult[c] = k0 + c < a.cols ? moe::block_multiplier(a.quant, m, a.scale_inv, g * a.cols + k0 + c)
                              : moe::block_scale(a.quant, 0).multiplier;
  }
  __syncthreads();
  const float f0 = mult[2 * lane], f1 = mult[2 * lane + 1];
  // Writer of pass 2: column wc of the CTA, bytes [8·wp, 8·wp + 8) of the 32 staged rows.
  const int wc = static_cast<int>(threadIdx.x) / 4, wp = static_cast<int>(threadIdx.x) % 4;
  uint8_t* base = a.data + g * a.g_stride + r_begin * a.keep_rows;
  const bool vec = n % 8 == 0 && a.k_stride % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(base) % 8 == 0;
  for (int64_t r0 = 0; r0 < n; r0 += kColRows) {
#pragma unroll
    for (int i = warp; i < kColRows; i += kColWarps) {
      const int64_t r = r0 + i;
      const bool live = r < n;
      const In* row = x + r * a.cols;
      tile[2 * lane][i] = ok0 && live ? code(a.quant, __fmul_rn(to_float(row[c0]), f0))
                                      : uint8_t{0};
      tile[2 * lane + 1][i] =
          ok1 && live ? code(a.quant, __fmul_rn(to_float(row[c1]), f1)) : uint8_t{0};
    }
    __syncthreads();
    if (k0 + wc < a.cols) {
      uint8_t* dst = base + (k0 + wc) * a.k_stride + r0 + 8 * wp;
      const uint8_t* src = &tile[wc][8 * wp];
      if (vec && r0 + 8 * wp + 8 <= n) {
        const auto* s4 = reinterpret_cast<const uint32_t*>(src);
        *reinterpret_cast<uint2*>(dst) = make_uint2(s4[0], s4[1]);
      } else {
        for (int j = 0; j < 8 && r0 + 8 * wp + j < n; ++j) dst[j] = src[j];
      }
    }
    __syncthreads();
  }
}

// Activations (members = the padded layout's groups, the copy (cols, rows) with every member at
// its own rows): the rows are cut into chunks of kChunkRows that need not respect members, so a
// large member is spread over many CTAs. Pass 1 (chunk_amax_kernel): each warp takes kWarpRows
// consecutive rows of the chunk, lane l columns 2l, 2l + 1 of the CTA's 64, and folds its
// maxima into the (member, column) slots by atomicMax whenever the member changes and at the end.
// Pass 2 (chunk_scales_kernel): each slot's scale_inv and multiplier (in place of its bits).
// Pass 3 (chunk_encode_kernel): the codes of a chunk staged in shared memory, then each column's
// kChunkRows bytes written 16 at a time.
constexpr int kChunkStride = kChunkRows + 16;      // staged bytes per column (16-byte aligned)

// The member of row r, searched only when r leaves the cached member [g, end).
struct MemberCursor {
  int64_t g = -1, begin = 0, end = 0;
  __device__ int64_t at(const Members& m, int64_t r) {
    if (r < begin || r >= end) {
      g = m.member_of(r);
      begin = g < 0 ? r : m.begin(g);
      end = g < 0 ? r + 1 : m.end(g);
    }
    return g;
  }
};

template <class In>
__global__ void __launch_bounds__(kColThreads) chunk_amax_kernel(MemberColumnsArgs a,
                                                                 uint32_t* slots) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t c0 = int64_t{blockIdx.x} * kColCols + 2 * lane, c1 = c0 + 1;
  const bool ok0 = c0 < a.cols, ok1 = c1 < a.cols;
  const int64_t r_begin = int64_t{blockIdx.y} * kChunkRows + warp * kWarpRows;
  const int64_t r_end = r_begin + kWarpRows < a.rows ? r_begin + kWarpRows : a.rows;
  const In* x = static_cast<const In*>(a.x);
  MemberCursor cur;
  int64_t g = -1;
  uint32_t m0 = 0, m1 = 0;
  const auto flush = [&]() {
    if (g >= 0) {
      if (ok0 && m0 != 0) atomicMax(slots + g * a.cols + c0, m0);
      if (ok1 && m1 != 0) atomicMax(slots + g * a.cols + c1, m1);
    }
    m0 = m1 = 0;
  };
  for (int64_t r = r_begin; r < r_end; ++r) {
    const int64_t rg = cur.at(a.members, r);
    if (rg != g) {
      flush();
      g = rg;
    }
    if (g < 0) continue;
    const In* row = x + r * a.cols;
    if (ok0) m0 = max(m0, scale_rules::abs_bits(to_float(row[c0])));
    if (ok1) m1 = max(m1, scale_rules::abs_bits(to_float(row[c1])));
  }
  flush();
}

template <class In>
__global__ void __launch_bounds__(kColThreads) chunk_encode_kernel(MemberColumnsArgs a,
                                                                   const uint32_t* mult) {
  __shared__ alignas(16) uint8_t tile[kColCols][kChunkStride];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t k0 = int64_t{blockIdx.x} * kColCols;
  const int64_t c0 = k0 + 2 * lane, c1 = c0 + 1;
  const bool ok0 = c0 < a.cols, ok1 = c1 < a.cols;
  const int64_t chunk0 = int64_t{blockIdx.y} * kChunkRows;
  const In* x = static_cast<const In*>(a.x);
  MemberCursor cur;
  int64_t g = -2;
  float f0 = 0.0f, f1 = 0.0f;
  for (int i = warp * kWarpRows; i < (warp + 1) * kWarpRows; ++i) {
    const int64_t r = chunk0 + i;
    const int64_t rg = r < a.rows ? cur.at(a.members, r) : -1;
    if (rg != g) {
      g = rg;
      f0 = g >= 0 && ok0 ? __uint_as_float(mult[g * a.cols + c0]) : 0.0f;
      f1 = g >= 0 && ok1 ? __uint_as_float(mult[g * a.cols + c1]) : 0.0f;
    }
    const In* row = x + r * a.cols;
    tile[2 * lane][i] = g >= 0 && ok0 ? code(a.quant, __fmul_rn(to_float(row[c0]), f0))
                                      : uint8_t{0};
    tile[2 * lane + 1][i] =
        g >= 0 && ok1 ? code(a.quant, __fmul_rn(to_float(row[c1]), f1)) : uint8_t{0};
  }
  __syncthreads();
  // Column c's bytes [16·j, 16·j + 16) of the chunk: 64 columns x 8 pieces over 256 threads.
  const int64_t live = a.rows - chunk0 < kChunkRows ? a.rows - chunk0 : int64_t{kChunkRows};
  for (int p = static_cast<int>(threadIdx.x); p < kColCols * (kChunkRows / 16); p += kColThreads) {
    const int c = p / (kChunkRows / 16), j = p % (kChunkRows / 16);
    if (k0 + c >= a.cols || 16 * j >= live) continue;
    uint8_t* dst = a.data + (k0 + c) * a.k_stride + chunk0 + 16 * j;
    const uint8_t* src = &tile[c][16 * j];
    if (16 * j + 16 <= live) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; 16 * j + e < live; ++e) dst[e] = src[e];
    }
  }
}

}  // namespace

bool lines_fused(const MemberColumnsArgs& a) { return wide_columns(a); }
bool columns_from_codes(const MemberColumnsArgs& a) {
  return a.x_row_scale_inv != nullptr && wide_columns(a);
}

int64_t member_columns_scratch_bytes(const MemberColumnsArgs& a) {
  if (!chunked_columns(a) && !wide_columns(a)) return 0;
  // then the rows' amax bits when the row copy is fused
  return slot_bytes(a) + (a.row_data != nullptr ? 4 * a.rows : 0);
}

namespace {
// The slots and, when the row copy is fused, the rows' amax bits right after them: the scratch
// the passes accumulate into, zeroed first.
int64_t member_columns_zero_bytes(const MemberColumnsArgs& a) {
  const bool fused_rows = wide_columns(a) && a.row_data != nullptr;
  return fused_rows ? slot_bytes(a) + 4 * a.rows : 4 * a.members.groups * a.cols;
}

}  // namespace

void quantize_member_columns(const MemberColumnsArgs& a, void* scratch, Stream stream) {
  const auto s = stream.as<cudaStream_t>();
  TESSERA_CHECK(a.x_row_scale_inv == nullptr || wide_columns(a), "quantize_member_columns: x "
                "as codes is read in the wide form only (columns_from_codes)");
  if (chunked_columns(a) || wide_columns(a)) {
    TESSERA_CHECK(scratch != nullptr, "quantize_member_columns: the chunked path needs ",
                  member_columns_scratch_bytes(a), " bytes of scratch");
    const unsigned grid_rows = chunk_grid_rows(a, "quantize_member_columns");
    auto* slots = static_cast<uint32_t*>(scratch);
    const bool fused_rows = wide_columns(a) && a.row_data != nullptr;
    // The slots and, when the row copy is fused, the rows' amax bits right after them: zeroed
    // in the wide passes or by one memset.
    const int64_t zero_bytes = member_columns_zero_bytes(a);
    const dim3 grid(static_cast<unsigned>((a.cols + kColCols - 1) / kColCols), grid_rows);
    const int64_t n = a.members.groups * a.cols + (fused_rows ? a.rows : 0);
    const unsigned sgrid = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
    if (wide_columns(a)) {
      uint32_t* row_amax = fused_rows
          ? reinterpret_cast<uint32_t*>(static_cast<char*>(scratch) + slot_bytes(a)) : nullptr;
      wide_member_columns(a, slots, row_amax, zero_bytes, s);
      return;
    }
    if (zero_bytes > 0) TESSERA_CUDA_CHECK(cudaMemsetAsync(slots, 0, zero_bytes, s));
    TESSERA_CHECK(a.row_data == nullptr, "quantize_member_columns: the row copy is fused only "
                  "in the wide form (lines_fused)");
    dispatch_float_input(a.x_dtype, "x", [&](auto tag) {
      using In = typename decltype(tag)::type;
      if (a.rows > 0) chunk_amax_kernel<In><<<grid, kColThreads, 0, s>>>(a, slots);
      chunk_scales_kernel<<<sgrid, 256, 0, s>>>(a, slots, nullptr);
      if (a.rows > 0) chunk_encode_kernel<In><<<grid, kColThreads, 0, s>>>(a, slots);
      TESSERA_CUDA_CHECK(cudaGetLastError());
    });
    return;
  }
  TESSERA_CHECK_STATUS(a.members.groups <= 65535, Status::kOutOfRange,
                       "quantize_member_columns: ", a.members.groups,
                       " members past the grid limit 65535");
  const dim3 grid(static_cast<unsigned>((a.cols + kColCols - 1) / kColCols),
                  static_cast<unsigned>(a.members.groups));
  dispatch_float_input(a.x_dtype, "x", [&](auto tag) {
    member_columns_kernel<typename decltype(tag)::type><<<grid, kColThreads, 0, s>>>(a);
    TESSERA_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace tessera::nn::detail::cuda
