// The reference's reading of a GEMM operand: its first `rows` LOGICAL rows as an FP64 matrix,
// dense operands converted element by element, quantized ones dequantized element by element
// from the spec (code × the scale of its block, read straight from the stored layout, the
// product taken in FP32 as the quantize layer defines it). Shares no code with the CPU backend.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/gemm/grouped_gemm.h"

namespace tessera::detail {

// Row-major FP64 (rows, cols). Invariant: values.size() == rows * cols.
struct ReferenceMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> values;
  double at(int64_t r, int64_t c) const { return values[static_cast<size_t>(r * cols + c)]; }
};

// group_starts: G+1 logical row starts (for per-group kTensor scales / NVFP4 global amax).
ReferenceMatrix reference_read(const GemmOperand& o, int64_t rows,
                               const std::vector<int64_t>& group_starts);

}  // namespace tessera::detail
