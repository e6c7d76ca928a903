// The training step of a grouped linear layer, written once (docs/nn.md): a stateless forward
// and backward of y_g = x_g · W_gᵀ (+ b_g) over caller-owned tensors, for every recipe. The C++
// layers (nn::GroupedLinear, nn::GroupedMLP) and the PyTorch modules (tessera.torch) are thin
// holders of weights and state over these functions.
//
// One step, per call:
//   forward   x (T, in) → the operands the recipe asks for (one quantization of x: rowwise copy
//             for the GEMM, columnwise copy saved for the wgrad) → y = x·W_gᵀ (+ b_g) by an
//             M-grouped GEMM on the weight's rowwise copy;
//   backward  dy (T, out) → one quantization of dy → dx = dy·W_g (dgrad, the weight's
//             columnwise copy), dW_g = dy_gᵀ x_g (wgrad: the K-grouped GEMM on the two
//             columnwise copies, written or accumulated into an FP32 main grad), db_g = Σ dy_g.
// The weight is quantized (both usages in one pass) by quantize_weight, once per weight
// version: callers keep the WeightCopies and pass them to every step that reads them.
//
// Groups: `offsets` say which rows of x form each group (int32/int64, on the host or on x's
// device; end offsets (G) as torch._grouped_mm takes them, or start offsets (G+1)). Rows in no
// group (a capacity tail past the last offset) get y = 0 and dx = 0, no bias, and add nothing
// to any gradient. Empty groups give dW_g = 0 (main grad unchanged). T = 0 is a valid step.
// Nothing here synchronizes with the device; every device operation is enqueued on `stream`.
//
// Memory: outputs (y, dx, dW, db) are the caller's; every other byte comes from the caller's
// Allocator: scratch (dead when the call's work is done, in stream order) and what the step
// hands back (WeightCopies, LinearSaved), whose Allocations the caller keeps. The one exception:
// on the CPU the GEMMs' workspace (FP32 operand images) is a block kept per thread (docs/nn.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/nn/allocator.h"
#include "tessera/quantize/quantizer.h"
#include "tessera/quantize/recipe.h"

