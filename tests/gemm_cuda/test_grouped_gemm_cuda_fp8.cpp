// FP8 (E4M3) quantized operands through the PUBLIC grouped GEMM API on the CUDA backend:
// forward (M-grouped TN: A and B rowwise), dgrad (M-grouped NN: B's transposed columnwise copy)
// and wgrad (K-grouped: both transposed columnwise copies), with rowwise and per-tensor (shared
// or per-group) scales, ragged groups with empty ones at the start/middle/end, capacity rows,
// poisoned D. Operands are quantized on the host by a plain loop following the data model of
// quantize/types.h (scale = 448 / amax, scale_inv stored, columnwise copy = rowwise quantization
// of the transpose), copied to the device; the oracle is a loop of FP64 GEMMs on the
// dequantized copy each operand reads, compared per element with gemm_tolerance (the operands
// are exact, so only FP32 accumulation and output rounding remain). Plus the statuses of what
// the FP8 path refuses. A second test quantizes with tessera's own CPU Quantizer (rowwise and
// per-tensor, both usages) and checks forward, dgrad and wgrad against an FP64 loop over the
// quantize layer's dequantize() of each copy read, also with E5M2 gradients (the HYBRID recipes'
// E5M2 x E4M3 dgrad and wgrad). Skips without an sm_90 GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gemm/gemm_case.h"
#include "gemm/cuda/quantized_operands.h"
#include "gemm/gemm_backend.h"
#include "gemm_cuda/gemm_cuda_test_util.h"
#include "tessera/formats/codecs.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::test {
namespace {

constexpr float kE4M3Max = 448.0f;

// A logical (rows, cols) matrix quantized on the host, both copies, plus their dequantized values
// in the logical orientation. Scales: kRowwise one per stored row; kTensor one per group
// (`group_of_row` maps a logical row to its group) or one shared (groups = 1).
struct HostQuantized {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> data, cdata;     // (rows, cols), transposed (cols, rows)
  std::vector<float> scale, cscale;     // scale_inv of each copy
  std::vector<double> deq, cdeq;        // (rows, cols) logical, from each copy
};

float scale_for(float amax) { return amax > 0.0f && std::isfinite(amax) ? kE4M3Max / amax : 1.0f; }

// Quantizes x (rows, cols) row by row into codes/scale_inv; `block_of(r)` says which scale row r
// uses (r itself for rowwise, its group for per-tensor).
void quantize_rows(const std::vector<float>& x, int64_t rows, int64_t cols,
                   const std::vector<int64_t>& block_of, int64_t blocks, std::vector<uint8_t>& q,
                   std::vector<float>& scale_inv, std::vector<double>& deq) {
  std::vector<float> amax(blocks, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      amax[block_of[r]] = std::max(amax[block_of[r]], std::fabs(x[r * cols + c]));
  scale_inv.assign(blocks, 1.0f);
  std::vector<float> scale(blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    scale[b] = scale_for(amax[b]);
    scale_inv[b] = 1.0f / scale[b];
  }
  q.assign(rows * cols, 0);
  deq.assign(rows * cols, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t code = formats::encode_e4m3(x[r * cols + c] * scale[block_of[r]]);
      q[r * cols + c] = code;
      deq[r * cols + c] = double(formats::decode_e4m3(code)) * scale_inv[block_of[r]];
    }
}

// `group_rows`: logical rows per group (per-tensor scales per group); empty = one shared scale.
HostQuantized quantize(const std::vector<float>& x, int64_t rows, int64_t cols, bool rowwise_mode,
                       const std::vector<int64_t>& group_of_row, int64_t groups) {
  HostQuantized h;
  h.rows = rows, h.cols = cols;
  std::vector<int64_t> id(std::max(rows, cols));
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<int64_t>(i);
  if (rowwise_mode) {
    quantize_rows(x, rows, cols, id, rows, h.data, h.scale, h.deq);
  } else {
    quantize_rows(x, rows, cols, group_of_row, groups, h.data, h.scale, h.deq);
  }
  // Columnwise: the rowwise quantization of xᵀ (cols, rows); per-tensor scales per logical group.
  std::vector<float> xt(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
  std::vector<double> deq_t;
  if (rowwise_mode) {
    quantize_rows(xt, cols, rows, id, cols, h.cdata, h.cscale, deq_t);
  } else {  // per-tensor per group: amax over the group's logical rows = the same blocks
    h.cdata.resize(rows * cols);
    h.cscale = h.scale;
    deq_t.resize(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t g = group_of_row[r];
        const uint8_t code = formats::encode_e4m3(x[r * cols + c] / h.scale[g]);
        h.cdata[c * rows + r] = code;
        deq_t[c * rows + r] = double(formats::decode_e4m3(code)) * h.scale[g];
      }
  }
  h.cdeq.assign(rows * cols, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) h.cdeq[r * cols + c] = deq_t[c * rows + r];
  return h;
}

// The device copy of a HostQuantized and its QuantizedTensorView.
struct DeviceQuantized {
  DeviceArray data, cdata, scale, cscale;
  QuantizedTensorView view;
  DeviceQuantized(const HostQuantized& h, bool rowwise_mode)
      : data(h.data), cdata(h.cdata), scale(h.scale), cscale(h.cscale) {
    const Device dev = Device::cuda(0);
    view.config.mode = rowwise_mode ? ScalingMode::kRowwise : ScalingMode::kTensor;
    view.config.element = DType::kFloat8E4M3;
    view.config.columnwise = true;
    view.rows = h.rows, view.cols = h.cols;
    view.device = dev;
    view.data = TensorView::contiguous(data.ptr, DType::kFloat8E4M3, {h.rows, h.cols}, dev);
    view.columnwise_data = TensorView::contiguous(cdata.ptr, DType::kFloat8E4M3, {h.cols, h.rows}, dev);
    const int64_t ns = static_cast<int64_t>(h.scale.size()), nc = static_cast<int64_t>(h.cscale.size());
    view.scale_inv = TensorView::contiguous(scale.ptr, DType::kFloat32, {ns, 1}, dev);
    view.columnwise_scale_inv = TensorView::contiguous(cscale.ptr, DType::kFloat32, {nc, 1}, dev);
  }
};

enum class Pass { kForward, kDgrad, kWgrad };

struct Fp8Case {
  std::string name;
  Pass pass = Pass::kForward;
  bool rowwise = true;         // kRowwise, else kTensor
  bool shared_scale = false;   // kTensor: one scale for all groups
  std::vector<int64_t> rows;   // tokens per group
  int64_t extra = 0;           // capacity rows past the last group
  int64_t m = 0, n = 0, k = 0; // forward/dgrad: n, k (contraction); wgrad: m, n
  DType out = DType::kBFloat16;
  float beta = 0.0f;
  bool bias = false, int32_end_offsets = false, host_offsets = false;
};

void PrintTo(const Fp8Case& c, std::ostream* os) { *os << c.name; }

std::vector<float> random_values(int64_t count, std::mt19937& rng, float spread) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = nd(rng) * std::exp2(spread * ud(rng));  // rows of different magnitudes
  return v;
}

// Group of every token row (rows past the groups: the last group, their values are unused).
std::vector<int64_t> token_groups(const std::vector<int64_t>& start, int64_t cap) {
  const int64_t g_count = static_cast<int64_t>(start.size()) - 1;
  std::vector<int64_t> of(cap, g_count - 1);
  for (int64_t g = 0; g < g_count; ++g)
    for (int64_t r = start[g]; r < start[g + 1]; ++r) of[r] = g;
  return of;
}

// Runs one case; returns "" or the first failure.
std::string run_case(const Fp8Case& c) {
  std::mt19937 rng(97);
  const int64_t groups = static_cast<int64_t>(c.rows.size());
  std::vector<int64_t> start(groups + 1, 0);
  for (int64_t g = 0; g < groups; ++g) start[g + 1] = start[g] + c.rows[g];
  const int64_t cap = start[groups] + c.extra;
  const bool wgrad = c.pass == Pass::kWgrad;
  const int64_t scale_groups = c.shared_scale ? 1 : groups;
  const std::vector<int64_t> tok_of = token_groups(start, cap);  // group of each token row
  std::vector<int64_t> tok_group = tok_of;                          // its scale slot
  if (c.shared_scale) tok_group.assign(cap, 0);
  // A: forward/dgrad (T, K) tokens; wgrad (T, M). B: forward (G·N, K), dgrad (G·K, N), wgrad (T, N).
  const int64_t a_cols = wgrad ? c.m : c.k;
  const int64_t b_rows = wgrad ? cap : groups * (c.pass == Pass::kForward ? c.n : c.k);
  const int64_t b_cols = wgrad ? c.n : (c.pass == Pass::kForward ? c.k : c.n);
  const int64_t b_per_group = wgrad ? 0 : b_rows / groups;
  std::vector<int64_t> b_group(b_rows);
  for (int64_t r = 0; r < b_rows; ++r)
    b_group[r] = c.shared_scale ? 0 : (wgrad ? tok_group[r] : r / b_per_group);
  // Each group's values get their own magnitude, so a scale or row read from the wrong group
  // shows as an O(|D|) error.
  auto group_gain = [](int64_t g) { return std::exp2(float(g % 5) - 2.0f); };
  std::vector<float> a_vals = random_values(cap * a_cols, rng, 4.0f);
  for (int64_t r = 0; r < cap; ++r)
    for (int64_t i = 0; i < a_cols; ++i) a_vals[r * a_cols + i] *= group_gain(tok_of[r]);
  std::vector<float> b_vals = random_values(b_rows * b_cols, rng, 4.0f);
  for (int64_t r = 0; r < b_rows; ++r) {
    const int64_t g = wgrad ? tok_of[r] : r / b_per_group;
    for (int64_t i = 0; i < b_cols; ++i) b_vals[r * b_cols + i] *= group_gain(g + 1);
  }
  const HostQuantized ha = quantize(a_vals, cap, a_cols, c.rowwise, tok_group, scale_groups);
  const HostQuantized hb = quantize(b_vals, b_rows, b_cols, c.rowwise, b_group, scale_groups);
  DeviceQuantized da(ha, c.rowwise), db(hb, c.rowwise);

  // D: forward/dgrad (cap, N); wgrad (G, M, N). Poisoned (beta 0) or random (beta 1).
  const int64_t d_rows = wgrad ? groups * c.m : cap, d_cols = c.n;
  const int eb = c.out == DType::kFloat32 ? 4 : 2;
  std::vector<uint8_t> d_init(d_rows * d_cols * eb, 0x7f);
  std::vector<double> d_old(d_rows * d_cols, 0.0);
  if (c.beta != 0.0f) {
    std::vector<float> v = random_values(d_rows * d_cols, rng, 0.0f);
    std::memcpy(d_init.data(), v.data(), d_init.size());
    for (size_t i = 0; i < v.size(); ++i) d_old[i] = v[i];
  }
  DeviceArray d(d_init);
  std::vector<float> bias_h = random_values(groups * c.n, rng, 0.0f);
  DeviceArray bias(bias_h);
  std::vector<int64_t> off64(start);
  std::vector<int32_t> off32(start.begin() + 1, start.end());
  DeviceArray offsets = c.int32_end_offsets ? DeviceArray(off32) : DeviceArray(off64);

  GroupedGemmProblem p;
  p.kind = wgrad ? GroupedGemmKind::kKGrouped : GroupedGemmKind::kMGrouped;
  p.num_groups = groups;
  p.transpose_a = wgrad;
  p.transpose_b = c.pass == Pass::kForward;
  p.a = GemmOperand::from_quantized(da.view, wgrad);
  p.b = GemmOperand::from_quantized(db.view, c.pass != Pass::kForward);
  const Device dev = Device::cuda(0);
  p.d = wgrad ? TensorView::contiguous(d.ptr, c.out, {groups, c.m, c.n}, dev)
              : TensorView::contiguous(d.ptr, c.out, {cap, c.n}, dev);
  if (c.int32_end_offsets) {
    p.offsets_format = GroupOffsetsFormat::kEndOffsets;
    p.group_offsets = TensorView::contiguous(offsets.ptr, DType::kInt32, {groups}, dev);
  } else if (c.host_offsets) {
    p.group_offsets = TensorView::contiguous(off64.data(), DType::kInt64, {groups + 1});
  } else {
    p.group_offsets = TensorView::contiguous(offsets.ptr, DType::kInt64, {groups + 1}, dev);
  }
  if (c.bias) p.bias = TensorView::contiguous(bias.ptr, DType::kFloat32, {groups, c.n}, dev);
  p.beta = c.beta;
  std::string reason;
  const Status st = can_implement(p, &reason);
  if (st != Status::kOk) return "can_implement: " + reason;
  grouped_gemm(p);
  cuda_ok(cudaDeviceSynchronize(), "sync");
  const std::vector<uint8_t> got_bytes = d.to_host<uint8_t>();

  // Oracle on the dequantized copies each operand reads.
  const std::vector<double>& A = wgrad ? ha.cdeq : ha.deq;
  const std::vector<double>& B = c.pass == Pass::kForward ? hb.deq : hb.cdeq;
  // FP8 wgmma adds each k32 step into the FP32 accumulator with a shortened alignment (~13-14
  // bits kept; torch's use_fast_accum, measured on the H200: 0.2% of |D| at K = 400). The
  // accumulation term of the budget is therefore (k/32 + 1) · 2^-12 of the magnitudes summed
  // (K = 400: 3.4e-3), still far below the O(|D|) error of a wrong element, or of a wrong scale
  // or group (the groups' magnitudes differ by powers of 2).
  const int64_t kk_max = wgrad ? cap : c.k;
  GemmTolerance tol = gemm_tolerance(c.out, kk_max);
  tol.sum_rel = std::max(tol.sum_rel, double((kk_max + 31) / 32 + 1) * std::exp2(-12.0));
  auto value_at = [&](int64_t i) {
    if (c.out == DType::kFloat32) { float f; std::memcpy(&f, &got_bytes[i * 4], 4); return double(f); }
    uint16_t h; std::memcpy(&h, &got_bytes[i * 2], 2);
    return double(bf16{h}.to_float());
  };
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t out_rows = wgrad ? c.m : c.rows[g];
    for (int64_t r = 0; r < out_rows; ++r)
      for (int64_t n = 0; n < c.n; ++n) {
        double sum = 0, abs_sum = 0;
        const int64_t kk = wgrad ? c.rows[g] : c.k;
        for (int64_t k = 0; k < kk; ++k) {
          double av, bv;
          if (wgrad) { av = A[(start[g] + k) * c.m + r]; bv = B[(start[g] + k) * c.n + n]; }
          else if (c.pass == Pass::kForward) { av = A[(start[g] + r) * c.k + k]; bv = B[(g * c.n + n) * c.k + k]; }
          else { av = A[(start[g] + r) * c.k + k]; bv = B[(g * c.k + k) * c.n + n]; }
          sum += av * bv;
          abs_sum += std::fabs(av * bv);
        }
        const int64_t i = wgrad ? (g * c.m + r) * c.n + n : (start[g] + r) * c.n + n;
        if (c.bias) { sum += bias_h[g * c.n + n]; abs_sum += std::fabs(bias_h[g * c.n + n]); }
        sum += c.beta * d_old[i];
        abs_sum += std::fabs(c.beta * d_old[i]);
        const double v = value_at(i);
        if (!(std::fabs(v - sum) <= tol.value_rel * std::fabs(sum) + tol.sum_rel * abs_sum))
          return c.name + ": D[" + std::to_string(i / c.n) + ", " + std::to_string(n) + "] = " +
                 std::to_string(v) + ", expected " + std::to_string(sum);
      }
  }
  if (!wgrad) {  // rows past the last group: untouched
    for (int64_t i = start[groups] * c.n * eb; i < static_cast<int64_t>(got_bytes.size()); ++i)
      if (got_bytes[i] != d_init[i]) return c.name + ": a capacity row of D was written";
  }
  return "";
}

std::vector<Fp8Case> cases() {
  std::vector<Fp8Case> v;
  const std::vector<int64_t> ragged = {0, 37, 130, 0, 300, 9, 0};
  v.push_back({"forward_rowwise_ragged_empty_ends", Pass::kForward, true, false, ragged, 40, 0, 264, 208});
  Fp8Case f2{"forward_tensor_per_group_fp32_beta1_bias", Pass::kForward, false, false, ragged, 8, 0, 136, 400};
  f2.out = DType::kFloat32, f2.beta = 1.0f, f2.bias = true;
  v.push_back(f2);
  Fp8Case f3{"forward_tensor_shared_int32_end_offsets", Pass::kForward, false, true, {515}, 0, 0, 128, 64};
  f3.int32_end_offsets = true;
  v.push_back(f3);
  Fp8Case f4{"forward_rowwise_host_offsets", Pass::kForward, true, false, {64, 0, 200}, 0, 0, 256, 128};
  f4.host_offsets = true;
  v.push_back(f4);
  Fp8Case d1{"dgrad_rowwise_columnwise_b", Pass::kDgrad, true, false, {64, 0, 200, 33}, 16, 0, 136, 80};
  d1.out = DType::kFloat32;
  v.push_back(d1);
  v.push_back({"dgrad_tensor_per_group", Pass::kDgrad, false, false, {0, 150, 7, 0}, 0, 0, 264, 160});
  const std::vector<int64_t> kg = {0, 32, 208, 0, 64, 16, 0};
  Fp8Case w1{"wgrad_rowwise_empty_groups_write_zeros", Pass::kWgrad, true, false, kg, 16, 136, 264, 0};
  w1.out = DType::kFloat32;
  v.push_back(w1);
  Fp8Case w2{"wgrad_tensor_per_group_fp32_beta1", Pass::kWgrad, false, false, {48, 0, 256}, 0, 200, 128, 0};
  w2.out = DType::kFloat32, w2.beta = 1.0f, w2.int32_end_offsets = true;
  v.push_back(w2);
  Fp8Case w3{"wgrad_rowwise_bf16_host_offsets", Pass::kWgrad, true, false, {16, 96, 0}, 0, 64, 256, 0};
  w3.host_offsets = true;
  v.push_back(w3);
  return v;
}

class CudaFp8GroupedGemm : public ::testing::TestWithParam<Fp8Case> {
 protected:
  void SetUp() override {
    if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  }
};

TEST_P(CudaFp8GroupedGemm, EqualsFp64LoopOnDequantizedOperands) { EXPECT_EQ(run_case(GetParam()), ""); }

INSTANTIATE_TEST_SUITE_P(Cases, CudaFp8GroupedGemm, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// A CPU QuantizedTensor copied to the device, buffer by buffer, with the same shapes.
struct DeviceCopy {
  DeviceArray data, scale, cdata, cscale, amax, camax;
  QuantizedTensorView view;
  static DeviceArray copy(const TensorView& v, TensorView& out) {
    if (v.data == nullptr) return {};
    const auto* p = static_cast<const uint8_t*>(v.data);
    DeviceArray d(std::vector<uint8_t>(p, p + v.nbytes()));
    out = v;
    out.data = d.ptr;
    out.device = Device::cuda(0);
    return d;
  }
  explicit DeviceCopy(const QuantizedTensorView& h) : view(h) {
    view.device = Device::cuda(0);
    amax = copy(h.amax, view.amax);  // NVFP4's global amax (kTensor's is not read by the GEMM)
    camax = copy(h.columnwise_amax, view.columnwise_amax);
    data = copy(h.data, view.data);
    scale = copy(h.scale_inv, view.scale_inv);
    cdata = copy(h.columnwise_data, view.columnwise_data);
    cscale = copy(h.columnwise_scale_inv, view.columnwise_scale_inv);
  }
};

// (rows, cols) logical values of one copy, through the quantize layer's dequantize().
std::vector<double> dequantized(const QuantizedTensor& q, bool columnwise) {
  std::vector<float> out(q.view().rows * q.view().cols);
  dequantize(q.view(), TensorView::contiguous(out.data(), DType::kFloat32,
                                              {q.view().rows, q.view().cols}),
             columnwise);
  return std::vector<double>(out.begin(), out.end());
}

QuantizedTensor quantize_with_tessera(const QuantizerConfig& cfg, std::vector<float>& x,
                                      int64_t rows, int64_t cols) {
  QuantizedTensor q(cfg, rows, cols, Device::cpu());
  Quantizer(cfg).quantize(TensorView::contiguous(x.data(), DType::kFloat32, {rows, cols}), q);
  return q;
}

// D (FP32, device) of `p` against got[i] = Σ_k a(i, k)·b(k, j) given by `expect(r, c, &abs)`.
template <class Expect>
std::string compare_fp32(const std::string& name, const DeviceArray& d, int64_t rows, int64_t cols,
                         int64_t k, Expect expect) {
  const std::vector<float> got = d.to_host<float>();
  GemmTolerance tol = gemm_tolerance(DType::kFloat32, k);
  tol.sum_rel = std::max(tol.sum_rel, double((k + 31) / 32 + 1) * std::exp2(-12.0));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double abs_sum = 0;
      bool live = true;
      const double want = expect(r, c, &abs_sum, &live);
      if (!live) continue;
      const double v = got[r * cols + c];
      if (!(std::fabs(v - want) <= tol.value_rel * std::fabs(want) + tol.sum_rel * abs_sum))
        return name + ": D[" + std::to_string(r) + ", " + std::to_string(c) + "] = " +
               std::to_string(v) + ", expected " + std::to_string(want);
    }
  return "";
}

// The device operands of one layer step (quantized copies) and its outputs: y (T, N), dx (T, K),
// dW (G, N, K), all FP32.
struct LayerOperands {
  const DeviceCopy *x, *w, *dy;
  int64_t groups, n, k, cap;
};
struct LayerOutputs {
  DeviceArray y, dx, dw;
  explicit LayerOutputs(const LayerOperands& o)
      : y(std::vector<float>(o.cap * o.n, 0.0f)), dx(std::vector<float>(o.cap * o.k, 0.0f)),
        dw(std::vector<float>(o.groups * o.n * o.k, 7.0f)) {}
};

// The three problems of the step through the public API, group offsets (G+1 starts) on the device.
struct LayerProblems {
  GroupedGemmProblem fwd, dgrad, wgrad;
  LayerProblems(const LayerOperands& o, const LayerOutputs& out, const DeviceArray& offsets) {
    const Device dev = Device::cuda(0);
    const TensorView offs = TensorView::contiguous(offsets.ptr, DType::kInt64, {o.groups + 1}, dev);
    fwd.num_groups = dgrad.num_groups = wgrad.num_groups = o.groups;
    fwd.group_offsets = dgrad.group_offsets = wgrad.group_offsets = offs;
    // forward y = x Wᵀ: (T, N)
    fwd.a = GemmOperand::from_quantized(o.x->view, false);
    fwd.b = GemmOperand::from_quantized(o.w->view, false);
    fwd.d = TensorView::contiguous(out.y.ptr, DType::kFloat32, {o.cap, o.n}, dev);
    // dgrad dx = dy W: (T, K), W read through its columnwise (transposed) copy
    dgrad.transpose_b = false;
    dgrad.a = GemmOperand::from_quantized(o.dy->view, false);
    dgrad.b = GemmOperand::from_quantized(o.w->view, true);
    dgrad.d = TensorView::contiguous(out.dx.ptr, DType::kFloat32, {o.cap, o.k}, dev);
    // wgrad dW_g = dy_gᵀ x_g: (G, N, K), both columnwise copies; empty groups write zeros
    wgrad.kind = GroupedGemmKind::kKGrouped;
    wgrad.transpose_a = true;
    wgrad.transpose_b = false;
    wgrad.a = GemmOperand::from_quantized(o.dy->view, true);
    wgrad.b = GemmOperand::from_quantized(o.x->view, true);
    wgrad.d = TensorView::contiguous(out.dw.ptr, DType::kFloat32, {o.groups, o.n, o.k}, dev);
  }
};

// The FP64 oracle of a step: the dequantized copy each GEMM reads (logical (rows, cols) values).
struct LayerReference {
  const std::vector<double>&x_r, &x_c, &w_r, &w_c, &dy_r, &dy_c;
  std::vector<int64_t> start;  // G+1 group starts
  int64_t n, k;
};

// y, dx (live rows) and dW (every group; empty ones zeros) against the oracle.
std::string compare_layer(const LayerReference& ref, const LayerOutputs& out) {
  const int64_t groups = static_cast<int64_t>(ref.start.size()) - 1, n = ref.n, k = ref.k;
  const int64_t cap = static_cast<int64_t>(ref.x_r.size()) / k;
  const std::vector<int64_t>& start = ref.start;
  auto group_of = [&](int64_t r) {
    for (int64_t g = 0; g < groups; ++g)
      if (r >= start[g] && r < start[g + 1]) return g;
    return int64_t{-1};
  };
  std::string err;
  err += compare_fp32("forward", out.y, cap, n, k, [&](int64_t r, int64_t c, double* abs, bool* live) {
    const int64_t g = group_of(r);
    *live = g >= 0;
    double s = 0;
    for (int64_t i = 0; *live && i < k; ++i) {
      s += ref.x_r[r * k + i] * ref.w_r[(g * n + c) * k + i];
      *abs += std::fabs(ref.x_r[r * k + i] * ref.w_r[(g * n + c) * k + i]);
    }
    return s;
  });
  err += compare_fp32("dgrad", out.dx, cap, k, n, [&](int64_t r, int64_t c, double* abs, bool* live) {
    const int64_t g = group_of(r);
    *live = g >= 0;
    double s = 0;
    for (int64_t i = 0; *live && i < n; ++i) {
      s += ref.dy_r[r * n + i] * ref.w_c[(g * n + i) * k + c];
      *abs += std::fabs(ref.dy_r[r * n + i] * ref.w_c[(g * n + i) * k + c]);
    }
    return s;
  });
  err += compare_fp32("wgrad", out.dw, groups * n, k, cap, [&](int64_t r, int64_t c, double* abs, bool*) {
    const int64_t g = r / n, m = r % n;
    double s = 0;
    for (int64_t t = start[g]; t < start[g + 1]; ++t) {
      s += ref.dy_c[t * n + m] * ref.x_c[t * k + c];
      *abs += std::fabs(ref.dy_c[t * n + m] * ref.x_c[t * k + c]);
    }
    return s;
  });
  return err;
}

// The shapes of one forward/dgrad/wgrad run: tokens per group (multiples of 16: FP8 wgrad), N
// (the dgrad contraction), K, capacity rows.
struct LayerShape {
  std::vector<int64_t> rows = {0, 48, 160, 0, 32};
  int64_t n = 144, k = 192, cap = 256;
  ScaleLayout scale_layout = ScaleLayout::kCompact;  // MXFP8/NVFP4: compact or swizzled scales
  // NVFP4: the 16-point Hadamard transform on x's and dy's columnwise copies (the wgrad's).
  bool rht = false;
  // dy's mode when it differs from x's (kNone: the same; the custom recipes' NVFP4 gradients
  // with MXFP8 activations and weights).
  ScalingMode grad_mode = ScalingMode::kNone;
};

// Both usages of `m` with `element` (E2M1 for the NVFP4 modes); NVFP4 gradients (`grad`) with
// stochastic rounding, as the recipe quantizes them.
QuantizerConfig layer_config(ScalingMode m, DType element, const LayerShape& shape,
                             bool grad = false) {
  const bool fp4 = scaling_mode_info(m).fp4;
  QuantizerConfig c = make_config(m, fp4 ? DType::kFloat4E2M1 : element);
  c.rowwise = c.columnwise = true;
  if (scaling_mode_info(m).swizzle) c.scale_layout = shape.scale_layout;
  if (fp4) {
    c.random_hadamard = shape.rht && m == ScalingMode::kNVFP4;
    c.stochastic_rounding = grad;
    c.rng_seed = 5;
  }
  return c;
}

// Forward, dgrad and wgrad on operands quantized by tessera's CPU Quantizer; dy in
// `grad_element` (E5M2: the HYBRID recipes, dgrad and wgrad then run the E5M2 x E4M3 kind);
// the weights in `weight_mode` (FP8 block: 128x128 weights with 1x128 activations).
std::string run_with_tessera_quantizer(ScalingMode mode, DType grad_element = DType::kFloat8E4M3,
                                       ScalingMode weight_mode = ScalingMode::kNone,
                                       const LayerShape& shape = {}) {
  const std::vector<int64_t>& rows = shape.rows;
  const int64_t groups = static_cast<int64_t>(rows.size()), n = shape.n, k = shape.k,
                cap = shape.cap;
  if (weight_mode == ScalingMode::kNone) weight_mode = mode;
  std::vector<int64_t> start(groups + 1, 0);
  for (int64_t g = 0; g < groups; ++g) start[g + 1] = start[g] + rows[g];
  std::mt19937 rng(7);
  std::vector<float> x = random_values(cap * k, rng, 3.0f), w = random_values(groups * n * k, rng, 3.0f),
                     dy = random_values(cap * n, rng, 3.0f);
  const QuantizerConfig cfg = layer_config(mode, DType::kFloat8E4M3, shape);
  QuantizerConfig w_cfg = layer_config(weight_mode, DType::kFloat8E4M3, shape);
  w_cfg.random_hadamard = false;  // the recipes transform activations and gradients only
  const QuantizedTensor qx = quantize_with_tessera(cfg, x, cap, k);
  const QuantizedTensor qw = quantize_with_tessera(w_cfg, w, groups * n, k);
  const ScalingMode grad_mode = shape.grad_mode == ScalingMode::kNone ? mode : shape.grad_mode;
  const QuantizerConfig grad_cfg = layer_config(grad_mode, grad_element, shape, true);
  const QuantizedTensor qdy = quantize_with_tessera(grad_cfg, dy, cap, n);
  DeviceCopy dx(qx.view()), dw(qw.view()), ddy(qdy.view());
  const std::vector<double> x_r = dequantized(qx, false), x_c = dequantized(qx, true);
  const std::vector<double> w_r = dequantized(qw, false), w_c = dequantized(qw, true);
  const std::vector<double> dy_r = dequantized(qdy, false), dy_c = dequantized(qdy, true);
  DeviceArray offsets(start);
  LayerOperands ops{&dx, &dw, &ddy, groups, n, k, cap};
  LayerOutputs out(ops);
  const LayerProblems probs(ops, out, offsets);
  grouped_gemm(probs.fwd);
  grouped_gemm(probs.dgrad);
  grouped_gemm(probs.wgrad);
  cuda_ok(cudaDeviceSynchronize(), "sync");
  return compare_layer(LayerReference{x_r, x_c, w_r, w_c, dy_r, dy_c, start, n, k}, out);
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, ForwardDgradWgradRowwise) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kRowwise), "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, ForwardDgradWgradPerTensor) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kTensor), "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, HybridE5M2GradientsRowwise) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kRowwise, DType::kFloat8E5M2), "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, HybridE5M2GradientsPerTensor) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kTensor, DType::kFloat8E5M2), "");
}

