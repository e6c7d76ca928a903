// The rules of docs/numerics.md written a second time, plainly, for the reference backend only:
// amax, scale choices, E8M0 exponents, NVFP4 scales, the Hadamard matrix, Philox and stochastic
// rounding. Deliberately independent of include/tessera/quantize/scale_rules.h and philox.h (which
// the fast paths use); the tests hold both to the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/tensor_view.h"
#include "tessera/quantize/types.h"

namespace tessera::reference {

// A dense float matrix (rows, cols), row-major.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  float& at(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  float at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

Matrix load_matrix(const TensorView& x);  // float32/bfloat16/float16 (M, K) → float
Matrix transposed(const Matrix& a);

// Largest |v| of a set; NaN (0x7fc00000) when any element is NaN; 0 for an empty set.
class AmaxAccumulator {
 public:
  void add(float v);
  float value() const;

 private:
  float max_ = 0.0f;
  bool nan_ = false;
};

float elem_max(DType element);                         // 448 or 57344
uint8_t fp8_code(float v, DType element);               // NaN → 0x7F, else the saturating codec
float current_scaling_scale(float amax, const QuantizerConfig& c);
uint8_t e8m0_exponent(float amax, const QuantizerConfig& c);
float e8m0_element_multiplier(uint8_t e);               // 2^(127 - e); e = 255 → NaN
float nvfp4_s_enc(float global_amax);
uint8_t nvfp4_scale_byte(float block_amax, float s_enc);
float nvfp4_dec(uint8_t s_b, float s_enc);
float nvfp4_enc(uint8_t s_b, float s_enc);
uint8_t e2m1_nearest(float v);                          // clamp to [-6, 6] happened before
uint8_t e2m1_stochastic(float v, uint32_t random);

// (1/4) H16 diag(signs) applied to 16 values, and its inverse.
void hadamard_forward(const float* in, float* out);
void hadamard_inverse(const float* in, float* out);

// Philox 4x32-10 word for element `e` of the stream (seed, offset) (see philox.h for the map).
uint32_t philox_word(uint64_t seed, uint64_t offset, uint64_t e);

// Byte position of logical scale (r, c) in a scale buffer laid out per `layout`, whose logical
// width is `cols` (compact) or padded width `padded_cols` (swizzled 128x4 tiles).
int64_t scale_position(ScaleLayout layout, int64_t r, int64_t c, int64_t compact_cols,
                       int64_t padded_cols);

// Position (in entries) of the scale of element (r, k) of one stored copy (R, C) of a tensor
// quantized with `c` (copy as stored: the transposed columnwise copy is (K, M)), derived from the
// scaling-mode table's block shapes and padding and scale_position above. Every reference
// (quantize, dequantize, the GEMM's operand reader) reads scales through it.
int64_t copy_scale_position(const QuantizerConfig& c, bool columnwise, int64_t r, int64_t k,
                            int64_t R, int64_t C);

}  // namespace tessera::reference
