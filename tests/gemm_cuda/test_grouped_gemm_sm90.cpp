// The sm90 grouped GEMM kernel driven through its internal launch API, against a plain FP64 loop
// on the same (decoded) operands: M-grouped and K-grouped, BF16 and FP8 E4M3 (rowwise and
// per-tensor scales), BF16/FP32 outputs, beta = 1, ragged groups (empty at start/middle/end,
// sizes not multiples of the tile), many groups, int32 end offsets, and CUDA-graph replay with
// group sizes changed between replays. Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gemm/cuda/grouped_gemm_sm90.h"
#include "gemm/cuda/transpose_16bit.h"
#include "tessera/formats/codecs.h"
#include "gemm_cuda/gemm_cuda_test_util.h"

namespace tessera::gemm_cuda {
namespace {

using test::DeviceArray;

struct Case {
  ElemKind elem = ElemKind::kBF16;
  bool k_grouped = false;
  std::vector<int64_t> sizes;
  int64_t m = 0, n = 0, k = 0;  // M-grouped: n, k; K-grouped: m, n
  gemm_sm90::OutType out = gemm_sm90::OutType::kBF16;
  float beta = 0.0f;
  int scales = 0;  // 0 none, 1 rowwise, 2 per-tensor per group
  bool bias = false;  // FP32 bias (G, n)
  bool per_member = false;  // K-grouped operand layout
  bool end_offsets32 = false;
  int block_n = 256;          // 256: cooperative kernel, 128: ping-pong
  bool pingpong = false;     // ping-pong schedule (block_n 128) instead of cooperative
  int stages = 0;            // 0: 4 (block_n 256) or 6 (128); the launcher caps it to what fits
  int64_t capacity_pad = 0;  // extra token rows past the last offset
  bool nan_pad = false;      // K-grouped whole: NaN in every token column past the last offset
  int raster_band = 0;       // Sm90Config::raster_band (tile order inside a group)
  int cluster = 1;           // Sm90Config::cluster (2: tile pairs, multicast shared operands)
  int num_sms = 0;           // persistent CTAs (0: all SMs)
  float alpha = 0.75f;
};

struct Result {
  double rel_err = 0;
  int nan_groups = 0;  // groups whose outputs are all NaN
  int64_t bad_untouched = 0;  // rows that must stay untouched but changed
  int64_t zero_sign_mismatch = 0;  // exact zeros (empty contractions) of the wrong sign
};

// Fills `codes` with random operand elements and returns their decoded values.
std::vector<double> random_operand(ElemKind e, int64_t count, std::mt19937& rng,
                                   std::vector<uint8_t>& bytes) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<double> vals(count);
  const int eb = e == ElemKind::kBF16 ? 2 : 1;
  bytes.assign(count * eb, 0);
  for (int64_t i = 0; i < count; ++i) {
    const float x = nd(rng);
    if (e == ElemKind::kBF16) {
      const bf16 h = bf16::from_float(x);
      std::memcpy(&bytes[i * 2], &h.bits, 2);
      vals[i] = h.to_float();
    } else {
      bytes[i] = formats::encode_e4m3(x * 64.0f);
      vals[i] = formats::decode_e4m3(bytes[i]);
    }
  }
  return vals;
}

Result run_case(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t groups = static_cast<int64_t>(c.sizes.size());
  std::vector<int64_t> start(groups + 1, 0);
  for (int64_t g = 0; g < groups; ++g) start[g + 1] = start[g] + c.sizes[g];
  const int64_t total = start[groups], cap = total + c.capacity_pad;

  // Operands as K-major matrices. M-grouped: A (cap, k), B (G*n, k).
  // K-grouped whole: A (m, cap), B (n, cap); per member: A_g (m, len) blocks at start*m.
  // Whole transposed K-grouped operands get a row stride padded to 16 elements (TMA needs
  // 16-byte strides); the padding columns hold random values that must never be read.
  const int64_t ld = c.k_grouped ? (c.per_member ? cap : (cap + 15) / 16 * 16) : c.k;
  const int64_t a_rows = c.k_grouped ? c.m : cap, a_cols = c.k_grouped ? cap : c.k;
  const int64_t b_rows = c.k_grouped ? c.n : groups * c.n, b_cols = c.k_grouped ? cap : c.k;
  std::vector<uint8_t> a_bytes, b_bytes;
  const std::vector<double> a = random_operand(c.elem, a_rows * ld, rng, a_bytes);
  const std::vector<double> b = random_operand(c.elem, b_rows * ld, rng, b_bytes);
  auto a_at = [&](int64_t g, int64_t i, int64_t kk) {  // op(A_g)[i][kk]
    if (!c.k_grouped) return a[(start[g] + i) * c.k + kk];
    return c.per_member ? a[start[g] * c.m + i * c.sizes[g] + kk] : a[i * ld + start[g] + kk];
  };
  auto b_at = [&](int64_t g, int64_t j, int64_t kk) {
    if (!c.k_grouped) return b[(g * c.n + j) * c.k + kk];
    return c.per_member ? b[start[g] * c.n + j * c.sizes[g] + kk] : b[j * ld + start[g] + kk];
  };
  // Scales: rowwise = one per A row (token or output row) and one per B row; per-tensor = per group.
  std::uniform_real_distribution<float> ud(0.5f, 2.0f);
  const int64_t sa_count = c.scales == 1 ? (c.k_grouped ? c.m : cap) : groups;
  const int64_t sb_count = c.scales == 1 ? (c.k_grouped ? c.n : groups * c.n) : groups;
  std::vector<float> sa(sa_count), sb(sb_count), galpha(groups);
  // FP16 D holds at most 65504: FP8 products (codes up to 448 · 448) get A scales 2^-12 then.
  const bool fp8_to_fp16 = c.out == gemm_sm90::OutType::kFP16 && c.elem == ElemKind::kE4M3;
  const float sa_mul = fp8_to_fp16 ? 1.0f / 4096 : 1.0f;
  for (auto& v : sa) v = ud(rng) * sa_mul;
  for (auto& v : sb) v = ud(rng);
  for (auto& v : galpha) v = ud(rng);
  std::vector<float> bias(groups * c.n);
  for (auto& v : bias) v = ud(rng) - 1.25f;

  const int64_t d_rows = c.k_grouped ? groups * c.m : cap, d_cols = c.n;
  const bool fp32 = c.out == gemm_sm90::OutType::kFP32;
  std::vector<float> d0(d_rows * d_cols);
  for (auto& v : d0) v = ud(rng);
  const float kSentinel = 12345.0f;
  if (!c.k_grouped)
    for (int64_t r = total; r < cap; ++r)
      for (int64_t j = 0; j < d_cols; ++j) d0[r * d_cols + j] = kSentinel;

  if (c.nan_pad && c.k_grouped && !c.per_member) {  // NaN codes: E4M3 0x7F, BF16 0x7FC0
    const int64_t eb = c.elem == ElemKind::kBF16 ? 2 : 1;
    for (auto* bytes : {&a_bytes, &b_bytes})
      for (int64_t r = 0; r < static_cast<int64_t>(bytes->size()) / (ld * eb); ++r)
        for (int64_t kk = total; kk < ld; ++kk) {
          uint8_t* e = bytes->data() + (r * ld + kk) * eb;
          if (eb == 1) e[0] = 0x7F;
          else e[0] = 0xC0, e[1] = 0x7F;
        }
  }
  DeviceArray da(a_bytes), db(b_bytes), dsa(sa), dsb(sb), dal(galpha);
  const bool out_fp16 = c.out == gemm_sm90::OutType::kFP16;
  auto to_float16 = [&](float v) {
    return out_fp16 ? fp16::from_float(v).to_float() : bf16::from_float(v).to_float();
  };
  std::vector<uint16_t> d0_half(d0.size());
  for (size_t i = 0; i < d0.size(); ++i)
    d0_half[i] = out_fp16 ? fp16::from_float(d0[i]).bits : bf16::from_float(d0[i]).bits;
  DeviceArray dbias(bias);
  DeviceArray dd = fp32 ? DeviceArray(d0) : DeviceArray(d0_half);
  std::vector<int64_t> offs64(start);
  std::vector<int32_t> ends32(groups);
  for (int64_t g = 0; g < groups; ++g) ends32[g] = static_cast<int32_t>(start[g + 1]);
  DeviceArray doffs = c.end_offsets32 ? DeviceArray(ends32) : DeviceArray(offs64);

  Sm90GroupedGemm l;
  l.elem = c.elem;
  auto& p = l.params;
  p.k_grouped = c.k_grouped;
  p.num_groups = static_cast<int>(groups);
  p.offsets = doffs.ptr;
  p.offsets_int64 = !c.end_offsets32;
  p.offsets_start = !c.end_offsets32;
  p.capacity = cap;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.b_group_rows = c.k_grouped ? 0 : c.n;
  p.d = dd.ptr;
  p.out_type = c.out;
  p.ldd = c.n;
  p.d_group_stride = c.m * c.n;
  p.alpha = c.alpha;
  p.beta = c.beta;
  p.group_alpha = static_cast<const float*>(dal.ptr);
  if (c.bias) {
    p.bias = dbias.ptr;
    p.bias_type = gemm_sm90::OutType::kFP32;
    p.bias_gs = c.n;
  }
  if (c.scales) {
    p.scale_a = static_cast<const float*>(dsa.ptr);
    p.scale_b = static_cast<const float*>(dsb.ptr);
    if (c.scales == 1) {
      p.sa_rs = 1;
      p.sb_rs = 1;
      p.sb_gs = c.k_grouped ? 0 : c.n;
    } else {
      p.sa_gs = 1;
      p.sb_gs = 1;
    }
  }
  l.a = {da.ptr, a_rows, a_cols, ld};
  l.b = {db.ptr, b_rows, b_cols, ld};
  l.a_per_member = l.b_per_member = c.per_member;
  l.config.pingpong = c.pingpong || c.block_n == 128;  // block_n 128 is the ping-pong kernel
  l.config.block_n = l.config.pingpong ? 128 : 256;
  l.config.stages = c.stages ? c.stages : (l.config.block_n == 256 ? 4 : 6);
  l.config.raster_band = c.raster_band;
  l.config.cluster = c.cluster;
  l.config.num_sms = c.num_sms;
  DeviceArray ws(std::vector<uint8_t>(std::max<int64_t>(sm90_workspace_bytes(l), 1) + 128));
  launch_grouped_gemm_sm90(l, test::align128(ws.ptr), sm90_workspace_bytes(l), nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> out;
  if (fp32) {
    out = dd.to_host<float>();
  } else {
    const std::vector<uint16_t> bits = dd.to_host<uint16_t>();
    out.resize(bits.size());
    for (size_t i = 0; i < bits.size(); ++i)
      out[i] = out_fp16 ? fp16{bits[i]}.to_float() : bf16{bits[i]}.to_float();
  }
  Result res;
  double num = 0, den = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = c.k_grouped ? c.m : c.sizes[g];
    const int64_t kk_len = c.k_grouped ? c.sizes[g] : c.k;
    int64_t nans = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < c.n; ++j)
        nans += std::isnan(out[(c.k_grouped ? g * c.m + i : start[g] + i) * d_cols + j]);
    if (rows > 0 && nans == rows * c.n) ++res.nan_groups;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t drow = c.k_grouped ? g * c.m + i : start[g] + i;
      const double sai = c.scales == 1 ? sa[c.k_grouped ? i : start[g] + i]
                                       : (c.scales == 2 ? sa[g] : 1.0);
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < kk_len; ++kk) acc += a_at(g, i, kk) * b_at(g, j, kk);
        const double sbj = c.scales == 1 ? sb[c.k_grouped ? j : g * c.n + j]
                                         : (c.scales == 2 ? sb[g] : 1.0);
        double ref = static_cast<double>(c.alpha) * galpha[g] * sai * sbj * acc + (c.bias ? bias[g * c.n + j] : 0.0);
        if (c.beta != 0) ref += c.beta * d0[drow * d_cols + j];
        const double got = out[drow * d_cols + j];
        num += (got - ref) * (got - ref);
        den += ref * ref;
        if (std::isnan(got)) num += 1e30;
        if (ref == 0 && got == 0 && std::signbit(ref) != std::signbit(got)) ++res.zero_sign_mismatch;
      }
    }
  }
  for (int64_t r = c.k_grouped ? d_rows : total; r < d_rows; ++r)
    for (int64_t j = 0; j < d_cols; ++j)
      if (out[r * d_cols + j] != (fp32 ? kSentinel : to_float16(kSentinel)))
        ++res.bad_untouched;
  res.rel_err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return res;
}