namespace tessera::nn {

// How one role's tensor becomes a GEMM operand: a dense copy in `dense_dtype` (recipes that do
// not quantize), or the bits `config` produces (its usage flags are ignored: the step asks for
// the usages it needs).
struct RoleFormat {
  bool quantized = false;
  DType dense_dtype = DType::kBFloat16;
  QuantizerConfig config{};
  friend bool operator==(const RoleFormat&, const RoleFormat&) = default;
};

// Bytes a saved context takes for T rows: per_row · T + fixed (an upper bound of the exact size
// for every T, affine so that a framework can size the saved tensor from a symbolic T).
struct SavedSize {
  int64_t per_row = 0, fixed = 0;
  int64_t at(int64_t rows) const { return per_row * rows + fixed; }
};

// What one grouped linear step runs. Invariants (make_linear_spec checks them): groups, in, out
// >= 1; input and grad_output are both quantized or both dense, and so is weight; the three
// pairs the GEMMs meet (input·weight, grad_output·weight, grad_output·input) can meet in one
// GEMM (modes_can_meet); a dense step has one dense dtype for all roles.
struct LinearSpec {
  int64_t groups = 0, in = 0, out = 0;
  bool bias = false;
  RoleFormat input, weight, grad_output;
  // Quantized steps: the wgrad reads the columnwise copies of x and dy in a layout where every
  // group starts on a multiple of wgrad_align rows (max(16, the token block of either copy's
  // mode): 16 per-tensor / rowwise FP8, 32 MXFP8, 128 FP8 block, 16 NVFP4), zero rows between,
  // so that no scaling block or Hadamard block of the token dimension spans two groups and the
  // CUDA wgrad's 16-byte loads start on every group. 1 for dense steps.
  int64_t wgrad_align = 1;
  SavedSize saved_input;  // what a saved context takes (set by make_linear_spec)
  int64_t weight_layout = 0;  // bytes of the quantized weight copies (set by make_linear_spec)
  bool quantized() const { return input.quantized; }
};

// The spec of layer `name` (the roles {grouped_linear, input|weight|grad_output, name}) under
// `recipe`: Recipe::config_for (a custom factory is called here, once per role). dense_dtype:
// the compute dtype of a recipe that does not quantize ("bf16" → bfloat16, "fp32" → float32)
// unless overridden (kFloat32 / kBFloat16 / kFloat16; ignored for quantized recipes). Throws a
// clear Error naming the role when the roles cannot run as one step.
LinearSpec make_linear_spec(const Recipe& recipe, const std::string& name, int64_t groups,
                            int64_t in, int64_t out, bool bias,
                            std::optional<DType> dense_dtype = std::nullopt);

// The dense compute dtype a framework binding asks for given its weight's dtype: the weight's
// own when it is 16-bit (the GEMMs then read the parameter itself), else the recipe's.
inline std::optional<DType> dense_dtype_of_weight(DType weight) {
  if (weight == DType::kBFloat16 || weight == DType::kFloat16) return weight;
  return std::nullopt;
}

// Per-role delayed-scaling state (caller memory; empty views for a role without one), one per
// group member (expert) as TransformerEngine's grouped linear keeps a quantizer per expert:
// scale (G) and amax_history (amax_history_len, G), contiguous FP32 on the step's device,
// expert g's scale at g and its history slot i at i·G + g (initially scale 1, history 0). A
// step quantizes expert g's rows (W_g) of a delayed role with scale[g], writes their amax into
// its slot 0 and then updates every expert's state (its history's max or slot 0 → its next
// scale; history rolled), on the stream: bit for bit a standalone delayed Quantizer per expert
// on that expert's state (docs/numerics.md, "Scaling units per group member").
struct LinearState {
  DelayedScalingState input, weight, grad_output;
};

// The process-wide counter of stochastic-rounding offsets: every stochastically rounded
// quantization of a step takes the next value (fresh random bits for every layer and step, no
// host sync). reset_rng_offset(v) makes later steps reproducible.
uint64_t next_rng_offset();
uint64_t current_rng_offset();  // the value the next call of next_rng_offset returns
void reset_rng_offset(uint64_t value);

// Both usages of the weight (G, out, in) as the GEMMs read them. Quantized: `q` holds the
// (G·out, in) matrix's rowwise copy (forward) and columnwise copy (dgrad) — except for MXFP8
// with out % 32 == 0, where the dgrad's copy is kept instead as `wt`, the rowwise copy of Wᵀ
// per group ((G·in, out) codes, (G·in, out/32) scales: the same bytes moved), which the dgrad
// reads as a TN GEMM (no transpose of W per call). Dense: `dense` is (G, out, in) in the compute
// dtype (the caller's weight itself when it already is that, else a copy). `storage` owns every
// byte here that is not the caller's.
//
// NVFP4 weights with in % 8 == 0 also keep `expanded`: the rowwise copy's elements expanded
// exactly into BF16, (G·out, in) (GemmOperand::expanded), made with the copies. The CUDA forward
// reads it instead of expanding W into the GEMM's workspace on every call, and so does the
// dgrad where the columnwise copy is its transpose (16x16 tiles without stochastic rounding:
// the NVFP4 recipe's weights). It costs 2 bytes per weight (docs/nn.md). MXFP8 weights keep the
// same image (FP8 value × 2^(e − 127)) when in % 8 == 0 and the CUDA GEMMs may run MXFP8 in
// BF16 (by default where a CUDA device is present; not with TESSERA_MXFP8_EXPANDED=0,
// docs/gemm_cuda.md), and in the Wᵀ form also `expanded_wt`, the image of `wt` ((G·in, out)
// BF16), which the dgrad reads: 4 bytes per weight.
struct WeightCopies {
  Allocation storage;
  QuantizedTensorView q;
  QuantizedTensorView wt;
  TensorView expanded;
  TensorView expanded_wt;
  TensorView dense;
  bool quantized() const { return q.has_rowwise(); }
  bool columnwise_is_wt() const { return wt.has_rowwise(); }
};

// Bytes of the storage quantize_weight allocates for `spec` (0 when the weight is used as it is:
// a dense weight of the compute dtype).
int64_t weight_copies_bytes(const LinearSpec& spec, DType weight_dtype);
// Quantizes (or casts) w (G, out, in) float32/bfloat16/float16, contiguous, into new storage
// from `alloc`: both usages in one pass. A delayed weight role uses state.weight.
WeightCopies quantize_weight(const LinearSpec& spec, const TensorView& w,
                             const LinearState& state, Allocator& alloc, Stream stream = {});
// The WeightCopies whose storage is `storage` (as quantize_weight made it, weight_copies_bytes
// bytes, e.g. a framework tensor kept by the caller); `w` is the weight itself (read when the
// weight is used as it is).
WeightCopies view_weight_copies(const LinearSpec& spec, const TensorView& w,
                                const Allocation& storage);

// What a training forward keeps for backward, in one Allocation (the caller keeps it; its
// size is saved_size(spec, true).at(T)): for quantized steps whose backward computes dW, the
// group starts and padded starts of the wgrad layout (G+1 int64 each) and the columnwise copy
// of x in that layout (padded_rows rows). Dense steps and save_original_input keep nothing
// here: backward is given x.
struct LinearSaved {
  Allocation storage;
  int64_t rows = 0;                  // T
  bool has_input = false;            // x's columnwise copy is held
  int64_t padded_rows = 0;           // rows of the wgrad layout (padded_rows_for(T, G, align))
  TensorView starts, padded_starts;  // int64 (G+1): group starts, padded group starts
  QuantizedTensorView input;         // (padded_rows, in), columnwise usage
};

SavedSize saved_size(const LinearSpec& spec, bool save_input);

struct LinearForwardArgs {
  TensorView x;                  // (T, in) float32 / bfloat16 / float16, contiguous
  TensorView offsets;            // group offsets, see the file header
  GroupOffsetsFormat offsets_format = GroupOffsetsFormat::kEndOffsets;
  TensorView bias;               // (G, out) or empty
  TensorView y;                  // (T, out) float32 / bfloat16 / float16, written whole
  bool save_input = false;       // keep x's columnwise copy for a backward that computes dW
  // x given instead as its rowwise quantized copy (leave x empty): (T, in) in the input role's
  // mode and element, a mode whose scales are local to a row (rowwise, block1x128, mxfp8: e.g.
  // an FP8 dispatch's payload, or the copy an upstream op wrote). The forward GEMM reads it as it
  // is (x is not quantized again); the step's x is then x̂ = dequantize(x_rowwise) (FP32), and
  // the saved columnwise copy is the input role's quantization of x̂ — made from the codes on
  // CUDA for rowwise E4M3 (one byte an element read), else through an FP32 image of x̂.
  QuantizedTensorView x_rowwise;
};

// Whether a forward takes x as its rowwise copy: x_rowwise has data, or (T = 0) columns while x
// is no view at all.
inline bool x_rowwise_given(const TensorView& x, const QuantizedTensorView& x_rowwise) {
  return x_rowwise.has_rowwise() || (x.ndim == 0 && x_rowwise.cols > 0);
}

LinearSaved linear_forward(const LinearSpec& spec, const WeightCopies& weight,
                           const LinearForwardArgs& args, const LinearState& state,
                           Allocator& alloc, Stream stream = {});
// The LinearSaved whose storage is `storage` (saved_size(spec, save_input).at(rows) bytes).
LinearSaved view_linear_saved(const LinearSpec& spec, int64_t rows, bool save_input,
                              const Allocation& storage);

// dy's quantized copies as the backward GEMMs read them (inspection: tests and the demo): the
// rowwise copy of dy (T rows, the dgrad's) and the columnwise copy in the wgrad layout
// (padded_rows rows, LinearSaved).
struct LinearGradOutput {
  Allocation storage;
  QuantizedTensorView rowwise, columnwise;
};

struct LinearBackwardArgs {
  TensorView dy;        // (T, out), like y
  TensorView offsets;   // the forward's
  GroupOffsetsFormat offsets_format = GroupOffsetsFormat::kEndOffsets;
  TensorView x;         // (T, in): the forward's x, when the step did not save its copy
  TensorView dx;        // (T, in) or empty: written whole
  TensorView dw;        // (G, out, in) or empty: float32 when accumulate, else any float dtype
  TensorView db;        // (G, out) or empty (float32 when accumulate_bias)
  bool accumulate = false;       // dw += dW (main-grad accumulation: the GEMM's beta = 1)
  bool accumulate_bias = false;  // db += db
  // When set (quantized steps), dy's copies are made in memory handed back here instead of in
  // scratch (with dy_rowwise: the columnwise copy; `rowwise` is then dy_rowwise itself).
  LinearGradOutput* keep_grad_output = nullptr;
  // dy given instead as its rowwise quantized copy (leave dy empty): (T, out) in the
  // grad_output role's mode and element, a mode whose scales are local to a row (rowwise,
  // block1x128, mxfp8: e.g. a combine's quantized gradient). The dgrad reads it as it is (dy is
  // not quantized again); the step's dy is then dŷ = dequantize(dy_rowwise) (FP32): the wgrad's
  // columnwise copy is the grad_output role's quantization of dŷ — made from the codes on CUDA
  // for rowwise E4M3, else through an FP32 image of dŷ — and db is Σ dŷ.
  QuantizedTensorView dy_rowwise;
};

// Whether a backward takes dy as its rowwise copy (as x_rowwise_given).
inline bool dy_rowwise_given(const TensorView& dy, const QuantizedTensorView& dy_rowwise) {
  return x_rowwise_given(dy, dy_rowwise);
}

void linear_backward(const LinearSpec& spec, const WeightCopies& weight, const LinearSaved& saved,
                     const LinearBackwardArgs& args, const LinearState& state, Allocator& alloc,
                     Stream stream = {});

}  // namespace tessera::nn
