// Grouped quantize == quantizing each member alone, byte for byte, for every recipe and usage:
// members of 0 rows, odd sizes, the imbalanced [128, 128, M - 256] case and a half-full capacity
// buffer (poisoned bytes past the live rows stay untouched). Also: the noop flag, weight updates
// that never drop a usage, grouped dequantize, and clear errors for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "grouped/grouped_cases.h"
#include "tessera/core/status.h"
#include "tessera/grouped/grouped_quantize.h"

namespace tessera {
namespace {

using testing::expect_same_bytes;
using testing::expect_same_quantized;
using testing::HostInput;
using Shapes = std::vector<std::array<int64_t, 2>>;

constexpr uint8_t kPoison = 0xA5;

struct MemberCase {
  std::string name;
  std::vector<int64_t> rows;
  int64_t cols;
  int64_t capacity_rows;  // -1: none
};

// Shapes every recipe accepts: NVFP4 needs even cols (rowwise) and even rows (transposed
// columnwise); with the Hadamard transform, rows in multiples of 16.
std::vector<MemberCase> cases_for(const QuantizerConfig& c) {
  if (c.random_hadamard) {
    return {{"empty_and_uneven", {0, 32, 16, 80, 0}, 96, -1},
            {"imbalanced", {128, 128, 384}, 256, -1},
            {"capacity_half_full", {96, 0, 160}, 64, 512}};
  }
  if (testing::is_nvfp4_mode(c.mode)) {
    return {{"empty_and_odd", {0, 34, 2, 70, 0}, 100, -1},
            {"imbalanced", {128, 128, 384}, 256, -1},
            {"capacity_half_full", {100, 0, 156}, 64, 512}};
  }
  return {{"empty_and_odd", {0, 33, 1, 70, 0}, 99, -1},
          {"imbalanced", {128, 128, 384}, 256, -1},
          {"capacity_half_full", {100, 0, 156}, 64, 512}};
}

GroupedTensor make_grouped(const QuantizerConfig& c, const MemberCase& mc) {
  Shapes shapes;
  for (int64_t r : mc.rows) shapes.push_back({r, mc.cols});
  GroupedTensorOptions o;
  o.config = c;
  o.mode = GroupedShapeMode::kVaryingFirst;
  o.capacity_rows = mc.capacity_rows;
  return GroupedTensor::from_shapes(shapes, o);
}

void poison(const GroupedTensorView& v) {
  for (const TensorView* f : {&v.data, &v.columnwise_data, &v.scale_inv, &v.columnwise_scale_inv,
                              &v.amax, &v.columnwise_amax}) {
    if (f->data != nullptr) std::memset(f->data, kPoison, static_cast<size_t>(f->nbytes()));
  }
}

// Bytes of a flat field past element `live` must still be poison.
void expect_poison_after(const TensorView& f, int64_t live, const std::string& label) {
  if (f.data == nullptr) return;
  const auto* p = static_cast<const uint8_t*>(f.data);
  for (int64_t i = dtype_bytes(f.dtype, live); i < f.nbytes(); ++i) {
    ASSERT_EQ(p[i], kPoison) << label << ": byte " << i << " past the live members was written";
  }
}

// Quantizes member g alone with a fresh quantizer of the same config.
QuantizedTensor quantize_alone(const QuantizerConfig& c, const TensorView& x) {
  QuantizedTensor alone(c, x.shape[0], x.shape[1], Device::cpu());
  Quantizer q(c);
  q.quantize(x, alone);
  return alone;
}

TensorView rows_of(const TensorView& x, int64_t first_row, int64_t rows) {
  return TensorView::contiguous(static_cast<char*>(x.data) +
                                    dtype_bytes(x.dtype, first_row * x.shape[1]),
                                x.dtype, {rows, x.shape[1]});
}

void run_case(const std::string& recipe, QuantizerConfig c, const MemberCase& mc, bool list,
              DType in_dtype) {
  const std::string label = recipe + "/" + mc.name + (list ? "/list" : "/contiguous") + "/rw" +
                            std::to_string(c.rowwise) + "cw" + std::to_string(c.columnwise);
  GroupedTensor g = make_grouped(c, mc);
  poison(g.view());
  const int64_t logical_rows = g.view().logical_rows;
  const HostInput x(testing::random_values(logical_rows * mc.cols, 11), logical_rows, mc.cols,
                    in_dtype);
  std::vector<TensorView> inputs;
  int64_t row = 0;
  for (int64_t r : mc.rows) {
    inputs.push_back(rows_of(x.view, row, r));
    row += r;
  }
  Quantizer q(c);
  if (list) {
    grouped_quantize_list(q, inputs, g);
  } else {
    grouped_quantize_contiguous(q, x.view, g);
  }
  for (size_t m = 0; m < mc.rows.size(); ++m) {
    const QuantizedTensor alone = quantize_alone(c, inputs[m]);
    expect_same_quantized(g.quantized_member(static_cast<int64_t>(m)), alone.view(),
                          label + " member " + std::to_string(m));
  }
  const GroupedTensorView& v = g.view();
  const int64_t live = v.host.tensor_offsets.as<const int64_t>()[v.num_tensors];
  expect_poison_after(v.data, live, label + " data");
  expect_poison_after(v.columnwise_data, live, label + " columnwise_data");
  expect_poison_after(v.scale_inv, v.host.scale_offsets.as<const int64_t>()[v.num_tensors],
                      label + " scale_inv");
  expect_poison_after(v.columnwise_scale_inv,
                      v.host.columnwise_scale_offsets.as<const int64_t>()[v.num_tensors],
                      label + " columnwise_scale_inv");
}

TEST(GroupedQuantize, EqualsQuantizingEachMemberAlone) {
  for (auto [name, config] : testing::all_recipes()) {
    for (int usage = 1; usage <= 3; ++usage) {
      config.rowwise = usage & 1;
      config.columnwise = usage & 2;
      for (const MemberCase& mc : cases_for(config)) {
        run_case(name, config, mc, /*list=*/false, DType::kBFloat16);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    // The list form (a weight update) and float32 / float16 inputs, both usages.
    config.rowwise = config.columnwise = true;
    run_case(name, config, cases_for(config)[0], /*list=*/true, DType::kFloat32);
    run_case(name, config, cases_for(config)[1], /*list=*/true, DType::kFloat16);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(GroupedQuantize, NoopFlagSkipsEverything) {
  const QuantizerConfig c = make_config(ScalingMode::kMXFP8);
  const MemberCase mc{"small", {32, 64}, 64, -1};
  GroupedTensor g = make_grouped(c, mc);
  poison(g.view());
  const HostInput x(testing::random_values(96 * 64, 3), 96, 64, DType::kBFloat16);
  Quantizer q(c);
  float flag = 1.0f;
  const TensorView noop = TensorView::contiguous(&flag, DType::kFloat32, {1});
  grouped_quantize_contiguous(q, x.view, g, noop);
  expect_poison_after(g.view().data, 0, "noop=1 data");
  expect_poison_after(g.view().scale_inv, 0, "noop=1 scale_inv");
  flag = 0.0f;
  grouped_quantize_contiguous(q, x.view, g, noop);
  expect_same_quantized(g.quantized_member(1), quantize_alone(c, rows_of(x.view, 32, 64)).view(),
                        "noop=0 member 1");
}

TEST(GroupedQuantize, WeightUpdateNeverDropsAUsage) {
  QuantizerConfig both = make_config(ScalingMode::kBlock128x128);
  both.columnwise = true;
  const Shapes shapes{{128, 256}, {128, 256}};
  GroupedTensorOptions o;
  o.config = both;
  GroupedTensor w = GroupedTensor::from_shapes(shapes, o);
  QuantizerConfig train = both;  // an eval step only asks for the rowwise copy
  QuantizerConfig eval = both;
  eval.columnwise = false;
  for (int step = 0; step < 4; ++step) {
    const HostInput x(testing::random_values(256 * 256, 100 + step), 256, 256, DType::kBFloat16);
    const std::vector<TensorView> inputs{rows_of(x.view, 0, 128), rows_of(x.view, 128, 128)};
    Quantizer q(step % 2 == 0 ? train : eval);
    grouped_quantize_list(q, inputs, w);
    ASSERT_TRUE(w.view().has_columnwise());
    for (int64_t m = 0; m < 2; ++m) {
      expect_same_quantized(w.quantized_member(m), quantize_alone(both, inputs[m]).view(),
                            "step " + std::to_string(step) + " member " + std::to_string(m));
    }
  }
}

TEST(GroupedQuantize, DequantizeEqualsMemberDequantize) {
  for (auto [name, config] : testing::all_recipes()) {
    const MemberCase mc = cases_for(config)[2];  // capacity buffer, half full
    GroupedTensor g = make_grouped(config, mc);
    const int64_t rows = g.view().logical_rows;
    const HostInput x(testing::random_values(rows * mc.cols, 5), rows, mc.cols, DType::kBFloat16);
    Quantizer q(config);
    grouped_quantize_contiguous(q, x.view, g);
    for (bool cw : {false, true}) {
      std::vector<float> out(static_cast<size_t>(rows * mc.cols), -7.0f);
      grouped_dequantize(g.view(), TensorView::contiguous(out.data(), DType::kFloat32,
                                                          {rows, mc.cols}), cw);
      int64_t row = 0;
      for (size_t m = 0; m < mc.rows.size(); ++m) {
        const int64_t r = mc.rows[m];
        std::vector<float> want(static_cast<size_t>(r * mc.cols));
        dequantize(g.quantized_member(static_cast<int64_t>(m)),
                   TensorView::contiguous(want.data(), DType::kFloat32, {r, mc.cols}), cw);
        ASSERT_TRUE(want.empty() ||
                    std::memcmp(out.data() + row * mc.cols, want.data(), want.size() * 4) == 0)
            << name << " member " << m << (cw ? " columnwise" : " rowwise");
        row += r;
      }
      for (int64_t i = row * mc.cols; i < rows * mc.cols; ++i) {
        ASSERT_EQ(out[static_cast<size_t>(i)], -7.0f) << name << ": element " << i
                                                      << " past the live rows was written";
      }
    }
  }
}

TEST(GroupedQuantize, BadInputIsAClearError) {
  const QuantizerConfig c = make_config(ScalingMode::kMXFP8);
  GroupedTensor g = make_grouped(c, {"small", {32, 64}, 64, -1});
  const HostInput x(testing::random_values(96 * 64, 3), 96, 64, DType::kBFloat16);
  Quantizer q(c);
  auto expect_error = [](auto&& f, Status status, const std::string& fragment) {
    try {
      f();
      ADD_FAILURE() << "expected an error containing '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), status) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  const std::vector<TensorView> one{rows_of(x.view, 0, 32)};
  expect_error([&] { grouped_quantize_list(q, one, g); }, Status::kShapeMismatch,
               "1 inputs for 2 members");
  const std::vector<TensorView> wrong{rows_of(x.view, 0, 32), rows_of(x.view, 32, 63)};
  expect_error([&] { grouped_quantize_list(q, wrong, g); }, Status::kShapeMismatch,
               "inputs[1]: expected (64, 64)");
  std::vector<int32_t> ints(96 * 64);
  const TensorView int_x = TensorView::contiguous(ints.data(), DType::kInt32, {96, 64});
  expect_error([&] { grouped_quantize_contiguous(q, int_x, g); }, Status::kDTypeMismatch,
               "dtype int32");
  Quantizer other(make_config(ScalingMode::kTensor));
  expect_error([&] { grouped_quantize_contiguous(other, x.view, g); }, Status::kInvalidArgument,
               "does not match out");
  float flag = 0.0f;
  const TensorView bad_noop = TensorView::contiguous(&flag, DType::kFloat16, {1});
  expect_error([&] { grouped_quantize_contiguous(q, x.view, g, bad_noop); },
               Status::kDTypeMismatch, "noop: dtype float16");
  QuantizerConfig cw = c;
  cw.columnwise = true;
  Quantizer needs_cw(cw);
  expect_error([&] { grouped_quantize_contiguous(needs_cw, x.view, g.view()); },
               Status::kInvalidArgument, "lacks those buffers");
}

}  // namespace
}  // namespace tessera