// FP8 block operands (the block-scaled kinds): 1x128 activations and gradients with 128x128 (or
// 1x128) weights; group starts that are multiples of 16 but not of 128 (wgrad windows straddle
// groups), empty groups first / in the middle / last, capacity rows, K not a multiple of 128
// (a partial last forward block), more than one n block per group.
LayerShape block_shape() {
  LayerShape s;
  s.rows = {0, 48, 160, 0, 32, 304, 0};
  s.n = 256;  // the dgrad contraction: a multiple of 128 (each group's columns start on a block)
  s.k = 208;
  s.cap = 640;
  return s;
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, Block1x128x128x128) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kBlock1x128, DType::kFloat8E4M3,
                                       ScalingMode::kBlock128x128, block_shape()),
            "");
}

// Odd and even stage counts (128-element contraction blocks) in every GEMM: forward 3 stages
// (K = 336), then 4 with a partial last one (K = 464); dgrad 3 (N = 384); wgrad windows of 1 to 4
// stages (groups of 16 .. 496 rows) and an empty contraction.
TEST(CudaFp8GroupedGemmTesseraQuantizer, BlockOddAndEvenStageCounts) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  LayerShape s;
  s.rows = {16, 0, 496, 48, 272};
  s.n = 384;
  s.k = 336;
  s.cap = 896;  // a multiple of 16 (the transposed copies' TMA row stride)
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kBlock1x128, DType::kFloat8E4M3,
                                       ScalingMode::kBlock128x128, s),
            "");
  s.k = 464;  // 4 forward stages, a partial last one
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kBlock1x128, DType::kFloat8E4M3,
                                       ScalingMode::kBlock1x128, s),
            "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, Block1x128Everywhere) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kBlock1x128, DType::kFloat8E4M3,
                                       ScalingMode::kBlock1x128, block_shape()),
            "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, BlockHybridE5M2Gradients) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  LayerShape s = block_shape();
  s.rows = {256, 0, 112, 16};  // one group of whole blocks first
  s.n = 384;
  s.k = 144;
  s.cap = 400;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kBlock1x128, DType::kFloat8E5M2,
                                       ScalingMode::kBlock128x128, s),
            "");
}

