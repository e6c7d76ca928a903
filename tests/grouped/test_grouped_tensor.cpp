// GroupedTensor storage: the four shape modes, member views sharing storage, capacity, quantized
// buffers per usage (member views shaped exactly like standalone QuantizedTensors), wrapping
// caller buffers, creation from (host-resident) split sizes, and clear errors for bad input.
#include <gtest/gtest.h>

#include <array>
#include <numeric>

#include "grouped/grouped_cases.h"
#include "tessera/core/status.h"
#include "tessera/grouped/grouped_tensor.h"

namespace tessera {
namespace {

using Shapes = std::vector<std::array<int64_t, 2>>;

template <class F>
void expect_error(F&& f, Status status, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

std::vector<int64_t> to_vec(const TensorView& v) {
  const int64_t* p = v.as<const int64_t>();
  return std::vector<int64_t>(p, p + v.numel());
}

GroupedTensorOptions unquantized(DType dt) {
  GroupedTensorOptions o;
  o.dtype = dt;
  return o;
}

TEST(GroupedTensor, FourShapeModes) {
  struct Case {
    Shapes shapes;
    GroupedShapeMode mode;
    int64_t rows, cols;
    bool first, last;
  };
  const std::vector<Case> cases = {
      {{{4, 8}, {4, 8}, {4, 8}}, GroupedShapeMode::kAllSame, 12, 8, false, false},
      {{{3, 8}, {0, 8}, {5, 8}}, GroupedShapeMode::kVaryingFirst, 8, 8, true, false},
      {{{4, 2}, {4, 6}, {4, 0}}, GroupedShapeMode::kVaryingLast, 4, 8, false, true},
      {{{1, 2}, {3, 5}, {2, 2}}, GroupedShapeMode::kVaryingBoth, 1, 21, true, true},
  };
  for (const Case& c : cases) {
    const GroupedTensor t = GroupedTensor::from_shapes(c.shapes, unquantized(DType::kBFloat16));
    const GroupedTensorView& v = t.view();
    SCOPED_TRACE(grouped_shape_mode_name(c.mode));
    EXPECT_EQ(v.mode, c.mode);
    EXPECT_EQ(v.logical_rows, c.rows);
    EXPECT_EQ(v.logical_cols, c.cols);
    EXPECT_EQ(v.first_dims.data != nullptr, c.first);
    EXPECT_EQ(v.last_dims.data != nullptr, c.last);
    EXPECT_FALSE(v.quantized());
    EXPECT_EQ(v.scale_inv.data, nullptr);
    EXPECT_EQ(v.columnwise_data.data, nullptr);
    std::vector<int64_t> want{0};
    for (const auto& s : c.shapes) want.push_back(want.back() + s[0] * s[1]);
    EXPECT_EQ(to_vec(v.tensor_offsets), want);
    EXPECT_EQ(v.data.numel(), c.rows * c.cols);
    check_grouped_view(v);
    for (int64_t g = 0; g < 3; ++g) {
      const TensorView m = t.member(g);
      EXPECT_EQ(m.shape[0], c.shapes[g][0]);
      EXPECT_EQ(m.shape[1], c.shapes[g][1]);
      EXPECT_EQ(m.dtype, DType::kBFloat16);
      EXPECT_EQ(static_cast<char*>(m.data) - static_cast<char*>(v.data.data), 2 * want[g]);
    }
  }
}

TEST(GroupedTensor, MemberViewsShareStorage) {
  GroupedTensor t = GroupedTensor::from_shapes(Shapes{{2, 3}, {1, 3}}, unquantized(DType::kFloat32));
  std::iota(t.view().data.as<float>(), t.view().data.as<float>() + 9, 0.0f);
  EXPECT_EQ(t.member(1).as<float>()[2], 8.0f);
  t.member(0).as<float>()[4] = -1.0f;
  EXPECT_EQ(t.view().data.as<float>()[4], -1.0f);
}

TEST(GroupedTensor, ForcedModeAndCapacity) {
  GroupedTensorOptions o = unquantized(DType::kFloat16);
  o.mode = GroupedShapeMode::kVaryingFirst;
  o.capacity_rows = 100;
  const GroupedTensor t = GroupedTensor::from_shapes(Shapes{{4, 16}, {4, 16}}, o);
  EXPECT_EQ(t.view().mode, GroupedShapeMode::kVaryingFirst);
  EXPECT_EQ(t.view().logical_rows, 100);
  EXPECT_EQ(t.view().data.numel(), 1600);
  EXPECT_EQ(to_vec(t.view().first_dims), (std::vector<int64_t>{4, 4}));
  EXPECT_NE(t.to_string().find("capacity: 128 of 1600 elements live"), std::string::npos)
      << t.to_string();
}

TEST(GroupedTensor, QuantizedMembersAreShapedLikeStandaloneTensors) {
  const Shapes shapes{{64, 96}, {0, 96}, {18, 96}, {128, 96}};
  for (auto [name, config] : testing::all_recipes()) {
    for (int usage = 1; usage <= 3; ++usage) {
      config.rowwise = usage & 1;
      config.columnwise = usage & 2;
      GroupedTensorOptions o;
      o.config = config;
      const GroupedTensor t = GroupedTensor::from_shapes(shapes, o);
      check_grouped_view(t.view());
      EXPECT_EQ(t.view().has_rowwise(), config.rowwise) << name;
      EXPECT_EQ(t.view().has_columnwise(), config.columnwise) << name;
      EXPECT_EQ(t.view().scale_offsets.data != nullptr, true) << name;
      for (int64_t g = 0; g < 4; ++g) {
        const QuantizedTensor alone(config, shapes[g][0], shapes[g][1], Device::cpu());
        const QuantizedTensorView m = t.quantized_member(g);
        const QuantizedTensorView& a = alone.view();
        for (auto [got, want] : {std::pair{m.data, a.data}, {m.scale_inv, a.scale_inv},
                                 {m.columnwise_data, a.columnwise_data},
                                 {m.columnwise_scale_inv, a.columnwise_scale_inv},
                                 {m.amax, a.amax}, {m.columnwise_amax, a.columnwise_amax}}) {
          ASSERT_EQ(got.data == nullptr, want.data == nullptr) << name << " member " << g;
          EXPECT_EQ(got.to_string(), want.to_string()) << name << " member " << g;
        }
      }
    }
  }
}

TEST(GroupedTensor, EnsureUsageAddsAndNeverDrops) {
  GroupedTensorOptions o;
  o.config = make_config(ScalingMode::kMXFP8);
  GroupedTensor t = GroupedTensor::from_shapes(Shapes{{32, 64}, {64, 64}}, o);
  void* rowwise = t.view().data.data;
  EXPECT_FALSE(t.view().has_columnwise());
  t.ensure_usage(false, true);
  EXPECT_TRUE(t.view().has_columnwise());
  EXPECT_EQ(t.view().data.data, rowwise);
  EXPECT_TRUE(t.view().config.rowwise && t.view().config.columnwise);
  check_grouped_view(t.view());
}

TEST(GroupedTensor, WrapsCallerBuffers) {
  GroupedTensorOptions o;
  o.config = make_config(ScalingMode::kTensor);  // rowwise: data, scale_inv, amax
  const Shapes shapes{{3, 16}, {5, 16}};
  Buffer data(128), scales(8), amax(8), small(64);
  GroupedBuffers b;
  b.data = TensorView::contiguous(data.data(), DType::kUInt8, {128});
  b.scale_inv = TensorView::contiguous(scales.data(), DType::kFloat32, {2});
  b.amax = TensorView::contiguous(amax.data(), DType::kFloat32, {2});
  GroupedTensor t = GroupedTensor::wrap(shapes, o, b);
  EXPECT_EQ(t.quantized_member(1).data.data, static_cast<char*>(data.data()) + 48);
  EXPECT_EQ(t.quantized_member(1).scale_inv.data, scales.as<float>() + 1);
  expect_error([&] { t.ensure_usage(false, true); }, Status::kUnsupported, "caller-owned");

  GroupedBuffers too_small = b;
  too_small.data = TensorView::contiguous(small.data(), DType::kUInt8, {64});
  expect_error([&] { GroupedTensor::wrap(shapes, o, too_small); }, Status::kBufferTooSmall,
               "buffers.data holds 64 bytes; the layout needs 128");
  GroupedBuffers wrong_dtype = b;
  wrong_dtype.scale_inv = TensorView::contiguous(scales.data(), DType::kFloat16, {4});
  expect_error([&] { GroupedTensor::wrap(shapes, o, wrong_dtype); }, Status::kDTypeMismatch,
               "buffers.scale_inv has dtype float16");
  GroupedBuffers extra = b;
  extra.columnwise_data = b.data;
  expect_error([&] { GroupedTensor::wrap(shapes, o, extra); }, Status::kInvalidArgument,
               "columnwise_data is given but the config does not use it");
  GroupedBuffers missing = b;
  missing.amax = {};
  expect_error([&] { GroupedTensor::wrap(shapes, o, missing); }, Status::kInvalidArgument,
               "buffers.amax is needed");
}

TEST(GroupedTensor, FromHostResidentSplits) {
  std::vector<int32_t> splits{3, 0, 5};
  const TensorView sv = TensorView::contiguous(splits.data(), DType::kInt32, {3});
  GroupedTensorOptions o;
  o.config = make_config(ScalingMode::kMXFP8);
  o.config.columnwise = true;
  o.capacity_rows = 16;
  GroupedTensor t = GroupedTensor::from_device_splits(sv, 64, o);
  ASSERT_TRUE(t.has_host_metadata());
  EXPECT_EQ(to_vec(t.view().first_dims), (std::vector<int64_t>{3, 0, 5}));
  EXPECT_EQ(to_vec(t.view().tensor_offsets), (std::vector<int64_t>{0, 192, 192, 512}));
  EXPECT_EQ(to_vec(t.view().scale_offsets),
            grouped_scale_offsets(o.config, {3, 0, 5}, {64, 64, 64}, false));
  EXPECT_EQ(to_vec(t.view().columnwise_scale_offsets),
            grouped_scale_offsets(o.config, {3, 0, 5}, {64, 64, 64}, true));
  EXPECT_EQ(t.view().logical_rows, 16);
  check_grouped_view(t.view());
  const auto shape = t.member_shape(2);
  EXPECT_EQ(shape[0], 5);

  splits = {0, 16, 0};  // new step, same buffers
  t.update_from_device_splits(sv);
  EXPECT_EQ(to_vec(t.view().tensor_offsets), (std::vector<int64_t>{0, 0, 1024, 1024}));
  EXPECT_EQ(t.member_shape(1)[0], 16);

  // Precomputed offsets are wrapped, not copied.
  std::vector<int64_t> offsets{0, 0, 1024, 1024};
  const TensorView ov = TensorView::contiguous(offsets.data(), DType::kInt64, {4});
  t.update_from_device_splits(sv, ov);
  EXPECT_EQ(t.view().tensor_offsets.data, offsets.data());
  offsets = {0, 1024, 0, 1024};
  expect_error([&] { t.update_from_device_splits(sv, ov); }, Status::kInvalidArgument,
               "not monotonic");
  offsets = {0, 64, 1024, 1024};
  expect_error([&] { t.update_from_device_splits(sv, ov); }, Status::kInvalidArgument,
               "tensor_offsets[1] - tensor_offsets[0] = 64");

  splits = {3, -1, 5};
  expect_error([&] { t.update_from_device_splits(sv); }, Status::kInvalidArgument,
               "splits[1] = -1 is negative");
  splits = {3, 10, 5};
  expect_error([&] { t.update_from_device_splits(sv); }, Status::kOutOfRange,
               "exceeds total_bound 16");
}

TEST(GroupedTensor, BadInputIsAClearError) {
  const GroupedTensorOptions f32 = unquantized(DType::kFloat32);
  expect_error([&] { GroupedTensor::from_shapes(Shapes{}, f32); }, Status::kInvalidArgument,
               "at least one member");
  expect_error([&] { GroupedTensor::from_shapes(Shapes{{2, 3}, {-1, 3}}, f32); },
               Status::kInvalidArgument, "shapes[1] = (-1, 3) has a negative dimension");
  expect_error([&] { GroupedTensor::from_shapes(Shapes{{2, 3}}, unquantized(DType::kInt32)); },
               Status::kDTypeMismatch, "options.dtype int32");
  GroupedTensorOptions cap = f32;
  cap.capacity_rows = 4;
  expect_error([&] { GroupedTensor::from_shapes(Shapes{{2, 3}, {3, 3}}, cap); },
               Status::kBufferTooSmall, "capacity_rows 4 is smaller than the 5 rows");
  expect_error([&] { GroupedTensor::from_shapes(Shapes{{2, 3}, {2, 4}}, cap); },
               Status::kInvalidArgument, "varying-first tensors");
  GroupedTensorOptions forced = f32;
  forced.mode = GroupedShapeMode::kVaryingLast;
  expect_error([&] { GroupedTensor::from_shapes(Shapes{{2, 3}, {3, 3}}, forced); },
               Status::kShapeMismatch, "does not fit the shapes");
  GroupedTensorOptions nv;
  nv.config = make_config(ScalingMode::kNVFP4);
  expect_error([&] { GroupedTensor::from_shapes(Shapes{{2, 3}}, nv); }, Status::kInvalidArgument,
               "even number of columns");
  GroupedTensor odd_rows = GroupedTensor::from_shapes(Shapes{{3, 32}}, nv);  // rowwise is fine
  expect_error([&] { odd_rows.ensure_usage(false, true); }, Status::kInvalidArgument,
               "e2m1 columnwise data needs an even number");
  nv.config.element = DType::kFloat8E4M3;
  expect_error([&] { GroupedTensor::from_shapes(Shapes{{2, 4}}, nv); }, Status::kDTypeMismatch,
               "config.element");

  const GroupedTensor t = GroupedTensor::from_shapes(Shapes{{2, 3}, {1, 3}}, f32);
  expect_error([&] { t.member(2); }, Status::kOutOfRange, "member 2 is out of range [0, 2)");
  expect_error([&] { t.member(-1); }, Status::kOutOfRange, "out of range");
  expect_error([&] { t.quantized_member(0); }, Status::kInvalidArgument, "not quantized");

  std::vector<int64_t> splits{1, 2};
  const TensorView sv = TensorView::contiguous(splits.data(), DType::kInt64, {2});
  expect_error([&] { GroupedTensor::from_device_splits(sv, 8, f32); }, Status::kInvalidArgument,
               "capacity_rows");
  std::vector<float> fsplits{1, 2};
  GroupedTensorOptions capped = f32;
  capped.capacity_rows = 8;
  expect_error([&] {
    GroupedTensor::from_device_splits(TensorView::contiguous(fsplits.data(), DType::kFloat32, {2}),
                                      8, capped);
  }, Status::kDTypeMismatch, "splits: dtype float32");
}

TEST(GroupedTensor, CheckGroupedViewRejectsBrokenViews) {
  GroupedTensor t = GroupedTensor::from_shapes(Shapes{{2, 4}, {3, 4}}, unquantized(DType::kFloat32));
  GroupedTensorView v = t.view();
  std::vector<int64_t> offsets{0, 12, 8};
  v.host.tensor_offsets = TensorView::contiguous(offsets.data(), DType::kInt64, {3});
  expect_error([&] { check_grouped_view(v); }, Status::kInvalidArgument, "not monotonic");
  offsets = {0, 8, 20};
  v.data.shape[0] = 16;
  expect_error([&] { check_grouped_view(v); }, Status::kBufferTooSmall, "data holds 64 bytes");
  v = t.view();
  v.data.dtype = DType::kFloat16;
  expect_error([&] { check_grouped_view(v); }, Status::kDTypeMismatch, "data has dtype float16");
  v = t.view();
  v.last_dims = v.first_dims;
  expect_error([&] { check_grouped_view(v); }, Status::kInvalidArgument, "last_dims is present");
}

TEST(GroupedTensor, DescriptionNamesModeRecipeAndBytes) {
  GroupedTensorOptions o;
  o.config = make_config(ScalingMode::kMXFP8);
  o.config.columnwise = true;
  const GroupedTensor t = GroupedTensor::from_shapes(Shapes{{32, 64}, {0, 64}, {64, 64}}, o);
  const std::string s = t.to_string();
  for (const char* part : {"3 members", "varying first", "(96, 64)", "mxfp8 e4m3",
                           "rowwise+columnwise", "compact scales", "data: e4m3[6144] cpu, 6144 B",
                           "[1] (0, 64) at element 2048"}) {
    EXPECT_NE(s.find(part), std::string::npos) << part << " in\n" << s;
  }
  EXPECT_EQ(t.storage_bytes(), 2 * 6144 + t.view().scale_inv.nbytes() +
                                   t.view().columnwise_scale_inv.nbytes());
}

}  // namespace
}  // namespace tessera
