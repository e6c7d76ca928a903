// Exact expansion of block-scaled operand copies into BF16, for the grouped GEMM pairs the sm90
// kernel has no FP4 or mixed-family kind for (quantized_operands.h: every pair with an NVFP4
// copy). Each stored element becomes code × block scale, which BF16 holds exactly:
//   NVFP4: e2m1 × e4m3(s_b) — at most 2 × 4 significant bits, exponents 2^-10 .. 2^12;
//     the copy's FP32 factor 1/S_enc is NOT applied here: it is the GEMM's epilogue scale
//     (nvfp4_decode_factors), so the tensor cores multiply exact values and accumulate in FP32;
//   MXFP8: e4m3/e5m2 × 2^(e − 127) — exact while the product is inside BF16's range (that of
//     FP32: any block of a finite FP32 tensor, except values below 2^-133 after scaling).
// Asynchronous, no sync, CUDA-graph safe (no allocation, no host read of device data).
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::gemm_cuda {

// One stored copy, in its stored orientation (rows, cols): codes row-major (E2M1: two per byte,
// low nibble first, each row starting on a byte: ceil(cols/2) bytes per row; FP8: cols bytes),
// the block scale of stored element (r, c) at byte scale_index(geometry, r, c) of `scales`
// (E4M3 for E2M1 codes, E8M0 for FP8 codes).
struct ExpandSource {
  const void* codes = nullptr;
  const void* scales = nullptr;
  scale_rules::ScaleGeometry geometry;
  int64_t rows = 0, cols = 0;
  DType element = DType::kFloat4E2M1;  // kFloat4E2M1, kFloat8E4M3 or kFloat8E5M2
};

// out (rows, ld) BF16 = the expanded copy, zeros in columns [cols, ld). Needs ld a multiple of 8,
// ld >= cols, out 16-byte aligned.
void expand_to_bf16(const ExpandSource& s, void* out, int64_t ld, void* stream);

// out (cols, ld) BF16 = the expanded copy transposed, zeros in columns [rows, ld) (MXFP8
// columnwise copies, stored untransposed, read K-major). Needs ld >= rows.
void expand_to_bf16_transposed(const ExpandSource& s, void* out, int64_t ld, void* stream);

// out[i] = 1 / S_enc(amax[i]) for i < count (scale_rules::nvfp4_global_encode_scale: NaN for a
// non-finite amax): the FP32 factor of an NVFP4 copy's values, as dequantize applies it.
void nvfp4_decode_factors(const float* amax, int64_t count, float* out, void* stream);

}  // namespace tessera::gemm_cuda