double budget(const Case& c) {
  // FP32 output: accumulation error only; BF16 output: its rounding (2^-9 relative) dominates.
  // FP8 wgmma accumulates with reduced precision (like torch's use_fast_accum=True).
  if (c.out == gemm_sm90::OutType::kFP32) return c.elem == ElemKind::kBF16 ? 1e-5 : 1e-3;
  return 6e-3;
}

// Runs the case as given and again under the ping-pong schedule, with 4 stages (the whole
// 128-row tile staged for the TMA stores) and 6 (one 64-row staging block reused); then
// cooperative with bands of 2 m blocks and ping-pong (4 stages) with bands of 1 (tile orders);
// Cases also with clusters of 2 CTAs (M-grouped: tile pairs sharing A or B, phantom partners,
// pairs across groups; K-grouped with an even number of m blocks: pairs sharing B inside a
// group): both schedules on all SMs, and on 4 CTAs (2 clusters), so that each cluster walks many
// pairs and its ring slots wrap many times. Every case also on 4 and 2 CTAs
// without clusters (K-grouped included): each CTA walks many tiles across the groups.
void expect_case(const Case& c, const char* name) {
  static const char* const kTags[] = {"",
                                      " (ping-pong, 4 stages)",
                                      " (ping-pong, 6 stages)",
                                      " (raster band 2)",
                                      " (ping-pong, raster band 1)",
                                      " (cluster 2)",
                                      " (ping-pong, 6 stages, cluster 2)",
                                      " (cluster 2, 4 CTAs, raster band 2)",
                                      " (ping-pong, 5 stages, cluster 2, 4 CTAs)",
                                      " (4 CTAs)",
                                      " (ping-pong, 2 CTAs)"};
  for (int variant = 0; variant < 11; ++variant) {
    // K-grouped clusters: an even number of m blocks (the launcher refuses the others)
    if (c.k_grouped && variant >= 5 && variant <= 8 && (c.m + 127) / 128 % 2 != 0) continue;
    Case v = c;
    v.pingpong = variant == 1 || variant == 2 || variant == 4 || variant == 6 || variant == 8 ||
                 variant == 10;
    if (v.pingpong) v.stages = variant == 2 || variant == 6 ? 6 : (variant == 8 ? 5 : 4);
    if (variant == 3 || variant == 7) v.raster_band = 2;
    if (variant == 4) v.raster_band = 1;
    if (variant >= 5 && variant <= 8) v.cluster = 2;
    if (variant >= 7) v.num_sms = variant == 10 ? 2 : 4;
    const char* tag = kTags[variant];
    const Result r = run_case(v, 1234);
    EXPECT_LT(r.rel_err, budget(v)) << name << tag;
    EXPECT_EQ(r.bad_untouched, 0) << name << tag << ": rows past the last offset were written";
    EXPECT_EQ(r.zero_sign_mismatch, 0) << name << tag;
  }
}

