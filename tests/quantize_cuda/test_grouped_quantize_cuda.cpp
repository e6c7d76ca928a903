// Grouped CUDA quantization of a contiguous varying-first input with DEVICE metadata: every
// member == the CPU backend quantizing that member alone (byte for byte), empty members, odd
// sizes, [128, 128, M-256], compact and swizzled MXFP8 scales, capacity half full with
// everything past the live rows untouched (poison kept), the noop flag (float32 and int32)
// writing nothing, and a CUDA graph captured once and replayed while the split sizes change
// between replays; NVFP4 16x16 weights (both copies from the strip kernel; per-member amaxes,
// a poisoned odd member); that Buffer::fill_bytes / copy_bytes, which those fixtures use before
// launching on a non-blocking stream, are synchronous for such streams (issue 19). Skips without
// a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "quantize/cuda/grouped_quantize_cuda.h"
#include "quantize_cuda/cuda_cases.h"
#include "tessera/core/device.h"

namespace tessera {
namespace {

constexpr uint8_t kPoison = 0xA5;

// Device buffers of a grouped (capacity_rows, K) tensor plus its device metadata. NVFP4: also
// the per-member amaxes (amax: n rowwise then n columnwise floats); E2M1 codes are two per byte.
struct GroupedFixture {
  QuantizerConfig config;
  int64_t n, capacity_rows, K;
  DType dtype;
  Buffer x, data, scale, col_data, col_scale, offsets, soffsets, col_soffsets, noop, amax;
  int64_t scale_bytes = 0, col_scale_bytes = 0;
  std::vector<uint8_t> host_x;  // (capacity_rows, K) input bytes

  GroupedFixture(const QuantizerConfig& c, int64_t members, int64_t cap, int64_t cols, DType dt,
                 test::InputKind kind = test::InputKind::kSpecials)
      : config(c), n(members), capacity_rows(cap), K(cols), dtype(dt) {
    const Device d = Device::cuda(0);
    const MatrixShape rs = scale_shape(c, cap, cols, false), cs = scale_shape(c, cap, cols, true);
    // Worst case of Σ per-member scale sizes: every member may add one partial block, or with
    // swizzled scales up to 127 padding rows (rowwise) and 3 padding columns of roundup(K, 128)
    // rows (columnwise).
    const int64_t row_pad = c.scale_layout == ScaleLayout::kSwizzled ? 128 : 32;
    const int64_t col_pad = c.scale_layout == ScaleLayout::kSwizzled ? (cols + 127) / 128 * 128 * 4 : cols;
    scale_bytes = dtype_bytes(rs.dtype, rs.numel() + members * (rs.numel() / std::max<int64_t>(cap, 1) + 1) * row_pad + 64);
    col_scale_bytes = dtype_bytes(cs.dtype, cs.numel() + members * col_pad + 64);
    x = Buffer(static_cast<size_t>(dtype_bytes(dt, cap * cols)), d);
    data = Buffer(static_cast<size_t>(cap * cols), d);
    col_data = Buffer(static_cast<size_t>(cap * cols), d);
    scale = Buffer(static_cast<size_t>(scale_bytes), d);
    col_scale = Buffer(static_cast<size_t>(col_scale_bytes), d);
    offsets = Buffer(static_cast<size_t>(8 * (members + 1)), d);
    soffsets = Buffer(static_cast<size_t>(8 * (members + 1)), d);
    col_soffsets = Buffer(static_cast<size_t>(8 * (members + 1)), d);
    noop = Buffer(4, d);
    amax = Buffer(static_cast<size_t>(8 * std::max<int64_t>(members, 1)), d);
    test::HostInput in = test::make_input(dt, cap, cols, kind, 77);
    host_x = in.bytes;
    copy_bytes(x.data(), d, host_x.data(), Device::cpu(), host_x.size());
  }

  bool nvfp4() const { return is_family(config.mode, ScaleFamily::kNVFP4); }

  void poison_outputs() {
    for (Buffer* b : {&data, &scale, &col_data, &col_scale, &amax}) b->fill_bytes(kPoison);
  }

