// The BF16 image of NVFP4 weights (WeightCopies::expanded, GemmOperand::expanded), and of MXFP8
// weights with the expanded-MXFP8 probe on (expanded, and expanded_wt of the Wᵀ form):
// - which weights keep one (NVFP4 with in % 8 == 0; none for FP8 or other widths);
// - on the CPU and on CUDA the image times 1/S_enc is the reference dequantization of the
//   rowwise copy (quantize/quantizer.h `dequantize`, an independent decoder) within its
//   two roundings, exactly 0 where that is 0; CUDA's image equals the CPU's byte for byte;
// - on CUDA the step with the image (forward reads it K-major, dgrad MN-major) equals the step
//   without it (the GEMM expands the copies itself) bit for bit: y, dx and dW, ragged groups
//   with an empty one and rows in no group; also with the columnwise copy that is not the
//   image's transpose (1x16 weight tiles: the dgrad expands that copy).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gemm/gemm_backend.h"
#include "nn_device_util.h"
#include "nn_test_util.h"
#include "tessera/formats/half.h"
#include "tessera/nn/allocator.h"
#include "tessera/nn/linear_step.h"
#include "tessera/quantize/quantizer.h"
#include "tessera/quantize/recipe.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::nn::test {
namespace {

constexpr int64_t kG = 4;
// Ragged groups (an empty one), 5 capacity rows in no group.
const std::vector<int64_t> kEnds = {48, 48, 170, 251};
constexpr int64_t kT = 256;

// Empty when the image of `wc` (device `dev`) is the dequantized rowwise copy over 1/S_enc.
std::string check_image(const LinearSpec& spec, const WeightCopies& wc, Device dev) {
  const int64_t rows = spec.groups * spec.out, in = spec.in;
  if (wc.expanded.data == nullptr) return "no image";
  if (wc.expanded.dtype != DType::kBFloat16 || wc.expanded.numel() != rows * in)
    return "image of the wrong dtype or size";
  std::vector<float> ref(rows * in);
  Dev out(ref, {rows, in}, DType::kFloat32, dev);
  dequantize(wc.q, out.view);
  ref = floats_of(out.view);
  const std::vector<uint8_t> bits = bytes_of(wc.expanded);
  const std::vector<float> amax = floats_of(wc.q.amax);
  // dequantize applies the first global amax to every row (member boundaries are the step's):
  // the image times that factor is what it decodes
  const double inv = 1.0 / scale_rules::nvfp4_global_encode_scale(amax.at(0));
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      uint16_t h;
      std::memcpy(&h, bits.data() + 2 * (r * in + c), 2);
      const double v = bf16{h}.to_float() * inv, d = ref[r * in + c];
      bad += d == 0.0 ? v != 0.0 : !(std::fabs(v - d) <= std::ldexp(std::fabs(d), -22));
    }
  }
  return bad ? std::to_string(bad) + " image elements differ from the dequantized copy" : "";
}

LinearSpec nvfp4_spec(int64_t out, int64_t in, bool tiles16 = true) {
  Recipe recipe = *make_recipe("nvfp4");
  LinearSpec s = make_linear_spec(recipe, "fc1", kG, in, out, false);
  if (!tiles16) {  // a custom weight role: 1x16 blocks (the copies are not transposes)
    s.weight.config.mode = ScalingMode::kNVFP4;
    s.weight_layout = 0;
    s.weight_layout = weight_copies_bytes(s, DType::kFloat32);
  }
  return s;
}

// MXFP8 weights keep images unless the CUDA GEMMs run MXFP8 natively
// (detail::mxfp8_weight_images; the layout is measured when the spec is made).
struct MxExpanded : ::tessera::detail::ScopedMxfp8Path {
  explicit MxExpanded(bool on)
      : ScopedMxfp8Path(on ? ::tessera::detail::Mxfp8Path::kExpanded
                           : ::tessera::detail::Mxfp8Path::kNative) {}
};

