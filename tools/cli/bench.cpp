// `tessera bench train`: one training step of a grouped linear layer through the public C++ API
// (no PyTorch): y = x·W_gᵀ (forward), dx = dy·W_g (dgrad), dW_g = dy_gᵀ·x_g (wgrad), on CUDA.
//   bf16: the three grouped GEMMs on the BF16 tensors as stored (the kernel reads W and the token
//         matrices MN-major where the contraction is not contiguous);
//   fp8_rowwise: x, W and dy quantized by the public Quantizer (both usages in one pass each),
//         then the three GEMMs on the quantized copies (scales in the epilogue);
//   fp8_block: the same with 1x128 blocks for x and dy and 128x128 blocks for W (scales
//         promoted every 128 K in the GEMM main loop);
//   mxfp8: the same with E8M0 scales per 1x32 block of x and dy and per 32x32 tile of W (each
//         32-K partial sum promoted in the main loop; columnwise copies transposed by the GEMM);
//   nvfp4: E2M1 with E4M3 scales per 1x16 block of x and dy (Hadamard-transformed columnwise
//         copies) and per 16x16 tile of W; the GEMM expands both operands to BF16 first.
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
// The C++ copy of python/tessera/bench/shapes.py's LINEAR_SHAPES (the program runs without
// Python); tests/python/test_bench_harness.py checks the two agree.
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
    if (a.is_quantized) p.config = fp8_config;
    return p;
  }
  GroupedGemmConfig fp8_config{};  // --fp8-config: the FP8 GEMMs' config (default: heuristic)
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
  void bf16_forward(Stream s) {
    gemm(problem(GroupedGemmKind::kMGrouped, GemmOperand::from_dense(x.view),
                 GemmOperand::from_dense(w.view), false, true, out(y, {t, n})), s);
  }
  void bf16_dgrad(Stream s) {
    gemm(problem(GroupedGemmKind::kMGrouped, GemmOperand::from_dense(dy.view),
                 GemmOperand::from_dense(w.view), false, false, out(dx, {t, k})), s);
  }
  void bf16_wgrad(Stream s) {
    gemm(problem(GroupedGemmKind::kKGrouped, GemmOperand::from_dense(dy.view),
                 GemmOperand::from_dense(x.view), true, false, out(dw, {g, n, k})), s);
  }
  void bf16(Stream s) {
    bf16_forward(s);
    bf16_dgrad(s);
    bf16_wgrad(s);
  }
};