// A block-scaled step (activations and gradients in `act`, weights in `weight`) captured once in
// a CUDA graph (setup kernel, transposes, three public-API GEMMs on a caller workspace) and
// replayed with different device group sizes — mid-block starts, empty experts, all experts
// empty, all tokens on one expert; each replay against the FP64 oracle.
void graph_replay_with_changed_group_sizes(ScalingMode act_mode, ScalingMode weight_mode,
                                           bool rht = false) {
  const int64_t groups = 4, n = 256, k = 208, cap = 512;
  const std::vector<std::vector<int64_t>> size_sets = {
      {112, 0, 304, 48}, {0, 256, 0, 256}, {0, 0, 0, 0}, {512, 0, 0, 0}, {16, 32, 48, 400}};
  std::mt19937 rng(11);
  std::vector<float> x = random_values(cap * k, rng, 3.0f), w = random_values(groups * n * k, rng, 3.0f),
                     dy = random_values(cap * n, rng, 3.0f);
  LayerShape shape;
  shape.rht = rht;
  const QuantizerConfig act = layer_config(act_mode, DType::kFloat8E4M3, shape);
  QuantizerConfig wcfg = layer_config(weight_mode, DType::kFloat8E4M3, shape);
  wcfg.random_hadamard = false;
  const QuantizerConfig grad = layer_config(act_mode, DType::kFloat8E4M3, shape, true);
  const QuantizedTensor qx = quantize_with_tessera(act, x, cap, k);
  const QuantizedTensor qw = quantize_with_tessera(wcfg, w, groups * n, k);
  const QuantizedTensor qdy = quantize_with_tessera(grad, dy, cap, n);
  DeviceCopy dx(qx.view()), dw(qw.view()), ddy(qdy.view());
  const std::vector<double> x_r = dequantized(qx, false), x_c = dequantized(qx, true);
  const std::vector<double> w_r = dequantized(qw, false), w_c = dequantized(qw, true);
  const std::vector<double> dy_r = dequantized(qdy, false), dy_c = dequantized(qdy, true);
  DeviceArray offsets(std::vector<int64_t>(groups + 1, 0));
  const LayerOperands ops{&dx, &dw, &ddy, groups, n, k, cap};
  LayerOutputs out(ops);
  const LayerProblems probs(ops, out, offsets);
  const Device dev = Device::cuda(0);
  std::vector<DeviceArray> ws;
  std::vector<TensorView> wsv;
  for (const GroupedGemmProblem* p : {&probs.fwd, &probs.dgrad, &probs.wgrad}) {
    const int64_t bytes = workspace_size(*p);
    ws.emplace_back(std::vector<uint8_t>(static_cast<size_t>(bytes > 0 ? bytes : 1) + 256));
    wsv.push_back(bytes > 0 ? TensorView::contiguous(test::align128(ws.back().ptr), DType::kUInt8,
                                                     {bytes}, dev)
                            : TensorView{});
  }
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  run(probs.fwd, wsv[0], Stream{s});
  run(probs.dgrad, wsv[1], Stream{s});
  run(probs.wgrad, wsv[2], Stream{s});
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const auto& sizes : size_sets) {
    std::vector<int64_t> start(groups + 1, 0);
    for (int64_t g = 0; g < groups; ++g) start[g + 1] = start[g] + sizes[g];
    ASSERT_EQ(cudaMemcpy(offsets.ptr, start.data(), start.size() * 8, cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(compare_layer(LayerReference{x_r, x_c, w_r, w_c, dy_r, dy_c, start, n, k}, out), "")
        << "sizes " << sizes[0] << ", " << sizes[1] << ", " << sizes[2] << ", " << sizes[3];
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, BlockGraphReplayWithChangedGroupSizes) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  graph_replay_with_changed_group_sizes(ScalingMode::kBlock1x128, ScalingMode::kBlock128x128);
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, MxGraphReplayWithChangedGroupSizes) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const detail::ScopedMxfp8Path native(detail::Mxfp8Path::kNative);  // the MXFP8 kinds
  graph_replay_with_changed_group_sizes(ScalingMode::kMXFP8, ScalingMode::kMXFP8_32x32);
}

