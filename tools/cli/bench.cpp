// `tessera bench train`: one training step of a grouped linear layer through the public C++ API
// (no PyTorch): y = x·W_gᵀ (forward), dx = dy·W_g (dgrad), dW_g = dy_gᵀ·x_g (wgrad), on CUDA.
//   bf16: the three grouped GEMMs on the BF16 tensors as stored (the kernel reads W and the token
//         matrices MN-major where the contraction is not contiguous);
//   fp8_rowwise: x, W and dy quantized by the public Quantizer (both usages in one pass each),
//         then the three GEMMs on the quantized copies (scales in the epilogue).
// Validates first (relative error of y, dx, dW of the FP8 step against the BF16 step's), then
// times whole steps with CUDA events (median). Shapes: the DeepSeek-V3, Qwen3 and Mixtral expert
// layers, balanced and imbalanced (one empty expert, skewed sizes, multiples of 16).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "tessera/core/status.h"
#include "tessera/formats/half.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/quantize/quantizer.h"
#include "tessera/tessera.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tessera::cli {
namespace {

struct Shape {
  const char* name;
  int64_t experts, per_expert, k, n;
};
constexpr Shape kShapes[] = {
    {"dsv3-fc1", 32, 512, 7168, 4096},   {"dsv3-fc2", 32, 512, 2048, 7168},
    {"qwen3-fc1", 128, 256, 2048, 1536}, {"qwen3-fc2", 128, 256, 768, 2048},
    {"mixtral-fc1", 8, 4096, 4096, 28672}, {"mixtral-fc2", 8, 4096, 14336, 4096},
};

[[maybe_unused]] std::vector<int64_t> group_sizes(const Shape& s, bool imbalanced) {
  std::vector<int64_t> sizes(static_cast<size_t>(s.experts), s.per_expert);
  if (!imbalanced) return sizes;
  const int64_t total = s.experts * s.per_expert;
  double wsum = 0;
  std::vector<double> w(sizes.size(), 0.0);
  for (size_t i = 1; i < w.size(); ++i) wsum += (w[i] = std::pow(0.85, static_cast<double>(i - 1)));
  int64_t used = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    sizes[i] = static_cast<int64_t>(static_cast<double>(total) * w[i] / wsum) / 16 * 16;
    used += sizes[i];
  }
  sizes[1] += total - used;  // expert 0 stays empty
  return sizes;
}

// A device tensor filled with N(0, 1)·scale values rounded to BF16 (xorshift + Box-Muller on the
// host, then one copy).
struct DeviceBf16 {
  Buffer buf;
  TensorView view;
  DeviceBf16(std::vector<int64_t> shape, float scale, uint64_t seed, Device dev) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint16_t> host(static_cast<size_t>(n));
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    auto next = [&s] {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      return static_cast<float>((s >> 40) + 1) * (1.0f / 16777217.0f);  // (0, 1]
    };
    for (auto& v : host) {
      const float g = std::sqrt(-2.0f * std::log(next())) * std::cos(6.2831853f * next());
      v = formats::encode_bf16(g * scale);
    }
    buf = Buffer(static_cast<size_t>(n) * 2, dev);
    copy_bytes(buf.data(), dev, host.data(), Device::cpu(), buf.bytes());
    view = TensorView::contiguous(buf.data(), DType::kBFloat16, shape.data(),
                                  static_cast<int>(shape.size()), dev);
  }
};

