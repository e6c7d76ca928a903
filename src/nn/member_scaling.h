// Per-member scaling of a training step's quantized copies (docs/numerics.md, "scaling units per
// group member"). A whole-tensor quantizer shares two kinds of scaling unit across the experts of
// a grouped matrix: the one scale of a per-tensor recipe (fp8_current), and the per-column
// scales of a rowwise-family columnwise copy (fp8_rowwise's x and dy for the wgrad, and its
// weight's Wᵀ for the dgrad). Here each member (group g's rows) takes its own: one expert's
// outliers, NaN or Inf never change another expert's codes or scales, and each member's copy is
// bit for bit the standalone quantizer applied to that member alone.
//
// Members of a (rows, cols) matrix: member g = rows [starts[g], starts[g+1]) with `starts` G+1
// int64 on the matrix's device (the step's padded group layout), or, when null, `uniform` rows
// each (member g = rows [g·uniform, (g+1)·uniform): a weight (G·out, in)). Rows past the last
// member are in none.
//
// Scale layout (what the grouped GEMM reads as per-group scales): a per-tensor copy's scale_inv
// and amax hold G values (member g's at g); a rowwise-family columnwise copy's scale_inv holds
// (G·cols) values, member g's column c at g·cols + c.
//
// Delayed scaling per member (the step's state of a delayed role, LinearState): scale (G) and
// amax_history (H, G) FP32, member g's scale at g and its history slot i at i·G + g (slot 0 of
// every member contiguous, as TransformerEngine lays out its amax histories): member g is
// quantized with scale[g], writes its amax into slot 0, and its update reads and rolls its own
// column — bit for bit a standalone delayed Quantizer of member g alone on member g's state.
#pragma once

#include <cstdint>

#include "nn/moe_kernels.h"
#include "quantize/quantize_backend.h"
#include "tessera/core/dtype.h"
#include "tessera/core/stream.h"
#include "tessera/nn/allocator.h"
#include "tessera/nn/linear_step.h"
#include "tessera/quantize/types.h"

namespace tessera::nn::detail {

namespace moe = ::tessera::detail::moe;  // the per-row quantization rules (nn/moe_kernels.h)

struct Members {
  const int64_t* starts = nullptr;  // G+1 row starts (device memory for CUDA), or null
  int64_t groups = 0;
  int64_t uniform = 0;  // rows per member when starts is null
  // Reading through the layout (CUDA activation kernels, where reads_through_layout says so):
  // the matrix is not materialized; row i of member g is row sources[g] + i of the caller's x
  // while i < sources[g+1] - sources[g], and a zero row after that (padding) or past the last
  // member. Null: the matrix itself is read.
  const int64_t* sources = nullptr;
  // Every member starts on a multiple of 16 rows (the step's padded layouts, align >= 16): the
  // wide activation kernels then find the member once per 16 rows.
  bool aligned16 = false;
  // Every start is a multiple of `align` rows (the step's layouts: its wgrad_align; 0: not known).
  int64_t align = 0;

  TESSERA_HD int64_t source_row(int64_t g, int64_t r) const {
    if (!sources) return r;
    if (g < 0) return -1;
    const int64_t i = r - begin(g);
    return i < sources[g + 1] - sources[g] ? sources[g] + i : -1;
  }