// MXFP8 operands (the MXFP8 kinds, Mxfp8Path::kNative): 1x32 activations and gradients with
// 32x32 (or 1x32) weights, compact and swizzled E8M0 scales, E4M3 and E5M2 gradients;
// block_shape's groups start on multiples of 16, not 32 (wgrad's 32-token scale blocks straddle
// groups), K = 208 ends in a partial block, the groups' weight rows (N = 256) tile on 32-row
// boundaries, N = 144 does not.
TEST(CudaFp8GroupedGemmTesseraQuantizer, Mx1x32x32x32) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const detail::ScopedMxfp8Path native(detail::Mxfp8Path::kNative);  // the MXFP8 kinds
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kMXFP8, DType::kFloat8E4M3,
                                       ScalingMode::kMXFP8_32x32, block_shape()),
            "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, Mx1x32EverywhereSwizzled) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const detail::ScopedMxfp8Path native(detail::Mxfp8Path::kNative);  // the MXFP8 kinds
  LayerShape s = block_shape();
  s.scale_layout = ScaleLayout::kSwizzled;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kMXFP8, DType::kFloat8E4M3,
                                       ScalingMode::kMXFP8, s),
            "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, Mx32x32WeightsSwizzled) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const detail::ScopedMxfp8Path native(detail::Mxfp8Path::kNative);  // the MXFP8 kinds
  LayerShape s = block_shape();
  s.n = 384;  // dgrad contraction multiple of 128
  s.k = 144;
  s.rows = {16, 0, 224, 48};
  s.cap = 320;
  s.scale_layout = ScaleLayout::kSwizzled;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kMXFP8, DType::kFloat8E4M3,
                                       ScalingMode::kMXFP8_32x32, s),
            "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, MxHybridE5M2Gradients) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const detail::ScopedMxfp8Path native(detail::Mxfp8Path::kNative);  // the MXFP8 kinds
  LayerShape s = block_shape();
  s.rows = {256, 0, 112, 16};
  s.n = 384;
  s.k = 144;
  s.cap = 400;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kMXFP8, DType::kFloat8E5M2,
                                       ScalingMode::kMXFP8_32x32, s),
            "");
}

