// Scalar codecs against the independent oracle: every code decoded, random and tie values encoded.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>

#include "formats/format_oracle.h"
#include "tessera/formats/codecs.h"

namespace tessera {
namespace {

using testing::oracle_decode;
using testing::oracle_encode;
using testing::oracle_grid;

struct Codec {
  DType dtype;
  uint8_t (*encode)(float);
  float (*decode)(uint8_t);
};

constexpr Codec kCodecs[] = {
    {DType::kFloat8E4M3, formats::encode_e4m3, formats::decode_e4m3},
    {DType::kFloat8E5M2, formats::encode_e5m2, formats::decode_e5m2},
    {DType::kFloat4E2M1, formats::encode_e2m1, formats::decode_e2m1},
};

uint32_t float_bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(Codecs, EveryCodeDecodesToTheFormulaValue) {
  for (const Codec& c : kCodecs) {
    const FormatInfo& f = format_info(c.dtype);
    for (uint32_t code = 0; code < (1u << f.bits); ++code) {
      const double want = oracle_decode(f, code);
      const float got = c.decode(static_cast<uint8_t>(code));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " code " << code;
      } else {
        EXPECT_EQ(double(got), want) << f.name << " code " << code;
      }
    }
  }
  for (uint32_t code = 0; code < 256; ++code) {
    const double want = oracle_decode(format_info(DType::kFloat8E8M0), code);
    const float got = formats::decode_e8m0(static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      EXPECT_EQ(double(got), want) << "e8m0 code " << code;
    }
  }
}

TEST(Codecs, EveryFiniteCodeRoundTrips) {
  for (const Codec& c : kCodecs) {
    const FormatInfo& f = format_info(c.dtype);
    for (uint32_t code = 0; code < (1u << f.bits); ++code) {
      const float v = c.decode(static_cast<uint8_t>(code));
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(c.encode(v), code) << f.name << " code " << code;
    }
  }
}

TEST(Codecs, TiesAndMidpointsRoundToEven) {
  for (const Codec& c : kCodecs) {
    const FormatInfo& f = format_info(c.dtype);
    const auto grid = oracle_grid(f);
    for (size_t i = 0; i + 1 < grid.values.size(); ++i) {
      const double lo = grid.values[i], hi = grid.values[i + 1];
      const float mid = static_cast<float>((lo + hi) / 2);  // exact in float
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), -mid}) {
        EXPECT_EQ(c.encode(x), oracle_encode(f, grid, x)) << f.name << " x=" << x;
      }
    }
  }
}

TEST(Codecs, RandomBitPatternsMatchTheOracle) {
  std::mt19937 rng(1234);
  for (const Codec& c : kCodecs) {
    const FormatInfo& f = format_info(c.dtype);
    const auto grid = oracle_grid(f);
    for (int i = 0; i < 200000; ++i) {
      const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
      if (std::isnan(x)) continue;
      ASSERT_EQ(c.encode(x), oracle_encode(f, grid, x)) << f.name << " bits " << float_bits(x);
    }
  }
}