class GroupedGemmSm90 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  }
};

TEST_F(GroupedGemmSm90, MGroupedBF16RaggedEmptyStartMiddleEnd) {
  Case c;
  c.sizes = {0, 37, 128, 300, 0, 5, 0};
  c.n = 264;
  c.k = 200;
  c.capacity_pad = 40;
  expect_case(c, "bf16 ragged bn256");
  c.block_n = 128;
  expect_case(c, "bf16 ragged bn128");
}

TEST_F(GroupedGemmSm90, MGroupedBF16Fp32BetaOneEndOffsets32) {
  Case c;
  c.sizes = {129, 0, 64, 255};
  c.n = 512;
  c.k = 320;
  c.out = gemm_sm90::OutType::kFP32;
  c.beta = 1.0f;
  c.end_offsets32 = true;
  expect_case(c, "bf16 fp32 beta1");
}

TEST_F(GroupedGemmSm90, MGroupedFP8Rowwise) {
  Case c;
  c.elem = ElemKind::kE4M3;
  c.scales = 1;
  c.sizes = {0, 200, 17, 384, 0};
  c.n = 256 + 128;
  c.k = 512 + 64;
  c.capacity_pad = 16;
  expect_case(c, "fp8 rowwise");
  c.scales = 2;
  c.out = gemm_sm90::OutType::kFP32;
  expect_case(c, "fp8 per-tensor fp32 out");
}