// MXFP8 pairs expanded exactly to BF16 in the workspace (Mxfp8Path::kExpanded; kAuto's choice
// where the expansion pays): the cases above through the BF16 kind — 32x32 and 1x32 weights,
// compact and swizzled scales, E5M2 gradients, a partial last K block, groups straddling the
// wgrad's 32-token blocks.
TEST(CudaFp8GroupedGemmTesseraQuantizer, MxExpandedToBf16) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const detail::ScopedMxfp8Path expanded(detail::Mxfp8Path::kExpanded);
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kMXFP8, DType::kFloat8E4M3,
                                       ScalingMode::kMXFP8_32x32, block_shape()),
            "");
  LayerShape s = block_shape();
  s.scale_layout = ScaleLayout::kSwizzled;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kMXFP8, DType::kFloat8E4M3,
                                       ScalingMode::kMXFP8, s),
            "");
  s.rows = {256, 0, 112, 16};
  s.n = 384;
  s.k = 144;
  s.cap = 400;
  s.scale_layout = ScaleLayout::kCompact;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kMXFP8, DType::kFloat8E5M2,
                                       ScalingMode::kMXFP8_32x32, s),
            "");
}

// NVFP4 operands (no FP4 kind: both copies expanded exactly to BF16, the BF16 kind, 1/S_enc in
// the epilogue): 1x16 activations and gradients (stochastic rounding) with 16x16 weights,
// compact and swizzled E4M3 scales, the Hadamard transform on the wgrad's copies (x's and dy's
// columnwise ones), K = 208 and N = 144 not multiples of 64 or 128, groups on multiples of 16.
TEST(CudaFp8GroupedGemmTesseraQuantizer, Nvfp4x16x16) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  LayerShape s = block_shape();
  s.n = 144;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kNVFP4, DType::kFloat4E2M1,
                                       ScalingMode::kNVFP4_16x16, s),
            "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, Nvfp4HadamardWgradSwizzled) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  LayerShape s = block_shape();
  s.rht = true;
  s.scale_layout = ScaleLayout::kSwizzled;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kNVFP4, DType::kFloat4E2M1,
                                       ScalingMode::kNVFP4_16x16, s),
            "");
}

