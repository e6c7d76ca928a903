// The CUDA grouped GEMM reading an M-grouped A through its own row layout
// (GroupedGemmProblem::a_row_starts), against the same problem on the compact A (bit for bit:
// every tile of a group covers the same group rows either way, and each output row depends on
// its own A row only) and against the FP64 loop of GEMMs (tests/gemm/spread_rows.h: ragged
// groups with empty ones at the start/middle/end, sizes not a multiple of 16, capacity rows,
// aligned and arbitrary starts, A's rows outside the groups poisoned with NaN values, codes and
// scales). Dense BF16/FP16 with every epilogue / schedule / cluster config, and every quantized
// family the CUDA path runs (FP8 tensor, rowwise, block, MXFP8, and NVFP4 / MXFP8 x NVFP4 through
// the BF16 expansion), forward TN and dgrad NN; a_row_starts and offsets on the device and in
// host memory; zero_unused_rows. Skips without an sm_90 GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gemm/gemm_case.h"
#include "gemm/spread_rows.h"
#include "gemm_cuda/gemm_cuda_test_util.h"
#include "tessera/gemm/grouped_gemm.h"

namespace tessera::test {
namespace {

// A host problem copied to the device view by view (dense operands, quantized copies, D, bias,
// group_alpha; group_offsets and a_row_starts too unless `metadata_on_host`).
struct DeviceProblem {
  std::vector<DeviceArray> arrays;
  GroupedGemmProblem problem;
  size_t d_index = 0;

  TensorView copy(const TensorView& v) {
    if (v.data == nullptr) return v;
    const auto* p = static_cast<const uint8_t*>(v.data);
    arrays.emplace_back(std::vector<uint8_t>(p, p + v.nbytes()));
    TensorView out = v;
    out.data = arrays.back().ptr;
    out.device = Device::cuda(0);
    return out;
  }
  GemmOperand copy(const GemmOperand& o) {
    if (!o.is_quantized) return GemmOperand::from_dense(copy(o.dense));
    QuantizedTensorView q = o.quantized;
    q.device = Device::cuda(0);
    for (TensorView* v : {&q.data, &q.scale_inv, &q.columnwise_data, &q.columnwise_scale_inv,
                          &q.amax, &q.columnwise_amax})
      *v = copy(*v);
    return GemmOperand::from_quantized(q, o.columnwise);
  }
  DeviceProblem(const GroupedGemmProblem& host, bool metadata_on_host) : problem(host) {
    arrays.reserve(16);
    problem.a = copy(host.a);
    problem.b = copy(host.b);
    d_index = arrays.size();
    problem.d = copy(host.d);
    problem.bias = copy(host.bias);
    problem.group_alpha = copy(host.group_alpha);
    if (!metadata_on_host) {
      problem.group_offsets = copy(host.group_offsets);
      problem.a_row_starts = copy(host.a_row_starts);
    }
  }
  std::vector<uint8_t> d_bytes() const { return arrays[d_index].to_host<uint8_t>(); }
};

// Runs `host` on the device; D's bytes.
std::vector<uint8_t> run_on_device(const GroupedGemmProblem& host, bool metadata_on_host,
                                   const GroupedGemmConfig& config = {}) {
  DeviceProblem dp(host, metadata_on_host);
  dp.problem.config = config;
  grouped_gemm(dp.problem);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return dp.d_bytes();
}

// D (bytes of a device run) of fixture `f`'s shape against the expectation.
std::string compare_bytes(const GemmFixture& f, const std::vector<uint8_t>& d, const Expected& e,
                          const GemmTolerance& tol) {
  GemmFixture got = copy_of(f);
  got.d.bytes = d;
  got.d.view.data = got.d.bytes.data();
  return compare(got, e, tol);
}

std::vector<int64_t> ragged() { return {0, 37, 130, 0, 300, 9, 1, 0, 64, 0}; }

class CudaARowStarts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  }
};

TEST_F(CudaARowStarts, DenseEqualsCompactUnderEveryConfig) {
  for (DType in : {DType::kBFloat16, DType::kFloat16}) {
    for (bool nn : {false, true}) {
      GemmCase c;
      c.group_rows = ragged();
      c.extra_rows = 40;
      c.n = 264, c.k = 200;
      c.in_dtype = c.out_dtype = in;
      c.transpose_b = !nn;
      c.name = std::string(nn ? "nn_" : "tn_") + dtype_name(in);
      if (nn) {  // dgrad: FP32 D, bias, group alpha, int32 end offsets
        c.out_dtype = DType::kFloat32;
        c.bias = c.group_alpha = true;
        c.alpha = 0.5f;
        c.offsets_format = GroupOffsetsFormat::kEndOffsets;
        c.offsets_dtype = DType::kInt32;
      }
      for (const auto& [align, gap] : {std::pair<int64_t, int64_t>{16, 0}, {1, 50}}) {
        SpreadCase s(c, align, gap, /*with_end=*/align == 16, 11);
        s.compact.problem.zero_unused_rows = s.spread.problem.zero_unused_rows = true;
        const std::string name = c.name + ", align " + std::to_string(align);
        const std::vector<uint8_t> want = run_on_device(s.compact.problem, false);
        EXPECT_EQ(compare_bytes(s.compact, want, loop_of_gemms(s.compact),
                                gemm_tolerance(c.out_dtype, c.k)), "") << name;
        for (bool host : {false, true})
          EXPECT_EQ(run_on_device(s.spread.problem, host), want) << name << " host " << host;
        // Every epilogue and schedule: register stores, ping-pong, 2-CTA clusters.
        std::vector<GroupedGemmConfig> configs(4);
        configs[0].tile_n = 256, configs[0].variant = 1;
        configs[1].tile_n = 128, configs[1].stages = 4;
        configs[2].tile_n = 256, configs[2].cluster_m = 2, configs[2].num_sms = 4;
        configs[3].tile_n = 128, configs[3].cluster_m = 2, configs[3].num_sms = 6;
        for (size_t i = 0; i < configs.size(); ++i)
          EXPECT_EQ(run_on_device(s.spread.problem, false, configs[i]),
                    run_on_device(s.compact.problem, false, configs[i]))
              << name << " config " << i;
      }
    }
  }
}


