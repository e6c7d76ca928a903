// NVFP4 operands expanded inside the sm90 grouped GEMM (the in-kernel path, see the kernel's
// converter threads): one stage of an operand arrives as raw E2M1 codes, 32 bytes per row (64
// contraction elements, two codes per byte, low nibble first), and leaves as the BF16 stage the
// BF16 kind's consumers read: 128 bytes per row, K-major, 128-byte swizzle (the 16-byte chunk j
// of row r at chunk j ^ (r % 8)). Each value is e2m1 × e4m3(block scale), exact in BF16 (at most
// 2 × 4 significant bits; exponents 2^-10 .. 2^12), as expand_operand.cu writes it; the copy's
// FP32 1/S_enc stays the epilogue's scale.
//
// Host and device share these functions (the device's byte permutes and BF16 multiplies have a
// host definition of the same bits), so the stage conversion is tested on the CPU.
//
// The unit of work is half a stage row: 32 codes (16 bytes) under two block scales (1x16 blocks;
// 16x16 tiles give two scales of one tile row) → 32 BF16 values, four 16-byte chunks.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

#include "gemm/cuda/kernels/grouped_gemm_params.h"
#include "tessera/core/macros.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::gemm_sm90::fp4 {

inline constexpr int kStageElems = 64;          // contraction elements of a BF16 stage row
inline constexpr int kUnitsPerRow = 2;           // halves of a row: 32 codes each
inline constexpr int kBf16RowBytes = 128;

// r = bytes of the 8-byte value {y:x} (x bytes 0-3, y bytes 4-7) picked by the selector nibbles
// of s (3 bits each; callers keep the nibbles' top bits clear, where the device's PRMT would
// replicate a sign instead).
TESSERA_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t v = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n)
    r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
  return r;
#endif
}

// The BF16 bits of an E4M3 block scale (every E4M3 value, NaN included, is a BF16 value).
TESSERA_HD uint32_t e4m3_bf16_bits(uint8_t s) {
  return formats::float_to_bits(formats::decode_e4m3(s)) >> 16;
}

// Two BF16 products a·s (a: two BF16 values in one word, s: BF16 bits in both halves); exact for
// an E2M1 value times an E4M3 scale, so the device's BF16 multiply and the host's FP32 one agree.
TESSERA_HD uint32_t bf16x2_mul(uint32_t a, uint32_t s2) {
#if defined(__CUDA_ARCH__)
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                             *reinterpret_cast<const __nv_bfloat162*>(&s2));
  return *reinterpret_cast<const uint32_t*>(&r);
#else
  uint32_t r = 0;
  for (int h = 0; h < 2; ++h) {
    const float p = formats::bits_to_float((a >> (16 * h)) << 16) *
                    formats::bits_to_float((s2 >> (16 * h)) << 16);
    r |= (formats::float_to_bits(p) >> 16) << (16 * h);
  }
  return r;
#endif
}

// Four E2M1 codes (the low 16 bits of w, code 0 in the low nibble) → their BF16 values as two
// words (codes 0, 1 in the first; the lower-index value in each word's low half). Magnitudes
// 0, 0.5, 1, 1.5, 2, 3, 4, 6 have BF16 bits 0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040,
// 0x4080, 0x40C0: a high-byte and a low-byte table, one byte permute each; the code's sign bit
// becomes bit 15 of its value.
TESSERA_HD void e2m1x4_bf16(uint32_t w, uint32_t& v01, uint32_t& v23) {
  const uint32_t sel = w & 0x7777u;
  const uint32_t lo = byte_perm(0xC0800000u, 0xC0804000u, sel);
  const uint32_t hi = byte_perm(0x3F3F3F00u, 0x40404040u, sel);
  v01 = byte_perm(lo, hi, 0x5140u) | ((w << 12) & 0x8000u) | ((w << 24) & 0x80000000u);
  v23 = byte_perm(lo, hi, 0x7362u) | ((w << 4) & 0x8000u) | ((w << 16) & 0x80000000u);
}