// FP16 D with bias and rowwise scales on whole tiles (n a multiple of 256): the straight-line
// staged epilogue with both column vectors, and the general one on the group-end tiles.
TEST_F(GroupedGemmSm90, MGroupedFP8Fp16OutBias) {
  Case c;
  c.elem = ElemKind::kE4M3;
  c.scales = 1;
  c.bias = true;
  c.out = gemm_sm90::OutType::kFP16;
  c.sizes = {256, 0, 128, 200};
  c.n = 512;
  c.k = 256;
  c.capacity_pad = 64;
  expect_case(c, "fp8 rowwise fp16 out bias");
  c.elem = ElemKind::kBF16;
  c.scales = 0;
  expect_case(c, "bf16 fp16 out bias");
}

// BF16 D on whole tiles through the staged epilogue, one case per compiled set of column
// vectors (none, B scales, bias, both), and the group-end tiles through the general path.
TEST_F(GroupedGemmSm90, MGroupedBF16OutEveryColumnVectorSet) {
  Case c;
  c.sizes = {256, 0, 128, 200};
  c.n = 512;
  c.k = 256;
  c.capacity_pad = 64;
  for (bool bias : {false, true}) {
    c.bias = bias;
    c.elem = ElemKind::kBF16;
    c.scales = 0;
    expect_case(c, bias ? "bf16 out, bias" : "bf16 out, no column vector");
    c.elem = ElemKind::kE4M3;
    c.scales = 1;
    expect_case(c, bias ? "fp8 rowwise bf16 out, B scales and bias" : "fp8 rowwise bf16 out, B scales");
  }
}