// NVFP4 expanded inside the kernel (gemm_cuda::set_nvfp4_in_kernel(true); off by default:
// M-grouped pairs with K % 32 == 0): forward (K = 224) and dgrad (contraction N = 160), neither
// a multiple of 64 (a partial last stage), empty groups first / in the middle / last, capacity
// rows, compact and swizzled scales; the wgrad (Hadamard copies) keeps the workspace expansion.
struct Nvfp4InKernel {
  bool was = gemm_cuda::nvfp4_in_kernel();
  Nvfp4InKernel() { gemm_cuda::set_nvfp4_in_kernel(true); }
  ~Nvfp4InKernel() { gemm_cuda::set_nvfp4_in_kernel(was); }
};

// A shape whose forward and dgrad take the in-kernel path (quantized_operands.cu
// fp4_in_kernel): K % 32 == 0 and each stage row's four scales one aligned word: K = 256 and
// N = 192 (compact scale rows of 16 and 12 bytes; the dgrad's groups start at g·192, on a
// 64-element stage). With swizzled scales K = 224 also qualifies (rows padded to 16 scales) and
// its last stage holds 32 elements of the group, 32 of padding.
LayerShape nvfp4_in_kernel_shape(ScaleLayout layout) {
  LayerShape s = block_shape();
  s.k = layout == ScaleLayout::kSwizzled ? 224 : 256;
  s.n = 192;
  s.scale_layout = layout;
  return s;
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, Nvfp4InKernelCompact) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const Nvfp4InKernel on;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kNVFP4, DType::kFloat4E2M1,
                                       ScalingMode::kNVFP4_16x16,
                                       nvfp4_in_kernel_shape(ScaleLayout::kCompact)),
            "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, Nvfp4InKernelSwizzledHadamard) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const Nvfp4InKernel on;
  LayerShape s = nvfp4_in_kernel_shape(ScaleLayout::kSwizzled);
  s.rht = true;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kNVFP4, DType::kFloat4E2M1,
                                       ScalingMode::kNVFP4_16x16, s),
            "");
}

