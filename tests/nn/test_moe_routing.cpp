// Expert-parallel routing ops on the CPU against the oracle of moe_routing_cases.h (plain loops
// from the contract; quantization by tessera's reference quantizer on the permuted tensor):
// dropless with every alignment the recipes use, capacity mode with drops, every index / map /
// input dtype, fused rowwise / block1x128 / MXFP8 (both E8M0 rules, E4M3 and E5M2), hidden sizes
// that are not multiples of the blocks, no tokens, one expert; and every argument error.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/moe_routing_cases.h"
#include "tessera/core/status.h"

namespace tessera {
namespace {

using moe_testing::MoeCase;

void check_case(const MoeCase& c) {
  const auto in = moe_testing::make_inputs(c);
  const auto want = moe_testing::oracle(c, in);
  const auto got = moe_testing::run_ops(c, in, Device::cpu());
  moe_testing::expect_same(got, want, c.name());
}

TEST(MoeRouting, DroplessEveryAlignmentAndDtype) {
  uint32_t seed = 1;
  for (int64_t align : {1, 16, 32, 128}) {
    for (DType idx : {DType::kInt32, DType::kInt64}) {
      for (DType map : {DType::kInt32, DType::kInt64}) {
        for (DType xd : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
          MoeCase c;
          c.align = align;
          c.index_dtype = idx;
          c.map_dtype = map;
          c.x_dtype = xd;
          c.seed = seed++;
          check_case(c);
        }
      }
    }
  }
}

TEST(MoeRouting, ShapesEdges) {
  uint32_t seed = 100;
  for (int64_t t : {0, 1, 3, 130}) {
    for (int64_t k : {1, 2, 4, 8}) {
      for (int64_t e : {1, 3, 8, 64}) {
        for (int64_t h : {1, 33, 100, 2100}) {
          MoeCase c;
          c.tokens = t;
          c.top_k = k;
          c.experts = e;
          c.hidden = h;
          c.align = e % 2 == 0 ? 16 : 1;
          c.with_probs = (seed % 2) == 0;
          c.seed = seed++;
          check_case(c);
        }
      }
    }
  }
}

TEST(MoeRouting, CapacityDropsLowerTokenWins) {
  uint32_t seed = 500;
  for (int64_t cap : {0, 16, 32, 48, 128}) {
    for (int64_t k : {1, 2, 6}) {
      MoeCase c;
      c.tokens = 150;
      c.top_k = k;
      c.experts = 8;
      c.align = 16;
      c.capacity = cap;
      c.seed = seed++;
      const auto in = moe_testing::make_inputs(c);
      const auto want = moe_testing::oracle(c, in);
      // The oracle's drop count, independently: Σ_e max(routed_e − C, 0).
      std::vector<int64_t> routed(8, 0);
      for (int64_t e : in.indices) ++routed[static_cast<size_t>(e)];
      int64_t dropped = 0;
      for (int64_t r : routed) dropped += std::max<int64_t>(r - cap, 0);
      ASSERT_EQ(want.dropped, dropped) << c.name();
      if (cap == 16) {
        ASSERT_GT(dropped, 0) << "the skewed routing must overflow expert 0";
      }
      const auto got = moe_testing::run_ops(c, in, Device::cpu());
      moe_testing::expect_same(got, want, c.name());
    }
  }
}

TEST(MoeRouting, FusedQuantizationBitIdenticalToQuantizer) {
  uint32_t seed = 900;
  for (ScalingMode m : {ScalingMode::kRowwise, ScalingMode::kBlock1x128, ScalingMode::kMXFP8}) {
    for (DType el : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      for (DType xd : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
        for (int64_t h : {32, 100, 256, 300}) {
          for (int64_t cap : {-1, 16}) {
            MoeCase c;
            c.quant = m;
            c.element = el;
            c.x_dtype = xd;
            c.hidden = h;
            c.align = m == ScalingMode::kMXFP8 ? 32 : 1;  // rows not a multiple of 4 for block
            c.capacity = cap < 0 ? -1 : (m == ScalingMode::kMXFP8 ? 32 : cap);
            c.floor_rule = m == ScalingMode::kMXFP8 && (seed % 2) == 1;
            c.seed = seed++;
            check_case(c);
          }
        }
      }
    }
  }
}

TEST(MoeRouting, DprobsCloseToFloat64) {
  MoeCase c;
  c.tokens = 64;
  c.hidden = 300;
  c.x_dtype = DType::kFloat32;
  const auto in = moe_testing::make_inputs(c);
  const auto got = moe_testing::run_ops(c, in, Device::cpu());
  for (int64_t p = 0; p < c.tokens * c.top_k; ++p) {
    const int64_t s = got.slot_map[static_cast<size_t>(p)];
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < c.hidden; ++i) {
      const double a = moe_testing::load(in.dout, c.x_dtype, (p / c.top_k) * c.hidden + i);
      const double b = moe_testing::load(in.y, c.x_dtype, s * c.hidden + i);
      ref += a * b;
      mag += std::fabs(a * b);
    }
    EXPECT_NEAR(got.dprobs[static_cast<size_t>(p)], ref, 1e-5 * mag + 1e-30) << p;
  }
}

// ---- errors ------------------------------------------------------------------------------------
template <class F>
void expect_error(F&& f, Status status, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MoeRouting, Errors) {
  MoeCase c;
  c.tokens = 4;
  c.top_k = 2;
  c.experts = 3;
  auto in = moe_testing::make_inputs(c);
  in.indices[5] = 3;  // token 2, choice 1
  expect_error([&] { moe_testing::run_ops(c, in, Device::cpu()); }, Status::kOutOfRange,
               "indices[2, 1] = 3 is not an expert in [0, 3)");
  in.indices[5] = -1;
  expect_error([&] { moe_testing::run_ops(c, in, Device::cpu()); }, Status::kOutOfRange,
               "indices[2, 1] = -1");
  MoeRoutingOptions o;
  o.num_experts = 4;
  o.align = 16;
  o.capacity = 20;
  expect_error([&] { moe_permuted_rows(4, 2, o); }, Status::kInvalidArgument,
               "capacity 20 must be a multiple of align 16");
  o.capacity = -1;
  o.num_experts = 0;
  expect_error([&] { moe_permuted_rows(4, 2, o); }, Status::kInvalidArgument, "num_experts 0");
  // A row_pair buffer smaller than the bound, mixed map dtypes.
  std::vector<int64_t> idx = {0, 1, 2, 0}, counts(3), offs(4), slot(4), rp(4), drop(1);
  std::vector<int32_t> rp32(12);
  o.num_experts = 3;
  o.align = 1;
  auto v64 = [](std::vector<int64_t>& v, std::initializer_list<int64_t> s) {
    return TensorView::contiguous(v.data(), DType::kInt64, s);
  };
  MoeRouting out{v64(counts, {3}), v64(offs, {4}), v64(slot, {2, 2}), v64(rp, {3}), v64(drop, {1})};
  expect_error([&] { moe_routing(v64(idx, {2, 2}), o, out); }, Status::kBufferTooSmall,
               "row_pair needs at least 4 entries");
  out.row_pair = TensorView::contiguous(rp32.data(), DType::kInt32, {4});
  expect_error([&] { moe_routing(v64(idx, {2, 2}), o, out); }, Status::kDTypeMismatch,
               "slot_map and row_pair must share one dtype");
  out.row_pair = v64(rp, {4});
  out.counts = v64(counts, {2});
  expect_error([&] { moe_routing(v64(idx, {2, 2}), o, out); }, Status::kShapeMismatch,
               "counts: expected (3)");
}

TEST(MoeRouting, PermuteErrors) {
  std::vector<float> x(8, 1.0f), y(16), probs(3);
  std::vector<int64_t> rp = {0, 1, -1, 5}, slot = {0, 1, 2, 3};
  const TensorView xv = TensorView::contiguous(x.data(), DType::kFloat32, {2, 4});
  const TensorView yv = TensorView::contiguous(y.data(), DType::kFloat32, {4, 4});
  const TensorView rpv = TensorView::contiguous(rp.data(), DType::kInt64, {4});
  expect_error([&] { moe_permute(xv, rpv, 2, yv); }, Status::kOutOfRange,
               "row_pair[3] = 5 is outside [-1, 4)");
  rp[3] = 3;
  std::vector<uint16_t> yb(16);
  const TensorView ybv = TensorView::contiguous(yb.data(), DType::kBFloat16, {4, 4});
  expect_error([&] { moe_permute(xv, rpv, 2, ybv); }, Status::kDTypeMismatch,
               "must have the dtype of x");
  QuantizedTensor tensor_q(make_config(ScalingMode::kTensor), 4, 4, Device::cpu());
  expect_error([&] { moe_permute_quantize(xv, rpv, 2, tensor_q.view()); }, Status::kUnsupported,
               "is not fused into permute");
  QuantizerConfig sw = make_config(ScalingMode::kMXFP8);
  sw.scale_layout = ScaleLayout::kSwizzled;
  QuantizedTensor swq(sw, 4, 4, Device::cpu());
  expect_error([&] { moe_permute_quantize(xv, rpv, 2, swq.view()); }, Status::kInvalidArgument,
               "scales must be compact");
  QuantizedTensor wrong(make_config(ScalingMode::kRowwise), 3, 4, Device::cpu());
  expect_error([&] { moe_permute_quantize(xv, rpv, 2, wrong.view()); }, Status::kShapeMismatch,
               "out is (3, 4)");
  const TensorView sv = TensorView::contiguous(slot.data(), DType::kInt64, {2, 2});
  const TensorView pv = TensorView::contiguous(probs.data(), DType::kFloat32, {3});
  expect_error([&] { moe_unpermute(yv, sv, pv, xv); }, Status::kShapeMismatch,
               "probs must be (T, k)");
  slot[2] = 4;
  expect_error([&] { moe_permute_backward(yv, sv, xv); }, Status::kOutOfRange,
               "slot_map[2] = 4 is outside [-1, 4)");
}

// num_tokens x top_k past int64 is refused naming both (it was a signed overflow: UBSan's report,
// or a wrapped bound and a misleading message about row_pair).
TEST(MoeRouting, TokensTimesTopKOverflowNamesBoth) {
  constexpr int64_t kHuge = int64_t{1} << 40;
  float x_storage = 0.0f;
  std::vector<int64_t> rp = {-1};
  const TensorView xv = TensorView::contiguous(&x_storage, DType::kFloat32, {kHuge, 0});
  const TensorView rpv = TensorView::contiguous(rp.data(), DType::kInt64, {1});
  const TensorView out = TensorView::contiguous(&x_storage, DType::kFloat32, {1, 0});
  for (const char* name : {"num_tokens", "top_k"})
    expect_error([&] { moe_permute(xv, rpv, kHuge, out); }, Status::kOutOfRange, name);
  QuantizedTensor q(make_config(ScalingMode::kRowwise), 1, 0, Device::cpu());
  expect_error([&] { moe_permute_quantize(xv, rpv, kHuge, q.view()); }, Status::kOutOfRange,
               "num_tokens");
  MoeRoutingOptions o;
  o.num_experts = 2;
  expect_error([&] { moe_routing_workspace_bytes(kHuge, kHuge, o, Device::cpu()); },
               Status::kOutOfRange, "num_tokens");
  expect_error([&] { moe_routing_workspace_bytes(-1, 2, o, Device::cpu()); },
               Status::kInvalidArgument, "num_tokens");
  expect_error([&] { moe_routing_workspace_bytes(4, 0, o, Device::cpu()); },
               Status::kInvalidArgument, "top_k");
  o.capacity = 0;
  expect_error([&] { moe_permuted_rows(kHuge, kHuge, o); }, Status::kOutOfRange, "top_k");
}

// Capacity is -1 (dropless) or a row count >= 0; other negative values are refused, not read as
// dropless.
TEST(MoeRouting, CapacityBelowMinusOneIsRefused) {
  MoeRoutingOptions o;
  o.num_experts = 2;
  o.capacity = -2;
  expect_error([&] { moe_permuted_rows(4, 2, o); }, Status::kInvalidArgument, "capacity -2");
  o.capacity = -1;
  EXPECT_EQ(moe_permuted_rows(4, 2, o), 8);
}

}  // namespace
}  // namespace tessera