// One problem: inputs, offsets, outputs, a workspace big enough for the three GEMMs.
struct Step {
  int64_t g, t, k, n;
  Device dev;
  DeviceBf16 x, w, dy;
  Buffer offs, y, dx, dw, ws;
  int64_t ws_bytes = 0;
  Step(const Shape& s, const std::vector<int64_t>& sizes, Device d)
      : g(s.experts), t(s.experts * s.per_expert), k(s.k), n(s.n), dev(d),
        x({t, k}, 1.0f, 1, d), w({g, n, k}, 1.0f / std::sqrt(static_cast<float>(s.k)), 2, d),
        dy({t, n}, 1.0f, 3, d) {
    std::vector<int64_t> ends(sizes.size());
    int64_t acc = 0;
    for (size_t i = 0; i < sizes.size(); ++i) ends[i] = (acc += sizes[i]);
    offs = Buffer(ends.size() * 8, d);
    copy_bytes(offs.data(), d, ends.data(), Device::cpu(), offs.bytes());
    y = Buffer(static_cast<size_t>(t * n * 2), d);
    dx = Buffer(static_cast<size_t>(t * k * 2), d);
    dw = Buffer(static_cast<size_t>(g * n * k * 2), d);
  }
  TensorView offsets() const { return TensorView::contiguous(offs.data(), DType::kInt64, {g}, dev); }
  TensorView out(const Buffer& b, std::vector<int64_t> shape) const {
    return TensorView::contiguous(b.data(), DType::kBFloat16, shape.data(),
                                  static_cast<int>(shape.size()), dev);
  }
  GroupedGemmProblem problem(GroupedGemmKind kind, GemmOperand a, GemmOperand b, bool ta, bool tb,
                             TensorView d) const {
    GroupedGemmProblem p;
    p.kind = kind;
    p.num_groups = g;
    p.a = a;
    p.b = b;
    p.transpose_a = ta;
    p.transpose_b = tb;
    p.d = d;
    p.group_offsets = offsets();
    p.offsets_format = GroupOffsetsFormat::kEndOffsets;
    return p;
  }
  void gemm(const GroupedGemmProblem& p, Stream s) {
    const int64_t need = workspace_size(p);
    if (need > ws_bytes) {
      ws = Buffer(static_cast<size_t>(need), dev);
      ws_bytes = need;
    }
    run(p, need > 0 ? TensorView::contiguous(ws.data(), DType::kUInt8, {ws_bytes}, dev) : TensorView{},
        s);
  }
  // The three GEMMs on dense BF16 operands as stored.
  void bf16(Stream s) {
    gemm(problem(GroupedGemmKind::kMGrouped, GemmOperand::from_dense(x.view),
                 GemmOperand::from_dense(w.view), false, true, out(y, {t, n})), s);
    gemm(problem(GroupedGemmKind::kMGrouped, GemmOperand::from_dense(dy.view),
                 GemmOperand::from_dense(w.view), false, false, out(dx, {t, k})), s);
    gemm(problem(GroupedGemmKind::kKGrouped, GemmOperand::from_dense(dy.view),
                 GemmOperand::from_dense(x.view), true, false, out(dw, {g, n, k})), s);
  }
};

// The FP8 rowwise step: three one-pass quantizations (both usages) and the three GEMMs.
struct Fp8Step {
  Quantizer quant;
  QuantizedTensor xq, wq, dyq;
  Fp8Step(const Step& st)
      : quant(rowwise_both(), st.dev), xq(rowwise_both(), st.t, st.k, st.dev),
        wq(rowwise_both(), st.g * st.n, st.k, st.dev), dyq(rowwise_both(), st.t, st.n, st.dev) {}
  static QuantizerConfig rowwise_both() {
    QuantizerConfig c = make_config(ScalingMode::kRowwise, DType::kFloat8E4M3);
    c.rowwise = c.columnwise = true;
    return c;
  }
  void run_step(Step& st, Stream s) {
    quant.quantize(st.x.view, xq, s);
    quant.quantize(TensorView::contiguous(st.w.buf.data(), DType::kBFloat16, {st.g * st.n, st.k},
                                          st.dev), wq, s);
    quant.quantize(st.dy.view, dyq, s);
    using K = GroupedGemmKind;
    st.gemm(st.problem(K::kMGrouped, GemmOperand::from_quantized(xq.view(), false),
                       GemmOperand::from_quantized(wq.view(), false), false, true,
                       st.out(st.y, {st.t, st.n})), s);
    st.gemm(st.problem(K::kMGrouped, GemmOperand::from_quantized(dyq.view(), false),
                       GemmOperand::from_quantized(wq.view(), true), false, false,
                       st.out(st.dx, {st.t, st.k})), s);
    st.gemm(st.problem(K::kKGrouped, GemmOperand::from_quantized(dyq.view(), true),
                       GemmOperand::from_quantized(xq.view(), true), true, false,
                       st.out(st.dw, {st.g, st.n, st.k})), s);
  }
};

#if defined(TESSERA_WITH_CUDA)
template <class F>
float median_ms(F&& step, int reps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) step();
  cudaDeviceSynchronize();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, nullptr);
    step();
    cudaEventRecord(b, nullptr);
    cudaEventSynchronize(b);
    float v = 0;
    cudaEventElapsedTime(&v, a, b);
    ms.push_back(v);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Relative L2 error of two BF16 device buffers of n elements.
