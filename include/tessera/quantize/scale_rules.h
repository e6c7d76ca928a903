// The scale and element rules of every recipe (docs/numerics.md), as host/device functions shared by the
// CPU backend (src/quantize/cpu) and the CUDA backend (src/quantize/cuda). The reference
// (src/quantize/reference) re-derives the same rules independently; tests hold them to the same
// bits. The ORDER of float operations written here is normative: every backend performs exactly
// these IEEE-754 single-precision operations (round to nearest even, no flush to zero, no
// reassociation). No rule contains an a*b+c whose product is inexact, so FMA contraction cannot
// change a result. docs/numerics.md restates all of it in prose.
#pragma once

#include <cstdint>

#include "tessera/formats/bits.h"
#include "tessera/formats/codecs.h"

namespace tessera::scale_rules {

inline constexpr float kFloatMax = 3.40282346638528859812e38f;
inline constexpr uint32_t kCanonicalNaN = 0x7fc00000u;

// ---- amax ----------------------------------------------------------------------------------
// amax of a set of values = max over |x| with NaN winning: reduce max over the bit patterns
// (bits & 0x7fffffff) as unsigned integers (order-independent: any NaN pattern exceeds +inf),
// then map any NaN to the canonical quiet NaN 0x7fc00000. An empty set has amax 0.
TESSERA_HD uint32_t abs_bits(float x) { return formats::float_to_bits(x) & 0x7fffffffu; }
TESSERA_HD float amax_from_abs_bits(uint32_t m) {
  return formats::bits_to_float(m > 0x7f800000u ? kCanonicalNaN : m);
}
TESSERA_HD bool is_finite(float x) { return abs_bits(x) < 0x7f800000u; }

// ---- FP8 current scaling (kTensor current, kRowwise, kBlock*) --------------------------------
// a = (amax < eps) ? eps : amax   (a NaN amax stays NaN)
// a inf or NaN (non-finite input in the scaling unit) → scale NaN (canonical): every element of
// the unit encodes as NaN and its scale_inv is NaN (docs/numerics.md, non-finite input);
// a == 0 → scale 1; else scale = fp8_max / a (IEEE division); scale == +inf → FLT_MAX;
// power_of_two: scale bits &= 0xff800000 (mantissa cleared: rounds down).
TESSERA_HD float current_scale(float amax, float fp8_max, float eps, bool power_of_two) {
  const float a = amax < eps ? eps : amax;
  if (!is_finite(a)) return formats::bits_to_float(kCanonicalNaN);
  if (a == 0.0f) return 1.0f;
  float scale = fp8_max / a;
  if (!is_finite(scale)) scale = kFloatMax;
  if (power_of_two) scale = formats::bits_to_float(formats::float_to_bits(scale) & 0xff800000u);
  return scale;
}

// ---- FP8 delayed scaling -------------------------------------------------------------------
// amax == 0, inf or NaN → old scale; else scale = (fp8_max / amax) / 2^margin (two IEEE
// divisions, the second by an exact power of two); scale == +inf → FLT_MAX.
TESSERA_HD float delayed_scale(float amax, float old_scale, float fp8_max, int margin) {
  if (amax == 0.0f || !is_finite(amax)) return old_scale;
  float scale = (fp8_max / amax) / formats::exp2i(margin);
  if (!is_finite(scale)) scale = kFloatMax;
  return scale;
}

// The update of one delayed-scaling state: amax = the history's abs-bits maximum (NaN wins) or
// its slot 0 (most_recent); *scale = delayed_scale(amax, *scale, ...); then the history rolls
// by one toward slot 0 (h'[i] = h[(i + 1) % len]) and slot 0 is cleared. Slot i of the history
// is history[i * stride] (stride 1: a contiguous history; G: member g's of an (len, G) one).
TESSERA_HD void delayed_update(float* scale, float* history, int len, int64_t stride,
                               bool most_recent, float fp8_max, int margin) {
  const float h0 = history[0];
  uint32_t m = abs_bits(h0);
  for (int i = 1; i < len && !most_recent; ++i) {
    const uint32_t v = abs_bits(history[i * stride]);
    m = v > m ? v : m;
  }
  *scale = delayed_scale(amax_from_abs_bits(m), *scale, fp8_max, margin);
  for (int i = 0; i + 1 < len; ++i) history[i * stride] = history[(i + 1) * stride];
  history[(len - 1) * stride] = h0;
  history[0] = 0.0f;
}

// scale_inv stored for every FP32-scaled mode: 1.0f / scale (IEEE division). A NaN scale gives
// the canonical NaN 0x7fc00000: the division alone would not give the same bits everywhere (x86
// returns the operand's NaN, GPU arithmetic its own canonical NaN 0x7fffffff).
TESSERA_HD float reciprocal(float scale) {
  return abs_bits(scale) > 0x7f800000u ? formats::bits_to_float(kCanonicalNaN) : 1.0f / scale;
}

// ---- MXFP8 ---------------------------------------------------------------------------------
// Round-up rule (TE): v = amax * inv_elem_max, inv_elem_max = fp32(1/fp8_max) (1/448 or
// 1/57344 rounded to float). v NaN or +inf (a non-finite element in the block) → 0xFF, the NaN
// scale; v = 0 → 0x00; else E = the biased
// exponent field of v, plus 1 when the mantissa field is non-zero, except when E is already 0xFE
// (saturation) or v is a subnormal <= 2^-127 (mantissa <= 0x400000: E stays 0).
TESSERA_HD uint8_t e8m0_round_up(float amax, float inv_elem_max) {
  const float v = amax * inv_elem_max;
  const uint32_t u = formats::float_to_bits(v);
  if ((u & 0x7fffffffu) >= 0x7f800000u) return 0xff;
  if (u == 0) return 0x00;
  uint32_t e = (u >> 23) & 0xffu;
  const uint32_t m = u & 0x7fffffu;
  if (m > 0 && e != 0xfeu && !(e == 0 && m <= 0x400000u)) ++e;
  return static_cast<uint8_t>(e);
}

// Floor rule (OCP MX v1.0, torchao default): E = clamp(floor(log2(amax)) - emax_elem, -127, 127)
// + 127 with floor(log2) exact from the bits (subnormals included), emax_elem = 8 (E4M3) or 15
// (E5M2). amax NaN or +inf → 0xFF (the NaN scale); amax 0 → 0x00.
TESSERA_HD uint8_t e8m0_floor(float amax, int emax_elem) {
  const uint32_t u = formats::float_to_bits(amax) & 0x7fffffffu;
  if (u >= 0x7f800000u) return 0xff;
  if (u == 0) return 0x00;
  int log2_floor;
  if ((u >> 23) != 0) {
    log2_floor = static_cast<int>(u >> 23) - 127;
  } else {
    int hb = 22;
    while (((u >> hb) & 1u) == 0) --hb;
    log2_floor = hb - 149;
  }
  int e = log2_floor - emax_elem;
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<uint8_t>(e + 127);
}

// The element multiplier 2^(127 - E), built exactly from bits: E = 0xFF → NaN (every element of
// the block becomes NaN); E = 0xFE → 2^-127 (the subnormal 0x00400000); else bits (254-E) << 23.
TESSERA_HD float e8m0_multiplier(uint8_t e) {
  if (e == 0xff) return formats::bits_to_float(kCanonicalNaN);
  if (e == 0xfe) return formats::bits_to_float(0x00400000u);
  return formats::bits_to_float(static_cast<uint32_t>(254 - e) << 23);
}

// ---- NVFP4 ---------------------------------------------------------------------------------
inline constexpr float kNvfp4GlobalNumerator = 2688.0f;  // 448 * 6, exact
inline constexpr float kInv6 = 1.0f / 6.0f;              // fp32(1/6) = 0x3e2aaaab

// global_amax inf or NaN (non-finite input: E2M1 holds neither) → S_enc NaN (canonical), so
// every block scale byte is the NaN code 0x7F and the whole copy decodes to NaN;
// else S_enc = 2688 / global_amax; S_enc = +inf → FLT_MAX; global_amax == 0 or S_enc == 0 → 1.
TESSERA_HD float nvfp4_global_encode_scale(float global_amax) {
  if (!is_finite(global_amax)) return formats::bits_to_float(kCanonicalNaN);
  float s = kNvfp4GlobalNumerator / global_amax;
  if (!(s <= kFloatMax)) s = kFloatMax;
  if (global_amax == 0.0f || s == 0.0f) s = 1.0f;
  return s;
}

// Block scale byte: s_b = encode_e4m3(block_amax * (S_enc * fp32(1/6))) (RNE, saturating; a NaN
// block amax gives the NaN code 0x7F).
TESSERA_HD uint8_t nvfp4_block_scale(float block_amax, float s_enc) {
  return formats::encode_e4m3(block_amax * (s_enc * kInv6));
}

// Decode scale of a block (what dequantize multiplies the E2M1 value by):
// dec = decode_e4m3(s_b) * (1.0f / S_enc).
TESSERA_HD float nvfp4_decode_scale(uint8_t s_b, float s_enc) {
  return formats::decode_e4m3(s_b) * (1.0f / s_enc);
}

// Element encode scale: enc = 1.0f / dec; enc = +inf or NaN → FLT_MAX.
TESSERA_HD float nvfp4_encode_scale(uint8_t s_b, float s_enc) {
  float enc = 1.0f / nvfp4_decode_scale(s_b, s_enc);
  if (!(enc <= kFloatMax)) enc = kFloatMax;
  return enc;
}

// v = x * enc, clamped to [-6, 6] by comparisons (a NaN v stays NaN and encodes as +6, 0x7).
TESSERA_HD float nvfp4_clamp(float v) { return v > 6.0f ? 6.0f : (v < -6.0f ? -6.0f : v); }

// Stochastic rounding of a clamped v onto the E2M1 grid with 32 random bits r:
// a = |v|; step = 0.5 (a < 2), 1 (a < 4) or 2; lo = floor(a / step) * step; frac = (a - lo) /
// step (all exact); u = (r >> 8) * 2^-24; rounds up to lo + step iff frac > u. Sign kept
// (-0 → 0x8). NaN → 0x7.
TESSERA_HD uint8_t e2m1_stochastic(float v, uint32_t r) {
  const uint32_t bits = formats::float_to_bits(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7;
  const float a = formats::bits_to_float(bits & 0x7fffffffu);
  const float step = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
  const float lo = static_cast<float>(static_cast<int>(a / step)) * step;
  const float frac = (a - lo) / step;
  const float u = static_cast<float>(r >> 8) * 5.9604644775390625e-08f;  // 2^-24
  const float q = frac > u ? lo + step : lo;
  return static_cast<uint8_t>(formats::encode_e2m1(q) | ((bits >> 28) & 0x8u));
}

// ---- 16-point random Hadamard transform ---------------------------------------------------
// t = (1/4) H16 diag(s) b, H16 the Sylvester Hadamard matrix H[i][j] = (-1)^popcount(i & j),
// s the fixed sign vector below. Per output i: acc = 0.0f; for j = 0..15 ascending:
// acc = acc + (H[i][j] * s[j]) * b[j] (the product is ±b[j], exact); t[i] = acc * 0.25f.
// Inverse (dequantize): b[j] = s[j] * ((sum_i H[i][j] * t[i], i ascending, from 0.0f) * 0.25f).
inline constexpr float kRhtSigns[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};

TESSERA_HD float hadamard_entry(int i, int j) {
  int p = i & j, parity = 0;
  while (p != 0) {
    parity ^= p & 1;
    p >>= 1;
  }
  return parity != 0 ? -1.0f : 1.0f;
}

TESSERA_HD void rht16_forward(const float* b, float* t) {
  for (int i = 0; i < 16; ++i) {
    float acc = 0.0f;
    for (int j = 0; j < 16; ++j) acc = acc + (hadamard_entry(i, j) * kRhtSigns[j]) * b[j];
    t[i] = acc * 0.25f;
  }
}

TESSERA_HD void rht16_inverse(const float* t, float* b) {
  for (int j = 0; j < 16; ++j) {
    float acc = 0.0f;
    for (int i = 0; i < 16; ++i) acc = acc + hadamard_entry(i, j) * t[i];
    b[j] = kRhtSigns[j] * (acc * 0.25f);
  }
}

// ---- where a scale lives ------------------------------------------------------------------
// The swizzled layout pads a scale matrix to whole 128 x 4 tiles.
inline constexpr int64_t kSwizzleTileRows = 128;
inline constexpr int64_t kSwizzleTileCols = 4;

// Byte offset of entry (r, c) of a scale matrix in the GEMM-swizzled layout (ScaleLayout::
// kSwizzled) whose padded width is `padded_cols` (a multiple of 4): 128x4 tiles, tile-major,
// entry (r, c) of a tile at (r % 32) * 16 + (r % 128 / 32) * 4 + c % 4. The one definition of the
// swizzle (int64_t on the host; device code may instantiate it on uint32_t for matrices below
// 2^32 bytes).
template <class I>
TESSERA_HD I swizzled_scale_offset(I r, I c, I padded_cols) {
  const I tile = (r / 128) * (padded_cols / 4) + c / 4;
  const I rr = r % 128;
  return tile * 512 + (rr % 32) * 16 + (rr / 32) * 4 + c % 4;
}

// Scales of one stored copy: element (r, c) of the copy (stored orientation) has its scale in
// block (r / block_rows, c / block_cols) (a block size of 0 spans the whole dimension). Compact
// layout: entry at sr * ld + sc (ld = width of the scale matrix, padding included). Swizzled:
// swizzled_scale_offset of (sr, sc), or of (sc, sr) when `swizzle_transposed` (MXFP8 columnwise:
// its 32x1 block scales are swizzled as the transpose). types.h scale_geometry() fills it.
struct ScaleGeometry {
  int64_t block_rows = 0, block_cols = 0;
  int64_t ld = 1;
  bool swizzled = false;
  bool swizzle_transposed = false;
};

TESSERA_HD int64_t scale_index(const ScaleGeometry& g, int64_t r, int64_t c) {
  const int64_t sr = g.block_rows > 0 ? r / g.block_rows : 0;
  const int64_t sc = g.block_cols > 0 ? c / g.block_cols : 0;
  if (!g.swizzled) return sr * g.ld + sc;
  return g.swizzle_transposed ? swizzled_scale_offset<int64_t>(sc, sr, g.ld)
                              : swizzled_scale_offset<int64_t>(sr, sc, g.ld);
}

// ---- element codes -------------------------------------------------------------------------
// FP8 element = encode(x * scale) with the saturating RNE codec, except that a NaN product
// always gives the positive NaN code 0x7F (CPU and GPU disagree on the sign of NaN results).
TESSERA_HD uint8_t fp8_element(float product, bool e5m2) {
  if ((formats::float_to_bits(product) & 0x7fffffffu) > 0x7f800000u) return 0x7f;
  return e5m2 ? formats::encode_e5m2(product) : formats::encode_e4m3(product);
}

}  // namespace tessera::scale_rules
