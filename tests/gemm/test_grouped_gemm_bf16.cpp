// BF16 × BF16 on the CPU backend: the native path (oneDNN, where this build and CPU have it) and
// the FP32 path (convert, then oneDNN's FP32 matmul or sgemm; forced through the test hooks) each
// against the FP64 loop of single GEMMs, and against each other, over cases that cut D into many tasks: groups past 256
// rows with ragged tails, K not a multiple of 32, empty groups at the start / middle / end, every
// kind and layout, FP32 / BF16 / FP16 D, beta = 1 (main_grad), bias, per-group alpha, capacity
// rows (NaN in A/B, a byte pattern in D that must stay untouched).
#include <gtest/gtest.h>

#include <algorithm>

#include "gemm/cpu/bf16_gemm.h"
#include "gemm/gemm_case.h"
#include "tessera/config.h"

namespace tessera::test {
namespace {

// Sets the native-path switch for one scope.
class NativeAllowed {
 public:
  explicit NativeAllowed(bool allowed) : previous_(detail::cpu::set_bf16_native_allowed(allowed)) {}
  ~NativeAllowed() { detail::cpu::set_bf16_native_allowed(previous_); }
  NativeAllowed(const NativeAllowed&) = delete;
  NativeAllowed& operator=(const NativeAllowed&) = delete;

 private:
  bool previous_;
};

// Sets the FP32 path's GEMM form (oneDNN's FP32 matmul or sgemm) for one scope.
class Fp32OneDnnAllowed {
 public:
  explicit Fp32OneDnnAllowed(bool allowed)
      : previous_(detail::cpu::set_fp32_onednn_allowed(allowed)) {}
  ~Fp32OneDnnAllowed() { detail::cpu::set_fp32_onednn_allowed(previous_); }
  Fp32OneDnnAllowed(const Fp32OneDnnAllowed&) = delete;
  Fp32OneDnnAllowed& operator=(const Fp32OneDnnAllowed&) = delete;

