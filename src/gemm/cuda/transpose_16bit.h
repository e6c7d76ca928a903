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

// For b in [0, batch): in[b] (rows, cols) (at in + b·rows·cols) transposed into out + b·
// out_batch_stride as (cols, rows_pad) with row stride ld_out, zeros in columns [rows, rows_pad):
// by default (out_batch_stride < 0: rows_pad) the matrices sit side by side in out (cols, ld_out),
// matrix b at columns [b·rows_pad, (b + 1)·rows_pad) (the dgrad's W per group); with
// out_batch_stride = cols·rows_pad and ld_out = rows_pad, one after the other. For 1-byte
// elements (FP8 codes: MXFP8 columnwise copies, quantized_operands.h), through 64 x 64 byte tiles
// moved in 16-byte chunks (4-byte ones where cols, rows_pad, ld_out, the batch stride or the
// bases are not 16-byte multiples). Needs cols, rows_pad and ld_out multiples of 4,
// rows <= rows_pad <= ld_out and 4-byte aligned bases.
void transpose_8bit(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
                    int64_t ld_out, int64_t rows_pad, void* stream, int64_t out_batch_stride = -1);

}  // namespace tessera::gemm_cuda
