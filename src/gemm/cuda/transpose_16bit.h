// Transposes of 16-bit (and 8-bit) matrices on the device (BF16/FP16 bits), used by the CUDA grouped
// GEMM to turn MN-major dense operands into the K-major layout its TMA/wgmma kernel reads:
// K-grouped A (T, M) → (M, ld_out ≥ T) and NN B (G, K, N) → (G, N, K). Asynchronous, no sync.
#pragma once

#include <cstdint>

namespace tessera::gemm_cuda {

// For b in [0, batch): out[b] (cols, ld_out) = in[b] (rows, cols)ᵀ; batch strides are
// rows*cols (in) and cols*ld_out (out). Columns [rows, ld_out) of out are not written.
void transpose_16bit(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
                     int64_t ld_out, void* stream);

// out (cols, ld_out) = in (rows, cols)ᵀ for 1-byte elements (FP8 codes: MXFP8 columnwise copies,
// quantized_operands.h), through 64 x 64 byte tiles moved as 32-bit words. Needs cols % 4 == 0,
// ld_out % 4 == 0 and 4-byte aligned bases; columns [rows, roundup(rows, 4)) of out may be
// written (with bytes of no meaning), columns past that are not.
void transpose_8bit(const void* in, void* out, int64_t rows, int64_t cols, int64_t ld_out,
                    void* stream);

}  // namespace tessera::gemm_cuda