// An FP8 step: three one-pass quantizations (both usages) and the three GEMMs. Recipes:
// fp8_rowwise (x, W, dy rowwise; scales in the epilogue) and fp8_block (x, dy 1x128 blocks, W
// 128x128 blocks; scales promoted every 128 K in the main loop).
struct Fp8Step {
  Quantizer act_quant, w_quant;
  QuantizedTensor xq, wq, dyq;
  Fp8Step(const Step& st, ScalingMode act, ScalingMode weight)
      : act_quant(both(act), st.dev), w_quant(both(weight), st.dev), xq(both(act), st.t, st.k, st.dev),
        wq(both(weight), st.g * st.n, st.k, st.dev), dyq(both(act), st.t, st.n, st.dev) {}
  static QuantizerConfig both(ScalingMode m) {
    QuantizerConfig c =
        make_config(m, scaling_mode_info(m).fp4 ? DType::kFloat4E2M1 : DType::kFloat8E4M3);
    c.rowwise = c.columnwise = true;
    // NVFP4 x and dy (1x16): the Hadamard transform on their columnwise copies, as the recipe
    // quantizes the wgrad's operands.
    c.random_hadamard = m == ScalingMode::kNVFP4;
    return c;
  }
  void quantize_x(Step& st, Stream s) { act_quant.quantize(st.x.view, xq, s); }
  void quantize_w(Step& st, Stream s) {
    w_quant.quantize(TensorView::contiguous(st.w.buf.data(), DType::kBFloat16,
                                            {st.g * st.n, st.k}, st.dev),
                     wq, s);
  }
  void quantize_dy(Step& st, Stream s) { act_quant.quantize(st.dy.view, dyq, s); }
  void quantize(Step& st, Stream s) {
    quantize_x(st, s);
    quantize_w(st, s);
    quantize_dy(st, s);
  }
  void forward(Step& st, Stream s) {
    st.gemm(st.problem(GroupedGemmKind::kMGrouped, GemmOperand::from_quantized(xq.view(), false),
                       GemmOperand::from_quantized(wq.view(), false), false, true,
                       st.out(st.y, {st.t, st.n})), s);
  }
  void dgrad(Step& st, Stream s) {
    st.gemm(st.problem(GroupedGemmKind::kMGrouped, GemmOperand::from_quantized(dyq.view(), false),
                       GemmOperand::from_quantized(wq.view(), true), false, false,
                       st.out(st.dx, {st.t, st.k})), s);
  }
  void wgrad(Step& st, Stream s) {
    st.gemm(st.problem(GroupedGemmKind::kKGrouped, GemmOperand::from_quantized(dyq.view(), true),
                       GemmOperand::from_quantized(xq.view(), true), true, false,
                       st.out(st.dw, {st.g, st.n, st.k})), s);
  }
  void run_step(Step& st, Stream s) {
    quantize(st, s);
    forward(st, s);
    dgrad(st, s);
    wgrad(st, s);
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
      "usage: tessera bench train [--shapes dsv3-fc1,...] [--recipes fp8_rowwise,fp8_block,mxfp8,nvfp4]\n"
      "                           [--reps N] [--gemms] [--fp8-config tile_n,stages,cluster_m]\n"
      "  One grouped-linear training step (forward, dgrad, wgrad) through the public C++ API on\n"
      "  cuda:0: bf16 and each FP8 recipe (default fp8_rowwise), balanced and imbalanced; prints\n"
      "  ms and TFLOP/s. --gemms adds one row per GEMM of each FP8 recipe (quantization\n"
      "  excluded) next to the same BF16 GEMM.\n");
  return 0;
}

}  // namespace

