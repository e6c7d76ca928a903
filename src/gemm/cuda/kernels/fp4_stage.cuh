// NVFP4 operands expanded inside the sm90 grouped GEMM (the in-kernel path, see the kernel's
// converter threads): one stage of an operand arrives as raw E2M1 codes, 32 bytes per row (64
// contraction elements, two codes per byte, low nibble first), and leaves as the FP16 stage the
// FP16 kind's consumers read: 128 bytes per row, K-major, 128-byte swizzle (the 16-byte chunk j
// of row r at chunk j ^ (r % 8)). Each value is e2m1 × e4m3(block scale), exact in FP16 (at most
// 2 × 4 significant bits, magnitudes 2^-10 .. 2688: FP16 normals), as expand_operand.cu's BF16
// values are exact; the copy's FP32 1/S_enc stays the epilogue's scale.
//
// Why FP16 and how: an E2M1 code s e1 e0 m, its three low bits placed at bits 4..2 of a byte
// and its sign at bit 7, is the E4M3 byte of its value / 64 (e ≥ 1: 2^(e−7)(1 + m/2); e = 0:
// the E4M3 subnormal m · 2^−7). The hardware converts E4M3 pairs to FP16 pairs in one
// instruction (cvt.rn.f16x2.e4m3x2, sm_89+), and one FP16 multiply by 64 × the block scale (an
// E4M3 value converted the same way, times 64: exact) gives the value: about 19 instructions for
// 8 codes, where BF16 (no such conversion) took about 30.
//
// Host and device share these functions (the device's byte permutes, conversions and FP16
// multiplies have a host definition of the same bits), so the stage conversion is tested on the
// CPU (tests/gemm/test_fp4_stage.cpp).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

#include "gemm/cuda/kernels/grouped_gemm_params.h"
#include "tessera/core/macros.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/half.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::gemm_sm90::fp4 {

inline constexpr int kStageElems = 64;       // contraction elements of a stage row
inline constexpr int kBlocksPerRow = 4;      // 16-element block scales of a stage row
inline constexpr int kStageRowBytes = 128;   // FP16 bytes of a stage row

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

// The two E4M3 bytes in the low 16 bits of x (byte 0 → the low half) as two FP16 values.
TESSERA_HD uint32_t e4m3x2_f16x2(uint32_t x) {
#if defined(__CUDA_ARCH__)
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
#else
  const auto half = [](uint32_t b) {
    return static_cast<uint32_t>(formats::encode_fp16(formats::decode_e4m3(static_cast<uint8_t>(b))));
  };
  return half(x & 0xffu) | (half((x >> 8) & 0xffu) << 16);
#endif
}

// Two FP16 products a·b, rounded to nearest even (exact in this file's uses).
TESSERA_HD uint32_t f16x2_mul(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
#else
  uint32_t r = 0;
  for (int h = 0; h < 2; ++h) {
    const float p = formats::decode_fp16(static_cast<uint16_t>(a >> (16 * h))) *
                    formats::decode_fp16(static_cast<uint16_t>(b >> (16 * h)));
    r |= static_cast<uint32_t>(formats::encode_fp16(p)) << (16 * h);
  }
  return r;
#endif
}

// Block j's scale of a stage row (byte j of the packed scales, stage_row_scales) times 64, as
// FP16 in both halves: the factor that turns the placed E4M3 bytes (value / 64) into values.
TESSERA_HD uint32_t block_scale_f16x2(uint32_t scales4, int j) {
  constexpr uint32_t k64x2 = 0x54005400u;  // FP16 64.0 in both halves
  return f16x2_mul(e4m3x2_f16x2(byte_perm(scales4, 0, static_cast<uint32_t>(j) * 0x11u)), k64x2);
}

// Eight E2M1 codes (w, code 0 in the low nibble) → four words, word i holding codes 2i, 2i + 1
// as E4M3 bytes of value / 64 in its low 16 bits (the placement above: bits 2..0 of a code to
// bits 4..2 of its byte, its sign bit 3 to bit 7).
TESSERA_HD void e2m1x8_e4m3_pairs(uint32_t w, uint32_t (&pairs)[4]) {
  const uint32_t even = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u);  // codes 0, 2, 4, 6
  const uint32_t odd = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);          // codes 1, 3, 5, 7
  for (int i = 0; i < 4; ++i) pairs[i] = byte_perm(even, odd, static_cast<uint32_t>(i | (4 + i) << 4));
}

// Byte offset in a stage (128-byte rows, 128-byte swizzle) of 16-byte chunk j (elements
// 8j .. 8j + 7) of row r.
TESSERA_HD uint32_t swizzled_chunk(int r, int j) {
  return static_cast<uint32_t>(r * kStageRowBytes + ((j ^ (r & 7)) << 4));
}

// The scale bytes of the stage row that starts at stored row `row`, contraction element `col`
// (whose offset in its group's contraction is `local`) of operand `o` (KernelParams::fa / fb):
// byte j = the E4M3 scale of elements col + 16j .. col + 16j + 15, or 0 for padding (a row past
// the copy, or elements past the group's contraction), so that a block of the next group, or
// past the copy, never meets the other operand's codes there. One aligned 32-bit load: the
// host takes this path only where a stage row's four scales are adjacent bytes on a 4-byte
// boundary (Fp4Operand), and masks are applied past the contraction, so bytes read past it
// (inside the row's padded scale width) never count.
TESSERA_HD uint32_t stage_row_scales(const Fp4Operand& o, int64_t row, int64_t col, int64_t local) {
  if (row >= o.rows || local >= o.k) return 0;
  // scale_rules::scale_index of 16-element blocks of 1 or 16 rows, with a shift for its division
  // by the run-time block height
  const int64_t sr = row >> o.row_shift, sc = col >> 4;
  const scale_rules::ScaleGeometry& g = o.geometry;
  const int64_t i = g.swizzled ? scale_rules::swizzled_scale_offset(sr, sc, g.ld) : sr * g.ld + sc;
  const uint32_t s = *reinterpret_cast<const uint32_t*>(o.scales + i);
  const int64_t left = o.k - local;  // a multiple of 16, > 0
  return left >= kStageElems ? s : s & ((1u << (8 * (left / 16))) - 1u);
}

// 16 bytes read or written at once (one 128-bit shared-memory access on the device).
struct alignas(16) Words4 {
  uint32_t w[4];
};

// Stage row r: its 64 codes from `raw_row` (kFp4RawRowBytes), its packed block scales
// (stage_row_scales) → its 64 FP16 values in the stage, one 16-byte chunk (8 codes) at a time.
TESSERA_HD void convert_row(const uint8_t* raw_row, uint8_t* stage, int r, uint32_t scales4) {
  for (int h = 0; h < 2; ++h) {
    const Words4 q = *reinterpret_cast<const Words4*>(raw_row + 16 * h);
    const uint32_t s_lo = block_scale_f16x2(scales4, 2 * h), s_hi = block_scale_f16x2(scales4, 2 * h + 1);
    for (int c = 0; c < 4; ++c) {
      uint32_t pairs[4];
      e2m1x8_e4m3_pairs(q.w[c], pairs);
      Words4 out;
      for (int i = 0; i < 4; ++i) out.w[i] = f16x2_mul(e4m3x2_f16x2(pairs[i]), c < 2 ? s_lo : s_hi);
      *reinterpret_cast<Words4*>(stage + swizzled_chunk(r, 4 * h + c)) = out;
    }
  }
}

}  // namespace tessera::gemm_sm90::fp4
