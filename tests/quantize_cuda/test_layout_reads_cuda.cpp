// Quantizing x through a group layout on CUDA (detail::quantize_through_layout: the FP8 block
// cast-transpose kernel and the MXFP8 tile kernel reading each row of the padded layout from x)
// equals the CPU quantizer applied to the padded copy made on the host, byte for byte: codes,
// scales, zeros in every padding row and past the last group (the device buffers start
// poisoned). FP8 block 1x128 and 128x128, MXFP8 and MXFP8 32x32 (compact and swizzled scales),
// each usage alone and both, float32 / bfloat16 / float16 with NaN / Inf, ragged and empty
// groups, the tail of x past the last group (never read), K on and off the kernels' vector
// grids. Also the map itself (LayoutRows::source_row) and the switch (takes_layout_rows), which
// run without a GPU; the device cases skip without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "quantize/nvfp4_members_case.h"
#include "quantize/quantize_backend.h"
#include "quantize_cuda/cuda_cases.h"
#include "tessera/core/device.h"

namespace tessera {
namespace {

// The switch on for one test, as it was after.
struct LayoutReadsOn {
  bool was = detail::layout_reads();
  LayoutReadsOn() { detail::set_layout_reads(true); }
  ~LayoutReadsOn() { detail::set_layout_reads(was); }
};

struct LayoutCase {
  std::vector<int64_t> counts;  // rows of x in each group
  int64_t tail;                 // rows of x past the last group
  int64_t align;                // the padded layout's group alignment (a multiple of 16)
  int64_t K;
  std::string name() const {
    std::ostringstream s;
    s << "counts";
    for (int64_t c : counts) s << ' ' << c;
    s << " tail " << tail << " align " << align << " K " << K;
    return s.str();
  }
};

// "" when quantize_through_layout on CUDA equals the CPU quantizer on the host's padded copy
// (padded_rows rows: the groups at multiples of align, then `extra` zero rows).
std::string layout_vs_padded_cpu(const QuantizerConfig& config, const LayoutCase& c, DType dt,
                                 int64_t extra) {
  const Device d = Device::cuda(0);
  const int64_t G = static_cast<int64_t>(c.counts.size());
  std::vector<int64_t> src(G + 1, 0), dst(G + 1, 0);
  for (int64_t g = 0; g < G; ++g) {
    src[g + 1] = src[g] + c.counts[g];
    dst[g + 1] = dst[g] + (c.counts[g] + c.align - 1) / c.align * c.align;
  }
  const int64_t T = src[G] + c.tail, P = dst[G] + extra, K = c.K;
  test::HostInput in = test::make_input(dt, T, K, test::InputKind::kSpecials, 5);
  test::HostInput padded{dt, P, K, std::vector<uint8_t>(static_cast<size_t>(dtype_bytes(dt, P * K)), 0)};
  const int64_t row_bytes = dtype_bytes(dt, K);
  for (int64_t g = 0; g < G; ++g) {
    if (c.counts[g] == 0) continue;
    std::memcpy(padded.bytes.data() + dst[g] * row_bytes, in.bytes.data() + src[g] * row_bytes,
                static_cast<size_t>(c.counts[g] * row_bytes));
  }
  Quantizer qc(config);
  QuantizedTensor cpu = qc.allocate(P, K);
  qc.quantize(padded.view(), cpu.view(), Backend::kCPU);

  Quantizer qg(config, d);
  QuantizedTensor gpu = qg.allocate(P, K);
  test::poison(gpu.view());
  test::DeviceInput dx(in);
  Buffer offs(static_cast<size_t>(16 * (G + 1)), d);
  copy_bytes(offs.data(), d, dst.data(), Device::cpu(), static_cast<size_t>(8 * (G + 1)));
  auto* dev_dst = static_cast<int64_t*>(offs.data());
  copy_bytes(dev_dst + G + 1, d, src.data(), Device::cpu(), static_cast<size_t>(8 * (G + 1)));
  detail::LayoutRows layout{dev_dst, dev_dst + G + 1, G, T, c.align};
  detail::quantize_through_layout(config, dx.view, layout, gpu.view(), {});
  QuantizedTensor back = qc.allocate(P, K);
  test::copy_to_host(gpu.view(), back.view());
  return test::compare_quantized(cpu.view(), back.view());
}

std::vector<LayoutCase> layout_cases() {
  return {
      {{512, 512}, 0, 128, 256},            // aligned: no padding row
      {{200, 0, 77, 1, 128}, 5, 128, 384},  // ragged, an empty group, x's tail past the groups
      {{3, 130, 0}, 0, 128, 200},           // K off the 16-column grid: the per-element path
      {{17, 33, 64}, 9, 16, 128},           // the 16-row layout (tiles span several groups)
      {{40, 1, 0, 95}, 3, 32, 96},          // the 32-row layout (MXFP8's), K off 64
      {{31, 64, 2}, 0, 32, 100},            // K off the 32-column blocks: MXFP8's partial path
      {{0, 0}, 7, 128, 128},                // no row in any group
  };
}

// The configs read through a layout: FP8 block 1x128 and 128x128, MXFP8 and MXFP8 32x32 with
// compact and swizzled scales.
std::vector<QuantizerConfig> layout_configs() {
  std::vector<QuantizerConfig> out;
  for (const ScalingMode mode : {ScalingMode::kBlock1x128, ScalingMode::kBlock128x128,
                                 ScalingMode::kMXFP8, ScalingMode::kMXFP8_32x32}) {
    out.push_back(make_config(mode));
    if (is_family(mode, ScaleFamily::kMXFP8)) {
      out.push_back(make_config(mode));
      out.back().scale_layout = ScaleLayout::kSwizzled;
    }
  }
  return out;
}

TEST(LayoutReadsCuda, EqualsTheCpuOnThePaddedCopy) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  LayoutReadsOn on;
  for (const QuantizerConfig& base : layout_configs()) {
    const ScalingMode mode = base.mode;
    for (const auto& [row, col] : {std::pair{true, true}, std::pair{true, false},
                                   std::pair{false, true}}) {
      QuantizerConfig config = base;
      config.rowwise = row;
      config.columnwise = col;
      for (const LayoutCase& c : layout_cases()) {
        if (c.align % detail::layout_rows_align(config) != 0) continue;
        for (const DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
          for (const int64_t extra : {int64_t{0}, int64_t{128}}) {
            std::ostringstream trace;
            trace << scaling_mode_name(mode)
                  << (config.scale_layout == ScaleLayout::kSwizzled ? " swizzled" : "")
                  << (row ? " rowwise" : "")
                  << (col ? " columnwise" : "") << ' ' << c.name() << ' ' << dtype_name(dt)
                  << " extra " << extra;
            SCOPED_TRACE(trace.str());
            EXPECT_EQ(layout_vs_padded_cpu(config, c, dt, extra), "");
          }
        }
      }
    }
  }
}

// NVFP4 per member through the layout (quantize_nvfp4_members with sources: the tiled member
// kernels and both amax passes read member g's rows of x, then zeros): equal to the CPU's
// quantize_nvfp4_members on the host's padded copy, byte for byte, for the 1x16 configs
// (compact / swizzled, Hadamard transform, stochastic rounding), both usages and each alone.
std::string nvfp4_layout_vs_padded_cpu(QuantizerConfig config, const LayoutCase& c, DType dt,
                                       bool row, bool col) {
  const Device d = Device::cuda(0);
  const int64_t G = static_cast<int64_t>(c.counts.size()), K = c.K;
  std::vector<int64_t> src(G + 1, 0), dst(G + 1, 0);
  for (int64_t g = 0; g < G; ++g) {
    src[g + 1] = src[g] + c.counts[g];
    dst[g + 1] = dst[g] + (c.counts[g] + c.align - 1) / c.align * c.align;
  }
  const int64_t T = src[G] + c.tail, P = dst[G] + c.align;  // one zero member-free block after
  test::HostInput in = test::make_input(dt, T, K, test::InputKind::kSpecials, 9);
  test::HostInput padded{dt, P, K,
                         std::vector<uint8_t>(static_cast<size_t>(dtype_bytes(dt, P * K)), 0)};
  const int64_t row_bytes = dtype_bytes(dt, K);
  for (int64_t g = 0; g < G; ++g) {
    if (c.counts[g] == 0) continue;
    std::memcpy(padded.bytes.data() + dst[g] * row_bytes, in.bytes.data() + src[g] * row_bytes,
                static_cast<size_t>(c.counts[g] * row_bytes));
  }
  std::vector<int64_t> offsets(G + 1);
  for (int64_t g = 0; g <= G; ++g) offsets[g] = dst[g] * K;
  config.rowwise = row;
  config.columnwise = col;
  test::MembersOutput cpu(config, P, K, G);
  detail::quantize_nvfp4_members(
      config, padded.view(), TensorView::contiguous(offsets.data(), DType::kInt64, {G + 1}),
      cpu.view(), {});

  QuantizedTensor gpu(config, P, K, d);
  gpu.ensure_usage(true, true);
  Buffer amax(static_cast<size_t>(8 * G), d), off(static_cast<size_t>(16 * (G + 1)), d);
  gpu.view().amax = TensorView::contiguous(amax.data(), DType::kFloat32, {G}, d);
  gpu.view().columnwise_amax =
      TensorView::contiguous(static_cast<float*>(amax.data()) + G, DType::kFloat32, {G}, d);
  test::poison(gpu.view());
  auto* dev_off = static_cast<int64_t*>(off.data());
  copy_bytes(dev_off, d, offsets.data(), Device::cpu(), static_cast<size_t>(8 * (G + 1)));
  copy_bytes(dev_off + G + 1, d, src.data(), Device::cpu(), static_cast<size_t>(8 * (G + 1)));
  test::DeviceInput dx(in);
  detail::quantize_nvfp4_members(
      config, dx.view, TensorView::contiguous(dev_off, DType::kInt64, {G + 1}, d), gpu.view(), {},
      TensorView::contiguous(dev_off + G + 1, DType::kInt64, {G + 1}, d));
  test::MembersOutput back(config, P, K, G);
  test::copy_to_host(gpu.view(), back.view());
  // The usages not asked for: neither side writes them (the CPU's hold zeros, the device's the
  // poison), so only those asked for are compared.
  QuantizedTensorView a = cpu.view(), b = back.view();
  for (QuantizedTensorView* v : {&a, &b}) {
    if (!row) v->data = v->scale_inv = v->amax = TensorView{};
    if (!col) v->columnwise_data = v->columnwise_scale_inv = v->columnwise_amax = TensorView{};
  }
  return test::compare_quantized(a, b);
}

TEST(LayoutReadsCuda, Nvfp4MembersEqualTheCpuOnThePaddedCopy) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  LayoutReadsOn on;
  for (const test::NamedConfig& nc : test::nvfp4_configs()) {
    if (scaling_mode_info(nc.config.mode).block_rows != 1) continue;  // 16x16: the weights'
    for (const auto& [row, col] : {std::pair{true, true}, std::pair{true, false},
                                   std::pair{false, true}}) {
      for (const LayoutCase& c : layout_cases()) {
        if (c.K % 16 != 0) continue;  // the tiled kernels' grid (takes the padded copy otherwise)
        for (const DType dt : {DType::kFloat32, DType::kBFloat16}) {
          std::ostringstream trace;
          trace << nc.name << (row ? " rowwise" : "") << (col ? " columnwise" : "") << ' '
                << c.name() << ' ' << dtype_name(dt);
          SCOPED_TRACE(trace.str());
          EXPECT_EQ(nvfp4_layout_vs_padded_cpu(nc.config, c, dt, row, col), "");
        }
      }
    }
  }
}