 private:
  bool previous_;
};

enum class Path { kNative, kFp32OneDnn, kFp32Sgemm };

const char* path_name(Path p) {
  return p == Path::kNative ? "native path" : (p == Path::kFp32OneDnn ? "FP32 path, oneDNN"
                                                                      : "FP32 path, sgemm");
}

GemmCase bf16_case(std::string name, GroupedGemmKind kind, DType out) {
  GemmCase c;
  c.name = std::move(name);
  c.kind = kind;
  c.in_dtype = DType::kBFloat16;
  c.out_dtype = out;
  if (kind == GroupedGemmKind::kKGrouped) c.transpose_a = true, c.transpose_b = false;
  return c;
}

// Groups: empty first, two past 256 rows with ragged tails, empty middle, a 1-row one, empty last.
const std::vector<int64_t> kRagged = {0, 300, 517, 0, 64, 1, 0};

void add_m_grouped(std::vector<GemmCase>& cases) {
  GemmCase c = bf16_case("m_grouped_tn_ragged_k1031_bf16", GroupedGemmKind::kMGrouped,
                         DType::kBFloat16);
  c.group_rows = kRagged;
  c.extra_rows = 9;
  c.n = 96, c.k = 1031;
  cases.push_back(c);
  c.name = "m_grouped_nn_ragged_k1031_end_offsets_bf16";
  c.transpose_b = false;
  c.offsets_format = GroupOffsetsFormat::kEndOffsets;
  c.offsets_dtype = DType::kInt32;
  cases.push_back(c);
  c.name = "m_grouped_tn_ragged_to_fp32";
  c.transpose_b = true;
  c.out_dtype = DType::kFloat32;
  c.n = 72, c.k = 200;
  cases.push_back(c);
  c.name = "m_grouped_tn_ragged_bias_group_alpha_bf16";
  c.out_dtype = DType::kBFloat16;
  c.bias = true;
  c.group_alpha = true;
  c.alpha = 0.75f;
  cases.push_back(c);
  c.name = "m_grouped_nn_ragged_beta1_bias_fp32";
  c.transpose_b = false;
  c.out_dtype = DType::kFloat32;
  c.beta = 1.0f;
  c.group_alpha = false;
  c.alpha = 1.0f;
  cases.push_back(c);
  c.name = "m_grouped_tn_ragged_to_fp16";
  c.transpose_b = true;
  c.out_dtype = DType::kFloat16;
  c.beta = 0.0f;
  c.bias = false;
  cases.push_back(c);
  c = bf16_case("m_grouped_tn_1group_small", GroupedGemmKind::kMGrouped, DType::kBFloat16);
  c.group_rows = {5};
  c.n = 35, c.k = 53;
  cases.push_back(c);
}

void add_k_grouped(std::vector<GemmCase>& cases) {
  GemmCase w = bf16_case("k_grouped_nt_ragged_m300_bf16", GroupedGemmKind::kKGrouped,
                         DType::kBFloat16);
  w.group_rows = {0, 77, 0, 600, 1, 0};  // enough work for the threads to share (a team)
  w.extra_rows = 4;
  w.m = 300, w.n = 400;
  cases.push_back(w);
  w.name = "k_grouped_nt_ragged_beta1_main_grad";
  w.out_dtype = DType::kFloat32;
  w.beta = 1.0f;
  cases.push_back(w);
  w.name = "k_grouped_nt_ragged_alpha_beta1_main_grad";
  w.alpha = -0.5f;
  cases.push_back(w);
  w.name = "k_grouped_nt_ragged_to_fp32";
  w.alpha = 1.0f;
  w.beta = 0.0f;
  cases.push_back(w);
}

void add_batched(std::vector<GemmCase>& cases) {
  for (int layout = 0; layout < 4; ++layout) {
    const bool ta = layout & 1, tb = layout & 2;
    GemmCase b = bf16_case(std::string("batched_") + (ta ? "t" : "n") + (tb ? "t" : "n") +
                               "_m270_k45_bf16",
                           GroupedGemmKind::kBatched, DType::kBFloat16);
    b.batch_count = 3;
    b.m = 270, b.n = 33, b.k = 45;
    b.transpose_a = ta, b.transpose_b = tb;
    b.bias = layout == 3;
    cases.push_back(b);
  }
}

std::vector<GemmCase> bf16_cases() {
  std::vector<GemmCase> cases;
  add_m_grouped(cases);
  add_k_grouped(cases);
  add_batched(cases);
  return cases;
}

int64_t contraction(const GemmCase& c) {
  if (c.kind != GroupedGemmKind::kKGrouped) return c.k;
  return *std::max_element(c.group_rows.begin(), c.group_rows.end());
}

// Runs the case on one path; D compared with the oracle, untouched bytes checked.
GemmFixture run_on_path(const GemmCase& c, Path path, const Expected& e) {
  const NativeAllowed native(path == Path::kNative);
  const Fp32OneDnnAllowed onednn(path == Path::kFp32OneDnn);
  GemmFixture f = make_fixture(c);
  std::string reason;
  EXPECT_EQ(can_implement(f.problem, &reason), Status::kOk) << reason;
  grouped_gemm(f.problem);
  EXPECT_EQ(compare(f, e, gemm_tolerance(c.out_dtype, contraction(c))), "") << path_name(path);
  EXPECT_EQ(check_untouched(f, e), "") << path_name(path);
  return f;
}

class Bf16Gemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(Bf16Gemm, NativeAndFp32PathsEqualLoopOfGemms) {
  const GemmCase& c = GetParam();
  const Expected e = loop_of_gemms(make_fixture(c));
  const GemmFixture native = run_on_path(c, Path::kNative, e);
  const GemmFixture fp32 = run_on_path(c, Path::kFp32Sgemm, e);
  const GemmFixture fp32_onednn = run_on_path(c, Path::kFp32OneDnn, e);
  // The paths against the sgemm form: both rounded, so twice the output-rounding budget.
  Expected from_fp32 = e;
  for (size_t i = 0; i < e.value.size(); ++i) {
    if (e.written[i]) from_fp32.value[i] = d_value(fp32.d.view, static_cast<int64_t>(i));
  }
  const GemmTolerance tol = gemm_tolerance(c.out_dtype, contraction(c));
  EXPECT_EQ(compare(native, from_fp32, {2 * tol.value_rel, tol.sum_rel}), "");
  EXPECT_EQ(compare(fp32_onednn, from_fp32, {2 * tol.value_rel, tol.sum_rel}), "");
}

INSTANTIATE_TEST_SUITE_P(Cases, Bf16Gemm, ::testing::ValuesIn(bf16_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(Bf16GemmPath, NativeWhereTheBuildAndCpuHaveIt) {
  const detail::cpu::Bf16Support& s = detail::cpu::bf16_support();
  std::printf("CPU BF16 GEMM path: %s\n", cpu_bf16_gemm_path().c_str());
#if TESSERA_WITH_ONEDNN && (defined(__x86_64__) || defined(__i386__))
  if (__builtin_cpu_supports("avx512bf16")) {
    EXPECT_TRUE(s.native) << s.description;
  }
#endif
  EXPECT_EQ(s.native, cpu_bf16_gemm_path().rfind("onednn", 0) == 0) << cpu_bf16_gemm_path();
  const NativeAllowed fp32(false);
  {
    const Fp32OneDnnAllowed sgemm(false);
    EXPECT_EQ(cpu_bf16_gemm_path().rfind("fp32 sgemm (", 0), 0u) << cpu_bf16_gemm_path();
  }
  const Fp32OneDnnAllowed onednn(true);
  const bool built = detail::cpu::built_with_onednn();
  EXPECT_EQ(cpu_bf16_gemm_path().rfind(built ? "fp32 onednn matmul (" : "fp32 sgemm (", 0), 0u)
      << cpu_bf16_gemm_path();
}

TEST(Bf16GemmPath, WorkspaceIsTheStagingAreaOnlyWhenOurEpilogueRuns) {
  if (!detail::cpu::bf16_support().native) GTEST_SKIP() << detail::cpu::bf16_support().description;
  GemmCase c = bf16_case("ws", GroupedGemmKind::kMGrouped, DType::kBFloat16);
  c.group_rows = {4, 0, 9};
  c.extra_rows = 6;
  c.n = 16, c.k = 24;
  EXPECT_EQ(workspace_size(make_fixture(c).problem), 0);  // oneDNN writes the BF16 D itself
  c.bias = true;  // FP32 staging of D's capacity rows: 19 × 16, 256-aligned
  EXPECT_EQ(workspace_size(make_fixture(c).problem), (19 * 16 * 4 + 255) / 256 * 256);
}

}  // namespace
}  // namespace tessera::test
