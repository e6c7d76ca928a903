// Scale slots and grouped_scale_offsets against scale_shape (the per-tensor definition) and
// hand-computed layouts; the capacity bound against random splits.
#include <gtest/gtest.h>

#include <random>

#include "grouped/grouped_cases.h"
#include "tessera/core/status.h"
#include "tessera/grouped/grouped_tensor.h"

namespace tessera {
namespace {

using testing::all_recipes;

TEST(GroupedLayout, SlotCoversTheScaleMatrixOfEveryRecipeAndRowCount) {
  for (const auto& [name, config] : all_recipes()) {
    for (bool cw : {false, true}) {
      for (int64_t cols : {0, 2, 30, 96, 128, 130, 7168}) {
        const ScaleSlotRule rule = grouped_scale_slot_rule(config, cols, cw);
        for (int64_t rows = 0; rows <= 1100; rows += rows < 300 ? 1 : 37) {
          const int64_t exact = scale_shape(config, rows, cols, cw).numel();
          const int64_t slot = rule.size(rows);
          ASSERT_GE(slot, exact) << name << (cw ? " cw" : " rw") << " (" << rows << ", " << cols
                                 << ")";
          // Slack: fewer than `align` entries per block of rows; none for constant slots.
          const int64_t blocks = rule.stride == 0 ? 0 : (rows + rule.align - 1) / rule.align;
          ASSERT_LE(slot - exact, (rule.align - 1) * blocks)
              << name << " (" << rows << ", " << cols << ")";
          if (rule.stride != 0 && rows == 0) {
            ASSERT_EQ(slot, 0) << name;
          }
        }
      }
    }
  }
}

TEST(GroupedLayout, RowwiseMicroscalingSlotsAreExact) {
  for (const auto& [name, config] : all_recipes()) {
    const ScalingMode m = config.mode;
    if (m != ScalingMode::kMXFP8 && m != ScalingMode::kNVFP4 && m != ScalingMode::kRowwise) {
      continue;
    }
    for (int64_t rows : {0, 1, 31, 128, 129, 640}) {
      EXPECT_EQ(grouped_scale_slot_rule(config, 7168, false).size(rows),
                scale_shape(config, rows, 7168, false).numel()) << name << " rows " << rows;
    }
  }
}

TEST(GroupedLayout, HandComputedOffsets) {
  QuantizerConfig mx = make_config(ScalingMode::kMXFP8);
  // rowwise compact: (r, ceil(64/32) = 2) per member
  EXPECT_EQ(grouped_scale_offsets(mx, {3, 0, 5}, {64, 64, 64}, false),
            (std::vector<int64_t>{0, 6, 6, 16}));
  // columnwise compact: (ceil(r/32), 64), slot 64 x ceil(r/32)
  EXPECT_EQ(grouped_scale_offsets(mx, {3, 0, 33}, {64, 64, 64}, true),
            (std::vector<int64_t>{0, 64, 64, 192}));
  mx.scale_layout = ScaleLayout::kSwizzled;
  // rowwise swizzled: (roundup(r,128), roundup(2,4) = 4)
  EXPECT_EQ(grouped_scale_offsets(mx, {3, 0, 129}, {64, 64, 64}, false),
            (std::vector<int64_t>{0, 512, 512, 1536}));
  const QuantizerConfig tensor = make_config(ScalingMode::kTensor);
  EXPECT_EQ(grouped_scale_offsets(tensor, {3, 0, 5}, {8, 8, 8}, true),
            (std::vector<int64_t>{0, 1, 2, 3}));
  const QuantizerConfig rowwise = make_config(ScalingMode::kRowwise);
  EXPECT_EQ(grouped_scale_offsets(rowwise, {3, 0, 5}, {8, 9, 10}, false),
            (std::vector<int64_t>{0, 3, 3, 8}));
  EXPECT_EQ(grouped_scale_offsets(rowwise, {3, 0, 5}, {8, 9, 10}, true),
            (std::vector<int64_t>{0, 8, 17, 27}));
  // block 1x128 rowwise: (roundup(r,4), ceil(300/128) = 3)
  const QuantizerConfig b1 = make_config(ScalingMode::kBlock1x128);
  EXPECT_EQ(grouped_scale_offsets(b1, {1, 5}, {300, 300}, false),
            (std::vector<int64_t>{0, 12, 36}));
}

TEST(GroupedLayout, CapacityBoundsEverySplit) {
  std::mt19937 rng(7);
  for (const auto& [name, config] : all_recipes()) {
    for (bool cw : {false, true}) {
      const int64_t n = 9, bound = 1000, cols = 256;
      const int64_t cap = grouped_scale_capacity(config, n, bound, cols, cw);
      for (int trial = 0; trial < 50; ++trial) {
        std::vector<int64_t> rows(n, 0), colv(n, cols);
        int64_t left = bound;
        for (auto& r : rows) {
          r = std::uniform_int_distribution<int64_t>(0, left)(rng) / (trial % 3 + 1);
          left -= r;
        }
        ASSERT_LE(grouped_scale_offsets(config, rows, colv, cw).back(), cap) << name;
      }
    }
  }
}

TEST(GroupedLayout, UnquantizedHasNoScales) {
  try {
    grouped_scale_slot_rule(unquantized_config(), 16, false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("not quantized"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