TEST(Codecs, SaturationAndSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(formats::encode_e4m3(inf), 0x7E);
  EXPECT_EQ(formats::encode_e4m3(-inf), 0xFE);
  EXPECT_EQ(formats::encode_e4m3(464.0f), 0x7E);  // tie 448/480 → even 448
  EXPECT_EQ(formats::encode_e4m3(1e9f), 0x7E);
  EXPECT_EQ(formats::encode_e4m3(nan) & 0x7F, 0x7F);
  EXPECT_EQ(formats::encode_e5m2(inf), 0x7B);
  EXPECT_EQ(formats::encode_e5m2(-1e30f), 0xFB);
  EXPECT_TRUE(std::isnan(formats::decode_e5m2(formats::encode_e5m2(nan))));
  EXPECT_EQ(formats::encode_e4m3(-0.0f), 0x80);
  EXPECT_EQ(formats::encode_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the min subnormal: tie → 0
  EXPECT_EQ(formats::encode_e4m3(std::ldexp(1.5f, -10)), 0x01);
  // E2M1 grid rounding from docs/formats.md.
  const float xs[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.01f, 100.0f};
  const float want[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, 6.0f};
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(formats::decode_e2m1(formats::encode_e2m1(xs[i])), want[i]) << xs[i];
    EXPECT_EQ(formats::decode_e2m1(formats::encode_e2m1(-xs[i])), -want[i]) << xs[i];
  }
  EXPECT_EQ(formats::encode_e2m1(nan), 0x7);
  EXPECT_EQ(formats::encode_e8m0(0.0f), 0xFF);
  EXPECT_EQ(formats::encode_e8m0(-1.0f), 0xFF);
  EXPECT_EQ(formats::encode_e8m0(1.0f), 127);
  // Nearest power of two, ties up, in the float subnormals as in the normals.
  EXPECT_EQ(formats::encode_e8m0(1.5f), 128);
  EXPECT_EQ(formats::encode_e8m0(std::nextafter(1.5f, 0.0f)), 127);
  EXPECT_EQ(formats::encode_e8m0(std::ldexp(1.0f, -127)), 0);
  EXPECT_EQ(formats::encode_e8m0(std::ldexp(1.5f, -127)), 1);
  EXPECT_EQ(formats::encode_e8m0(std::nextafter(std::ldexp(1.5f, -127), 0.0f)), 0);
  EXPECT_EQ(formats::encode_e8m0(std::ldexp(1.0f, -140)), 0);
  EXPECT_EQ(formats::encode_e8m0(std::ldexp(1.0f, -126)), 1);
}

TEST(Codecs, HalfTypesMatchTheOracle) {
  std::mt19937 rng(99);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    // bfloat16: RNE on the top 16 bits, computed in double.
    const uint16_t b = formats::encode_bf16(x);
    const double bx = formats::decode_bf16(b);
    if (std::isfinite(x) && std::isfinite(bx)) {
      const double ulp = std::ldexp(1.0, std::max(bx == 0 ? -126 : std::ilogb(bx), -126) - 7);
      ASSERT_LE(std::fabs(bx - x), ulp / 2 * (1 + 1e-12)) << x;
    }
    // float16 (IEEE): within half an ulp and even on ties, or inf past 65520.
    const uint16_t h = formats::encode_fp16(x);
    const float hx = formats::decode_fp16(h);
    if (std::fabs(x) >= 65520.0f) {
      ASSERT_TRUE(std::isinf(hx)) << x;
    } else {
      ASSERT_EQ(formats::encode_fp16(hx), h);
      ASSERT_LE(std::fabs(double(hx) - x),
                std::ldexp(1.0, std::max(std::ilogb(std::fabs(hx) + 1e-30), -14) - 11) * (1 + 1e-12))
          << x;
    }
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// The branch-free encoders agree with the plain RNE rounding (a different algorithm) on a sweep
// of every 61st float bit pattern (about 70 million values).
TEST(Codecs, BranchFreeRoundingEqualsPlainRoundingOnABitSweep) {
  for (uint64_t b = 0; b < (uint64_t{1} << 31); b += 61) {
    const auto a = static_cast<uint32_t>(b);  // non-negative patterns; NaNs excluded below
    if (a > 0x7f800000u) break;
    const uint32_t e4 = std::min<uint32_t>(formats::round_magnitude_rne<3, 7>(a), 0x7e);
    const uint32_t e5 = std::min<uint32_t>(formats::round_magnitude_rne<2, 15>(a), 0x7b);
    const uint32_t e2 = std::min<uint32_t>(formats::round_magnitude_rne<1, 1>(a), 0x7);
    ASSERT_EQ((formats::round_magnitude_rne_sat<3, 7, 0x7eu>(a)), e4) << a;
    ASSERT_EQ((formats::round_magnitude_rne_sat<2, 15, 0x7bu>(a)), e5) << a;
    ASSERT_EQ((formats::round_magnitude_rne_sat<1, 1, 0x7u>(a)), e2) << a;
  }
}

}  // namespace
}  // namespace tessera
