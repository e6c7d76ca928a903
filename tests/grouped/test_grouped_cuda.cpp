// GroupedTensor on CUDA: creation from device split sizes performs no device→host copy — it is
// captured in a CUDA graph (capture fails on any sync), the offsets recomputation is captured in
// strict (global) mode and replayed with changed splits; offsets checked against the host
// definition. Also: precomputed device offsets are wrapped, member views without host metadata
// are a clear error, and the CUDA grouped quantize matches the CPU path (or reports that the
// kernels are not built). Skips without a GPU.
#include <gtest/gtest.h>

#include <random>

#include "grouped/grouped_cases.h"
#include "tessera/core/status.h"
#include "tessera/grouped/grouped_quantize.h"
#include "tessera/grouped/grouped_tensor.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tessera {
namespace {

#if defined(TESSERA_WITH_CUDA)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

constexpr int64_t kMembers = 8, kCols = 256, kCapacity = 4096;

QuantizerConfig both_usages_mxfp8() {
  QuantizerConfig c = make_config(ScalingMode::kMXFP8);
  c.columnwise = true;
  return c;
}

std::vector<int64_t> read_int64(const TensorView& v) {
  std::vector<int64_t> h(static_cast<size_t>(v.numel()));
  copy_bytes(h.data(), Device::cpu(), v.data, v.device, h.size() * sizeof(int64_t));
  return h;
}

// The offsets every field must hold for `splits`, from the host definitions.
void expect_metadata(const GroupedTensorView& v, const std::vector<int32_t>& splits,
                     const std::string& label) {
  std::vector<int64_t> rows(splits.begin(), splits.end()), cols(rows.size(), kCols);
  std::vector<int64_t> offsets{0};
  for (int64_t r : rows) offsets.push_back(offsets.back() + r * kCols);
  EXPECT_EQ(read_int64(v.first_dims), rows) << label;
  EXPECT_EQ(read_int64(v.tensor_offsets), offsets) << label;
  EXPECT_EQ(read_int64(v.scale_offsets), grouped_scale_offsets(v.config, rows, cols, false))
      << label;
  EXPECT_EQ(read_int64(v.columnwise_scale_offsets),
            grouped_scale_offsets(v.config, rows, cols, true)) << label;
}

std::vector<int32_t> random_splits(std::mt19937& rng) {
  std::vector<int32_t> s(kMembers);
  int64_t left = kCapacity;
  for (auto& v : s) {
    v = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, left / 3)(rng));
    if (rng() % 4 == 0) v = 0;  // empty experts
    left -= v;
  }
  return s;
}

struct DeviceSplits {
  Buffer buffer{kMembers * sizeof(int32_t), Device::cuda(0)};
  TensorView view() const {
    return TensorView::contiguous(buffer.data(), DType::kInt32, {kMembers}, Device::cuda(0));
  }
  void set(const std::vector<int32_t>& s) {
    copy_bytes(buffer.data(), buffer.device(), s.data(), Device::cpu(), s.size() * 4);
  }
};

TEST(GroupedCuda, CreationFromDeviceSplitsIsCapturedAndReplayed) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  DeviceSplits splits;
  std::mt19937 rng(42);
  std::vector<int32_t> host = random_splits(rng);
  splits.set(host);
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreate(&s));  // a blocking stream: legacy-stream syncs break its capture
  GroupedTensorOptions o;
  o.config = both_usages_mxfp8();
  o.device = Device::cuda(0);
  o.capacity_rows = kCapacity;

  // 1. The whole creation (allocation included) in a relaxed capture.
  GroupedTensor t;
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  try {
    t = GroupedTensor::from_device_splits(splits.view(), kCols, o, {}, {}, Stream{s});
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << "creation broke the capture: " << e.what();
  }
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  EXPECT_FALSE(t.has_host_metadata());
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
  expect_metadata(t.view(), host, "captured creation");

  // 2. The offsets recomputation in a strict capture, replayed with new split sizes.
  cudaGraph_t update = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  try {
    t.update_from_device_splits(splits.view(), {}, {}, Stream{s});
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &update);
    FAIL() << "update broke the capture: " << e.what();
  }
  CUDA_OK(cudaStreamEndCapture(s, &update));
  cudaGraphExec_t update_exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&update_exec, update, 0));
  for (int step = 0; step < 5; ++step) {
    host = random_splits(rng);
    if (step == 0) host.assign(kMembers, 0);
    splits.set(host);
    CUDA_OK(cudaGraphLaunch(update_exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    expect_metadata(t.view(), host, "replay " + std::to_string(step));
  }
  CUDA_OK(cudaGraphExecDestroy(update_exec));
  CUDA_OK(cudaGraphDestroy(update));
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaStreamDestroy(s));

  try {
    t.member(0);
    ADD_FAILURE() << "member() without host metadata must fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("metadata lives only on cuda:0"), std::string::npos)
        << e.what();
  }
}

