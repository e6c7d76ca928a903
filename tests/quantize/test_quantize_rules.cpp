// The building blocks against independent statements: Philox known-answer vectors (both
// implementations), the CPU's branch-free FP8 encoders and fp16 load against the codecs over
// billions of bit patterns, and hand-computed values of every scale rule (docs/numerics.md
// examples).
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "quantize/cpu/cpu_kernels.h"
#include "quantize/reference/reference_rules.h"
#include "tessera/formats/codecs.h"
#include "tessera/quantize/philox.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera {
namespace {

// Random123 kat_vectors, philox4x32 10 rounds: counter, key → output.
struct Kat {
  uint32_t ctr[4], key[2], out[4];
};
constexpr Kat kKat[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

TEST(Philox, KnownAnswerVectors) {
  for (const Kat& k : kKat) {
    const philox::Block out = philox::philox4x32_10(
        philox::Block{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.w[i], k.out[i]) << "word " << i;
  }
}

TEST(Philox, StreamMapAndReferenceAgree) {
  // Element e uses word e % 4 of counter (e / 4, offset); the reference is a separate implementation.
  // seed = key, offset = counter words 2-3, e / 4 = counter words 0-1.
  const uint64_t seed = (uint64_t{0x299f31d0u} << 32) | 0xa4093822u;
  const uint64_t offset = (uint64_t{0x03707344u} << 32) | 0x13198a2eu;
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(philox::random_bits(0, 0, w), kKat[0].out[w]);
    EXPECT_EQ(reference::philox_word(0, 0, w), kKat[0].out[w]);
    const philox::Block b = philox::philox4x32_10(philox::Block{{5, 0, 0x13198a2eu, 0x03707344u}},
                                                  0xa4093822u, 0x299f31d0u);
    EXPECT_EQ(philox::random_bits(seed, offset, 20 + w), b.w[w]);
    EXPECT_EQ(reference::philox_word(seed, offset, 20 + w), b.w[w]);
  }
  for (uint64_t e = 0; e < 100000; e += 7) {
    ASSERT_EQ(philox::random_bits(42, 3, e), reference::philox_word(42, 3, e)) << e;
  }
}

TEST(CpuEncoders, MatchCodecsOverBitPatterns) {
  // Every pattern whose low 9 bits are one of a few values (all exponents, all high mantissas,
  // ties), plus every 97th pattern.
  int64_t checked = 0, bad = 0;
#pragma omp parallel for reduction(+ : checked, bad) schedule(static)
  for (int64_t hi = 0; hi < (int64_t{1} << 23); ++hi) {
    for (uint32_t lo : {0u, 1u, 0x100u, 0x1ffu, static_cast<uint32_t>(hi % 512)}) {
      const float v = std::bit_cast<float>(static_cast<uint32_t>(hi << 9) | lo);
      bad += detail::cpu::e4m3_element(v) != scale_rules::fp8_element(v, false);
      bad += detail::cpu::e5m2_element(v) != scale_rules::fp8_element(v, true);
      checked += 2;
    }
  }
  EXPECT_EQ(bad, 0) << "of " << checked;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 97) {
    const float v = std::bit_cast<float>(static_cast<uint32_t>(u));
    ASSERT_EQ(detail::cpu::e4m3_element(v), scale_rules::fp8_element(v, false)) << std::hex << u;
    ASSERT_EQ(detail::cpu::e5m2_element(v), scale_rules::fp8_element(v, true)) << std::hex << u;
  }
}

TEST(CpuEncoders, Fp16LoadIsExact) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = detail::cpu::load_float(fp16{static_cast<uint16_t>(h)});
    const float b = formats::decode_fp16(static_cast<uint16_t>(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b)) << std::hex << h;
  }
}