// The in-kernel expansion gives the workspace expansion's bits: the same operand values (FP16
// stages in the kernel, BF16 copies in the workspace; both exact) through the same main loop and
// epilogue (forward and dgrad, FP32 outputs compared byte for byte). That the in-kernel run took
// the in-kernel path is shown by its workspace: no expanded copies.
TEST(CudaFp8GroupedGemmTesseraQuantizer, Nvfp4InKernelEqualsWorkspaceExpansion) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const LayerShape shape = nvfp4_in_kernel_shape(ScaleLayout::kCompact);
  const int64_t groups = static_cast<int64_t>(shape.rows.size());
  std::vector<int64_t> start(groups + 1, 0);
  for (int64_t g = 0; g < groups; ++g) start[g + 1] = start[g] + shape.rows[g];
  std::mt19937 rng(3);
  std::vector<float> x = random_values(shape.cap * shape.k, rng, 3.0f),
                     w = random_values(groups * shape.n * shape.k, rng, 3.0f),
                     dy = random_values(shape.cap * shape.n, rng, 3.0f);
  const QuantizerConfig act = layer_config(ScalingMode::kNVFP4, DType::kFloat4E2M1, shape);
  const QuantizerConfig wcfg = layer_config(ScalingMode::kNVFP4_16x16, DType::kFloat4E2M1, shape);
  const QuantizerConfig grad = layer_config(ScalingMode::kNVFP4, DType::kFloat4E2M1, shape, true);
  const QuantizedTensor qx = quantize_with_tessera(act, x, shape.cap, shape.k);
  const QuantizedTensor qw = quantize_with_tessera(wcfg, w, groups * shape.n, shape.k);
  const QuantizedTensor qdy = quantize_with_tessera(grad, dy, shape.cap, shape.n);
  DeviceCopy dx(qx.view()), dw(qw.view()), ddy(qdy.view());
  DeviceArray offsets(start);
  const LayerOperands ops{&dx, &dw, &ddy, groups, shape.n, shape.k, shape.cap};
  std::vector<std::vector<uint8_t>> got[2];
  const Nvfp4InKernel restore;
  int64_t workspace[2][2] = {};
  for (int in_kernel = 0; in_kernel < 2; ++in_kernel) {
    gemm_cuda::set_nvfp4_in_kernel(in_kernel == 1);
    LayerOutputs out(ops);
    const LayerProblems probs(ops, out, offsets);
    workspace[in_kernel][0] = workspace_size(probs.fwd);
    workspace[in_kernel][1] = workspace_size(probs.dgrad);
    grouped_gemm(probs.fwd);
    grouped_gemm(probs.dgrad);
    cuda_ok(cudaDeviceSynchronize(), "sync");
    got[in_kernel] = {out.y.to_host<uint8_t>(), out.dx.to_host<uint8_t>()};
  }
  // the expanded copies: 2 bytes per element of both operands
  const int64_t copies_fwd = 2 * (shape.cap + groups * shape.n) * shape.k;
  const int64_t copies_dgrad = 2 * (shape.cap + groups * shape.k) * shape.n;
  EXPECT_LE(workspace[1][0] + copies_fwd, workspace[0][0]) << "forward not in the kernel";
  EXPECT_LE(workspace[1][1] + copies_dgrad, workspace[0][1]) << "dgrad not in the kernel";
  EXPECT_TRUE(got[0][0] == got[1][0]) << "forward differs from the workspace expansion";
  EXPECT_TRUE(got[0][1] == got[1][1]) << "dgrad differs from the workspace expansion";
}

// The demo's custom recipe: MXFP8 activations and weights (the MXFP8 kind forward), NVFP4
// gradients (dgrad NVFP4 dy x MXFP8 W's columnwise copy, wgrad dy's x x's columnwise copies:
// both expanded, the MXFP8 columnwise copies transposed on the way).
TEST(CudaFp8GroupedGemmTesseraQuantizer, Nvfp4GradientsWithMxfp8Operands) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  LayerShape s = block_shape();
  s.grad_mode = ScalingMode::kNVFP4;
  EXPECT_EQ(run_with_tessera_quantizer(ScalingMode::kMXFP8, DType::kFloat8E4M3,
                                       ScalingMode::kMXFP8_32x32, s),
            "");
}

TEST(CudaFp8GroupedGemmTesseraQuantizer, Nvfp4HadamardGraphReplayWithChangedGroupSizes) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  graph_replay_with_changed_group_sizes(ScalingMode::kNVFP4, ScalingMode::kNVFP4_16x16, true);
}

// Hadamard-transformed wgrad copies with device offsets whose group ends mid-block: that group's
// dW is NaN (its transforms no longer cancel), the others are right.
TEST(CudaFp8GroupedGemmTesseraQuantizer, Nvfp4HadamardGroupOffBlockIsNaN) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const int64_t t = 64, m = 16, n = 32;
  std::mt19937 rng(3);
  std::vector<float> dy = random_values(t * m, rng, 2.0f), x = random_values(t * n, rng, 2.0f);
  LayerShape shape;
  shape.rht = true;
  const QuantizerConfig cfg = layer_config(ScalingMode::kNVFP4, DType::kFloat4E2M1, shape);
  const QuantizedTensor qdy = quantize_with_tessera(cfg, dy, t, m);
  const QuantizedTensor qx = quantize_with_tessera(cfg, x, t, n);
  DeviceCopy ddy(qdy.view()), dx(qx.view());
  const std::vector<double> dy_c = dequantized(qdy, true), x_c = dequantized(qx, true);
  const std::vector<int64_t> start = {0, 16, 24, 64};  // group 1 ends mid-block, group 2 starts there
  DeviceArray offsets(start), d(std::vector<float>(3 * m * n, 7.0f));
  GroupedGemmProblem p;
  p.kind = GroupedGemmKind::kKGrouped;
  p.num_groups = 3;
  p.transpose_a = true, p.transpose_b = false;
  p.a = GemmOperand::from_quantized(ddy.view, true);
  p.b = GemmOperand::from_quantized(dx.view, true);
  p.d = TensorView::contiguous(d.ptr, DType::kFloat32, {3, m, n}, Device::cuda(0));
  p.group_offsets = TensorView::contiguous(offsets.ptr, DType::kInt64, {4}, Device::cuda(0));
  grouped_gemm(p);
  cuda_ok(cudaDeviceSynchronize(), "sync");
  const std::vector<float> got = d.to_host<float>();
  for (int64_t g = 1; g < 3; ++g)
    for (int64_t i = 0; i < m * n; ++i)
      ASSERT_TRUE(std::isnan(got[g * m * n + i])) << "group " << g << " element " << i;
  EXPECT_EQ(compare_fp32("group 0", d, m, n, 16, [&](int64_t r, int64_t c, double* abs, bool*) {
              double acc = 0;
              for (int64_t i = 0; i < 16; ++i) {
                acc += dy_c[i * m + r] * x_c[i * n + c];
                *abs += std::fabs(dy_c[i * m + r] * x_c[i * n + c]);
              }
              return acc;
            }),
            "");
}