TEST_F(GroupedGemmSm90, MGroupedOneGroupAndManyGroups) {
  Case one;
  one.sizes = {1000};
  one.n = 136;
  one.k = 72;
  expect_case(one, "one group");
  Case many;
  std::mt19937 rng(7);
  for (int g = 0; g < 300; ++g) many.sizes.push_back(rng() % 4 == 0 ? 0 : rng() % 40);
  many.n = 64;
  many.k = 128;
  many.elem = ElemKind::kE4M3;
  many.scales = 1;
  expect_case(many, "300 groups fp8");
}

TEST_F(GroupedGemmSm90, KGroupedBF16WholeTransposedRagged) {
  Case c;
  c.k_grouped = true;
  c.sizes = {0, 24, 200, 0, 64, 8, 0};  // starts 16-byte aligned (TMA), not tile multiples
  c.m = 200;
  c.n = 264;
  expect_case(c, "kgrouped bf16 whole");
  c.out = gemm_sm90::OutType::kFP32;
  c.beta = 1.0f;
  expect_case(c, "kgrouped bf16 whole fp32 beta1");
}

TEST_F(GroupedGemmSm90, KGroupedFP8PerMemberRowwise) {
  Case c;
  c.k_grouped = true;
  c.elem = ElemKind::kE4M3;
  c.per_member = true;
  c.scales = 1;
  c.sizes = {0, 16, 336, 0, 128, 0};
  c.m = 256;
  c.n = 384;
  c.out = gemm_sm90::OutType::kFP32;
  expect_case(c, "kgrouped fp8 per-member fp32");
  c.per_member = false;
  c.sizes = {48, 0, 80, 17};
  expect_case(c, "kgrouped fp8 whole ragged");
}

// Empty K-grouped groups (tokens routed to no expert): D = bias + 0·(scales) exactly, the sign
// of zero included. With BF16 D, no bias and positive factors the kernel clears a staging
// buffer and TMA-stores it (rows past a multiple of 8 by plain stores: m = 203); with a bias, a
// negative alpha (-0) or columns past n (n = 264: the last column tile) the general path.
TEST_F(GroupedGemmSm90, KGroupedEmptyGroupsFastZerosAndGeneralPath) {
  Case c;
  c.k_grouped = true;
  c.elem = ElemKind::kE4M3;
  c.scales = 1;
  c.sizes = {0, 48, 0, 0, 32, 0};
  c.m = 203;
  c.n = 264;
  expect_case(c, "kgrouped empty groups, staged zeros");
  c.alpha = -0.5f;
  expect_case(c, "kgrouped empty groups, negative alpha");
  c.alpha = 0.75f;
  c.bias = true;
  expect_case(c, "kgrouped empty groups, bias");
}

