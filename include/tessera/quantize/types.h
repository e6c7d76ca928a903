// The quantization data model shared by every layer: scaling modes, quantizer configuration,
// the storage of a quantized tensor (QuantizedTensorView / QuantizedTensor) and the one function
// that sizes data and scale buffers (used by the quantizers, GroupedTensor, the GEMM setup and
// the reference alike). docs/numerics.md.
//
// Storage contract of a quantized (rows, cols) = (M, K) tensor, K the last (contiguous) dim:
//   rowwise copy: blocks along K. data (M, K) codes row-major (E2M1: two per byte, each row
//     starting on a byte: (M, ceil(K/2)) bytes).
//   columnwise copy: blocks along M. For kTensor, kRowwise, kBlock*, kNVFP4*: stored TRANSPOSED,
//     i.e. it is the rowwise quantization of xᵀ (K, M) (data (K, M), scales as for (K, M)).
//     For kMXFP8*: data (M, K) in the rowwise layout, scales per 32x1 column block.
//   A partial last block (K not a multiple of the block) is quantized over its valid elements.
//   Scales are scale_inv = 1/scale (what GEMM and dequantize multiply by), see scale_shape().
//   amax / columnwise_amax (FP32, one value) exist for kTensor (both usages: the tensor amax) and
//   kNVFP4* (the global amax of that copy; with the Hadamard transform the columnwise one is taken
//   after the transform). Other modes have no amax buffers.
// Exact numerics of every mode: docs/numerics.md and include/tessera/quantize/scale_rules.h.
#pragma once

#include <cstdint>

#include "tessera/core/buffer.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/tensor_view.h"
#include "tessera/formats/scaling_modes.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera {

// The modes themselves (ScalingMode) and their facts (block shapes, scale dtype, ...) are the
// rows of formats/scaling_modes.h.
// "none", "tensor", ... : the names of kScalingModeTable.
const char* scaling_mode_name(ScalingMode m) noexcept;
// Inverse of scaling_mode_name; throws Error(kInvalidArgument) listing the accepted names.
ScalingMode scaling_mode_from_name(const char* name);

enum class ScaleLayout : int {
  kCompact = 0,   // one scale per block, row-major, no padding (FP8 block: see scale_shape)
  kSwizzled = 1,  // MXFP8/NVFP4 only: padded to (roundup(rows,128), roundup(blocks,4)), 128x4
                  // tiles tile-major, element (r,c) of a tile at byte (r%32)*16 + (r/32)*4 + c
};

enum class AmaxHistoryAlgo : int { kMax = 0, kMostRecent = 1 };
enum class E8M0Rounding : int { kRoundUp = 0 /* TE */, kFloor = 1 /* OCP / torchao default */ };

// Everything that decides the bits a quantizer produces. Plain data; compare with ==.
struct QuantizerConfig {
  ScalingMode mode = ScalingMode::kTensor;
  DType element = DType::kFloat8E4M3;  // E4M3 or E5M2 (FP8 recipes), E2M1 (NVFP4)
  bool rowwise = true;                 // usages the next quantization produces
  bool columnwise = false;
  ScaleLayout scale_layout = ScaleLayout::kCompact;
  // kTensor: delayed scaling (amax history) instead of current scaling.
  bool delayed = false;
  int amax_history_len = 1024;
  AmaxHistoryAlgo amax_algo = AmaxHistoryAlgo::kMax;
  int margin = 0;
  // Current-scaling family (kTensor current, kRowwise, kBlock*): amax' = max(amax, eps).
  float amax_epsilon = 0.0f;
  // Power-of-two scales (mantissa cleared, rounding down). make_config() turns it on for
  // kBlock* (the FP8 block recipe default); a hand-built config gets what it sets.
  bool power_of_two_scales = false;
  // kMXFP8*: how the E8M0 exponent is chosen.
  E8M0Rounding e8m0_rounding = E8M0Rounding::kRoundUp;
  // kNVFP4*: 16-point random Hadamard transform (applied to the columnwise copy, as TE does for
  // wgrad operands) and stochastic rounding (Philox, seed + offset; reproducible).
  bool random_hadamard = false;
  bool stochastic_rounding = false;
  uint64_t rng_seed = 0;
  uint64_t rng_offset = 0;

  friend bool operator==(const QuantizerConfig&, const QuantizerConfig&) = default;
};

