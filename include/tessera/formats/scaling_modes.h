// The constexpr table of scaling modes (the sibling of format_table.h): one row per ScalingMode
// with every fact the quantizers, dequantizers, GEMM operand readers, layout helpers, parsers and
// `tessera info` need — name, family, scale dtype, elements, block shapes, scale-matrix padding,
// whether the columnwise copy is stored transposed, amax, swizzle, defaults. Code reads the row
// (scaling_mode_info) instead of switching on the mode; only a new FAMILY (a new kind of scale)
// needs new code. Adding a block size of an existing family is one row here.
//
// Shapes: a quantized tensor is (rows, cols) = (M, K); "the copy" is what one usage stores:
// the rowwise copy blocks along K; the columnwise copy blocks along M and is, for modes with
// `columnwise_transposed`, the rowwise quantization of xᵀ (K, M) stored (K, M). For the others
// (MXFP8*) the columnwise data stays (M, K) and its scales cover 32x1 blocks.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "tessera/core/dtype.h"

namespace tessera {

enum class ScalingMode : int {
  kNone = 0,          // not quantized (FP32 / BF16 / FP16)
  kTensor = 1,        // FP8, one FP32 scale per tensor (current or delayed scaling)
  kRowwise = 2,       // FP8, one FP32 scale per row (columnwise usage: per column)
  kBlock1x128 = 3,    // FP8, FP32 scale per 1x128 block (columnwise: 128x1)
  kBlock128x128 = 4,  // FP8, FP32 scale per 128x128 tile
  kMXFP8 = 5,         // E4M3/E5M2, E8M0 scale per 1x32 (columnwise: 32x1)
  kMXFP8_32x32 = 6,   // weights: one E8M0 per 32x32 tile, stored expanded as kMXFP8 scales
  kNVFP4 = 7,         // E2M1, E4M3 scale per 1x16 + FP32 global amax
  kNVFP4_16x16 = 8,   // weights: one E4M3 per 16x16 tile, stored expanded as kNVFP4 scales
};

// The kernels that quantize a mode and the way its scales are applied. Modes of one family can
// meet in one GEMM (e.g. 1x128 activations with 128x128 weights, as DeepGEMM does).
enum class ScaleFamily : int {
  kNone = 0,     // not quantized
  kTensor = 1,   // one FP32 scale (current or delayed)
  kRowwise = 2,  // one FP32 scale per row of the copy
  kBlock = 3,    // FP32 scale per block_rows x block_cols block (current scaling)
  kMXFP8 = 4,    // E8M0 scale per 32 elements (OCP MX)
  kNVFP4 = 5,    // E4M3 scale per 16 elements + FP32 global amax
};

struct ScalingModeInfo {
  ScalingMode mode;
  const char* name;           // scaling_mode_name / scaling_mode_from_name
  ScaleFamily family;
  DType scale_dtype;          // dtype of scale_inv
  bool fp4;                   // elements: E2M1 only (true) or E4M3 / E5M2 (false)
  // Quantization block of the copy (rows x cols of the copy; 0 = the whole dimension).
  int block_rows, block_cols;
  // Block one STORED scale entry covers. Tiled weights (MXFP8 32x32, NVFP4 16x16) repeat their
  // tile's scale in every row of the tile, so their storage is that of the 1xN mode.
  int scale_block_rows, scale_block_cols;
  // Compact scale matrix: rows / cols padded to a multiple of these (padding entries are 0).
  int pad_rows, pad_cols;
  bool columnwise_transposed;  // columnwise copy stored as (K, M) (see the file header)
  bool has_amax;               // amax / columnwise_amax buffers (FP32, one value)
  bool swizzle;                // ScaleLayout::kSwizzled allowed (GEMM-swizzled 128x4 tiles)
  bool power_of_two_default;   // make_config turns power_of_two_scales on
  bool delayed;                // delayed scaling (amax history) allowed
};

inline constexpr ScalingModeInfo kScalingModeTable[] = {
    // mode, name, family, scale dtype, fp4, block, stored-scale block, pad, transposed, amax,
    // swizzle, pow2 default, delayed
    {ScalingMode::kNone, "none", ScaleFamily::kNone, DType::kFloat32, false, 0, 0, 0, 0, 1, 1,
     false, false, false, false, false},
    {ScalingMode::kTensor, "tensor", ScaleFamily::kTensor, DType::kFloat32, false, 0, 0, 0, 0, 1,
     1, true, true, false, false, true},
    {ScalingMode::kRowwise, "rowwise", ScaleFamily::kRowwise, DType::kFloat32, false, 1, 0, 1, 0,
     1, 1, true, false, false, false, false},
    {ScalingMode::kBlock1x128, "block1x128", ScaleFamily::kBlock, DType::kFloat32, false, 1, 128,
     1, 128, 4, 1, true, false, false, true, false},
    {ScalingMode::kBlock128x128, "block128x128", ScaleFamily::kBlock, DType::kFloat32, false, 128,
     128, 128, 128, 1, 4, true, false, false, true, false},
    {ScalingMode::kMXFP8, "mxfp8", ScaleFamily::kMXFP8, DType::kFloat8E8M0, false, 1, 32, 1, 32,
     1, 1, false, false, true, false, false},
    {ScalingMode::kMXFP8_32x32, "mxfp8_32x32", ScaleFamily::kMXFP8, DType::kFloat8E8M0, false, 32,
     32, 1, 32, 1, 1, false, false, true, false, false},
    {ScalingMode::kNVFP4, "nvfp4", ScaleFamily::kNVFP4, DType::kFloat8E4M3, true, 1, 16, 1, 16, 1,
     1, true, true, true, false, false},
    {ScalingMode::kNVFP4_16x16, "nvfp4_16x16", ScaleFamily::kNVFP4, DType::kFloat8E4M3, true, 16,
     16, 1, 16, 1, 1, true, true, true, false, false},
};

// The row of `m`, or nullptr when `m` is not a value of the table.
constexpr const ScalingModeInfo* find_scaling_mode(ScalingMode m) {
  for (const ScalingModeInfo& r : kScalingModeTable) {
    if (r.mode == m) return &r;
  }
  return nullptr;
}

// The row of `m`; throws Error(kInvalidArgument) naming the value and the accepted names.
const ScalingModeInfo& scaling_mode_info(ScalingMode m);
std::span<const ScalingModeInfo> scaling_mode_table();
// "tensor, rowwise, ..., nvfp4_16x16" (every quantizing mode; with_none: "none, " first).
const char* scaling_mode_names(bool with_none = false);
// The names of `modes`, comma-separated, in their order ("rowwise, block1x128, mxfp8").
std::string scaling_mode_names(std::span<const ScalingMode> modes);

// Shorthands read from the table (false for a value not in it).
constexpr ScaleFamily scale_family(ScalingMode m) {
  const ScalingModeInfo* r = find_scaling_mode(m);
  return r == nullptr ? ScaleFamily::kNone : r->family;
}
constexpr bool is_family(ScalingMode m, ScaleFamily f) { return scale_family(m) == f; }

// Whether copies of modes a and b can meet as A and B of one grouped GEMM (on every backend):
// two modes of one family (e.g. block1x128 with block128x128), or MXFP8 and NVFP4 copies in any
// mix (an NVFP4 operand is expanded exactly to BF16 on CUDA, dequantized on the CPU). The one
// statement of this rule: the training step's recipe check and tessera.torch read it.
constexpr bool modes_can_meet(ScalingMode a, ScalingMode b) {
  const ScaleFamily fa = scale_family(a), fb = scale_family(b);
  if (fa == ScaleFamily::kNone || fb == ScaleFamily::kNone) return false;
  const auto narrow = [](ScaleFamily f) { return f == ScaleFamily::kMXFP8 || f == ScaleFamily::kNVFP4; };
  return fa == fb || (narrow(fa) && narrow(fb));
}

}  // namespace tessera
