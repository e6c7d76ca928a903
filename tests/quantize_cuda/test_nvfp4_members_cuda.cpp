// NVFP4 per member in place on CUDA (quantize_nvfp4_members_cuda, device member offsets) equals
// the CPU (tests/quantize/test_nvfp4_members.cpp holds the CPU to the standalone quantizer) byte
// for byte: codes, scales, per-member amaxes, zeros past the last member and in empty members
// (the device buffers start poisoned), for every NVFP4 config (compact / swizzled, 16x16 tiles,
// Hadamard transform, stochastic rounding), ragged members, K on and off the tiled kernels'
// grid, float32 and bfloat16 input with NaN / Inf. Skips without a GPU.
#include <gtest/gtest.h>

#include "quantize/nvfp4_members_case.h"
#include "quantize_cuda/cuda_cases.h"
#include "tessera/core/device.h"

namespace tessera {
namespace {

TEST(Nvfp4MembersCuda, EqualsTheCpuByteForByte) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device d = Device::cuda(0);
  for (const test::NamedConfig& nc : test::nvfp4_configs()) {
    for (const test::MembersShape& s : test::members_shapes()) {
      for (const DType dt : {DType::kFloat32, DType::kBFloat16}) {
        SCOPED_TRACE(nc.name + " " + s.name() + " " + dtype_name(dt));
        const int64_t groups = static_cast<int64_t>(s.rows.size()), M = s.total();
        test::HostInput in = test::make_input(dt, M, s.K, test::InputKind::kSpecials, 21);
        std::vector<int64_t> offsets = s.offsets();
        test::MembersOutput cpu(nc.config, M, s.K, groups);
        detail::quantize_nvfp4_members(
            nc.config, in.view(),
            TensorView::contiguous(offsets.data(), DType::kInt64, {groups + 1}), cpu.view(), {});

        QuantizedTensor gpu(nc.config, M, s.K, d);
        gpu.ensure_usage(true, true);
        Buffer amax(static_cast<size_t>(8 * groups), d), off(static_cast<size_t>(8 * (groups + 1)), d);
        gpu.view().amax = TensorView::contiguous(amax.data(), DType::kFloat32, {groups}, d);
        gpu.view().columnwise_amax = TensorView::contiguous(
            static_cast<float*>(amax.data()) + groups, DType::kFloat32, {groups}, d);
        test::poison(gpu.view());
        copy_bytes(off.data(), d, offsets.data(), Device::cpu(), off.bytes());
        test::DeviceInput dx(in);
        detail::quantize_nvfp4_members(
            nc.config, dx.view, TensorView::contiguous(off.data(), DType::kInt64, {groups + 1}, d),
            gpu.view(), {});
        test::MembersOutput back(nc.config, M, s.K, groups);
        test::copy_to_host(gpu.view(), back.view());
        EXPECT_EQ(test::compare_quantized(cpu.view(), back.view()), "");
      }
    }
  }
}

}  // namespace
}  // namespace tessera