  // Writes the device metadata of `splits` (host values; the kernels only see the device copy).
  void set_splits(const std::vector<int64_t>& splits) {
    std::vector<int64_t> off(static_cast<size_t>(n + 1), 0), so(off), cso(off);
    for (int64_t g = 0; g < n; ++g) {
      off[g + 1] = off[g] + splits[g] * K;
      so[g + 1] = so[g] + scale_shape(config, splits[g], K, false).numel();
      cso[g + 1] = cso[g] + scale_shape(config, splits[g], K, true).numel();
    }
    const Device d = Device::cuda(0);
    copy_bytes(offsets.data(), d, off.data(), Device::cpu(), off.size() * 8);
    copy_bytes(soffsets.data(), d, so.data(), Device::cpu(), so.size() * 8);
    copy_bytes(col_soffsets.data(), d, cso.data(), Device::cpu(), cso.size() * 8);
  }

  GroupedTensorView view() {
    GroupedTensorView v;
    const Device d = Device::cuda(0);
    v.num_tensors = n;
    v.mode = GroupedShapeMode::kVaryingFirst;
    v.logical_rows = capacity_rows;
    v.logical_cols = K;
    v.uniform_cols = K;
    v.dtype = config.element;
    v.config = config;
    v.tensor_offsets = TensorView::contiguous(offsets.data(), DType::kInt64, {n + 1}, d);
    v.scale_offsets = TensorView::contiguous(soffsets.data(), DType::kInt64, {n + 1}, d);
    v.columnwise_scale_offsets = TensorView::contiguous(col_soffsets.data(), DType::kInt64, {n + 1}, d);
    v.data = TensorView::contiguous(data.data(), config.element, {capacity_rows * K}, d);
    v.columnwise_data = TensorView::contiguous(col_data.data(), config.element, {capacity_rows * K}, d);
    const DType sd = scale_shape(config, 1, K, false).dtype;
    v.scale_inv = TensorView::contiguous(scale.data(), sd, {scale_bytes / dtype_bytes(sd, 1)}, d);
    v.columnwise_scale_inv =
        TensorView::contiguous(col_scale.data(), sd, {col_scale_bytes / dtype_bytes(sd, 1)}, d);
    if (nvfp4()) {
      v.amax = TensorView::contiguous(amax.data(), DType::kFloat32, {n}, d);
      v.columnwise_amax =
          TensorView::contiguous(static_cast<float*>(amax.data()) + n, DType::kFloat32, {n}, d);
    }
    v.device = d;
    return v;
  }

  TensorView x_view() {
    return TensorView::contiguous(x.data(), dtype, {capacity_rows, K}, Device::cuda(0));
  }

  static std::vector<uint8_t> to_host(const Buffer& b) {
    std::vector<uint8_t> h(b.bytes());
    copy_bytes(h.data(), Device::cpu(), b.data(), Device::cuda(0), h.size());
    return h;
  }

