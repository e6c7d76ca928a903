// The public grouped GEMM API (can_implement → workspace_size → run) on the CUDA backend: the same
// generated cases as the CPU tests (tests/gemm/gemm_case.h: ragged groups with empty ones at the
// start/middle/end, capacity rows filled with NaN, poisoned D), copied to the device, run there,
// copied back and compared with the FP64 loop-of-GEMMs oracle under the format's tolerance; plus
// the statuses of what the CUDA path refuses. BF16 and FP16 operands (every case runs with both);
// K-grouped groups with any starts (padded transposes); batched 3D x 3D. Skips without an sm_90
// GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gemm/gemm_backend.h"
#include "gemm/gemm_case.h"
#include "gemm_cuda/gemm_cuda_test_util.h"
#include "tessera/gemm/grouped_gemm.h"

namespace tessera::test {
namespace {

// A device copy of a host view (same shape/dtype); empty views stay empty.
struct DeviceView {
  DeviceArray storage;
  TensorView view;
  explicit DeviceView(const Owned& host) : view(host.view) {
    if (host.view.data == nullptr) return;
    storage = DeviceArray(host.bytes);
    view.data = storage.ptr;
    view.device = Device::cuda(0);
  }
};

struct DeviceProblem {
  DeviceView a, b, d, bias, offsets, group_alpha;
  GroupedGemmProblem problem;
  DeviceProblem(const GemmFixture& f, bool offsets_on_host)
      : a(f.a), b(f.b), d(f.d), bias(f.bias), offsets(f.offsets), group_alpha(f.group_alpha) {
    problem = f.problem;
    problem.a = GemmOperand::from_dense(a.view);
    problem.b = GemmOperand::from_dense(b.view);
    problem.d = d.view;
    if (f.bias.view.data != nullptr) problem.bias = bias.view;
    if (!offsets_on_host) problem.group_offsets = offsets.view;
    if (f.group_alpha.view.data != nullptr) problem.group_alpha = group_alpha.view;
  }
};

GemmCase bf16_case(std::string name, GroupedGemmKind kind, std::vector<int64_t> rows, int64_t m,
                   int64_t n, int64_t k) {
  GemmCase c;
  c.name = std::move(name);
  c.kind = kind;
  c.group_rows = std::move(rows);
  c.m = m;
  c.n = n;
  c.k = k;
  c.in_dtype = DType::kBFloat16;
  c.out_dtype = DType::kBFloat16;
  if (kind == GroupedGemmKind::kKGrouped) {
    c.transpose_a = true;
    c.transpose_b = false;
  }
  return c;
}

std::vector<GemmCase> cuda_cases() {
  std::vector<GemmCase> cases;
  using K = GroupedGemmKind;
  GemmCase tn = bf16_case("m_grouped_tn_ragged_empty_ends", K::kMGrouped, {0, 37, 130, 0, 300, 9, 0},
                          0, 264, 200);
  tn.extra_rows = 40;
  cases.push_back(tn);
  GemmCase nn = bf16_case("m_grouped_nn_dgrad_fp32_beta1_bias_alpha", K::kMGrouped, {64, 0, 200}, 0,
                          136, 72);
  nn.transpose_b = false;
  nn.out_dtype = DType::kFloat32;
  nn.beta = 1.0f;
  nn.bias = true;
  nn.group_alpha = true;
  nn.alpha = 0.5f;
  cases.push_back(nn);
  GemmCase one = bf16_case("m_grouped_one_group_int32_end_offsets", K::kMGrouped, {515}, 0, 128, 64);
  one.offsets_format = GroupOffsetsFormat::kEndOffsets;
  one.offsets_dtype = DType::kInt32;
  cases.push_back(one);
  GemmCase many = bf16_case("m_grouped_1100_groups", K::kMGrouped, {}, 0, 64, 64);
  for (int g = 0; g < 1100; ++g) many.group_rows.push_back(g % 5 == 0 ? 0 : (g * 7) % 23);
  cases.push_back(many);
  GemmCase kg = bf16_case("k_grouped_wgrad_empty_groups_write_zeros", K::kKGrouped,
                          {0, 24, 200, 0, 64, 8, 0}, 136, 264, 0);
  cases.push_back(kg);
  GemmCase kg_acc = bf16_case("k_grouped_wgrad_fp32_beta1_main_grad", K::kKGrouped, {48, 0, 256}, 200,
                              128, 0);
  kg_acc.out_dtype = DType::kFloat32;
  kg_acc.beta = 1.0f;
  kg_acc.offsets_format = GroupOffsetsFormat::kEndOffsets;
  kg_acc.offsets_dtype = DType::kInt32;
  cases.push_back(kg_acc);
  // Group starts that are not multiples of 8 rows (what an unpadded layer passes): the padded
  // transposes (k_grouped_transpose.h) make every group computable.
  GemmCase kg_odd = bf16_case("k_grouped_wgrad_unaligned_starts", K::kKGrouped,
                              {13, 0, 37, 1, 100, 7, 0, 5}, 72, 136, 0);
  kg_odd.extra_rows = 11;
  cases.push_back(kg_odd);
  GemmCase kg_odd_acc = bf16_case("k_grouped_wgrad_unaligned_fp32_beta1_int32_ends",
                                  K::kKGrouped, {3, 250, 0, 9}, 64, 200, 0);
  kg_odd_acc.out_dtype = DType::kFloat32;
  kg_odd_acc.beta = 1.0f;
  kg_odd_acc.offsets_format = GroupOffsetsFormat::kEndOffsets;
  kg_odd_acc.offsets_dtype = DType::kInt32;
  cases.push_back(kg_odd_acc);
  // Batched 3D x 3D: the M-grouped kernel over (G·M, K) with uniform starts; every storage order.
  GemmCase bt;
  bt.name = "batched_tn_bias";
  bt.kind = K::kBatched;
  bt.batch_count = 3;
  bt.m = 100, bt.n = 136, bt.k = 72;
  bt.in_dtype = bt.out_dtype = DType::kBFloat16;
  bt.bias = true;
  cases.push_back(bt);
  GemmCase bn = bt;
  bn.name = "batched_nn_transposed_a_fp32_beta1_alpha";
  bn.bias = false;
  bn.transpose_a = true;
  bn.transpose_b = false;
  bn.out_dtype = DType::kFloat32;
  bn.beta = 1.0f;
  bn.group_alpha = true;
  bn.batch_count = 5;
  bn.m = 200;
  cases.push_back(bn);
  // The same cases with FP16 operands (HGMMA F16 kind; FP16 D where the BF16 case had BF16 D).
  const size_t bf16_count = cases.size();
  for (size_t i = 0; i < bf16_count; ++i) {
    GemmCase h = cases[i];
    h.name = "fp16_" + h.name;
    h.in_dtype = DType::kFloat16;
    if (h.out_dtype == DType::kBFloat16) h.out_dtype = DType::kFloat16;
    cases.push_back(h);
  }
  return cases;
}

int64_t contraction(const GemmCase& c) {
  if (c.kind != GroupedGemmKind::kKGrouped) return c.k;
  int64_t mx = 0;
  for (int64_t r : c.group_rows) mx = std::max(mx, r);
  return mx;
}

class CudaGroupedGemm : public ::testing::TestWithParam<GemmCase> {
 protected:
  void SetUp() override {
    if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  }
};

void run_and_check(const GemmCase& c, bool offsets_on_host) {
  GemmFixture f = make_fixture(c);
  DeviceProblem dp(f, offsets_on_host);
  std::string reason;
  ASSERT_EQ(can_implement(dp.problem, &reason), Status::kOk) << reason;
  grouped_gemm(dp.problem);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  f.d.bytes = dp.d.storage.to_host<uint8_t>();
  f.d.view.data = f.d.bytes.data();
  const Expected e = loop_of_gemms(f);
  EXPECT_EQ(compare(f, e, gemm_tolerance(c.out_dtype, contraction(c))), "");
  EXPECT_EQ(check_untouched(f, e), "");
}

TEST_P(CudaGroupedGemm, EqualsLoopOfSingleGemms) { run_and_check(GetParam(), false); }

TEST_P(CudaGroupedGemm, HostOffsetsAreCopiedNotSynced) { run_and_check(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Cases, CudaGroupedGemm, ::testing::ValuesIn(cuda_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// The TMA-store epilogue (default for BF16 D, beta = 0) and the register-store epilogue
// (config.variant bit 0) write the same bits, under both schedules (tile_n 256: cooperative,
// 128: ping-pong); ragged groups mix both store paths inside one launch.
// Row blocks crossing a group end are staged too (8-row TMA boxes + plain stores for the last
// rows % 8): groups / m with 8 (200), 13 (333), 6 (70), 5 (5, 197) rows in their last block.
TEST(CudaGroupedGemmEpilogue, TmaStoresEqualRegisterStores) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (auto kind : {GroupedGemmKind::kMGrouped, GroupedGemmKind::kKGrouped}) {
    const bool kg = kind == GroupedGemmKind::kKGrouped;
    GemmCase c = bf16_case(kg ? "k_grouped" : "m_grouped", kind,
                           kg ? std::vector<int64_t>{64, 0, 136, 256}
                              : std::vector<int64_t>{0, 200, 64, 0, 333, 70, 5},
                           kg ? 197 : 0, 264, kg ? 0 : 320);
    GemmFixture f = make_fixture(c);
    DeviceProblem tma(f, false), reg(f, false), pp_tma(f, false), pp_tma6(f, false),
        pp_reg(f, false), c2(f, false), pp_c2(f, false);
    reg.problem.config.tile_n = 256;
    reg.problem.config.variant = 1;
    tma.problem.config.tile_n = 256;
    pp_tma.problem.config.tile_n = 128;
    pp_tma.problem.config.stages = 4;  // whole 128-row tile staged (6: one 64-row block reused)

    pp_tma6.problem.config.tile_n = 128;
    pp_tma6.problem.config.stages = 6;

    pp_reg.problem.config.tile_n = 128;
    pp_reg.problem.config.variant = 1;
    for (DeviceProblem* d : {&tma, &reg, &pp_tma, &pp_tma6, &pp_reg}) grouped_gemm(d->problem);
    // Clusters of 2 CTAs, both schedules, on 4 and 6 CTAs. K-grouped: run where the launch
    // reads K-major operands (its B rows multicast), refused with a reason on MN-major ones.
    c2.problem.config.tile_n = 256;
    c2.problem.config.cluster_m = 2;
    c2.problem.config.num_sms = 4;
    pp_c2.problem.config.tile_n = 128;
    pp_c2.problem.config.cluster_m = 2;
    pp_c2.problem.config.num_sms = 6;
    bool clusters_ran = true;
    try {
      grouped_gemm(c2.problem);
      grouped_gemm(pp_c2.problem);
    } catch (const Error& e) {
      clusters_ran = false;
      EXPECT_TRUE(kg) << c.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("MN-major"), std::string::npos) << e.what();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto want = reg.d.storage.to_host<uint8_t>();
    EXPECT_EQ(tma.d.storage.to_host<uint8_t>(), want) << c.name;
    EXPECT_EQ(pp_tma.d.storage.to_host<uint8_t>(), want) << c.name << " ping-pong";
    EXPECT_EQ(pp_tma6.d.storage.to_host<uint8_t>(), want) << c.name << " ping-pong, 6 stages";
    EXPECT_EQ(pp_reg.d.storage.to_host<uint8_t>(), want) << c.name << " ping-pong, registers";
    if (clusters_ran) {
      EXPECT_EQ(c2.d.storage.to_host<uint8_t>(), want) << c.name << " cluster 2";
      EXPECT_EQ(pp_c2.d.storage.to_host<uint8_t>(), want) << c.name << " ping-pong, cluster 2";
    }
  }
}

// select_grouped_gemm_config's choice, passed back as problem.config, gives the same launch (the
// same bits as the heuristic's own run, and the same config selected back); fields the sm90
// kernel does not take are refused by can_implement, naming the field.
TEST(CudaGroupedGemmConfig, HeuristicChoiceRoundTripsAndUnusedValuesAreRefused) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (auto kind : {GroupedGemmKind::kMGrouped, GroupedGemmKind::kKGrouped}) {
    const bool kg = kind == GroupedGemmKind::kKGrouped;
    GemmCase c = bf16_case(kg ? "k_grouped" : "m_grouped", kind,
                           kg ? std::vector<int64_t>{64, 0, 1536, 2048}
                              : std::vector<int64_t>{0, 2000, 64, 1500},
                           kg ? 197 : 0, 1024, kg ? 0 : 512);
    GemmFixture f = make_fixture(c);
    DeviceProblem heuristic(f, false), chosen(f, false);
    const GroupedGemmConfig cfg = select_grouped_gemm_config(heuristic.problem);
    EXPECT_FALSE(cfg.is_default());
    chosen.problem.config = cfg;
    const GroupedGemmConfig again = select_grouped_gemm_config(chosen.problem);
    EXPECT_EQ(again.tile_n, cfg.tile_n);
    EXPECT_EQ(again.stages, cfg.stages);
    EXPECT_EQ(again.raster_band, cfg.raster_band);
    grouped_gemm(heuristic.problem);
    grouped_gemm(chosen.problem);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(chosen.d.storage.to_host<uint8_t>(), heuristic.d.storage.to_host<uint8_t>())
        << c.name;
    std::string reason;
    DeviceProblem bad(f, false);
    bad.problem.config = cfg;
    bad.problem.config.tile_m = 64;
    EXPECT_EQ(can_implement(bad.problem, &reason), Status::kUnsupported);
    EXPECT_NE(reason.find("config.tile_m"), std::string::npos) << reason;
    bad.problem.config = cfg;
    bad.problem.config.tile_k = 32;
    EXPECT_EQ(can_implement(bad.problem, &reason), Status::kUnsupported);
    EXPECT_NE(reason.find("config.tile_k"), std::string::npos) << reason;
    bad.problem.config = cfg;
    bad.problem.config.variant = 2;
    EXPECT_EQ(can_implement(bad.problem, &reason), Status::kUnsupported);
    EXPECT_NE(reason.find("config.variant"), std::string::npos) << reason;
  }
}

TEST(CudaGroupedGemmStatus, RefusesWhatTheSm90PathCannotRun) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  // FP32 operands: the CUDA path takes BF16 or FP16.
  GemmCase fp32 = bf16_case("fp32_operands", GroupedGemmKind::kMGrouped, {8}, 0, 16, 16);
  fp32.in_dtype = DType::kFloat32;
  GemmFixture f = make_fixture(fp32);
  DeviceProblem dp(f, false);
  std::string reason;
  EXPECT_EQ(can_implement(dp.problem, &reason), Status::kUnsupported);
  EXPECT_NE(reason.find("both BF16 or both FP16"), std::string::npos) << reason;
  // BF16 x FP16: no mixed 16-bit kind.
  GemmCase mixed = bf16_case("bf16_x_fp16", GroupedGemmKind::kMGrouped, {8}, 0, 16, 16);
  GemmFixture mf = make_fixture(mixed);
  GemmCase mixed_b = mixed;
  mixed_b.in_dtype = DType::kFloat16;
  GemmFixture mbf = make_fixture(mixed_b);
  DeviceProblem dm(mf, false), dmb(mbf, false);
  dm.problem.b = dmb.problem.b;
  EXPECT_EQ(can_implement(dm.problem, &reason), Status::kUnsupported);
  EXPECT_NE(reason.find("both BF16 or both FP16"), std::string::npos) << reason;
  // K-grouped host offsets with a start that is not a multiple of 8 rows: accepted now (padded
  // transposes).
  GemmCase kg = bf16_case("k_grouped_misaligned", GroupedGemmKind::kKGrouped, {13, 8}, 16, 16, 0);
  GemmFixture g = make_fixture(kg);
  DeviceProblem dg(g, true);
  EXPECT_EQ(can_implement(dg.problem, &reason), Status::kOk) << reason;
  // N not a multiple of 8.
  GemmCase odd = bf16_case("odd_n", GroupedGemmKind::kMGrouped, {8}, 0, 12, 16);
  GemmFixture h = make_fixture(odd);
  DeviceProblem dh(h, false);
  EXPECT_EQ(can_implement(dh.problem, &reason), Status::kUnsupported);
}

}  // namespace
}  // namespace tessera::test