std::vector<QuantCase> quant_cases() {
  std::vector<QuantCase> cases;
  for (const QuantRecipe& r : quantized_pairs()) {
    if (r.name.rfind("emulated", 0) == 0) continue;  // CPU only
    GemmCase fwd;
    fwd.group_rows = ragged();
    fwd.extra_rows = 24;
    fwd.n = 136, fwd.k = 256;  // K: whole 128-element blocks (FP8 block and MXFP8 dgrad need it)
    fwd.out_dtype = DType::kBFloat16;
    fwd.name = "fwd_tn_" + r.name;
    cases.push_back({fwd.name, fwd, r});
    GemmCase dgrad = fwd;
    dgrad.transpose_b = false;
    dgrad.out_dtype = DType::kFloat32;
    dgrad.name = "dgrad_nn_" + r.name;
    cases.push_back({dgrad.name, dgrad, r});
  }
  return cases;
}

class CudaQuantizedARowStarts : public ::testing::TestWithParam<QuantCase> {
 protected:
  void SetUp() override {
    if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  }
};

TEST_P(CudaQuantizedARowStarts, EqualsCompact) {
  const QuantCase& qc = GetParam();
  for (const auto& [align, gap] : {std::pair<int64_t, int64_t>{16, 0}, {1, 50}}) {
    QuantizedSpread q(qc.gemm, qc.recipe, align, gap);
    q.s.compact.problem.zero_unused_rows = q.s.spread.problem.zero_unused_rows = true;
    const std::string name = qc.name + ", align " + std::to_string(align);
    // can_implement on the device copies (the CUDA path's own rules)
    DeviceProblem compact(q.s.compact.problem, false), spread(q.s.spread.problem, false);
    std::string why_compact, why_spread;
    const Status sc = can_implement(compact.problem, &why_compact);
    ASSERT_EQ(can_implement(spread.problem, &why_spread), sc) << why_spread;
    if (sc != Status::kOk) GTEST_SKIP() << "the CUDA path refuses " << name << ": " << why_compact;
    grouped_gemm(compact.problem);
    grouped_gemm(spread.problem);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> want = compact.d_bytes();
    EXPECT_EQ(spread.d_bytes(), want) << name;
    EXPECT_EQ(run_on_device(q.s.spread.problem, true), want) << name << ", host metadata";
    // The compact run against the FP64 loop on the quantize layer's dequantized operands.
    GemmFixture deq = copy_of(q.s.compact);
    const QuantizedTensorView& qa = q.qa.view();
    const QuantizedTensorView& qb = q.qb.view();
    dequantize(qa, TensorView::contiguous(deq.a.view.data, DType::kFloat32, {qa.rows, qa.cols}),
               false);
    dequantize(qb, TensorView::contiguous(deq.b.view.data, DType::kFloat32, {qb.rows, qb.cols}),
               !qc.gemm.transpose_b);
    GemmTolerance tol = gemm_tolerance(qc.gemm.out_dtype, qc.gemm.k);
    tol.sum_rel = std::max(tol.sum_rel, double((qc.gemm.k + 31) / 32 + 1) * std::exp2(-12.0));
    EXPECT_EQ(compare_bytes(q.s.compact, want, loop_of_gemms(deq), tol), "") << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, CudaQuantizedARowStarts, ::testing::ValuesIn(quant_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// Starts the host cannot check (device metadata) that would put a group's rows past A's end are
// clamped on the device: the GEMM reads inside A (no fault) and writes only D's group rows.
TEST_F(CudaARowStarts, DeviceStartsPastTheEndAreClampedInsideA) {
  GemmCase c;
  c.group_rows = {50, 0, 70};
  c.n = 64, c.k = 64;
  c.in_dtype = c.out_dtype = DType::kBFloat16;
  SpreadCase s(c, 16, 0, false, 1);
  std::vector<int64_t> wild = {-5, 1 << 30, int64_t{1} << 40};
  s.spread.problem.a_row_starts = TensorView::contiguous(wild.data(), DType::kInt64, {3});
  DeviceProblem dp(s.spread.problem, false);  // device starts: never read on the host
  std::string why;
  ASSERT_EQ(can_implement(dp.problem, &why), Status::kOk) << why;
  grouped_gemm(dp.problem);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace tessera::test