// K-grouped groups whose lengths are whole contraction windows (128 FP8, 64 BF16 elements) read
// the whole operands' maps at absolute coordinates, the others their group's maps (zero fill at
// the group end): both kinds of group side by side, mid-tensor starts, ragged last groups, and
// NaN in every token column past the last group (no NaN may reach a sum).
TEST_F(GroupedGemmSm90, KGroupedWholeWindowGroupsBesideRaggedOnes) {
  Case c;
  c.k_grouped = true;
  c.elem = ElemKind::kE4M3;
  c.scales = 1;
  c.sizes = {128, 0, 256, 48, 384, 128, 16};
  c.capacity_pad = 200;
  c.nan_pad = true;  // the last group's tail window reaches into NaN columns
  c.m = 256;
  c.n = 384;
  c.out = gemm_sm90::OutType::kFP32;
  expect_case(c, "kgrouped fp8 whole windows");
  c.elem = ElemKind::kBF16;
  c.scales = 0;
  c.sizes = {64, 192, 0, 40, 128, 24};
  c.out = gemm_sm90::OutType::kBF16;
  expect_case(c, "kgrouped bf16 whole windows");
}

// A K-grouped group whose contraction start is not 16-byte aligned cannot be loaded by TMA: the
// setup kernel flags it and the GEMM writes NaN for that group (never a fault), while the other
// groups stay exact.
TEST_F(GroupedGemmSm90, KGroupedMisalignedGroupIsPoisonedNotFaulted) {
  Case c;
  c.k_grouped = true;
  c.sizes = {16, 13, 32};  // group 2 starts at 29 (58 bytes)
  c.m = 128;
  c.n = 128;
  c.out = gemm_sm90::OutType::kFP32;
  for (bool pingpong : {false, true}) {
    c.pingpong = pingpong;
    const Result r = run_case(c, 99);
    EXPECT_FALSE(r.rel_err < 1e10) << "group 2 must be NaN";
    EXPECT_EQ(r.nan_groups, 1);
    EXPECT_EQ(r.bad_untouched, 0);
  }
}

// The byte transpose of MXFP8 columnwise copies (transpose_16bit.h) against a host loop: batches
// at rows_pad-column offsets with zeros past each matrix's rows, 16-byte chunks (cols % 16 == 0)
// and 4-byte ones (cols % 16 != 0), partial tiles in both dimensions.
TEST(Transpose8bit, MatchesHostTransposeWithZeroPadding) {
  if (!test::has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  struct Shape {
    int64_t batch, rows, cols, rows_pad;
  };
  for (const Shape c : {Shape{3, 37, 80, 48}, Shape{2, 130, 20, 132}, Shape{1, 64, 64, 64}}) {
    const int64_t ld = c.batch * c.rows_pad + 16;  // a wider out: columns past the batches stay
    std::vector<uint8_t> in(static_cast<size_t>(c.batch * c.rows * c.cols));
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 131 + 7);
    const std::vector<uint8_t> fill(static_cast<size_t>(c.cols * ld), 0xAB);
    DeviceArray din(in), dout(fill);
    transpose_8bit(din.ptr, dout.ptr, c.batch, c.rows, c.cols, ld, c.rows_pad, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> out = dout.to_host<uint8_t>();
    for (int64_t col = 0; col < c.cols; ++col)
      for (int64_t j = 0; j < ld; ++j) {
        const int64_t b = j / c.rows_pad, r = j % c.rows_pad;
        const uint8_t want = b >= c.batch ? 0xAB
                             : r < c.rows ? in[static_cast<size_t>((b * c.rows + r) * c.cols + col)]
                                          : 0;
        ASSERT_EQ(out[static_cast<size_t>(col * ld + j)], want)
            << "batch " << c.batch << " rows " << c.rows << " cols " << c.cols << ": out[" << col
            << ", " << j << "]";
      }
    // The matrices one after the other: out (batch, cols, rows_pad).
    const int64_t per = c.cols * c.rows_pad;
    DeviceArray seq(std::vector<uint8_t>(static_cast<size_t>(c.batch * per), 0xAB));
    transpose_8bit(din.ptr, seq.ptr, c.batch, c.rows, c.cols, c.rows_pad, c.rows_pad, nullptr, per);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> got = seq.to_host<uint8_t>();
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t col = 0; col < c.cols; ++col)
        for (int64_t r = 0; r < c.rows_pad; ++r) {
          const uint8_t want =
              r < c.rows ? in[static_cast<size_t>((b * c.rows + r) * c.cols + col)] : 0;
          ASSERT_EQ(got[static_cast<size_t>(b * per + col * c.rows_pad + r)], want)
              << "sequential batch " << b << ": out[" << col << ", " << r << "]";
        }
  }
}

}  // namespace
}  // namespace tessera::gemm_cuda
