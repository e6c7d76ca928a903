// What the two files of the activation passes of the per-member scaling share
// (member_scaling.cu: the chunked form; member_scaling_wide.cu: the wide form): their geometry,
// which form takes a matrix, the wide form's entry point, and the scales pass.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "nn/member_scaling.h"
#include "nn/member_scaling_device.cuh"
#include "tessera/core/status.h"

namespace tessera::nn::detail::cuda {

// CTAs of 256 threads over chunks of 128 rows, 16 rows per warp.
constexpr int kColThreads = 256;  // 8 warps
constexpr int kColWarps = kColThreads / 32;
constexpr int kChunkRows = 128;
constexpr int kWarpRows = kChunkRows / kColWarps;  // 16

// Which form of the activation passes `a` takes (host).
inline bool chunked_columns(const MemberColumnsArgs& a) {
  return a.g_stride == 0 && a.keep_rows == 1 && a.k_stride % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.data) % 16 == 0;
}

// A weight's Wᵀ per member (member_columns_kernel's layout) whose members are whole 16-row
// pieces and whose member blocks and columns start on 16 bytes.
inline bool weight_columns(const MemberColumnsArgs& a) {
  return a.keep_rows == 0 && a.members.starts == nullptr && a.members.aligned16 &&
         a.k_stride % 16 == 0 && a.g_stride % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.data) % 16 == 0;
}

inline bool wide_columns(const MemberColumnsArgs& a) {
  const auto aligned = [](const void* p, uintptr_t n) {
    return reinterpret_cast<uintptr_t>(p) % n == 0;
  };
  static_assert(kWarpRows == 16, "a warp's rows lie in one member of a 16-row aligned layout");
  // x as E4M3 codes with row scales (x_row_scale_inv): 8 bytes a lane, the columnwise copy only,
  // in E4M3 (the one kind instantiated).
  const bool input_ok = a.x_row_scale_inv == nullptr
      ? dtype_bytes(a.x_dtype, 1) == 2 && aligned(a.x, 16)
      : a.x_dtype == DType::kFloat8E4M3 && aligned(a.x, 8) && a.row_data == nullptr &&
            !a.quant.e5m2;
  return (chunked_columns(a) || weight_columns(a)) && a.members.aligned16 && input_ok &&
         a.cols % 8 == 0 &&
         (a.row_data == nullptr || (aligned(a.row_data, 8) && a.row_quant.e5m2 == a.quant.e5m2));
}

// Scratch: the (member, column) slots, then the rows' amax bits when the row copy is fused.
inline int64_t slot_bytes(const MemberColumnsArgs& a) {
  return (4 * a.members.groups * a.cols + 255) / 256 * 256;
}

// The rows of CTAs of the chunked and wide passes (kChunkRows rows each); refuses a matrix past
// the grid limit, naming `what`.
inline unsigned chunk_grid_rows(const MemberColumnsArgs& a, const char* what) {
  const int64_t chunks = (a.rows + kChunkRows - 1) / kChunkRows;
  TESSERA_CHECK_STATUS(chunks <= 65535, Status::kOutOfRange, what, ": ", a.rows,
                       " rows past the grid limit of ", 65535 * kChunkRows);
  return static_cast<unsigned>(chunks > 0 ? chunks : 1);
}

// The wide form of quantize_member_columns (wide_columns(a)): the (member, column) slots (and
// the rows' amax bits at row_amax, when the row copy is fused), the first zero_bytes of the
// scratch at `slots` zeroed first, then the codes (member_scaling_wide.cu).
void wide_member_columns(const MemberColumnsArgs& a, uint32_t* slots, uint32_t* row_amax,
                         int64_t zero_bytes, cudaStream_t s);

namespace {
// Pass 2 of the chunked form (and of the wide form for a matrix of no rows): each (member,
// column) slot's multiplier in place of its abs-bits maximum (its scale_inv to a.scale_inv); with
// the fused row copy (row_amax not null), each row's as well (scale_inv to a.row_scale_inv).
__global__ void chunk_scales_kernel(MemberColumnsArgs a, uint32_t* slots, uint32_t* row_amax) {
  const int64_t n = a.members.groups * a.cols;
  const int64_t all = n + (row_amax != nullptr ? a.rows : 0);
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < all;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (i < n) {
      slots[i] = __float_as_uint(moe::block_multiplier(a.quant, slots[i], a.scale_inv, i));
    } else {
      const int64_t r = i - n;
      row_amax[r] = __float_as_uint(
          moe::block_multiplier(a.row_quant, row_amax[r], a.row_scale_inv, r));
    }
  }
}
}  // namespace

}  // namespace tessera::nn::detail::cuda
