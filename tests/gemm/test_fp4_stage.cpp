// The NVFP4 stage conversion of the sm90 kernel's in-kernel path (gemm/cuda/kernels/
// fp4_stage.cuh), run on the host: every E2M1 code under every E4M3 scale byte gives the FP16
// bits of the FP32 product decode_e2m1(code) · decode_e4m3(scale) (the codecs of
// tessera/formats; the product is exact in FP16); whole stages (compact 1x16, 16x16 tiles,
// swizzled scales; rows and contraction past the operand, contraction ending inside a stage) land at
// the 128-byte-swizzle positions the FP16 consumers read, padding as zeros.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "gemm/cuda/kernels/fp4_stage.cuh"
#include "tessera/formats/codecs.h"
#include "tessera/formats/half.h"

namespace tessera {
namespace {

namespace fp4 = gemm_sm90::fp4;

// The oracle: FP16 bits of code × scale through the FP32 codecs.
uint32_t expected_bits(uint8_t code, uint8_t scale) {
  const float v = formats::decode_e2m1(static_cast<uint8_t>(code & 0xF)) * formats::decode_e4m3(scale);
  return formats::encode_fp16(v);
}

bool is_nan_f16(uint32_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0; }

bool same(uint32_t got, uint32_t want) {
  return is_nan_f16(want) ? is_nan_f16(got) : got == want;
}

TEST(Fp4Stage, EveryCodeUnderEveryScaleByte) {
  for (int s = 0; s < 256; ++s) {
    const float sv = formats::decode_e4m3(static_cast<uint8_t>(s));
    // exactness of the oracle itself: every product is an FP16 value (or a NaN)
    for (int c = 0; c < 16; ++c) {
      const float v = formats::decode_e2m1(static_cast<uint8_t>(c)) * sv;
      ASSERT_TRUE(formats::decode_fp16(formats::encode_fp16(v)) == v || v != v)
          << "code " << c << " scale " << s;
    }
    // one stage row: element e = code e % 16 (each block holds every code once), block j under
    // scale byte s, 255 - s, s ^ 0x55, s ^ 0xAA
    alignas(16) uint8_t raw[gemm_sm90::kFp4RawRowBytes] = {};
    for (int e = 0; e < fp4::kStageElems; ++e)
      raw[e / 2] = static_cast<uint8_t>(raw[e / 2] | (e % 16) << (4 * (e % 2)));
    const uint8_t sb[4] = {static_cast<uint8_t>(s), static_cast<uint8_t>(255 - s),
                           static_cast<uint8_t>(s ^ 0x55), static_cast<uint8_t>(s ^ 0xAA)};
    const uint32_t scales4 = sb[0] | sb[1] << 8 | sb[2] << 16 | static_cast<uint32_t>(sb[3]) << 24;
    alignas(16) uint8_t stage[fp4::kStageRowBytes];
    fp4::convert_row(raw, stage, 0, scales4);
    for (int e = 0; e < fp4::kStageElems; ++e) {
      uint16_t got = 0;
      std::memcpy(&got, &stage[2 * e], 2);  // row 0: chunk j at j
      const uint32_t want = expected_bits(static_cast<uint8_t>(e % 16), sb[e / 16]);
      ASSERT_TRUE(same(got, want)) << "element " << e << " code " << e % 16 << " scale byte "
                                   << int{sb[e / 16]} << ": got 0x" << std::hex << got
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
// g0) is converted row by row as the converter threads do, and read back at the swizzled
// positions.
TEST(Fp4Stage, StagesLandSwizzledWithPaddingZero) {
  const StageCase cases[] = {{"compact 1x16", 1, false}, {"compact 16x16", 16, false},
                             {"swizzled 1x16", 1, true}, {"swizzled 16x16", 16, true}};
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
    // (the last ones: a group's contraction ending one, two or three blocks into the stage, or
    // before it)
    for (const Stage st : {Stage{0, 0, 0, 320}, Stage{64, 128, 128, 192}, Stage{120, 256, 0, 304},
                           Stage{100, 64, 64, 48}, Stage{30, 256, 192, 96}, Stage{90, 128, 64, 80},
                           Stage{7, 192, 128, 64}}) {
      op.k = st.k;
      const int stage_rows = 64;
      // the raw stage as TMA fills it: rows past the copy are zeros
      std::vector<uint8_t> raw(stage_rows * gemm_sm90::kFp4RawRowBytes, 0);
      for (int r = 0; r < stage_rows; ++r)
        if (st.r0 + r < rows)
          std::memcpy(&raw[r * gemm_sm90::kFp4RawRowBytes], &codes[(st.r0 + r) * (cols / 2) + st.k0 / 2],
                      gemm_sm90::kFp4RawRowBytes);
      std::vector<uint8_t> stage(stage_rows * fp4::kStageRowBytes, 0xAB);
      for (int r = 0; r < stage_rows; ++r)
        fp4::convert_row(&raw[r * gemm_sm90::kFp4RawRowBytes], stage.data(), r,
                         fp4::stage_row_scales(op, st.r0 + r, st.k0, st.k0 - st.g0));
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
