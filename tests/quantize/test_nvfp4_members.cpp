// NVFP4 per member in place on the CPU (quantize_nvfp4_members; the training step's per-expert
// global amax, docs/numerics.md "Scaling units per group member"). Oracles: the standalone
// quantizer (Quantizer on the CPU backend) —
// * each member alone (its stochastic-rounding offset the config's + g): its amax, and its rows
//   / columns of the whole copies dequantized under its amax equal the standalone copy of that
//   member dequantized (with compact scales also the code and scale bytes), while another member
//   holds NaN, Inf and outliers 1e30× larger — every config, stochastic rounding, the Hadamard
//   transform and swizzled scales included;
// * members that all hold the same values (so every member's amax equals the whole tensor's),
//   without stochastic rounding: the whole copies equal the standalone quantization of the whole
//   input byte for byte (swizzled scales at the whole copy's places); rows past the last member
//   are zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "quantize/nvfp4_members_case.h"

namespace tessera {
namespace {

using test::MembersOutput;
using test::MembersShape;

// Raw float32 input (rows, K): member g scaled by 4^g, member `hot` also holding NaN, ±Inf and
// 1e30-sized outliers; tail rows as random values too (they are in no member).
std::vector<float> ragged_input(const MembersShape& s, int64_t hot) {
  test::HostInput in = test::make_input(DType::kFloat32, s.total(), s.K, test::InputKind::kGaussian, 5);
  std::vector<float> x(static_cast<size_t>(s.total() * s.K));
  std::memcpy(x.data(), in.bytes.data(), in.bytes.size());
  int64_t r0 = 0;
  for (size_t g = 0; g < s.rows.size(); ++g) {
    for (int64_t i = r0 * s.K; i < (r0 + s.rows[g]) * s.K; ++i) {
      x[i] *= std::pow(4.0f, static_cast<float>(g));
      if (static_cast<int64_t>(g) == hot && i % 37 == 3) x[i] = 1e30f;
    }
    if (static_cast<int64_t>(g) == hot && s.rows[g] > 0) {
      x[r0 * s.K] = NAN;
      x[r0 * s.K + 1] = INFINITY;
      x[(r0 + s.rows[g]) * s.K - 1] = -INFINITY;
    }
    r0 += s.rows[g];
  }
  return x;
}

std::vector<float> dequantized(const QuantizedTensorView& q, bool columnwise) {
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
  dequantize(q, TensorView::contiguous(out.data(), DType::kFloat32, {q.rows, q.cols}), columnwise);
  return out;
}

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(float)) == 0;
}

TEST(Nvfp4Members, EachMemberIsTheStandaloneQuantizerOnItsOwn) {
  for (const test::NamedConfig& nc : test::nvfp4_configs()) {
    for (const MembersShape& s : test::members_shapes()) {
      SCOPED_TRACE(nc.name + " " + s.name());
      const int64_t groups = static_cast<int64_t>(s.rows.size()), M = s.total();
      std::vector<float> x = ragged_input(s, groups - 1);
      MembersOutput out(nc.config, M, s.K, groups);
      std::vector<int64_t> offsets = s.offsets();
      detail::quantize_nvfp4_members(
          nc.config, TensorView::contiguous(x.data(), DType::kFloat32, {M, s.K}),
          TensorView::contiguous(offsets.data(), DType::kInt64, {groups + 1}), out.view(), {});
      const bool compact = nc.config.scale_layout == ScaleLayout::kCompact;
      int64_t r0 = 0;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t n = s.rows[g];
        SCOPED_TRACE("member " + std::to_string(g));
        QuantizerConfig member_config = nc.config;
        member_config.rng_offset += static_cast<uint64_t>(g);
        Quantizer q(member_config);
        QuantizedTensor alone = q.allocate(n, s.K);
        q.quantize(TensorView::contiguous(x.data() + r0 * s.K, DType::kFloat32, {n, s.K}),
                   alone.view(), Backend::kCPU);
        const float a = *alone.view().amax.as<float>(), ca = *alone.view().columnwise_amax.as<float>();
        EXPECT_TRUE(same_bits(out.amax[g], a)) << out.amax[g] << " vs " << a;
        EXPECT_TRUE(same_bits(out.col_amax[g], ca)) << out.col_amax[g] << " vs " << ca;
        if (n == 0) continue;
        for (const bool cw : {false, true}) {
          QuantizedTensorView mine = out.view();  // the whole copy under member g's amax
          mine.amax = TensorView::contiguous(&out.amax[g], DType::kFloat32, {1});
          mine.columnwise_amax = TensorView::contiguous(&out.col_amax[g], DType::kFloat32, {1});
          const std::vector<float> whole = dequantized(mine, cw), own = dequantized(alone.view(), cw);
          for (int64_t i = 0; i < n * s.K; ++i) {
            ASSERT_TRUE(same_bits(whole[r0 * s.K + i], own[i]))
                << (cw ? "columnwise" : "rowwise") << " element " << i << ": " << whole[r0 * s.K + i]
                << " vs " << own[i];
          }
        }
        if (!compact) {
          r0 += n;
          continue;
        }
        // Bytes: member rows of the rowwise copy, member columns of the columnwise copy.
        const auto* row = out.view().data.as<const uint8_t>();
        const auto* mine_row = alone.view().data.as<const uint8_t>();
        EXPECT_EQ(std::memcmp(row + r0 * s.K / 2, mine_row, static_cast<size_t>(n * s.K / 2)), 0);
        const auto* rs = out.view().scale_inv.as<const uint8_t>();
        const int64_t nb = (s.K + 15) / 16;  // scales per row
        EXPECT_EQ(std::memcmp(rs + r0 * nb, alone.view().scale_inv.as<const uint8_t>(),
                              static_cast<size_t>(n * nb)), 0);
        const auto* col = out.view().columnwise_data.as<const uint8_t>();
        const auto* cs = out.view().columnwise_scale_inv.as<const uint8_t>();
        const int64_t cpitch = (M + 1) / 2, spitch = (M + 15) / 16;
        for (int64_t k = 0; k < s.K; ++k) {
          ASSERT_EQ(std::memcmp(col + k * cpitch + r0 / 2,
                                alone.view().columnwise_data.as<const uint8_t>() + k * (n / 2),
                                static_cast<size_t>(n / 2)), 0) << "columnwise row " << k;
          ASSERT_EQ(std::memcmp(cs + k * spitch + r0 / 16,
                                alone.view().columnwise_scale_inv.as<const uint8_t>() + k * (n / 16),
                                static_cast<size_t>(n / 16)), 0) << "columnwise scales row " << k;
        }
        r0 += n;
      }
    }
  }
}

