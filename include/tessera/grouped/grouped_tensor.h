// GroupedTensor: N member tensors sharing one allocation per field (docs/grouped.md).
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
//   (Σ rows_g, K) matrix. E2M1 members must have an even number of elements per data row: even
//   cols for the rowwise copy, even rows for the (transposed) columnwise copy, so that every
//   member starts on a byte (checked when the shapes are host-known).
// - Scales: member g's scale matrix (scale_shape(config, rows_g, cols_g, usage), padding
//   included) starts at element offset scale_offsets[g] (rowwise) / columnwise_scale_offsets[g].
//   Both are prefix sums of per-member scale SLOTS computed by grouped_scale_offsets() — the one
//   function everybody uses. Refinement: a slot may be larger than the member's scale matrix
//   (see ScaleSlotRule): slot(rows) = stride × roundup(rows, align) or a constant, so that the
//   offsets of varying-first tensors are one scan of the split sizes on the device. The
//   entries between the end of a member's scale matrix and the next slot are never read.
//   For a quantized tensor scale_offsets and columnwise_scale_offsets are BOTH always present
//   (even for an absent usage), so a usage can be added later without the split sizes.
// - Per-tensor quantities (amax, columnwise_amax: the current-scaling amax or the NVFP4 global
//   amax) have one FP32 entry per member, present exactly when a standalone QuantizedTensor of
//   the config has that field. `scale` (FP32, N) is part of the view for kernels that take
//   per-member scales; tessera's own tensors leave it absent (the Quantizer owns the
//   delayed-scaling scale).
// - Shape modes: all same (N·M, K); varying first (ΣMᵢ, K); varying last (M, ΣKᵢ); varying both
//   (1, Σ MᵢKᵢ). first_dims / last_dims (int64, N) are present iff that axis varies.
// - Capacity (varying first only): logical_rows may exceed Σ rows (a preallocated token
//   buffer); rows past the last offset are never read or written. Data buffers hold
//   logical_rows × K elements and scale buffers the worst case over all splits with
//   Σ rows <= logical_rows (grouped_scale_capacity), so creation from device split sizes uses
//   host-known bounds only and never syncs.
// - Host metadata: `host` holds CPU copies of the member metadata when the shapes are known on
//   the host (always for a CPU tensor; for a CUDA tensor created from shapes). A tensor created
//   from device split sizes has none: member views, the CPU backend and to_string's per-member
//   listing need it, and report kUnsupported instead of syncing.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/quantize/types.h"
#include "tessera/scan/splits_to_offsets.h"

namespace tessera {

enum class GroupedShapeMode : int {
  kAllSame = 0,
  kVaryingFirst = 1,
  kVaryingLast = 2,
  kVaryingBoth = 3,
};

const char* grouped_shape_mode_name(GroupedShapeMode m) noexcept;

// CPU copies of the member metadata (int64 views into memory the owner keeps); all absent when
// the metadata lives only on the device.
struct GroupedHostMetadata {
  TensorView first_dims, last_dims;                    // (N) or absent, as in the view
  TensorView tensor_offsets;                           // (N+1)
  TensorView scale_offsets, columnwise_scale_offsets;  // (N+1), quantized tensors only
  bool known() const { return tensor_offsets.data != nullptr; }
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
  QuantizerConfig config{};       // config.mode == kNone: not quantized; rowwise/columnwise
                                  // say which usages are present
  TensorView first_dims, last_dims;           // int64 (N) or absent
  TensorView tensor_offsets;                  // int64 (N+1), leading 0
  TensorView scale_offsets, columnwise_scale_offsets;  // int64 (N+1) or absent
  TensorView data, columnwise_data;           // flat element storage
  TensorView scale_inv, columnwise_scale_inv; // flat scale storage
  TensorView amax, columnwise_amax, scale;    // FP32 (N) or absent
  Device device{};
  GroupedHostMetadata host;                   // CPU copies, or absent (device-only metadata)

  bool quantized() const { return config.mode != ScalingMode::kNone; }
  bool has_rowwise() const { return data.data != nullptr; }
  bool has_columnwise() const { return columnwise_data.data != nullptr; }
};

// The config of an unquantized grouped tensor (mode kNone).
QuantizerConfig unquantized_config();

// ---- scale slots ------------------------------------------------------------------------------

// Size in scale elements of a member's scale slot, as a function of its rows for fixed cols:
// constant (when the scale matrix does not depend on rows), else stride × roundup(rows, align).
// Invariant: slot(rows) >= scale_shape(config, rows, cols, usage).numel() for every rows >= 0,
// with equality whenever stride is a multiple of align's block entries (all rowwise MXFP8 and
// NVFP4 layouts, per-row FP8); at most align - 1 extra entries per block row otherwise.
struct ScaleSlotRule {
  int64_t constant = 0;  // used when stride == 0
  int64_t stride = 0;
  int64_t align = 1;
  int64_t size(int64_t rows) const;
};

// Derived from the scaling-mode table (block shape and padding along the rows of x) and the
// scale matrix of one row (scale_shape).
ScaleSlotRule grouped_scale_slot_rule(const QuantizerConfig& config, int64_t cols,
                                      bool columnwise);

// Prefix sums of the per-member scale slots for one usage: offsets (N+1, leading 0) in scale
// elements. rows/cols are the members' shapes (host values).
std::vector<int64_t> grouped_scale_offsets(const QuantizerConfig& config,
                                           const std::vector<int64_t>& rows,
                                           const std::vector<int64_t>& cols, bool columnwise);

// Scale elements a varying-first tensor of N members, `cols` columns and at most `rows_bound`
// live rows can need for one usage, whatever the split sizes.
int64_t grouped_scale_capacity(const QuantizerConfig& config, int64_t num_tensors,
                               int64_t rows_bound, int64_t cols, bool columnwise);

// ---- creation ---------------------------------------------------------------------------------

struct GroupedTensorOptions {
  DType dtype = DType::kFloat32;             // unquantized: float32/bfloat16/float16
  QuantizerConfig config = unquantized_config();  // quantized when mode != kNone; its
                                             // rowwise/columnwise select the buffers
  Device device = Device::cpu();
  int64_t capacity_rows = -1;                // varying first: logical rows >= Σ rows (-1: Σ)
  std::optional<GroupedShapeMode> mode;      // default: inferred from the shapes (all equal →
                                             // kAllSame, equal cols → kVaryingFirst, ...)
};

// Caller-owned buffers for GroupedTensor::wrap (absent = nullptr). Each must hold at least the
// bytes the layout needs (GroupedTensor::field_bytes) and be on options.device.
struct GroupedBuffers {
  TensorView data, columnwise_data, scale_inv, columnwise_scale_inv, amax, columnwise_amax;
};

// Owning grouped tensor. Moving keeps every pointer of view() valid; copying is not allowed.
class GroupedTensor {
 public:
  GroupedTensor() = default;