TEST(WeightImage, KeptByNvfp4WeightsOfWholeRowsOnly) {
  const MxExpanded probe(false);  // MXFP8 images: Mxfp8ImagesUnlessNative
  PoolAllocator alloc;
  for (const auto& [recipe, in, want] : {std::tuple{"nvfp4", 64, true},
                                         std::tuple{"nvfp4", 48, true},
                                         std::tuple{"nvfp4", 36, false},
                                         std::tuple{"fp8_rowwise", 64, false},
                                         std::tuple{"mxfp8", 64, false}}) {
    const LinearSpec spec = make_linear_spec(*make_recipe(recipe), "fc1", kG, in, 32, false);
    std::vector<float> w = random_normal(kG * 32 * in, 5, 0.1f);
    const WeightCopies wc = quantize_weight(spec, view_of(w, {kG, 32, in}), {}, alloc);
    EXPECT_EQ(wc.expanded.data != nullptr, want) << recipe << " in = " << in;
  }
}

TEST(WeightImage, CpuImageIsTheDequantizedRowwiseCopy) {
  PoolAllocator alloc;
  // an amax per expert; out_features on whole 16-row tiles (make_linear_spec refuses 40)
  EXPECT_THROW(nvfp4_spec(40, 80), Error);
  for (const int64_t out : {48, 32}) {
    const LinearSpec spec = nvfp4_spec(out, 80);
    // experts 10^3 apart in magnitude, so that their scales differ
    std::vector<float> w = random_normal(kG * out * 80, 7, 0.1f);
    for (int64_t i = 0; i < static_cast<int64_t>(w.size()); ++i)
      w[i] *= std::pow(10.0f, static_cast<float>(i / (out * 80)) - 1.5f);
    const WeightCopies wc = quantize_weight(spec, view_of(w, {kG, out, 80}), {}, alloc);
    EXPECT_EQ(check_image(spec, wc, Device::cpu()), "") << "out = " << out;
  }
}

struct Step {
  std::vector<float> y, dx, dw;
};

Step run_step(const LinearSpec& spec, const WeightCopies& wc, Device dev) {
  PoolAllocator alloc;
  std::vector<int64_t> ends = kEnds;
  Dev offs(ends, {kG}, DType::kInt64, dev);
  std::vector<float> xs = random_normal(kT * spec.in, 11), dys = random_normal(kT * spec.out, 12);
  std::vector<float> poison_y(kT * spec.out, 7.0f), poison_dx(kT * spec.in, 7.0f);
  std::vector<float> dw0(kG * spec.out * spec.in, 0.0f);
  Dev x(xs, {kT, spec.in}, DType::kFloat32, dev), dy(dys, {kT, spec.out}, DType::kFloat32, dev);
  Dev y(poison_y, {kT, spec.out}, DType::kFloat32, dev);
  Dev dx(poison_dx, {kT, spec.in}, DType::kFloat32, dev);
  Dev dw(dw0, {kG, spec.out, spec.in}, DType::kFloat32, dev);
  reset_rng_offset(1234);  // the same stochastic rounding of dy in both runs
  const LinearSaved saved = forward_saving_input(spec, wc, x.view, offs.view, y.view, alloc);
  LinearBackwardArgs b;
  b.dy = dy.view;
  b.offsets = offs.view;
  b.dx = dx.view;
  b.dw = dw.view;
  linear_backward(spec, wc, saved, b, {}, alloc);
  return {floats_of(y.view), floats_of(dx.view), floats_of(dw.view)};
}

std::string compare(const Step& a, const Step& b) {
  std::string err;
  const auto same = [](const std::vector<float>& u, const std::vector<float>& v) {
    return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * 4) == 0;
  };
  if (!same(a.y, b.y)) err += "y differs; ";
  if (!same(a.dx, b.dx)) err += "dx differs; ";
  if (!same(a.dw, b.dw)) err += "dW differs; ";
  for (float v : a.y) {
    if (v == 7.0f) return err + "y not written whole; ";
  }
  return err;
}