TEST(ScaleRules, CurrentScaling) {
  EXPECT_EQ(scale_rules::current_scale(448.0f, 448.0f, 0.0f, false), 1.0f);
  EXPECT_EQ(scale_rules::current_scale(3.0f, 448.0f, 0.0f, false), 448.0f / 3.0f);
  EXPECT_EQ(scale_rules::current_scale(3.0f, 448.0f, 0.0f, true), 128.0f);  // 149.33 → 2^7
  EXPECT_EQ(scale_rules::current_scale(0.0f, 448.0f, 0.0f, false), 1.0f);
  EXPECT_EQ(scale_rules::current_scale(0.0f, 448.0f, 0.5f, false), 896.0f);  // eps
  // Non-finite input in the unit: the scale is NaN (docs/numerics.md, non-finite input).
  EXPECT_TRUE(std::isnan(scale_rules::current_scale(INFINITY, 448.0f, 0.0f, false)));
  EXPECT_TRUE(std::isnan(scale_rules::current_scale(NAN, 448.0f, 1.0f, false)));
  EXPECT_TRUE(std::isnan(scale_rules::current_scale(INFINITY, 448.0f, 0.0f, true)));
  for (float amax : {INFINITY, NAN}) {
    EXPECT_TRUE(std::isnan(reference::current_scaling_scale(amax, make_config(ScalingMode::kTensor))));
  }
  EXPECT_EQ(scale_rules::current_scale(1e-40f, 448.0f, 0.0f, false), FLT_MAX);  // overflow
  EXPECT_EQ(scale_rules::current_scale(1e-40f, 448.0f, 0.0f, true), 0x1p127f);
  for (float amax : {1e-3f, 0.7f, 5.0f, 1e30f}) {
    QuantizerConfig c = make_config(ScalingMode::kTensor);
    EXPECT_EQ(reference::current_scaling_scale(amax, c), scale_rules::current_scale(amax, 448.0f, 0.0f, false));
  }
}

// scale_inv = 1 / scale; a NaN scale of any sign or payload gives the canonical NaN bits (GPU
// arithmetic would give 0x7fffffff, x86 the operand: the backends must agree bit for bit).
TEST(ScaleRules, ReciprocalCanonicalNan) {
  EXPECT_EQ(scale_rules::reciprocal(4.0f), 0.25f);
  EXPECT_EQ(scale_rules::reciprocal(FLT_MAX), 1.0f / FLT_MAX);
  EXPECT_EQ(std::bit_cast<uint32_t>(scale_rules::reciprocal(INFINITY)), 0u);
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fffffffu, 0xffffffffu}) {
    EXPECT_EQ(std::bit_cast<uint32_t>(scale_rules::reciprocal(std::bit_cast<float>(nan))),
              scale_rules::kCanonicalNaN)
        << std::hex << nan;
  }
}

TEST(ScaleRules, DelayedScaling) {
  EXPECT_EQ(scale_rules::delayed_scale(448.0f, 5.0f, 448.0f, 0), 1.0f);
  EXPECT_EQ(scale_rules::delayed_scale(448.0f, 5.0f, 448.0f, 2), 0.25f);
  EXPECT_EQ(scale_rules::delayed_scale(0.0f, 5.0f, 448.0f, 0), 5.0f);
  EXPECT_EQ(scale_rules::delayed_scale(INFINITY, 5.0f, 448.0f, 0), 5.0f);
  EXPECT_EQ(scale_rules::delayed_scale(NAN, 5.0f, 448.0f, 0), 5.0f);
  EXPECT_EQ(scale_rules::delayed_scale(1e-40f, 5.0f, 448.0f, 0), FLT_MAX);
}

TEST(ScaleRules, E8M0RoundUpAndFloor) {
  const float inv = 1.0f / 448.0f;
  EXPECT_EQ(scale_rules::e8m0_round_up(448.0f, inv), 127);  // v = 448 * fp32(1/448) = 1 exactly?
  EXPECT_EQ(scale_rules::e8m0_round_up(449.0f, inv), 128);
  EXPECT_EQ(scale_rules::e8m0_round_up(224.0f, inv), 126);
  EXPECT_EQ(scale_rules::e8m0_round_up(0.0f, inv), 0);
  EXPECT_EQ(scale_rules::e8m0_round_up(NAN, inv), 0xff);
  EXPECT_EQ(scale_rules::e8m0_round_up(INFINITY, inv), 0xff);  // inf in the block: NaN scale
  EXPECT_EQ(scale_rules::e8m0_floor(INFINITY, 8), 0xff);
  EXPECT_EQ(scale_rules::e8m0_floor(NAN, 8), 0xff);
  EXPECT_EQ(scale_rules::e8m0_round_up(FLT_MAX, inv), 247);  // ceil(log2(FLT_MAX/448)) = 120
  EXPECT_EQ(scale_rules::e8m0_floor(448.0f, 8), 127);  // floor(log2 448) = 8
  EXPECT_EQ(scale_rules::e8m0_floor(511.0f, 8), 127);
  EXPECT_EQ(scale_rules::e8m0_floor(512.0f, 8), 128);
  EXPECT_EQ(scale_rules::e8m0_floor(1.0f, 15), 112);
  EXPECT_EQ(scale_rules::e8m0_floor(1e-45f, 8), 0);  // clamp at 2^-127
  EXPECT_EQ(scale_rules::e8m0_floor(0.0f, 8), 0);
  EXPECT_EQ(scale_rules::e8m0_multiplier(127), 1.0f);
  EXPECT_EQ(scale_rules::e8m0_multiplier(0), 0x1p127f);
  EXPECT_EQ(scale_rules::e8m0_multiplier(254), 0x1p-127f);
  EXPECT_TRUE(std::isnan(scale_rules::e8m0_multiplier(255)));
  QuantizerConfig c = make_config(ScalingMode::kMXFP8);
  QuantizerConfig cf = c;
  cf.e8m0_rounding = E8M0Rounding::kFloor;
  for (uint32_t u = 0; u < 0x7f800000u; u += 0x1234u) {  // the reference's frexp/ilogb forms
    const float a = std::bit_cast<float>(u);
    ASSERT_EQ(reference::e8m0_exponent(a, c), scale_rules::e8m0_round_up(a, inv)) << a;
    ASSERT_EQ(reference::e8m0_exponent(a, cf), scale_rules::e8m0_floor(a, 8)) << a;
  }
}

