// Validation of quantized GEMM operands (recipe, usage, data/scale shapes) and of the recipe
// pairing of A and B. Throws Error with the specific status (docs/gemm.md).
#pragma once

#include <cstdint>

#include "gemm/gemm_backend.h"

namespace tessera::detail {

// A quantized operand: a known scaling mode, the requested usage present, element and scale
// dtypes and shapes as the data model (quantize/types.h) gives them; kTensor scale_inv (and the
// NVFP4 global amax) may hold 1 or `num_groups` values.
// path kEmulated also accepts NVFP4 copies with the random Hadamard transform.
void check_quantized_operand(const GemmOperand& o, const char* name, int64_t num_groups,
                             GemmPath path = GemmPath::kFast);

// Both unquantized, or both quantized with compatible recipes (kDTypeMismatch otherwise).
void check_quantized_pair(const GemmOperand& a, const GemmOperand& b);

}  // namespace tessera::detail