int run_bench(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") return usage();
  TESSERA_CHECK(args[0] == "train", "unknown benchmark '", args[0], "'; expected: train");
  std::string shapes, recipes = "fp8_rowwise", fp8_config;
  int reps = 20;
  [[maybe_unused]] bool gemms = false;  // read by the CUDA build only
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--gemms") {
      gemms = true;
      continue;
    }
    TESSERA_CHECK(i + 1 < args.size(), "option ", args[i], " needs a value");
    if (args[i] == "--shapes") shapes = args[++i];
    else if (args[i] == "--recipes") recipes = args[++i];
    else if (args[i] == "--reps") reps = std::stoi(args[++i]);
    else if (args[i] == "--fp8-config") fp8_config = args[++i];
    else TESSERA_FAIL(Status::kInvalidArgument, "unknown option ", args[i]);
  }
  TESSERA_CHECK(reps >= 1, "--reps must be >= 1, got ", reps);
  struct Fp8Recipe {
    const char* name;
    ScalingMode act, weight;
  };
  [[maybe_unused]] constexpr Fp8Recipe kFp8Recipes[] = {
      {"fp8_rowwise", ScalingMode::kRowwise, ScalingMode::kRowwise},
      {"fp8_block", ScalingMode::kBlock1x128, ScalingMode::kBlock128x128},
      {"mxfp8", ScalingMode::kMXFP8, ScalingMode::kMXFP8_32x32},
      {"nvfp4", ScalingMode::kNVFP4, ScalingMode::kNVFP4_16x16},
  };
  for (size_t start = 0; start < recipes.size();) {
    const size_t end = std::min(recipes.find(',', start), recipes.size());
    const std::string_view r = std::string_view(recipes).substr(start, end - start);
    TESSERA_CHECK(r == "fp8_rowwise" || r == "fp8_block" || r == "mxfp8" || r == "nvfp4",
                  "--recipes: unknown recipe '", r, "'; expected fp8_rowwise, fp8_block, mxfp8, "
                  "nvfp4");
    start = end + 1;
  }
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
      if (!fp8_config.empty()) {  // tile_n,stages,cluster_m (0 = the heuristic's)
        int tn = 0, stg = 0, cl = 0;
        TESSERA_CHECK(std::sscanf(fp8_config.c_str(), "%d,%d,%d", &tn, &stg, &cl) == 3,
                      "--fp8-config: expected tile_n,stages,cluster_m, got '", fp8_config, "'");
        st.fp8_config.tile_n = tn;
        st.fp8_config.stages = stg;
        st.fp8_config.cluster_m = cl;
      }
      const double flops = 3.0 * 2.0 * static_cast<double>(st.t * st.k * st.n);
      const char* bal = imb ? "imb" : "bal";
      // The BF16 step's outputs: the reference of each FP8 step's relative errors.
      st.bf16({});
      Buffer y16(st.y.bytes(), dev), dx16(st.dx.bytes(), dev), dw16(st.dw.bytes(), dev);
      copy_bytes(y16.data(), dev, st.y.data(), dev, st.y.bytes());
      copy_bytes(dx16.data(), dev, st.dx.data(), dev, st.dx.bytes());
      copy_bytes(dw16.data(), dev, st.dw.data(), dev, st.dw.bytes());
      const float ms16 = median_ms([&] { st.bf16({}); }, reps);
      std::printf("| %s | %s | bf16 | %.3f | %.0f | |\n", s.name, bal, ms16, flops / ms16 / 1e9);
      for (const Fp8Recipe& r : kFp8Recipes) {
        if (!listed(recipes, r.name)) continue;
        Fp8Step f8(st, r.act, r.weight);
        f8.run_step(st, {});
        cudaDeviceSynchronize();
        char err[96];
        std::snprintf(err, sizeof err, "%.4f / %.4f / %.4f", rel_err(st.y, y16, st.t * st.n, dev),
                      rel_err(st.dx, dx16, st.t * st.k, dev),
                      rel_err(st.dw, dw16, st.g * st.n * st.k, dev));
        const float ms8 = median_ms([&] { f8.run_step(st, {}); }, reps);
        std::printf("| %s | %s | %s | %.3f | %.0f | %s |\n", s.name, bal, r.name, ms8,
                    flops / ms8 / 1e9, err);
        if (gemms) {  // each GEMM alone, quantization excluded, next to the BF16 GEMM
          const double f1 = flops / 3.0;
          using Run = void (Fp8Step::*)(Step&, Stream);
          const std::pair<const char*, Run> parts[] = {
              {"forward", &Fp8Step::forward}, {"dgrad", &Fp8Step::dgrad}, {"wgrad", &Fp8Step::wgrad},
              {"quantize x", &Fp8Step::quantize_x}, {"quantize W", &Fp8Step::quantize_w},
              {"quantize dy", &Fp8Step::quantize_dy}};
          for (const auto& [name, fn] : parts) {
            const float m8 = median_ms([&] { (f8.*fn)(st, {}); }, reps);
            const bool gemm = name[0] != 'q';  // TFLOP/s for the GEMMs only
            std::printf("| %s | %s | %s %s | %.3f | ", s.name, bal, r.name, name, m8);
            if (gemm) std::printf("%.0f | |\n", f1 / m8 / 1e9);
            else std::printf(" | |\n");
          }
        }
        std::fflush(stdout);
      }
      if (gemms) {
        const double f1 = flops / 3.0;
        using Run = void (Step::*)(Stream);
        const std::pair<const char*, Run> parts[] = {{"forward", &Step::bf16_forward},
                                                     {"dgrad", &Step::bf16_dgrad},
                                                     {"wgrad", &Step::bf16_wgrad}};
        for (const auto& [name, fn] : parts) {
          const float m16 = median_ms([&] { (st.*fn)({}); }, reps);
          std::printf("| %s | %s | bf16 %s | %.3f | %.0f | |\n", s.name, bal, name, m16,
                      f1 / m16 / 1e9);
        }
      }
    }
  }
  return 0;
#endif
}

}  // namespace tessera::cli