  TESSERA_HD int64_t begin(int64_t g) const { return starts ? starts[g] : g * uniform; }
  TESSERA_HD int64_t end(int64_t g) const { return starts ? starts[g + 1] : (g + 1) * uniform; }
  // The member owning row r, or -1 (past the last member). Binary search over the starts.
  TESSERA_HD int64_t member_of(int64_t r) const {
    if (!starts) return uniform > 0 && r < groups * uniform ? r / uniform : -1;
    return ::tessera::detail::group_of_row(starts, groups, r);
  }
};

// Whether `columnwise` (else rowwise) copies of config c are scaled per member by the step:
// per-tensor scaling (both usages; current, or delayed with a state per member), the columnwise
// copy of the rowwise family. Other modes' scaling units already lie
// inside one member of the step's layouts (a row; a block of the aligned token dim).
bool member_scaled(const QuantizerConfig& c, bool columnwise);

// Whether the step keeps one global amax per member for config c (NVFP4: both copies; its block
// scales already lie inside one member of the step's 16-row aligned layouts). The copies then
// come from quantize_role_members through quantize_nvfp4_members: member g's rows (rowwise) and
// its columns of xᵀ (columnwise) under its own amax, in place in the whole copies.
bool member_global_amax(const QuantizerConfig& c);

// Column k of member g quantized as one rowwise unit (one FP32 scale over the member's rows of
// that column, `quant` a kRowwise rule): x (rows, cols) float. Codes of row r of member g go to
// data + g·g_stride + k·k_stride + (r − begin(g)) + begin(g)·keep_rows, the scale_inv to
// scale_inv[g·cols + k]:
// * a weight's Wᵀ per member (G·in, out): g_stride = in·out, k_stride = out, keep_rows = 0;
// * an activation's columnwise copy (cols, rows): g_stride = 0, k_stride = rows, keep_rows = 1.
// CPU or CUDA (x's device; scratch from `alloc` for the activation form).
// With `row_data` set (the activation form on CUDA, where lines_fused says so), the same two
// passes also write x's rowwise copy: row r's codes under one scale over the row (`row_quant`),
// its scale_inv at row_scale_inv[r] — bit for bit the standalone rowwise quantizer.
// With `x_row_scale_inv` set (CUDA, where columns_from_codes says so), x holds E4M3 codes of a
// kRowwise rowwise copy and the matrix quantized is x̂ = decode(code) · x_row_scale_inv[row]
// (FP32, dequantize()'s values): read at one byte an element, never materialized.
struct MemberColumnsArgs {
  const void* x;
  DType x_dtype;
  int64_t rows, cols;
  Members members;
  moe::RowQuant quant;
  uint8_t* data;
  int64_t g_stride, k_stride, keep_rows;
  float* scale_inv;
  uint8_t* row_data = nullptr;
  float* row_scale_inv = nullptr;
  moe::RowQuant row_quant{};
  const float* x_row_scale_inv = nullptr;
};
void quantize_member_columns(const MemberColumnsArgs& a, Allocator& alloc, Device device,
                             Stream stream);

// Per-tensor scaling per member: x (rows, cols) float → member g's amax over its rows, its scale
// (scale_rules::current_scale under `quant`, or the given delayed scale[g]), codes of its rows
// in `row_codes` (rows, cols) and/or the transposed `col_codes` (cols, rows) (rows in no
// member: code 0). scale_inv[g] (and scale_inv2[g], amax[g], amax2[g], history[g] where not
// null) written per member.
// `scratch`: member_tensor_scratch_bytes(...) bytes on x's device (the row codes when row_codes
// is null, the members' amax bits).
struct MemberTensorArgs {
  const void* x;
  DType x_dtype;
  int64_t rows, cols;
  Members members;
  moe::RowQuant quant;
  uint8_t* row_codes = nullptr;
  uint8_t* col_codes = nullptr;
  float* scale_inv = nullptr;
  float* scale_inv2 = nullptr;
  float* amax = nullptr;
  float* amax2 = nullptr;
  void* scratch = nullptr;
  // Delayed scaling: member g multiplies by scale[g] (G values; scale_inv[g] = its reciprocal)
  // and writes its amax to history[g] (slot 0 of an (H, G) history). Null: current scaling.
  const float* scale = nullptr;
  float* history = nullptr;
};

// Member g's element multiplier: its given scale, or the current scale of its amax bits; the
// scale_inv it stores goes to *scale_inv.
TESSERA_HD float member_multiplier(const MemberTensorArgs& a, uint32_t amax_bits, int64_t g,
                                   float* scale_inv) {
  if (a.scale == nullptr) return moe::block_multiplier(a.quant, amax_bits, scale_inv, 0);
  *scale_inv = scale_rules::reciprocal(a.scale[g]);
  return a.scale[g];
}

// Member g's element multiplier alone (nothing stored).
TESSERA_HD float member_multiplier(const MemberTensorArgs& a, uint32_t amax_bits, int64_t g) {
  return a.scale == nullptr ? moe::block_scale(a.quant, amax_bits).multiplier : a.scale[g];
}

int64_t member_tensor_scratch_bytes(const MemberTensorArgs& a);
void quantize_member_tensor(const MemberTensorArgs& a, Device device, Stream stream);

// The delayed-scaling state of `groups` members (the layout above) for config c on `device`:
// throws naming `role` and the expected shapes unless scale holds G and amax_history H·G
// contiguous FP32 values there.
void check_member_state(const QuantizerConfig& c, const DelayedScalingState& state,
                        int64_t groups, Device device, const char* role);
// The update of every member's state (scale_rules::delayed_update on member g's column), in one
// pass (CUDA: one launch, no host sync).
void update_member_state(const QuantizerConfig& c, const DelayedScalingState& state,
                         int64_t groups, Device device, Stream stream);

// Whether quantize_role_members can read x (T rows) through the layout (`members.sources` = the
// caller's group starts) instead of a padded copy: every usage asked for comes from the member
// kernels that take the map (CUDA: per-tensor current scaling; the rowwise family's wide
// passes, 16-bit x with cols % 8 == 0 and aligned data; FP8 block and MXFP8 where
// ::tessera::detail::takes_layout_rows says so).
// `rows`: the copy's rows; the copies are carve_quantized's (256-byte aligned).
bool reads_through_layout(const QuantizerConfig& c, bool rowwise, bool columnwise,
                          const TensorView& x, int64_t rows);

// The step's quantization of one role: x (rows, cols; or the caller's T rows read through the
// layout when members.sources is set) into the usages asked for of `out` (its
// views carved by carve_quantized with `members.groups`): the member-scaled usages through the
// kernels above (a delayed role: with `state`, per member, then its update), the others through
// the role's standalone quantizer (role_quantizer: the next stochastic-rounding offset). `role`
// names it in errors.
void quantize_role_members(const RoleFormat& format, bool rowwise, bool columnwise,
                           const DelayedScalingState& state, const TensorView& x,
                           const Members& members, QuantizedTensorView& out, Allocator& alloc,
                           Stream stream, const char* role);

// The columnwise copy of x̂ = dequantize(xq) for `format` (rowwise family), xq an E4M3 kRowwise
// rowwise copy whose rows are the layout's sources (members.sources): the bits
// quantize_role_members(format, false, true, {}, x̂, members, out) writes for that FP32 x̂, made
// from the codes (one byte an element read, no FP32 image). Returns false, doing nothing, where
// the kernels do not take it (the CPU; CUDA outside the wide form's geometry): the caller then
// dequantizes.
bool quantize_columns_from_codes(const RoleFormat& format, const QuantizedTensorView& xq,
                                 const Members& members, QuantizedTensorView& out,
                                 Allocator& alloc, Stream stream);

namespace cuda {
// offsets[g] = members.begin(g)·cols (g < G), offsets[G] = members.end(G − 1)·cols: the element
// offsets of the members of a (rows, cols) matrix (device; quantize_nvfp4_members' table).
void member_element_offsets(const Members& members, int64_t cols, int64_t* offsets, Stream stream);
int64_t member_columns_scratch_bytes(const MemberColumnsArgs& a);
bool lines_fused(const MemberColumnsArgs& a);  // the CUDA kernels can write row_data too
bool columns_from_codes(const MemberColumnsArgs& a);  // they can read x as codes (x_row_scale_inv)
void quantize_member_columns(const MemberColumnsArgs& a, void* scratch, Stream stream);
void member_tensor_amax(const MemberTensorArgs& a, uint32_t* amax_bits, Stream stream);
void member_tensor_encode(const MemberTensorArgs& a, const uint32_t* amax_bits, uint8_t* codes,
                          Stream stream);
// Per-tensor scaling with the columnwise copy through the wide kernels (16-bit x on the 16-row
// grid): both copies from one read of x, no transpose of the row codes. member_tensor_wide: the
// args qualify; the scratch then holds member_tensor_wide_scratch_bytes.
bool member_tensor_wide(const MemberTensorArgs& a);
int64_t member_tensor_wide_scratch_bytes(const MemberTensorArgs& a);
void quantize_member_tensor_wide(const MemberTensorArgs& a, void* scratch, Stream stream);
void update_member_state(float* scale, float* history, int64_t groups, int len, bool most_recent,
                         float fp8_max, int margin, Stream stream);
}  // namespace cuda

}  // namespace tessera::nn::detail