// One unit: 32 codes q (8 per word, element 0 in the low nibble of q[0]), elements 0-15 under
// the scale with BF16 bits s0 and 16-31 under s1 → out[i]: BF16 elements 2i, 2i + 1.
TESSERA_HD void unit_bf16(const uint32_t (&q)[4], uint32_t s0, uint32_t s1, uint32_t (&out)[16]) {
  for (int i = 0; i < 4; ++i) {
    const uint32_t s2 = (i < 2 ? s0 : s1) * 0x10001u;
    uint32_t a, b;
    e2m1x4_bf16(q[i], a, b);
    out[4 * i + 0] = bf16x2_mul(a, s2);
    out[4 * i + 1] = bf16x2_mul(b, s2);
    e2m1x4_bf16(q[i] >> 16, a, b);
    out[4 * i + 2] = bf16x2_mul(a, s2);
    out[4 * i + 3] = bf16x2_mul(b, s2);
  }
}

// Byte offset in a BF16 stage (128-byte rows, 128-byte swizzle) of 16-byte chunk j (elements
// 8j .. 8j + 7) of row r.
TESSERA_HD uint32_t swizzled_chunk(int r, int j) {
  return static_cast<uint32_t>(r * kBf16RowBytes + ((j ^ (r & 7)) << 4));
}

// The BF16 bits of the scale of stored row `row`, contraction element `col` (whose offset in
// its group's contraction is `local`) of operand `o` (KernelParams::fa / fb), or 0 for padding:
// a row past the copy, or an element past the group's contraction, so that a block of the next
// group, or past the copy, never meets the zero codes of the other operand there.
TESSERA_HD uint32_t scale_bits(const Fp4Operand& o, int64_t row, int64_t col, int64_t local) {
  if (row >= o.rows || local >= o.k) return 0;
  // scale_rules::scale_index of 16-element blocks of 1 or 16 rows, with shifts for its
  // divisions by run-time block sizes (this runs per unit in the converter threads)
  const int64_t sr = row >> o.row_shift, sc = col >> 4;
  const scale_rules::ScaleGeometry& g = o.geometry;
  int64_t i = sr * g.ld + sc;
  if (g.swizzled)
    i = g.swizzle_transposed ? scale_rules::swizzled_scale_offset(sc, sr, g.ld)
                             : scale_rules::swizzled_scale_offset(sr, sc, g.ld);
  return e4m3_bf16_bits(o.scales[i]);
}

// 16 bytes read or written at once (one 128-bit shared-memory access on the device).
struct alignas(16) Words4 {
  uint32_t w[4];
};

// Unit h (0, 1: elements [32h, 32h + 32) of the stage row) of stage row r: codes from the raw
// stage (kFp4RawRowBytes a row), values into the BF16 stage, s0 / s1 the BF16 bits of its two
// block scales; one 16-byte chunk (8 codes) at a time, so that few registers are live.

TESSERA_HD void convert_unit(const uint8_t* raw, uint8_t* bf16_stage, int r, int h, uint32_t s0,
                             uint32_t s1) {
  const Words4 q = *reinterpret_cast<const Words4*>(raw + r * kFp4RawRowBytes + 16 * h);
  for (int c = 0; c < 4; ++c) {
    const uint32_t s2 = (c < 2 ? s0 : s1) * 0x10001u;
    uint32_t v[4];
    e2m1x4_bf16(q.w[c], v[0], v[1]);
    e2m1x4_bf16(q.w[c] >> 16, v[2], v[3]);
    Words4 out;
    for (int i = 0; i < 4; ++i) out.w[i] = bf16x2_mul(v[i], s2);
    *reinterpret_cast<Words4*>(bf16_stage + swizzled_chunk(r, 4 * h + c)) = out;
  }
}

}  // namespace tessera::gemm_sm90::fp4