  // "" when every member equals the CPU backend on that member alone (NVFP4: its amaxes too;
  // an empty member's stay 0) and every byte past the members is still poison; else the first
  // problem. NVFP4 members with an odd row count break the columnwise storage contract and are
  // poisoned: every logical columnwise scale is the E4M3 NaN code (swizzle padding 0), their
  // columnwise codes are not written, the rest equals the CPU.
  std::string check(const std::vector<int64_t>& splits) {
    const std::vector<uint8_t> d = to_host(data), s = to_host(scale), cd = to_host(col_data),
                               cs = to_host(col_scale), am = to_host(amax);
    int64_t row = 0, so = 0, cso = 0;
    const int64_t esz = dtype_bytes(dtype, 1);
    const bool e2m1 = config.element == DType::kFloat4E2M1;
    auto data_at = [&](int64_t rows) { return e2m1 ? rows * K / 2 : rows * K; };
    for (int64_t g = 0; g < n; ++g) {
      const int64_t r = splits[g];
      const std::string tag = "member " + std::to_string(g) + " (" + std::to_string(r) + " rows): ";
      if (nvfp4() && r == 0) {
        for (int64_t i = 0; i < 4; ++i) {
          if ((config.rowwise && am[static_cast<size_t>(g * 4 + i)] != 0) ||
              (config.columnwise && am[static_cast<size_t>((n + g) * 4 + i)] != 0)) {
            return tag + "an empty member's amax is not 0";
          }
        }
      }
      if (r > 0) {
        test::HostInput in{dtype, r, K, {}};
        in.bytes.assign(host_x.begin() + row * K * esz, host_x.begin() + (row + r) * K * esz);
        Quantizer q(config);
        QuantizedTensor ref = q.allocate(r, K);
        q.quantize(in.view(), ref.view(), Backend::kCPU);
        const QuantizedTensorView& v = ref.view();
        auto cmp = [&](const TensorView& want, const std::vector<uint8_t>& got, int64_t at,
                       const char* what) -> std::string {
          if (want.data == nullptr) return "";
          const auto* w = want.as<const uint8_t>();
          for (int64_t i = 0; i < want.nbytes(); ++i) {
            if (got[static_cast<size_t>(at + i)] != w[i]) {
              return tag + what + " byte " + std::to_string(i) + ": " +
                     std::to_string(got[static_cast<size_t>(at + i)]) + " vs CPU " +
                     std::to_string(w[i]);
            }
          }
          return "";
        };
        const int64_t sb = dtype_bytes(scale_shape(config, r, K, false).dtype, 1);
        const int64_t csb = dtype_bytes(scale_shape(config, r, K, true).dtype, 1);
        const bool poisoned = nvfp4() && config.columnwise && r % 2 != 0;
        std::vector<uint8_t> nan_scales, untouched_codes;  // what a poisoned member holds
        TensorView want_col_scale = v.columnwise_scale_inv, want_col_data = v.columnwise_data;
        if (poisoned) {
          const MatrixShape cs_shape = scale_shape(config, r, K, true);
          nan_scales.assign(static_cast<size_t>(cs_shape.numel()), 0);
          const int64_t blocks = (r + 15) / 16;
          for (int64_t k = 0; k < K; ++k) {
            for (int64_t b = 0; b < blocks; ++b) {
              const int64_t at = config.scale_layout == ScaleLayout::kSwizzled
                                     ? swizzled_scale_offset(k, b, cs_shape.cols)
                                     : k * blocks + b;
              nan_scales[static_cast<size_t>(at)] = 0x7F;
            }
          }
          untouched_codes.assign(static_cast<size_t>(r * K / 2), kPoison);
          want_col_scale = TensorView::contiguous(nan_scales.data(), DType::kUInt8,
                                                  {cs_shape.numel()});
          want_col_data = TensorView::contiguous(untouched_codes.data(), DType::kUInt8,
                                                 {r * K / 2});
        }
        for (const std::string& m :
             {cmp(v.data, d, data_at(row), "data"), cmp(v.scale_inv, s, so * sb, "scale_inv"),
              cmp(want_col_data, cd, data_at(row), "columnwise_data"),
              cmp(want_col_scale, cs, cso * csb, "columnwise_scale_inv"),
              nvfp4() ? cmp(v.amax, am, g * 4, "amax") : std::string(),
              nvfp4() ? cmp(v.columnwise_amax, am, (n + g) * 4, "columnwise_amax")
                      : std::string()}) {
          if (!m.empty()) return m;
        }
      }
      row += r;
      so += scale_shape(config, r, K, false).numel();
      cso += scale_shape(config, r, K, true).numel();
    }
    const int64_t sb = dtype_bytes(scale_shape(config, 1, K, false).dtype, 1);
    const int64_t csb = dtype_bytes(scale_shape(config, 1, K, true).dtype, 1);
    auto untouched = [&](const std::vector<uint8_t>& b, int64_t from, const char* what,
                         bool used) -> std::string {
      for (size_t i = static_cast<size_t>(used ? from : 0); i < b.size(); ++i) {
        if (b[i] != kPoison) return std::string(what) + ": byte " + std::to_string(i) +
                                    " past the live members was written";
      }
      return "";
    };
    for (const std::string& m :
         {untouched(d, data_at(row), "data", config.rowwise), untouched(s, so * sb, "scale_inv", config.rowwise),
          untouched(cd, data_at(row), "columnwise_data", config.columnwise),
          untouched(cs, cso * csb, "columnwise_scale_inv", config.columnwise)}) {
      if (!m.empty()) return m;
    }
    return "";
  }
};

struct GroupedCase {
  std::string name;
  QuantizerConfig config;
};

std::vector<GroupedCase> grouped_cases() {
  std::vector<GroupedCase> v;
  QuantizerConfig c = make_config(ScalingMode::kMXFP8);
  c.columnwise = true;
  v.push_back({"mxfp8_both", c});
  c.e8m0_rounding = E8M0Rounding::kFloor;
  c.element = DType::kFloat8E5M2;
  v.push_back({"mxfp8_floor_e5m2_both", c});
  c = make_config(ScalingMode::kMXFP8);
  c.rowwise = false;
  c.columnwise = true;
  v.push_back({"mxfp8_columnwise", c});
  c = make_config(ScalingMode::kMXFP8_32x32);
  c.columnwise = true;
  v.push_back({"mxfp8_32x32_both", c});
  // Swizzled (GEMM-ready) scales: each member's scale matrices padded to 128 x 4 tiles on their
  // own, the padding zero, exactly the CPU layout of that member alone.
  c = make_config(ScalingMode::kMXFP8);
  c.columnwise = true;
  c.scale_layout = ScaleLayout::kSwizzled;
  v.push_back({"mxfp8_swizzled_both", c});
  c.rowwise = false;
  c.e8m0_rounding = E8M0Rounding::kFloor;
  v.push_back({"mxfp8_swizzled_floor_columnwise", c});
  c = make_config(ScalingMode::kMXFP8_32x32);
  c.scale_layout = ScaleLayout::kSwizzled;
  v.push_back({"mxfp8_32x32_swizzled_rowwise", c});
  v.push_back({"fp8_rowwise", make_config(ScalingMode::kRowwise)});
  return v;
}

class GroupedCuda : public ::testing::TestWithParam<GroupedCase> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(GroupedCuda, SplitCasesMatchCpuPerMember) {
  struct Split {
    std::vector<int64_t> sizes;
    int64_t capacity, K;
  };
  const std::vector<Split> splits = {
      {{0, 5, 0, 33, 128, 1}, 167, 256},          // empty members first / middle, odd sizes
      {{128, 128, 744}, 1000, 96},                // [128, 128, M - 256]
      {{100, 0, 200}, 600, 7168},                 // capacity half full
      {{3, 0, 0, 61}, 130, 100},                  // K not a multiple of 32 (scalar path)
      {{0, 0, 0}, 64, 64},                        // every member empty
  };
  for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
    for (const Split& s : splits) {
      GroupedFixture f(GetParam().config, static_cast<int64_t>(s.sizes.size()), s.capacity, s.K, dt);
      f.set_splits(s.sizes);
      f.poison_outputs();
      detail::grouped_quantize_contiguous_cuda(f.config, f.x_view(), f.view(), TensorView{}, Stream{});
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::string m = f.check(s.sizes);
      ASSERT_TRUE(m.empty()) << GetParam().name << " " << dtype_name(dt) << " K=" << s.K << ": " << m;
    }
  }
}

TEST_P(GroupedCuda, NoopFlagWritesNothing) {
  GroupedFixture f(GetParam().config, 3, 300, 256, DType::kBFloat16);
  f.set_splits({100, 0, 150});
  for (DType nd : {DType::kFloat32, DType::kInt32}) {
    f.poison_outputs();
    const float one_f = 1.0f;
    const int32_t one_i = 1;
    copy_bytes(f.noop.data(), Device::cuda(0), nd == DType::kFloat32 ? static_cast<const void*>(&one_f) : &one_i,
               Device::cpu(), 4);
    detail::grouped_quantize_contiguous_cuda(
        f.config, f.x_view(), f.view(), TensorView::contiguous(f.noop.data(), nd, {1}, Device::cuda(0)),
        Stream{});
    const std::vector<uint8_t> d = GroupedFixture::to_host(f.data), s = GroupedFixture::to_host(f.scale);
    EXPECT_TRUE(std::all_of(d.begin(), d.end(), [](uint8_t b) { return b == kPoison; }));
    EXPECT_TRUE(std::all_of(s.begin(), s.end(), [](uint8_t b) { return b == kPoison; }));
    // Flag cleared: the same call quantizes.
    const float zero = 0.0f;
    copy_bytes(f.noop.data(), Device::cuda(0), &zero, Device::cpu(), 4);
    detail::grouped_quantize_contiguous_cuda(
        f.config, f.x_view(), f.view(), TensorView::contiguous(f.noop.data(), nd, {1}, Device::cuda(0)),
        Stream{});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(f.check({100, 0, 150}), "") << dtype_name(nd) << " noop";
  }
}

TEST_P(GroupedCuda, GraphReplaysFollowDeviceSplits) {
  GroupedFixture f(GetParam().config, 4, 512, 512, DType::kBFloat16);
  f.set_splits({128, 128, 128, 128});
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  detail::grouped_quantize_contiguous_cuda(f.config, f.x_view(), f.view(), TensorView{},
                                           Stream{reinterpret_cast<void*>(s)});
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const std::vector<std::vector<int64_t>> replays = {
      {128, 128, 128, 128}, {0, 300, 1, 77}, {31, 0, 0, 0}, {0, 0, 0, 0}, {200, 0, 200, 112}};
  for (const auto& sizes : replays) {
    f.set_splits(sizes);  // only the device metadata changes; the graph is not rebuilt
    f.poison_outputs();
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::string m = f.check(sizes);
    EXPECT_TRUE(m.empty()) << GetParam().name << " replay " << sizes[0] << "," << sizes[1] << ","
                           << sizes[2] << "," << sizes[3] << ": " << m;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Recipes, GroupedCuda, ::testing::ValuesIn(grouped_cases()),
                         [](const auto& p) { return p.param.name; });

// NVFP4 16x16 tiles without stochastic rounding or the transform (the weights, one quantization
// per expert): both copies of every member from one launch of the strip kernel (16 rows x 512
// columns per strip), each member with its own amaxes, equal to the CPU on the member alone.
// Members: multiples of 16 rows, even counts off the 16-row grid, an odd count (its columnwise
// copy poisoned), empty ones; K past one strip (528), below one (80), one 16-column block (16),
// off the 16-column grid and the vector loads (100), two whole strips (1024); compact and
// swizzled scales; capacity rows past the live ones (never written); float32 and bfloat16 input
// (Gaussian, so the amaxes are finite and the scales differ), NaN / Inf input once; 4096 members.
TEST(GroupedCudaNvfp4, Tile16BothCopiesMatchCpuPerMember) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  QuantizerConfig compact = make_config(ScalingMode::kNVFP4_16x16);
  compact.rowwise = compact.columnwise = true;
  QuantizerConfig swizzled = compact;
  swizzled.scale_layout = ScaleLayout::kSwizzled;
  const std::vector<std::vector<int64_t>> splits = {
      {32, 34, 0, 17, 48, 2, 0},  // member 3 (17 rows) is poisoned; members 4.. start on odd rows
      {0, 160, 16},
      {0, 0, 0},
  };
  auto run = [](const QuantizerConfig& config, const std::vector<int64_t>& sizes, int64_t K,
                DType dt, test::InputKind kind) -> std::string {
    int64_t live = 0;
    for (int64_t r : sizes) live += r;
    GroupedFixture f(config, static_cast<int64_t>(sizes.size()), live + 24, K, dt, kind);
    f.set_splits(sizes);
    f.poison_outputs();
    detail::grouped_quantize_contiguous_cuda(config, f.x_view(), f.view(), TensorView{}, Stream{});
    if (cudaDeviceSynchronize() != cudaSuccess) return "CUDA error";
    return f.check(sizes);
  };
  for (const QuantizerConfig& config : {compact, swizzled}) {
    const char* layout = config.scale_layout == ScaleLayout::kSwizzled ? "swizzled" : "compact";
    for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
      for (int64_t K : {528, 80, 16, 100, 1024}) {
        for (size_t i = 0; i < splits.size(); ++i) {
          const std::string m = run(config, splits[i], K, dt, test::InputKind::kGaussian);
          ASSERT_TRUE(m.empty()) << layout << " " << dtype_name(dt) << " K=" << K << " split "
                                 << i << ": " << m;
        }
      }
    }
  }
  const std::string m = run(compact, splits[0], 528, DType::kBFloat16, test::InputKind::kSpecials);
  EXPECT_TRUE(m.empty()) << "NaN / Inf input: " << m;
  // kMaxGroupedMembers members: the member table with the strip passes 48 KB of shared memory
  // (the launcher raises the kernel's limit).
  std::vector<int64_t> many(4096);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i % 3 == 0 ? 0 : (i % 3 == 1 ? 2 : 16);
  many[1001] = 5;  // poisoned
  for (const QuantizerConfig& config : {compact, swizzled}) {
    const char* layout = config.scale_layout == ScaleLayout::kSwizzled ? "swizzled" : "compact";
    const std::string mm = run(config, many, 80, DType::kBFloat16, test::InputKind::kGaussian);
    EXPECT_TRUE(mm.empty()) << "4096 members, " << layout << ": " << mm;
  }
}