// The defaults of `mode`: element E4M3 (E2M1 for kNVFP4*; `element` overrides when given),
// power_of_two_scales on for kBlock*, everything else as in QuantizerConfig.
QuantizerConfig make_config(ScalingMode mode, DType element = DType::kFloat32 /* = default */);
// Throws a clear Error naming the field when `config` is not valid (element not allowed for the
// mode, E2M1 outside NVFP4, history length < 1, margin outside [-126, 126], negative or
// non-finite epsilon, Hadamard/stochastic rounding outside NVFP4, swizzled layout outside
// MXFP8/NVFP4, kNone).
void validate_config(const QuantizerConfig& config);
// True when the mode stores amax buffers (kTensor, kNVFP4*).
bool has_amax(ScalingMode mode);

// A 2-D matrix shape (rows, cols) plus its element type.
struct MatrixShape {
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kFloat32;
  // Both throw Error(kOutOfRange) when the result overflows int64.
  int64_t numel() const { return checked_mul(rows, cols, "(rows, cols)"); }
  int64_t bytes() const;  // E2M1 rows start on a byte: rows * ceil(cols/2)
};

// Shape of the data of one usage of a (rows, cols) tensor quantized with `config`.
MatrixShape data_shape(const QuantizerConfig& config, int64_t rows, int64_t cols, bool columnwise);
// Shape of the scale_inv matrix of one usage, padding included, in config.scale_layout:
//   kTensor: (1, 1) FP32.   kRowwise: rowwise (M, 1), columnwise (K, 1) FP32.
//   kBlock1x128: rowwise (roundup(M,4), ceil(K/128)); columnwise on xᵀ: (roundup(K,4), ceil(M/128)).
//   kBlock128x128: rowwise (ceil(M/128), roundup(ceil(K/128),4)); columnwise likewise on xᵀ.
//   kMXFP8*: rowwise (M, ceil(K/32)) E8M0; columnwise (ceil(M/32), K); swizzled: the rowwise
//     matrix, or the TRANSPOSE (K, ceil(M/32)) of the columnwise one, padded and tiled.
//   kNVFP4*: rowwise (M, ceil(K/16)) E4M3; columnwise on xᵀ: (K, ceil(M/16)); swizzled padded.
// Padding entries are written as 0 by the quantizers.
MatrixShape scale_shape(const QuantizerConfig& config, int64_t rows, int64_t cols, bool columnwise);
// Byte offset of scale (r, c) of a logical (unpadded) scale matrix in the swizzled layout whose
// padded width (blocks) is `padded_cols` (a multiple of 4): scale_rules::swizzled_scale_offset.
inline int64_t swizzled_scale_offset(int64_t r, int64_t c, int64_t padded_cols) {
  return scale_rules::swizzled_scale_offset(r, c, padded_cols);
}
// Where the scale of each element of one stored copy lives (scale_rules::scale_index), for a
// (rows, cols) tensor quantized with `config`, in the copy's stored orientation.
scale_rules::ScaleGeometry scale_geometry(const QuantizerConfig& config, int64_t rows,
                                          int64_t cols, bool columnwise);

// Non-owning views of every buffer a quantized tensor may have. A field whose data is nullptr
// is absent. Invariant: present fields have exactly the shapes data_shape/scale_shape give,
// except that an E2M1 data view has roundup(cols, 2) columns (rows start on a byte; the spare
// high nibble of an odd row is 0), and the view's byte size is at least MatrixShape::bytes().
struct QuantizedTensorView {
  QuantizerConfig config;          // the config that produced it (mode, element, layout, ...)
  int64_t rows = 0, cols = 0;      // logical (M, K) of the high-precision tensor
  TensorView data, scale_inv;                    // rowwise copy
  TensorView columnwise_data, columnwise_scale_inv;
  TensorView amax, columnwise_amax;              // FP32 (1): tensor amax (NVFP4: global amax)
  Device device{};
  bool has_rowwise() const { return data.data != nullptr; }
  bool has_columnwise() const { return columnwise_data.data != nullptr; }
};

// Owning storage for a QuantizedTensorView: allocates exactly the buffers its usages need.
class QuantizedTensor {
 public:
  QuantizedTensor() = default;
  QuantizedTensor(const QuantizerConfig& config, int64_t rows, int64_t cols, Device device);
  const QuantizedTensorView& view() const { return view_; }
  QuantizedTensorView& view() { return view_; }
  // Adds the buffers of a usage that is not present yet (never drops one). New scale buffers
  // are zero-filled (padding entries stay 0).
  void ensure_usage(bool rowwise, bool columnwise);
  bool has_rowwise() const { return view_.has_rowwise(); }
  bool has_columnwise() const { return view_.has_columnwise(); }

 private:
  QuantizedTensorView view_;
  Buffer data_, scale_inv_, columnwise_data_, columnwise_scale_inv_, amax_, columnwise_amax_;
};

}  // namespace tessera