TEST(GroupedCuda, PrecomputedDeviceOffsetsAreWrapped) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  DeviceSplits splits;
  const std::vector<int32_t> host{5, 0, 100, 7, 0, 64, 1, 3};
  splits.set(host);
  const OffsetsSpec spec{kCols, true, DType::kInt64, 1};
  OffsetsBundle offsets = splits_to_offsets_multi(splits.view(), {&spec, 1});
  GroupedTensorOptions o;
  o.config = both_usages_mxfp8();
  o.device = Device::cuda(0);
  o.capacity_rows = kCapacity;
  GroupedTensor t = GroupedTensor::from_device_splits(splits.view(), kCols, o, offsets.outputs[0]);
  EXPECT_EQ(t.view().tensor_offsets.data, offsets.outputs[0].data);
  expect_metadata(t.view(), host, "precomputed");
}

TEST(GroupedCuda, ContiguousQuantizeMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::vector<int32_t> host{5, 0, 100, 7, 0, 64, 1, 3};
  DeviceSplits splits;
  splits.set(host);
  const QuantizerConfig c = both_usages_mxfp8();
  GroupedTensorOptions o;
  o.config = c;
  o.device = Device::cuda(0);
  o.capacity_rows = 256;
  GroupedTensor gpu = GroupedTensor::from_device_splits(splits.view(), kCols, o);
  std::vector<std::array<int64_t, 2>> shapes;
  for (int32_t r : host) shapes.push_back({r, kCols});
  GroupedTensorOptions co = o;
  co.device = Device::cpu();
  co.mode = GroupedShapeMode::kVaryingFirst;
  GroupedTensor cpu = GroupedTensor::from_shapes(shapes, co);
  const testing::HostInput x(testing::random_values(256 * kCols, 9), 256, kCols,
                             DType::kBFloat16);
  Buffer dx(static_cast<size_t>(x.view.nbytes()), Device::cuda(0));
  copy_bytes(dx.data(), dx.device(), x.view.data, Device::cpu(), dx.bytes());
  const TensorView x_gpu = TensorView::contiguous(dx.data(), DType::kBFloat16, {256, kCols},
                                                  Device::cuda(0));
  Quantizer qg(c, Device::cuda(0));
  try {
    grouped_quantize_contiguous(qg, x_gpu, gpu);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kUnsupported) << e.what();
    GTEST_SKIP() << "CUDA grouped quantize kernels not built: " << e.what();
  }
  Quantizer qc(c);
  grouped_quantize_contiguous(qc, x.view, cpu);
  const GroupedTensorView& cv = cpu.view();
  const int64_t live = cv.host.tensor_offsets.as<const int64_t>()[kMembers];
  for (bool cw : {false, true}) {
    const TensorView& gd = cw ? gpu.view().columnwise_data : gpu.view().data;
    std::vector<uint8_t> got(static_cast<size_t>(live));
    copy_bytes(got.data(), Device::cpu(), gd.data, gd.device, got.size());
    const auto* want = static_cast<const uint8_t*>((cw ? cv.columnwise_data : cv.data).data);
    ASSERT_EQ(0, std::memcmp(got.data(), want, got.size())) << (cw ? "columnwise" : "rowwise");
    // Scales: each member's matrix (slot slack is unspecified on the device).
    const TensorView& gs = cw ? gpu.view().columnwise_scale_inv : gpu.view().scale_inv;
    const TensorView& cs = cw ? cv.columnwise_scale_inv : cv.scale_inv;
    std::vector<uint8_t> scales(static_cast<size_t>(gs.nbytes()));
    copy_bytes(scales.data(), Device::cpu(), gs.data, gs.device, scales.size());
    for (int64_t g = 0; g < kMembers; ++g) {
      const int64_t off = (cw ? cv.host.columnwise_scale_offsets : cv.host.scale_offsets)
                              .as<const int64_t>()[g];
      const int64_t n = scale_shape(c, host[g], kCols, cw).bytes();
      ASSERT_EQ(0, std::memcmp(scales.data() + off, static_cast<const uint8_t*>(cs.data) + off,
                               static_cast<size_t>(n)))
          << "member " << g << (cw ? " columnwise" : " rowwise") << " scales";
    }
  }
}

#else

TEST(GroupedCuda, SkippedWithoutTheCudaBackend) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace tessera