  // Members of the given (rows, cols) shapes (rows or cols may be 0). Host metadata is known.
  static GroupedTensor from_shapes(std::span<const std::array<int64_t, 2>> shapes,
                                   const GroupedTensorOptions& options);

  // Varying-first members of (splits[g], cols) where `splits` (N, int32/int64) lives on
  // options.device. options.capacity_rows (required) bounds Σ splits; it is the logical rows.
  // No device→host copy: buffers are sized from the bound, first_dims and every offset are
  // computed on `stream` (one splits_to_offsets_multi call plus one small copy kernel).
  // `tensor_offsets`, if given (int64 (N+1), leading 0, = cols × scan(splits)), is wrapped
  // instead of computed and must outlive the tensor. `scan.error_flag` reports bad splits on
  // CUDA (the CPU throws); scan.total_bound is set to capacity_rows.
  static GroupedTensor from_device_splits(const TensorView& splits, int64_t cols,
                                          const GroupedTensorOptions& options,
                                          const TensorView& tensor_offsets = {},
                                          const ScanOptions& scan = {}, Stream stream = {});

  // Metadata from `shapes` (owned), data/scales in caller-owned `buffers` (not freed here).
  static GroupedTensor wrap(std::span<const std::array<int64_t, 2>> shapes,
                            const GroupedTensorOptions& options, const GroupedBuffers& buffers);

  // Recomputes first_dims and every offset from new device split sizes (same N, Σ <= capacity)
  // on `stream`: asynchronous, allocation-free, capturable in a CUDA graph. Only for tensors
  // made by from_device_splits. After a call that throws (CPU) or raises the error flag (CUDA)
  // the metadata is unspecified until the next successful call.
  void update_from_device_splits(const TensorView& splits, const TensorView& tensor_offsets = {},
                                 const ScanOptions& scan = {}, Stream stream = {});

  const GroupedTensorView& view() const { return view_; }
  int64_t num_tensors() const { return view_.num_tensors; }
  bool has_host_metadata() const { return view_.host.known(); }
  // Host shapes of member g (needs host metadata).
  std::array<int64_t, 2> member_shape(int64_t g) const;

  // Member g as a view sharing storage: TensorView (rows_g, cols_g) of an unquantized tensor,
  // QuantizedTensorView of a quantized one. Need host metadata (kUnsupported otherwise).
  TensorView member(int64_t g) const;
  QuantizedTensorView quantized_member(int64_t g) const;

  // Adds the buffers of a usage that is not present yet (never drops one). Owned storage only.
  void ensure_usage(bool rowwise, bool columnwise);

  // Bytes of every owned or wrapped data/scale/amax buffer (not metadata).
  int64_t storage_bytes() const;
  // "GroupedTensor(32 members, varying first (16384, 7168), mxfp8 e4m3 rowwise+columnwise,
  //  compact scales, cpu, data 117440512 B, ...)" and one line per member when host-known.
  std::string to_string(int64_t max_members = 8) const;

 private:
  GroupedTensorView view_;
  int64_t data_elems_ = 0;                 // elements of each data field (logical rows × cols)
  std::array<int64_t, 2> scale_elems_{};   // scale elements per usage (rowwise, columnwise)
  bool owns_storage_ = true;               // false after wrap()
  bool device_splits_ = false;             // made by from_device_splits
  std::vector<int64_t> host_meta_;         // host copies: first, last, offsets, scale offsets
  Buffer meta_;                            // metadata on the tensor's device (when not host_meta_)
  Buffer data_, columnwise_data_, scale_inv_, columnwise_scale_inv_, amax_, columnwise_amax_;

  friend struct GroupedTensorBuilder;
};

// Member views of any grouped view (same rules as the GroupedTensor methods).
TensorView grouped_member(const GroupedTensorView& t, int64_t g);
QuantizedTensorView grouped_quantized_member(const GroupedTensorView& t, int64_t g);

// Checks a (possibly hand-made) view: dtypes, devices, field lengths against the layout and,
// when host metadata is known, offsets starting at 0, monotonic, consistent with the dims and
// within the buffers. Throws an Error naming the field.
void check_grouped_view(const GroupedTensorView& t, const char* arg = "grouped tensor");

std::string to_string(const GroupedTensorView& t, int64_t max_members = 8);

}  // namespace tessera