// The fixtures above poison outputs (Buffer::fill_bytes) and write split sizes (copy_bytes), then
// launch on a cudaStreamNonBlocking stream, which the default stream does not order: they rely
// on both calls being synchronous (buffer.h). Issue 19: they were not (a memset or device copy
// only enqueued), and on a shared GPU replays saw poison bytes and stale offsets. Deterministic
// check without load: a host function sleeping on a BLOCKING stream holds the default stream
// back (it waits for blocking streams), so a call that only enqueues its write returns before the
// write lands, and the read on the non-blocking stream sees the old bytes.
TEST(BufferCudaOrdering, FillAndCopyAreVisibleToNonBlockingStreams) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  constexpr size_t kBytes = 1 << 16;
  const Device d = Device::cuda(0);
  cudaStream_t blocking, nonblocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
  void* pinned_mem = nullptr;  // the non-blocking stream's reads land here
  ASSERT_EQ(cudaMallocHost(&pinned_mem, kBytes), cudaSuccess);
  auto* pinned = static_cast<uint8_t*>(pinned_mem);
  Buffer a(kBytes, d), b(kBytes, d);
  a.fill_bytes(0x11);
  b.fill_bytes(0x22);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto hold_default_stream = [&] {
    ASSERT_EQ(cudaLaunchHostFunc(blocking, [](void*) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }, nullptr), cudaSuccess);
  };
  // Bytes of `buf` that differ from `want`, read on the non-blocking stream.
  auto wrong_bytes = [&](const Buffer& buf, uint8_t want) {
    EXPECT_EQ(cudaMemcpyAsync(pinned, buf.data(), kBytes, cudaMemcpyDeviceToHost, nonblocking),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nonblocking), cudaSuccess);
    return std::count_if(pinned, pinned + kBytes, [&](uint8_t v) { return v != want; });
  };
  hold_default_stream();
  a.fill_bytes(0x5A);
  EXPECT_EQ(wrong_bytes(a, 0x5A), 0) << "fill_bytes returned before its memset landed";
  hold_default_stream();
  copy_bytes(b.data(), d, a.data(), d, kBytes);  // device to device
  EXPECT_EQ(wrong_bytes(b, 0x5A), 0) << "copy_bytes (device to device) returned early";
  const std::vector<uint8_t> host(kBytes, 0x3C);  // pageable host memory
  hold_default_stream();
  copy_bytes(a.data(), d, host.data(), Device::cpu(), kBytes);
  EXPECT_EQ(wrong_bytes(a, 0x3C), 0) << "copy_bytes (host to device) returned early";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFreeHost(pinned_mem);
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(nonblocking);
}

}  // namespace
}  // namespace tessera
