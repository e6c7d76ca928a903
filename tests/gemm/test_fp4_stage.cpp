// The NVFP4 stage conversion of the sm90 kernel's in-kernel path (gemm/cuda/kernels/
// fp4_stage.cuh), run on the host: every E2M1 code under every E4M3 scale byte gives the BF16
// bits of the FP32 product decode_e2m1(code) · decode_e4m3(scale) (the codecs of
// tessera/formats, exact in BF16); whole stages (compact 1x16, 16x16 tiles, swizzled scales;
// rows and contraction past the operand) land at the 128-byte-swizzle positions the BF16
// consumers read, padding as zeros.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "gemm/cuda/kernels/fp4_stage.cuh"
#include "tessera/formats/codecs.h"

namespace tessera {
namespace {

namespace fp4 = gemm_sm90::fp4;

// The oracle: BF16 bits of code × scale through the FP32 codecs (the product is exact in BF16:
// its low 16 bits are zero, except a NaN's payload, compared as "a NaN").
uint32_t expected_bits(uint8_t code, uint8_t scale) {
  const float v = formats::decode_e2m1(static_cast<uint8_t>(code & 0xF)) * formats::decode_e4m3(scale);
  return formats::float_to_bits(v) >> 16;
}

bool is_nan_bf16(uint32_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

bool same(uint32_t got, uint32_t want) {
  return is_nan_bf16(want) ? is_nan_bf16(got) : got == want;
}

TEST(Fp4Stage, EveryCodeUnderEveryScaleByte) {
  for (int s = 0; s < 256; ++s) {
    const float sv = formats::decode_e4m3(static_cast<uint8_t>(s));
    // exactness of the oracle itself: every product's low 16 bits are zero (or it is a NaN)
    for (int c = 0; c < 16; ++c) {
      const float v = formats::decode_e2m1(static_cast<uint8_t>(c)) * sv;
      const uint32_t bits = formats::float_to_bits(v);
      ASSERT_TRUE((bits & 0xffffu) == 0 || v != v) << "code " << c << " scale " << s;
    }
    // 32 codes: element e = code e % 16 (so each half holds every code once), under scales s
    // (elements 0-15) and 255 - s (16-31)
    uint32_t q[4] = {};
    for (int e = 0; e < 32; ++e) q[e / 8] |= static_cast<uint32_t>(e % 16) << (4 * (e % 8));
    const auto s0 = static_cast<uint8_t>(s), s1 = static_cast<uint8_t>(255 - s);
    uint32_t out[16];
    fp4::unit_bf16(q, fp4::e4m3_bf16_bits(s0), fp4::e4m3_bf16_bits(s1), out);
    for (int e = 0; e < 32; ++e) {
      const uint32_t got = (out[e / 2] >> (16 * (e % 2))) & 0xffffu;
      const uint32_t want = expected_bits(static_cast<uint8_t>(e % 16), e < 16 ? s0 : s1);
      ASSERT_TRUE(same(got, want)) << "element " << e << " code " << e % 16 << " scale byte "
                                   << (e < 16 ? s0 : s1) << ": got 0x" << std::hex << got
                                   << ", want 0x" << want;
    }
  }
}

struct StageCase {
  const char* name;
  int64_t block_rows;  // 1 (1x16) or 16 (16x16 tiles)
  bool swizzled;
};

// A stored copy (rows x cols codes) with its scales; one stage of `stage_rows` rows starting at
// stored row r0 and contraction element k0 (a group's contraction of k elements starting at
// g0) is converted unit by unit as the converter threads do, and read back at the swizzled
// positions.
TEST(Fp4Stage, StagesLandSwizzledWithPaddingZero) {
  const StageCase cases[] = {{"compact 1x16", 1, false}, {"compact 16x16", 16, false},
                             {"swizzled 1x16", 1, true}};
  std::mt19937 rng(7);
  for (const StageCase& sc : cases) {
    const int64_t rows = 150, cols = 320, nb = cols / 16;
    std::vector<uint8_t> codes(static_cast<size_t>(rows * cols / 2));
    for (auto& b : codes) b = static_cast<uint8_t>(rng());
    scale_rules::ScaleGeometry geo;
    geo.block_rows = sc.block_rows;
    geo.block_cols = 16;
    const int64_t srows = (rows + sc.block_rows - 1) / sc.block_rows;
    int64_t scale_bytes = srows * nb;
    if (sc.swizzled) {
      geo.swizzled = true;
      geo.ld = (nb + 3) / 4 * 4;
      scale_bytes = (srows + 127) / 128 * 128 * geo.ld;
    } else {
      geo.ld = nb;
    }
    std::vector<uint8_t> scales(static_cast<size_t>(scale_bytes));
    for (auto& b : scales) b = static_cast<uint8_t>(rng() % 0x7f);  // finite E4M3 scales
    gemm_sm90::Fp4Operand op{scales.data(), geo, rows, 0, sc.block_rows == 16 ? 4 : 0};
    // stages: (first stored row, contraction start, group contraction start, group length)
    struct Stage { int64_t r0, k0, g0, k; };
    for (const Stage st : {Stage{0, 0, 0, 320}, Stage{64, 128, 128, 192}, Stage{120, 256, 0, 304},
                           Stage{100, 64, 64, 48}}) {
      op.k = st.k;
      const int stage_rows = 64;
      // the raw stage as TMA fills it: rows past the copy are zeros
      std::vector<uint8_t> raw(stage_rows * gemm_sm90::kFp4RawRowBytes, 0);
      for (int r = 0; r < stage_rows; ++r)
        if (st.r0 + r < rows)
          std::memcpy(&raw[r * gemm_sm90::kFp4RawRowBytes], &codes[(st.r0 + r) * (cols / 2) + st.k0 / 2],
                      gemm_sm90::kFp4RawRowBytes);
      std::vector<uint8_t> stage(stage_rows * fp4::kBf16RowBytes, 0xAB);
      for (int r = 0; r < stage_rows; ++r)
        for (int h = 0; h < fp4::kUnitsPerRow; ++h) {
          const int64_t col = st.k0 + 32 * h, local = col - st.g0;
          fp4::convert_unit(raw.data(), stage.data(), r, h,
                            fp4::scale_bits(op, st.r0 + r, col, local),
                            fp4::scale_bits(op, st.r0 + r, col + 16, local + 16));
        }
      for (int r = 0; r < stage_rows; ++r)
        for (int e = 0; e < fp4::kStageElems; ++e) {
          uint16_t got = 0;
          // the 128-byte swizzle as the wgmma descriptors read it: chunk j of row r at j ^ (r % 8)
          const int64_t at = r * 128 + (((e / 8) ^ (r % 8)) * 16) + 2 * (e % 8);
          std::memcpy(&got, &stage[at], 2);
          const int64_t row = st.r0 + r, col = st.k0 + e;
          uint32_t want = 0;
          if (row < rows && col - st.g0 < st.k) {
            const uint8_t byte = codes[row * (cols / 2) + col / 2];
            const auto code = static_cast<uint8_t>(col % 2 == 0 ? byte & 0xF : byte >> 4);
            want = expected_bits(code, scales[scale_rules::scale_index(geo, row, col)]);
          } else {
            // padding: zero codes past the copy (TMA fill), or a zero scale past the group
            const uint8_t byte = row < rows ? codes[row * (cols / 2) + col / 2] : 0;
            const bool neg = row < rows && ((col % 2 == 0 ? byte : byte >> 4) & 0x8);
            want = neg ? 0x8000u : 0u;
          }
          ASSERT_TRUE(same(got, want)) << sc.name << " stage r0 " << st.r0 << " k0 " << st.k0
                                       << ": row " << r << " element " << e << " got 0x"
                                       << std::hex << got << ", want 0x" << want;
        }
    }
  }
}

}  // namespace
}  // namespace tessera