// LayoutRows::source_row (the kernel's map, host logic) against the padded copy's rows written
// out one by one: every row of the layout, and rows past it; *end where the group's rows of x
// stop (x's tail past the last group is never a source). Runs without a GPU.
TEST(LayoutReadsCuda, SourceRowIsThePaddedCopysRow) {
  for (const LayoutCase& c : layout_cases()) {
    SCOPED_TRACE(c.name());
    const int64_t G = static_cast<int64_t>(c.counts.size());
    std::vector<int64_t> src(G + 1, 0), dst(G + 1, 0), want;
    for (int64_t g = 0; g < G; ++g) {
      src[g + 1] = src[g] + c.counts[g];
      dst[g + 1] = dst[g] + (c.counts[g] + c.align - 1) / c.align * c.align;
      for (int64_t r = 0; r < dst[g + 1] - dst[g]; ++r) want.push_back(r < c.counts[g] ? src[g] + r : -1);
    }
    for (int64_t r = 0; r < c.align; ++r) want.push_back(-1);  // past the last group
    const detail::LayoutRows layout{dst.data(), src.data(), G, src[G] + c.tail, c.align};
    for (int64_t r = 0; r < static_cast<int64_t>(want.size()); ++r) {
      int64_t end = -7;
      ASSERT_EQ(layout.source_row(r, &end), want[r]) << "row " << r;
      if (want[r] >= 0) {
        const int64_t g = static_cast<int64_t>(
            std::upper_bound(dst.begin(), dst.end(), r) - dst.begin() - 1);
        EXPECT_EQ(end, src[g + 1]) << "row " << r;
      }
    }
  }
}