TEST(Nvfp4Members, EqualMembersGiveTheWholeTensorsCopies) {
  for (const test::NamedConfig& nc : test::nvfp4_configs()) {
    if (nc.config.stochastic_rounding) continue;  // members draw their own elements and offsets
    for (const MembersShape& base : test::members_shapes()) {
      MembersShape s = base;  // every member the same 32 rows; tail zeros
      for (int64_t& r : s.rows) r = 32;
      SCOPED_TRACE(nc.name + " " + s.name());
      const int64_t groups = static_cast<int64_t>(s.rows.size()), M = s.total();
      test::HostInput one = test::make_input(DType::kBFloat16, 32, s.K, test::InputKind::kGaussian, 9);
      std::vector<uint8_t> x(static_cast<size_t>(M * s.K * 2), 0);
      for (int64_t g = 0; g < groups; ++g)
        std::memcpy(x.data() + g * one.bytes.size(), one.bytes.data(), one.bytes.size());
      const TensorView xv = TensorView::contiguous(x.data(), DType::kBFloat16, {M, s.K});
      MembersOutput out(nc.config, M, s.K, groups);
      std::vector<int64_t> offsets = s.offsets();
      detail::quantize_nvfp4_members(nc.config, xv,
                                     TensorView::contiguous(offsets.data(), DType::kInt64, {groups + 1}),
                                     out.view(), {});
      Quantizer q(nc.config);
      QuantizedTensor whole = q.allocate(M, s.K);
      q.quantize(xv, whole.view(), Backend::kCPU);
      QuantizedTensorView mine = out.view();
      mine.amax = whole.view().amax;  // compared below, member by member
      mine.columnwise_amax = whole.view().columnwise_amax;
      EXPECT_EQ(test::compare_quantized(mine, whole.view()), "");
      for (int64_t g = 0; g < groups; ++g) {
        EXPECT_TRUE(same_bits(out.amax[g], *whole.view().amax.as<float>()));
        EXPECT_TRUE(same_bits(out.col_amax[g], *whole.view().columnwise_amax.as<float>()));
      }
    }
  }
}

TEST(Nvfp4Members, RefusesMembersOffTheSixteenRowGrid) {
  const QuantizerConfig c = test::nvfp4_configs().front().config;
  std::vector<float> x(48 * 32, 1.0f);
  MembersOutput out(c, 48, 32, 2);
  std::vector<int64_t> offsets = {0, 8 * 32, 48 * 32};
  EXPECT_THROW(detail::quantize_nvfp4_members(
                   c, TensorView::contiguous(x.data(), DType::kFloat32, {48, 32}),
                   TensorView::contiguous(offsets.data(), DType::kInt64, {3}), out.view(), {}),
               Error);
  std::vector<int64_t> wrong = {0, 48 * 32};  // one member, but two amaxes
  EXPECT_THROW(detail::quantize_nvfp4_members(
                   c, TensorView::contiguous(x.data(), DType::kFloat32, {48, 32}),
                   TensorView::contiguous(wrong.data(), DType::kInt64, {2}), out.view(), {}),
               Error);
}

}  // namespace
}  // namespace tessera
