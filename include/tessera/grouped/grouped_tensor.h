// GroupedTensor: N member tensors sharing one allocation per field (DESIGN §5).
//
// Storage contract (what quantizers, the GEMM setup and the reference all rely on):
// - Member g is a 2-D tensor (rows_g, cols_g). Its RAW elements start at element offset
//   tensor_offsets[g] in every data field: `data` (rowwise codes or high-precision values) and
//   `columnwise_data` (same numel; for transposed modes it holds member g's (cols_g, rows_g)
//   transpose there). tensor_offsets is int64, N+1 entries, tensor_offsets[0] == 0,
//   tensor_offsets[g+1] - tensor_offsets[g] == rows_g * cols_g.
// - Each member is stored EXACTLY as a standalone QuantizedTensor of shape (rows_g, cols_g) with
//   the same config would be: member views are byte-identical to quantizing it alone.
//   Consequence for varying-first (MoE tokens) rowwise data: the members form one row-major
//   (Σ rows_g, K) matrix. E2M1 members must have even cols (each member starts on a byte).
// - Scales: member g's scale matrix (scale_shape(config, rows_g, cols_g, usage), padding
//   included) starts at element offset scale_offsets[g] (rowwise) / columnwise_scale_offsets[g];
//   both are the prefix sums of the padded per-member scale sizes, computed by
//   grouped_scale_offsets() — the one function everybody uses.
// - Per-tensor quantities (amax, scale for delayed/current FP8 and the NVFP4 global amax) have
//   one FP32 entry per member.
// - Shape modes: all same (N·M, K); varying first (ΣMᵢ, K); varying last (M, ΣKᵢ); varying both
//   (1, Σ MᵢKᵢ). first_dims / last_dims (int64, N) are present iff that axis varies.
// - Capacity: the logical first dim may exceed the live rows (a preallocated token buffer); rows
//   past the last offset are never read or written. Buffers are sized from host-known bounds, so
//   creation from device split sizes never syncs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/quantize/types.h"

namespace tessera {

enum class GroupedShapeMode : int {
  kAllSame = 0,
  kVaryingFirst = 1,
  kVaryingLast = 2,
  kVaryingBoth = 3,
};

// Non-owning description of a grouped tensor; every pointer may be host or device memory
// (`device` says which). Absent fields have data == nullptr.
struct GroupedTensorView {
  int64_t num_tensors = 0;
  GroupedShapeMode mode = GroupedShapeMode::kAllSame;
  int64_t logical_rows = 0;   // logical 2-D shape (capacity included)
  int64_t logical_cols = 0;
  int64_t uniform_rows = 0;   // rows of every member when the first dim does not vary
  int64_t uniform_cols = 0;   // cols of every member when the last dim does not vary
  DType dtype = DType::kFloat32;  // high-precision dtype, or the element dtype when quantized
  QuantizerConfig config{};       // config.mode == kNone: not quantized
  TensorView first_dims, last_dims;           // int64 (N) or absent
  TensorView tensor_offsets;                  // int64 (N+1), leading 0
  TensorView scale_offsets, columnwise_scale_offsets;  // int64 (N+1) or absent
  TensorView data, columnwise_data;           // flat element storage
  TensorView scale_inv, columnwise_scale_inv; // flat scale storage
  TensorView amax, columnwise_amax, scale;    // FP32 (N) or absent
  Device device{};
};

// Prefix sums of the padded per-member scale sizes for one usage: offsets (N+1, leading 0) in
// scale elements. rows/cols are the members' shapes (host values).
std::vector<int64_t> grouped_scale_offsets(const QuantizerConfig& config,
                                           const std::vector<int64_t>& rows,
                                           const std::vector<int64_t>& cols, bool columnwise);

}  // namespace tessera
