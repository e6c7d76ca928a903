// NVFP4 per member in place on CUDA (quantize_nvfp4_members_cuda, device member offsets) equals
// the CPU (tests/quantize/test_nvfp4_members.cpp holds the CPU to the standalone quantizer) byte
// for byte: codes, scales, per-member amaxes, zeros past the last member and in empty members
// (the device buffers start poisoned), for every NVFP4 config (compact / swizzled, 16x16 tiles,
// Hadamard transform, stochastic rounding), ragged members, K on and off the tiled kernels'
// grid, float32 and bfloat16 input with NaN / Inf; and the 16x16 weight path (512-column strips)
// on Gaussian input. Skips without a GPU.
#include <gtest/gtest.h>

#include "quantize/nvfp4_members_case.h"
#include "quantize_cuda/cuda_cases.h"
#include "tessera/core/device.h"

namespace tessera {
namespace {

// "" when quantize_nvfp4_members of an input of shape `s` gives the same bytes on CUDA as on the
// CPU, else the first mismatch.
std::string members_cpu_vs_cuda(const QuantizerConfig& config, const test::MembersShape& s,
                                DType dt, test::InputKind kind) {
  const Device d = Device::cuda(0);
  const int64_t groups = static_cast<int64_t>(s.rows.size()), M = s.total();
  test::HostInput in = test::make_input(dt, M, s.K, kind, 21);
  std::vector<int64_t> offsets = s.offsets();
  test::MembersOutput cpu(config, M, s.K, groups);
  detail::quantize_nvfp4_members(
      config, in.view(), TensorView::contiguous(offsets.data(), DType::kInt64, {groups + 1}),
      cpu.view(), {});

  QuantizedTensor gpu(config, M, s.K, d);
  gpu.ensure_usage(true, true);
  Buffer amax(static_cast<size_t>(8 * groups), d), off(static_cast<size_t>(8 * (groups + 1)), d);
  gpu.view().amax = TensorView::contiguous(amax.data(), DType::kFloat32, {groups}, d);
  gpu.view().columnwise_amax = TensorView::contiguous(
      static_cast<float*>(amax.data()) + groups, DType::kFloat32, {groups}, d);
  test::poison(gpu.view());
  copy_bytes(off.data(), d, offsets.data(), Device::cpu(), off.bytes());
  test::DeviceInput dx(in);
  detail::quantize_nvfp4_members(
      config, dx.view, TensorView::contiguous(off.data(), DType::kInt64, {groups + 1}, d),
      gpu.view(), {});
  test::MembersOutput back(config, M, s.K, groups);
  test::copy_to_host(gpu.view(), back.view());
  return test::compare_quantized(cpu.view(), back.view());
}

TEST(Nvfp4MembersCuda, EqualsTheCpuByteForByte) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const test::NamedConfig& nc : test::nvfp4_configs()) {
    for (const test::MembersShape& s : test::members_shapes()) {
      for (const DType dt : {DType::kFloat32, DType::kBFloat16}) {
        SCOPED_TRACE(nc.name + " " + s.name() + " " + dtype_name(dt));
        EXPECT_EQ(members_cpu_vs_cuda(nc.config, s, dt, test::InputKind::kSpecials), "");
      }
    }
  }
}

// 16x16 tiles without stochastic rounding or the transform (the weights) in place: both copies
// from the strip kernel (nvfp4_tile16_grouped_kernel), members placed at their rows / columns of
// the whole copies, compact and swizzled scales. Gaussian input, so the members' global amaxes
// are finite and their scales differ. K: past one 512-column strip (528), below one (80, 100),
// one 16-column block (16), two whole strips (1024); K = 100 is off the 16-column grid (partial
// tiles) and off the vector loads.
TEST(Nvfp4MembersCuda, Tile16StripsEqualTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<test::NamedConfig> configs;
  QuantizerConfig c = make_config(ScalingMode::kNVFP4_16x16);
  c.rowwise = c.columnwise = true;
  configs.push_back({"nvfp4_16x16", c});
  c.scale_layout = ScaleLayout::kSwizzled;
  configs.push_back({"nvfp4_16x16_swizzled", c});
  const std::vector<test::MembersShape> shapes = {
      {{32, 0, 48, 16}, 16, 528}, {{16, 64, 0}, 0, 80}, {{0, 16, 32}, 32, 16},
      {{48, 16}, 16, 100},        {{144, 16}, 0, 1024}};
  for (const test::NamedConfig& nc : configs) {
    for (const test::MembersShape& s : shapes) {
      for (const DType dt : {DType::kFloat32, DType::kBFloat16}) {
        SCOPED_TRACE(nc.name + " " + s.name() + " " + dtype_name(dt));
        EXPECT_EQ(members_cpu_vs_cuda(nc.config, s, dt, test::InputKind::kGaussian), "");
      }
    }
  }
}

}  // namespace
}  // namespace tessera