TEST(WeightImage, CudaStepEqualsTheStepWithoutTheImage) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const Device gpu = Device::cuda(0);
  for (const auto& [out, in, tiles16] : {std::tuple{128, 256, true}, std::tuple{48, 80, true},
                                         std::tuple{32, 64, true}, std::tuple{128, 256, false}}) {
    const LinearSpec spec = nvfp4_spec(out, in, tiles16);
    PoolAllocator alloc;
    std::vector<float> w = random_normal(kG * out * in, 21, 0.1f);
    Dev wd(w, {kG, out, in}, DType::kFloat32, gpu);
    const WeightCopies wc = quantize_weight(spec, wd.view, {}, alloc);
    const std::string what = "out " + std::to_string(out) + " in " + std::to_string(in) +
                             (tiles16 ? " 16x16" : " 1x16");
    EXPECT_EQ(check_image(spec, wc, gpu), "") << what;
    const WeightCopies cpu = quantize_weight(spec, view_of(w, {kG, out, in}), {}, alloc);
    EXPECT_EQ(bytes_of(wc.expanded), bytes_of(cpu.expanded)) << what << ": CUDA image vs CPU";
    WeightCopies plain = wc;
    plain.expanded = TensorView{};
    EXPECT_EQ(compare(run_step(spec, wc, gpu), run_step(spec, plain, gpu)), "") << what;
  }
}

// Empty when `image` (BF16, q's logical shape) is q's rowwise copy dequantized (quantizer.h
// `dequantize`, an independent decoder): FP8 value × 2^(e − 127) is exact in BF16.
std::string check_exact_image(const QuantizedTensorView& q, const TensorView& image, Device dev) {
  if (image.data == nullptr) return "no image";
  if (image.dtype != DType::kBFloat16 || image.numel() != q.rows * q.cols)
    return "image of the wrong dtype or size";
  std::vector<float> ref(q.rows * q.cols);
  Dev out(ref, {q.rows, q.cols}, DType::kFloat32, dev);
  QuantizedTensorView rowwise = q;
  rowwise.config.columnwise = false;
  rowwise.columnwise_data = {};
  rowwise.columnwise_scale_inv = {};
  dequantize(rowwise, out.view);
  ref = floats_of(out.view);
  const std::vector<uint8_t> bits = bytes_of(image);
  int64_t bad = 0;
  for (int64_t i = 0; i < q.rows * q.cols; ++i) {
    uint16_t h;
    std::memcpy(&h, bits.data() + 2 * i, 2);
    bad += bf16{h}.to_float() != ref[i];
  }
  return bad ? std::to_string(bad) + " image elements differ from the dequantized copy" : "";
}

TEST(WeightImage, Mxfp8ImagesUnlessNative) {
  PoolAllocator alloc;
  for (const bool on : {false, true}) {
    const MxExpanded probe(on);
    // The Wᵀ form (and its image) for every out_features the step takes (multiples of 32)
    for (const int64_t out : {64, 96}) {
      const LinearSpec spec = make_linear_spec(*make_recipe("mxfp8"), "fc1", kG, 96, out, false);
      std::vector<float> w = random_normal(kG * out * 96, 9, 0.1f);
      for (int64_t i = 0; i < static_cast<int64_t>(w.size()); ++i)  // experts' scales differ
        w[i] *= std::pow(10.0f, static_cast<float>(i / (out * 96)) - 1.5f);
      const WeightCopies wc = quantize_weight(spec, view_of(w, {kG, out, 96}), {}, alloc);
      const std::string what = std::string(on ? "on" : "off") + ", out " + std::to_string(out);
      EXPECT_EQ(wc.expanded.data != nullptr, on) << what;
      EXPECT_EQ(wc.expanded_wt.data != nullptr, on) << what;
      EXPECT_TRUE(wc.columnwise_is_wt()) << what;
      if (!on) continue;
      EXPECT_EQ(check_exact_image(wc.q, wc.expanded, Device::cpu()), "") << what;
      if (wc.columnwise_is_wt()) {
        EXPECT_EQ(check_exact_image(wc.wt, wc.expanded_wt, Device::cpu()), "") << what << " Wᵀ";
      }
    }
  }
  // out 48: a 32-row block of W's columnwise copy would span two experts: refused, naming it
  try {
    make_linear_spec(*make_recipe("mxfp8"), "fc1", kG, 96, 48, false);
    ADD_FAILURE() << "out_features 48 was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("out_features (48) must be a multiple of 32 with"),
              std::string::npos) << e.what();
  }
}