TEST(CudaFp8GroupedGemmStatus, Nvfp4RefusesWhatItCannotRunExactly) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::vector<float> a(64 * 32, 1.0f), b(64 * 48, 1.0f);
  LayerShape shape;
  shape.rht = true;
  const QuantizedTensor qa = quantize_with_tessera(
      layer_config(ScalingMode::kNVFP4, DType::kFloat4E2M1, shape), a, 64, 32);
  const QuantizedTensor qb = quantize_with_tessera(
      layer_config(ScalingMode::kNVFP4, DType::kFloat4E2M1, LayerShape{}), b, 64, 48);
  const QuantizedTensor qr = quantize_with_tessera(
      layer_config(ScalingMode::kRowwise, DType::kFloat8E4M3, LayerShape{}), b, 64, 48);
  DeviceCopy da(qa.view()), db(qb.view()), dr(qr.view());
  DeviceArray d(std::vector<float>(2 * 32 * 48)), offsets(std::vector<int64_t>{0, 32, 64});
  GroupedGemmProblem p;
  p.kind = GroupedGemmKind::kKGrouped;
  p.num_groups = 2;
  p.transpose_a = true, p.transpose_b = false;
  p.a = GemmOperand::from_quantized(da.view, true);  // transformed
  p.b = GemmOperand::from_quantized(db.view, true);  // not transformed
  p.d = TensorView::contiguous(d.ptr, DType::kFloat32, {2, 32, 48}, Device::cuda(0));
  p.group_offsets = TensorView::contiguous(offsets.ptr, DType::kInt64, {3}, Device::cuda(0));
  std::string reason;
  EXPECT_EQ(can_implement(p, &reason), Status::kUnsupported);
  EXPECT_NE(reason.find("random Hadamard"), std::string::npos) << reason;
  p.a = GemmOperand::from_quantized(db.view, true);  // NVFP4 x FP8 rowwise: no exact expansion
  p.b = GemmOperand::from_quantized(dr.view, true);
  EXPECT_EQ(can_implement(p, &reason), Status::kDTypeMismatch);  // the front end's pair rule
  EXPECT_NE(reason.find("nvfp4 and rowwise"), std::string::npos) << reason;
}

TEST(CudaFp8GroupedGemmStatus, BlockDgradNeedsKMultipleOf128) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::vector<float> dy(64 * 192, 1.0f), w(2 * 192 * 64, 1.0f);
  QuantizerConfig a = make_config(ScalingMode::kBlock1x128, DType::kFloat8E4M3);
  QuantizerConfig b = make_config(ScalingMode::kBlock128x128, DType::kFloat8E4M3);
  b.rowwise = b.columnwise = true;
  const QuantizedTensor qdy = quantize_with_tessera(a, dy, 64, 192);
  const QuantizedTensor qw = quantize_with_tessera(b, w, 2 * 192, 64);
  DeviceCopy ddy(qdy.view()), dw(qw.view());
  DeviceArray d(std::vector<float>(64 * 64)), offsets(std::vector<int64_t>{0, 32, 64});
  GroupedGemmProblem p;
  p.num_groups = 2;
  p.transpose_b = false;
  p.a = GemmOperand::from_quantized(ddy.view, false);
  p.b = GemmOperand::from_quantized(dw.view, true);
  p.d = TensorView::contiguous(d.ptr, DType::kFloat32, {64, 64}, Device::cuda(0));
  p.group_offsets = TensorView::contiguous(offsets.ptr, DType::kInt64, {3}, Device::cuda(0));
  std::string reason;
  EXPECT_EQ(can_implement(p, &reason), Status::kUnsupported);
  EXPECT_NE(reason.find("multiple of 128"), std::string::npos) << reason;
}

// A small forward problem on quantized operands, for the refusal checks.
struct SmallFp8 {
  HostQuantized ha, hb;
  DeviceQuantized da, db;
  DeviceArray d, offsets;
  GroupedGemmProblem p;
  SmallFp8()
      : ha(quantize(std::vector<float>(32 * 64, 1.0f), 32, 64, true, {}, 1)),
        hb(quantize(std::vector<float>(2 * 32 * 64, 1.0f), 64, 64, true, {}, 1)),
        da(ha, true), db(hb, true), d(std::vector<float>(32 * 32)),
        offsets(std::vector<int64_t>{0, 16, 32}) {
    const Device dev = Device::cuda(0);
    p.num_groups = 2;
    p.a = GemmOperand::from_quantized(da.view, false);
    p.b = GemmOperand::from_quantized(db.view, false);
    p.d = TensorView::contiguous(d.ptr, DType::kFloat32, {32, 32}, dev);
    p.group_offsets = TensorView::contiguous(offsets.ptr, DType::kInt64, {3}, dev);
  }
};

TEST(CudaFp8GroupedGemmStatus, RefusesWhatTheFp8PathCannotRun) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::string reason;
  {
    SmallFp8 s;
    ASSERT_EQ(can_implement(s.p, &reason), Status::kOk) << reason;
  }
  {  // forward reading B's columnwise (MN-major per group) copy
    SmallFp8 s;
    s.p.b.columnwise = true;
    EXPECT_EQ(can_implement(s.p, &reason), Status::kUnsupported);
    EXPECT_NE(reason.find("K-major"), std::string::npos) << reason;
  }
  {  // E5M2 x E4M3 (the HYBRID backward) runs; E4M3 x E5M2 has no kernel
    SmallFp8 s;
    s.p.a.quantized.config.element = DType::kFloat8E5M2;
    s.p.a.quantized.data.dtype = DType::kFloat8E5M2;
    EXPECT_EQ(can_implement(s.p, &reason), Status::kOk) << reason;
    SmallFp8 t;
    t.p.b.quantized.config.element = DType::kFloat8E5M2;
    t.p.b.quantized.data.dtype = DType::kFloat8E5M2;
    EXPECT_EQ(can_implement(t.p, &reason), Status::kUnsupported);
    EXPECT_NE(reason.find("not instantiated"), std::string::npos) << reason;
  }
  {  // batched 3D x 3D on quantized operands: no CUDA path
    SmallFp8 s;
    s.p.kind = GroupedGemmKind::kBatched;
    s.p.d = TensorView::contiguous(s.d.ptr, DType::kFloat32, {2, 16, 32}, Device::cuda(0));
    EXPECT_EQ(can_implement(s.p, &reason), Status::kUnsupported);
    EXPECT_NE(reason.find("batched"), std::string::npos) << reason;
  }
  {  // rowwise scales of the wrong length
    SmallFp8 s;
    s.p.a.quantized.scale_inv.shape[0] = 31;
    EXPECT_EQ(can_implement(s.p, &reason), Status::kShapeMismatch);
  }
  {  // rowwise A with per-tensor B
    SmallFp8 s;
    s.p.b.quantized.config.mode = ScalingMode::kTensor;
    EXPECT_EQ(can_implement(s.p, &reason), Status::kDTypeMismatch);
  }
}

TEST(CudaFp8GroupedGemmStatus, WgradHostOffsetsMustBeMultiplesOf16) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const HostQuantized h = quantize(std::vector<float>(32 * 16, 1.0f), 32, 16, true, {}, 1);
  DeviceQuantized a(h, true), b(h, true);
  DeviceArray d(std::vector<float>(2 * 16 * 16));
  std::vector<int64_t> offs = {0, 8, 32};
  GroupedGemmProblem p;
  p.kind = GroupedGemmKind::kKGrouped;
  p.num_groups = 2;
  p.transpose_a = true, p.transpose_b = false;
  p.a = GemmOperand::from_quantized(a.view, true);
  p.b = GemmOperand::from_quantized(b.view, true);
  p.d = TensorView::contiguous(d.ptr, DType::kFloat32, {2, 16, 16}, Device::cuda(0));
  p.group_offsets = TensorView::contiguous(offs.data(), DType::kInt64, {3});
  std::string reason;
  EXPECT_EQ(can_implement(p, &reason), Status::kMisaligned);
  EXPECT_NE(reason.find("multiples of 16"), std::string::npos) << reason;
}

}  // namespace
}  // namespace tessera::test