namespace tessera::test {
namespace {

// zero_unused_rows: D's rows past the last group's end become zeros (written by the GEMM kernel
// from the offsets it reads on the device, host or device offsets alike), every other byte equals
// the run without it, and a D with no unused rows is left as the plain run writes it. BF16 and
// FP32 D; int32 end and int64 start offsets; empty trailing groups; a tail of more rows than the
// kernel has warps (each warp then zeroes several rows); a K-grouped problem refuses the flag.
TEST(CudaGroupedGemmZeroUnusedRows, TailRowsZeroedRestUnchanged) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (DType out : {DType::kBFloat16, DType::kFloat32}) {
    for (int64_t extra : {int64_t{0}, int64_t{1}, int64_t{40}, int64_t{2500}}) {
      GemmCase c = bf16_case("zero_unused", GroupedGemmKind::kMGrouped, {0, 37, 130, 0, 21, 0},
                             0, 264, 200);
      c.out_dtype = out;
      c.extra_rows = extra;
      // int32 end offsets on one pass, int64 start offsets (G + 1 entries) on the others
      c.offsets_dtype = extra == 1 ? DType::kInt32 : DType::kInt64;
      c.offsets_format = extra == 1 ? GroupOffsetsFormat::kEndOffsets
                                    : GroupOffsetsFormat::kStartOffsets;
      const GemmFixture f = make_fixture(c);
      const int64_t live = 37 + 130 + 21, rows = live + extra;
      const int64_t row_bytes = 264 * static_cast<int64_t>(dtype_bytes(out, 1));
      for (bool host_offsets : {false, true}) {
        DeviceProblem plain(f, host_offsets), zeroed(f, host_offsets);
        zeroed.problem.zero_unused_rows = true;
        grouped_gemm(plain.problem);
        grouped_gemm(zeroed.problem);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto want = plain.d.storage.to_host<uint8_t>();
        const auto got = zeroed.d.storage.to_host<uint8_t>();
        ASSERT_EQ(static_cast<int64_t>(got.size()), rows * row_bytes);
        const auto split = static_cast<size_t>(live * row_bytes);
        EXPECT_TRUE(std::equal(got.begin(), got.begin() + split, want.begin()))
            << dtype_name(out) << " extra " << extra << " host offsets " << host_offsets;
        for (size_t i = split; i < got.size(); ++i) {
          ASSERT_EQ(got[i], 0) << "byte " << i << " of a row past the groups, " << dtype_name(out)
                               << " extra " << extra << " host offsets " << host_offsets;
        }
        if (extra > 0) {  // the plain run leaves them as they were (the poison)
          EXPECT_TRUE(std::equal(want.begin() + split, want.end(), f.d_initial.begin() + split));
        }
      }
    }
  }
  GemmCase kg = bf16_case("k_grouped", GroupedGemmKind::kKGrouped, {64, 0, 32}, 16, 24, 0);
  const GemmFixture f = make_fixture(kg);
  DeviceProblem d(f, false);
  d.problem.zero_unused_rows = true;
  std::string reason;
  EXPECT_EQ(can_implement(d.problem, &reason), Status::kInvalidArgument);
  EXPECT_NE(reason.find("zero_unused_rows"), std::string::npos) << reason;
}

}  // namespace
}  // namespace tessera::test
