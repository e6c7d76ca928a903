// FP32 images of GEMM operands for the CPU backend: the workspace carve-up, conversion of
// BF16/FP16 operands and dequantization of quantized ones (OpenMP loops), and the store of an
// FP32 result into a BF16/FP16 output.
#pragma once

#include <cstdint>

#include "tessera/gemm/grouped_gemm.h"

namespace tessera::detail {

// Bytes of an FP32 region of `elems` elements, padded to keep the next region 256-byte aligned.
int64_t fp32_region_bytes(int64_t elems);

// Hands out consecutive FP32 regions of the workspace. Invariant: used ≤ bytes.
struct WorkspaceCursor {
  char* base = nullptr;
  int64_t bytes = 0;
  int64_t used = 0;
  float* take_floats(int64_t elems);  // kInternal when the workspace was sized too small
};

// Workspace bytes operand_fp32 needs for `rows` × `cols` of `o` (0 for an FP32 dense operand).
int64_t operand_fp32_bytes(const GemmOperand& o, int64_t rows, int64_t cols);

// The first `rows` logical rows of `o` as an FP32 row-major (rows, cols) matrix: the operand's
// own memory when it is FP32 dense, else converted/dequantized into a region of `ws`.
const float* operand_fp32(const GemmOperand& o, const char* name, int64_t rows, int64_t cols,
                          WorkspaceCursor& ws);

// Rounds `elems` FP32 values into the first `elems` elements of `out` (BF16/FP16, RNE).
void store_fp32(const float* src, const TensorView& out, int64_t elems);

}  // namespace tessera::detail