double rel_err(const Buffer& got, const Buffer& ref, int64_t n, Device dev) {
  std::vector<uint16_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  copy_bytes(a.data(), Device::cpu(), got.data(), dev, a.size() * 2);
  copy_bytes(b.data(), Device::cpu(), ref.data(), dev, b.size() * 2);
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float fa = formats::decode_bf16(a[i]), fb = formats::decode_bf16(b[i]);
    num += (static_cast<double>(fa) - fb) * (static_cast<double>(fa) - fb);
    den += static_cast<double>(fb) * fb;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
#endif

// Whether `name` is one of the comma-separated entries of `list`.
[[maybe_unused]] bool listed(const std::string& list, std::string_view name) {
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    if (std::string_view(list).substr(start, end - start) == name) return true;
    start = end + 1;
  }
  return false;
}

int usage() {
  std::printf(
      "usage: tessera bench train [--shapes dsv3-fc1,...] [--reps N]\n"
      "  One grouped-linear training step (forward, dgrad, wgrad) through the public C++ API on\n"
      "  cuda:0, bf16 and fp8_rowwise, balanced and imbalanced; prints TFLOP/s and ms.\n");
  return 0;
}

}  // namespace

int run_bench(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") return usage();
  TESSERA_CHECK(args[0] == "train", "unknown benchmark '", args[0], "'; expected: train");
  std::string shapes;
  int reps = 20;
  for (size_t i = 1; i < args.size(); ++i) {
    TESSERA_CHECK(i + 1 < args.size(), "option ", args[i], " needs a value");
    if (args[i] == "--shapes") shapes = args[++i];
    else if (args[i] == "--reps") reps = std::stoi(args[++i]);
    else TESSERA_FAIL(Status::kInvalidArgument, "unknown option ", args[i]);
  }
  TESSERA_CHECK(reps >= 1, "--reps must be >= 1, got ", reps);
#if !defined(TESSERA_WITH_CUDA)
  TESSERA_FAIL(Status::kNoDevice, "tessera bench train needs the CUDA backend");
#else
  TESSERA_CHECK_STATUS(cuda_device_count() > 0, Status::kNoDevice, "no CUDA device is visible");
  const Device dev = Device::cuda(0);
  std::printf("| shape | balance | step | ms | TFLOP/s | rel. err. of FP8 y / dx / dW vs BF16 |\n"
              "|---|---|---|---:|---:|---|\n");
  for (const Shape& s : kShapes) {
    if (!shapes.empty() && !listed(shapes, s.name)) continue;
    for (bool imb : {false, true}) {
      Step st(s, group_sizes(s, imb), dev);
      Fp8Step f8(st);
      const double flops = 3.0 * 2.0 * static_cast<double>(st.t * st.k * st.n);
      // Validate: the FP8 step's outputs against the BF16 step's.
      st.bf16({});
      Buffer y16(st.y.bytes(), dev), dx16(st.dx.bytes(), dev), dw16(st.dw.bytes(), dev);
      copy_bytes(y16.data(), dev, st.y.data(), dev, st.y.bytes());
      copy_bytes(dx16.data(), dev, st.dx.data(), dev, st.dx.bytes());
      copy_bytes(dw16.data(), dev, st.dw.data(), dev, st.dw.bytes());
      f8.run_step(st, {});
      cudaDeviceSynchronize();
      char err[96];
      std::snprintf(err, sizeof err, "%.4f / %.4f / %.4f", rel_err(st.y, y16, st.t * st.n, dev),
                    rel_err(st.dx, dx16, st.t * st.k, dev),
                    rel_err(st.dw, dw16, st.g * st.n * st.k, dev));
      const float ms16 = median_ms([&] { st.bf16({}); }, reps);
      const float ms8 = median_ms([&] { f8.run_step(st, {}); }, reps);
      const char* bal = imb ? "imb" : "bal";
      std::printf("| %s | %s | bf16 | %.3f | %.0f | |\n", s.name, bal, ms16, flops / ms16 / 1e9);
      std::printf("| %s | %s | fp8_rowwise | %.3f | %.0f | %s |\n", s.name, bal, ms8,
                  flops / ms8 / 1e9, err);
      std::fflush(stdout);
    }
  }
  return 0;
#endif
}

}  // namespace tessera::cli