// The default (Mxfp8Path::kAuto) keeps MXFP8 images exactly where a CUDA device is present.
TEST(WeightImage, Mxfp8ImagesByDefaultWithADevice) {
  const ::tessera::detail::ScopedMxfp8Path path(::tessera::detail::Mxfp8Path::kAuto);
  PoolAllocator alloc;
  const LinearSpec spec = make_linear_spec(*make_recipe("mxfp8"), "fc1", kG, 96, 64, false);
  std::vector<float> w = random_normal(kG * 64 * 96, 9, 0.1f);
  const WeightCopies wc = quantize_weight(spec, view_of(w, {kG, 64, 96}), {}, alloc);
  const bool device = cuda_device_count() > 0;
  EXPECT_EQ(wc.expanded.data != nullptr, device);
  EXPECT_EQ(wc.expanded_wt.data != nullptr, device);
}

// On CUDA (MXFP8 through BF16): the images equal the CPU's byte for byte, and the step reading them
// (forward: W's image; dgrad: Wᵀ's) equals the step that expands the copies itself, bit for bit.
TEST(WeightImage, CudaMxfp8StepEqualsTheStepWithoutTheImages) {
  if (!has_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const MxExpanded probe(true);
  const Device gpu = Device::cuda(0);
  for (const auto& [out, in] : {std::tuple{128, 256}, std::tuple{96, 96}}) {
    const LinearSpec spec = make_linear_spec(*make_recipe("mxfp8"), "fc1", kG, in, out, false);
    PoolAllocator alloc;
    std::vector<float> w = random_normal(kG * out * in, 23, 0.1f);
    Dev wd(w, {kG, out, in}, DType::kFloat32, gpu);
    const WeightCopies wc = quantize_weight(spec, wd.view, {}, alloc);
    const std::string what = "out " + std::to_string(out) + " in " + std::to_string(in);
    const WeightCopies cpu = quantize_weight(spec, view_of(w, {kG, out, in}), {}, alloc);
    EXPECT_EQ(bytes_of(wc.expanded), bytes_of(cpu.expanded)) << what << ": CUDA image vs CPU";
    if (wc.columnwise_is_wt()) {
      EXPECT_EQ(bytes_of(wc.expanded_wt), bytes_of(cpu.expanded_wt)) << what << ": Wᵀ image";
    }
    WeightCopies plain = wc;
    plain.expanded = TensorView{};
    plain.expanded_wt = TensorView{};
    EXPECT_EQ(compare(run_step(spec, wc, gpu), run_step(spec, plain, gpu)), "") << what;
  }
}

TEST(WeightImage, BadImageIsRefusedByName) {
  const LinearSpec spec = nvfp4_spec(32, 64);
  PoolAllocator alloc;
  std::vector<float> w = random_normal(kG * 32 * 64, 31, 0.1f);
  WeightCopies wc = quantize_weight(spec, view_of(w, {kG, 32, 64}), {}, alloc);
  wc.expanded = TensorView::contiguous(wc.expanded.data, DType::kBFloat16, {kG * 32, 32},
                                       Device::cpu());
  std::vector<float> xs = random_normal(8 * 64, 32), ys(8 * 32);
  std::vector<int64_t> ends = {2, 4, 6, 8};
  LinearForwardArgs f;
  f.x = view_of(xs, {8, 64});
  f.offsets = view_of(ends);
  f.y = view_of(ys, {8, 32});
  try {
    (void)linear_forward(spec, wc, f, {}, alloc);
    ADD_FAILURE() << "no error for an image of the wrong shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expanded"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::nn::test