TEST(ScaleRules, Nvfp4) {
  EXPECT_EQ(scale_rules::nvfp4_global_encode_scale(0.0f), 1.0f);
  EXPECT_EQ(scale_rules::nvfp4_global_encode_scale(2688.0f), 1.0f);
  // Non-finite input anywhere in the copy: S_enc NaN, every block scale byte the NaN code.
  EXPECT_TRUE(std::isnan(scale_rules::nvfp4_global_encode_scale(INFINITY)));
  EXPECT_TRUE(std::isnan(scale_rules::nvfp4_global_encode_scale(NAN)));
  EXPECT_TRUE(std::isnan(reference::nvfp4_s_enc(INFINITY)));
  EXPECT_EQ(scale_rules::nvfp4_block_scale(1.0f, scale_rules::nvfp4_global_encode_scale(NAN)), 0x7f);
  EXPECT_EQ(scale_rules::nvfp4_global_encode_scale(1e-44f), FLT_MAX);
  // global amax 2688 → S_enc 1; block amax 6 → s_b = e4m3(6 * fp32(1/6)) = 1.0 → code 0x38.
  EXPECT_EQ(scale_rules::nvfp4_block_scale(6.0f, 1.0f), 0x38);
  EXPECT_EQ(scale_rules::nvfp4_encode_scale(0x38, 1.0f), 1.0f);
  EXPECT_EQ(scale_rules::nvfp4_encode_scale(0x00, 1.0f), FLT_MAX);  // zero block
  EXPECT_EQ(scale_rules::nvfp4_clamp(7.0f), 6.0f);
  EXPECT_EQ(scale_rules::nvfp4_clamp(-7.0f), -6.0f);
  EXPECT_EQ(formats::encode_e2m1(scale_rules::nvfp4_clamp(NAN)), 0x7);
}

TEST(ScaleRules, StochasticRoundingBothFormsAgree) {
  for (uint32_t i = 0; i < 200000; ++i) {
    const float v = -6.5f + 13.0f * static_cast<float>(i) / 200000.0f;
    const float c = scale_rules::nvfp4_clamp(v);
    const uint32_t r = i * 2654435761u;
    ASSERT_EQ(scale_rules::e2m1_stochastic(c, r), reference::e2m1_stochastic(c, r)) << v;
  }
  EXPECT_EQ(scale_rules::e2m1_stochastic(1.0f, 0xffffffffu), 0x2);  // on the grid: never moves
  EXPECT_EQ(scale_rules::e2m1_stochastic(-0.0f, 0), 0x8);
}

TEST(ScaleRules, HadamardBothFormsAgreeAndInvert) {
  float b[16], t1[16], t2[16], back[16];
  for (int i = 0; i < 16; ++i) b[i] = std::sin(1.0f + static_cast<float>(i) * 0.7f) * 3.0f;
  scale_rules::rht16_forward(b, t1);
  reference::hadamard_forward(b, t2);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(t1[i]), std::bit_cast<uint32_t>(t2[i]));
  scale_rules::rht16_inverse(t1, back);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(back[i], b[i], 1e-5f);
  // Orthonormal: the energy is kept.
  double e0 = 0, e1 = 0;
  for (int i = 0; i < 16; ++i) {
    e0 += double(b[i]) * b[i];
    e1 += double(t1[i]) * t1[i];
  }
  EXPECT_NEAR(e0, e1, 1e-4 * e0);
}

}  // namespace
}  // namespace tessera
