// The reference's reading of a GEMM operand: its first `rows` LOGICAL rows as an FP64 matrix,
// dense operands converted element by element, quantized ones dequantized from the spec (code ×
// the scale of its block, read straight from the stored layout). Shares no code with the CPU
// backend's conversion.
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

ReferenceMatrix reference_read(const GemmOperand& o, int64_t rows);

}  // namespace tessera::detail