// Host logic only (no device is touched): runs without a GPU too.
TEST(LayoutReadsCuda, TakesOnlyTheBlockFamilyOnCudaWithTheSwitchOn) {
  const TensorView x = TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{256}),
                                              DType::kBFloat16, {16, 128}, Device::cuda(0));
  const bool was = detail::layout_reads();
  detail::set_layout_reads(false);
  EXPECT_FALSE(detail::takes_layout_rows(make_config(ScalingMode::kBlock1x128), x));
  detail::set_layout_reads(true);
  EXPECT_TRUE(detail::takes_layout_rows(make_config(ScalingMode::kBlock1x128), x));
  EXPECT_TRUE(detail::takes_layout_rows(make_config(ScalingMode::kBlock128x128), x));
  EXPECT_TRUE(detail::takes_layout_rows(make_config(ScalingMode::kMXFP8), x));
  EXPECT_TRUE(detail::takes_layout_rows(make_config(ScalingMode::kMXFP8_32x32), x));
  for (const ScalingMode m : {ScalingMode::kTensor, ScalingMode::kRowwise, ScalingMode::kNVFP4,
                              ScalingMode::kNVFP4_16x16}) {
    EXPECT_FALSE(detail::takes_layout_rows(make_config(m), x)) << scaling_mode_name(m);
  }
  // NVFP4's member kernels: 1x16 blocks, K % 16 == 0, x 16-byte aligned.
  EXPECT_TRUE(detail::nvfp4_members_take_layout(make_config(ScalingMode::kNVFP4), x));
  EXPECT_FALSE(detail::nvfp4_members_take_layout(make_config(ScalingMode::kNVFP4_16x16), x));
  EXPECT_FALSE(detail::nvfp4_members_take_layout(make_config(ScalingMode::kBlock1x128), x));
  const TensorView odd_k = TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{256}),
                                                  DType::kBFloat16, {16, 120}, Device::cuda(0));
  const TensorView unaligned = TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{264}),
                                                      DType::kBFloat16, {16, 128}, Device::cuda(0));
  EXPECT_FALSE(detail::nvfp4_members_take_layout(make_config(ScalingMode::kNVFP4), odd_k));
  EXPECT_FALSE(detail::nvfp4_members_take_layout(make_config(ScalingMode::kNVFP4), unaligned));
  const TensorView host = TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{256}),
                                                 DType::kBFloat16, {16, 128});
  EXPECT_FALSE(detail::takes_layout_rows(make_config(ScalingMode::kBlock1x128), host));
  EXPECT_FALSE(detail::nvfp4_members_take_layout(make_config(ScalingMode::kNVFP4), host));
  detail::set_layout_reads(false);
  EXPECT_FALSE(detail::nvfp4_members_take_layout(make_config(ScalingMode::kNVFP4), x));
  detail::set_layout_reads(was);
}

}  // namespace
}  // namespace tessera
