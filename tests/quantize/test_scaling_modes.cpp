// The scaling-mode table and its one dispatch: names round-trip, the accepted names come from the
// table, unknown modes are refused by name (never decoded as a guessed layout), and the scale
// index agrees with the scale matrix shapes the data model documents.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "quantize/quantize_backend.h"
#include "tessera/core/dispatch.h"
#include "tessera/quantize/types.h"

namespace tessera::test {
namespace {

TEST(ScalingModeTable, NamesRoundTripAndAreListedOnce) {
  std::set<std::string> names;
  for (const ScalingModeInfo& r : scaling_mode_table()) {
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
    EXPECT_EQ(scaling_mode_from_name(r.name), r.mode) << r.name;
    EXPECT_STREQ(scaling_mode_name(r.mode), r.name);
    EXPECT_EQ(&scaling_mode_info(r.mode), &r);
    if (r.family != ScaleFamily::kNone) {
      EXPECT_NE(std::string(scaling_mode_names()).find(r.name), std::string::npos) << r.name;
    }
  }
  try {
    scaling_mode_from_name("block1x7");
    ADD_FAILURE() << "an unknown name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nvfp4_16x16"), std::string::npos) << e.what();
  }
}

TEST(ScalingModeTable, DispatchRefusesNoneAndUnknownValuesByName) {
  const auto family = [](ScalingMode m) {
    return dispatch_scaling_mode(m, "mode", [](auto f, const ScalingModeInfo&) { return f(); });
  };
  EXPECT_EQ(family(ScalingMode::kBlock128x128), ScaleFamily::kBlock);
  EXPECT_EQ(family(ScalingMode::kMXFP8_32x32), ScaleFamily::kMXFP8);
  for (ScalingMode m : {ScalingMode::kNone, static_cast<ScalingMode>(42)}) {
    try {
      family(m);
      ADD_FAILURE() << "mode " << static_cast<int>(m) << " was dispatched";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("(" + std::to_string(static_cast<int>(m)) + ")"), std::string::npos)
          << what;
      EXPECT_NE(what.find("block1x128"), std::string::npos) << what;
    }
  }
}

// A stored tensor whose config names a mode outside the table: the CPU dequantize refuses it
// (it used to decode any unknown mode as 128x128 blocks).
TEST(ScalingModeTable, CpuDequantizeRefusesAnUnknownMode) {
  QuantizedTensor q(make_config(ScalingMode::kBlock128x128), 4, 8, Device::cpu());
  QuantizedTensorView v = q.view();
  v.config.mode = static_cast<ScalingMode>(42);
  std::vector<float> out(32);
  EXPECT_THROW(detail::dequantize_cpu(v, TensorView::contiguous(out.data(), DType::kFloat32, {4, 8}),
                                      false),
               Error);
}

// scale_index (host/device) against the documented scale matrix of every mode, layout and usage:
// every element's scale lies inside the matrix, and the first element of each block maps to a
// distinct entry.
TEST(ScalingModeTable, ScaleIndexStaysInsideTheScaleMatrix) {
  for (const ScalingModeInfo& r : scaling_mode_table()) {
    if (r.family == ScaleFamily::kNone) continue;
    for (ScaleLayout layout : {ScaleLayout::kCompact, ScaleLayout::kSwizzled}) {
      if (layout == ScaleLayout::kSwizzled && !r.swizzle) continue;
      QuantizerConfig c = make_config(r.mode);
      c.scale_layout = layout;
      for (bool cw : {false, true}) {
        const int64_t rows = 200, cols = 300;
        const MatrixShape data = data_shape(c, rows, cols, cw);
        const int64_t entries = scale_shape(c, rows, cols, cw).numel();
        const scale_rules::ScaleGeometry g = scale_geometry(c, rows, cols, cw);
        std::set<int64_t> seen;
        for (int64_t i = 0; i < data.rows; ++i) {
          for (int64_t k = 0; k < data.cols; ++k) {
            const int64_t at = scale_rules::scale_index(g, i, k);
            ASSERT_TRUE(at >= 0 && at < entries) << r.name << " cw " << cw << " (" << i << ", "
                                                 << k << ") -> " << at << " of " << entries;
            seen.insert(at);
          }
        }
        const int64_t br = g.block_rows > 0 ? (data.rows + g.block_rows - 1) / g.block_rows : 1;
        const int64_t bc = g.block_cols > 0 ? (data.cols + g.block_cols - 1) / g.block_cols : 1;
        EXPECT_EQ(static_cast<int64_t>(seen.size()), br * bc) << r.name << " cw " << cw;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::test
