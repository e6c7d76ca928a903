// Grouped CUDA quantization of every recipe through the public API, on tensors made from DEVICE
// split sizes (no host metadata): every member == the CPU backend quantizing that member alone
// with its own Quantizer (data, scales with padding, amax; delayed scaling: also the amax
// history), byte for byte. Cases: empty members at the start / middle / end, sizes not multiples
// of the block, [128, 128, M-256], capacity half full (input rows past the live ones hold NaN,
// every output byte past the members and between scale slots must keep its poison), K not a
// multiple of the block, one member, all empty; the all-same mode (host shapes); the noop flag;
// one CUDA graph captured once and replayed while the device split sizes change. Skips without
// a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "quantize_cuda/cuda_cases.h"
#include "tessera/core/device.h"
#include "tessera/grouped/grouped_quantize.h"
#include "tessera/grouped/grouped_tensor.h"

namespace tessera {
namespace {

constexpr uint8_t kPoison = 0xA5;

struct RecipeCase {
  std::string name;
  QuantizerConfig config;
};

std::vector<RecipeCase> recipe_cases() {
  std::vector<RecipeCase> v;
  auto add = [&](std::string name, QuantizerConfig c, bool row, bool col) {
    c.rowwise = row;
    c.columnwise = col;
    v.push_back({std::move(name), c});
  };
  QuantizerConfig c = make_config(ScalingMode::kTensor);
  add("tensor_current_both", c, true, true);
  add("tensor_current_e5m2_rowwise", make_config(ScalingMode::kTensor, DType::kFloat8E5M2), true,
      false);
  c.power_of_two_scales = true;
  c.amax_epsilon = 1e-3f;
  add("tensor_current_pow2_eps_columnwise", c, false, true);
  c = make_config(ScalingMode::kTensor);
  c.delayed = true;
  c.amax_history_len = 16;
  add("tensor_delayed_both", c, true, true);
  c.margin = 1;
  add("tensor_delayed_margin_rowwise", c, true, false);
  add("rowwise_both", make_config(ScalingMode::kRowwise), true, true);
  add("rowwise_e5m2_columnwise", make_config(ScalingMode::kRowwise, DType::kFloat8E5M2), false,
      true);
  add("block1x128_both", make_config(ScalingMode::kBlock1x128), true, true);
  c = make_config(ScalingMode::kBlock1x128, DType::kFloat8E5M2);
  c.power_of_two_scales = false;
  add("block1x128_e5m2_no_pow2_columnwise", c, false, true);
  add("block128x128_both", make_config(ScalingMode::kBlock128x128), true, true);
  c = make_config(ScalingMode::kBlock128x128);
  c.power_of_two_scales = false;
  add("block128x128_no_pow2_rowwise", c, true, false);
  add("nvfp4_both", make_config(ScalingMode::kNVFP4), true, true);
  add("nvfp4_16x16_both", make_config(ScalingMode::kNVFP4_16x16), true, true);
  c = make_config(ScalingMode::kNVFP4);
  c.scale_layout = ScaleLayout::kSwizzled;
  add("nvfp4_swizzled_both", c, true, true);
  c.stochastic_rounding = true;
  c.rng_seed = 1234;
  c.rng_offset = 7;
  add("nvfp4_swizzled_sr_both", c, true, true);
  c = make_config(ScalingMode::kNVFP4_16x16);
  c.random_hadamard = true;
  c.stochastic_rounding = true;
  c.rng_seed = 99;
  add("nvfp4_16x16_rht_sr_both", c, true, true);
  c = make_config(ScalingMode::kNVFP4);
  c.random_hadamard = true;
  add("nvfp4_rht_columnwise", c, false, true);
  add("nvfp4_rht_both", c, true, true);  // 1x16, both copies, the transform alone (x's form)
  c.stochastic_rounding = true;
  c.rng_seed = 5;
  add("nvfp4_rht_sr_both", c, true, true);  // 1x16: both copies from one tiled launch
  return v;
}

// Member rows must be multiples of this for the config (the storage contract: NVFP4 columnwise
// copies need even rows; the Hadamard transform needs multiples of 16).
int64_t row_align(const QuantizerConfig& c) {
  if (c.mode != ScalingMode::kNVFP4 && c.mode != ScalingMode::kNVFP4_16x16) return 1;
  if (!c.columnwise) return 1;
  return c.random_hadamard ? 16 : 2;
}

std::vector<int64_t> aligned_splits(std::vector<int64_t> s, int64_t a) {
  for (int64_t& v : s) v = (v + a - 1) / a * a;
  return s;
}

std::vector<uint8_t> to_host(const TensorView& v) {
  std::vector<uint8_t> h(static_cast<size_t>(v.data == nullptr ? 0 : v.nbytes()));
  if (!h.empty()) copy_bytes(h.data(), Device::cpu(), v.data, v.device, h.size());
  return h;
}

// A CUDA grouped tensor made from device split sizes, its (capacity, K) device input and the
// host copy of that input (rows past the live ones: NaN).
struct Grouped {
  QuantizerConfig config;
  int64_t n, capacity, K;
  DType dtype;
  Buffer splits, x;
  std::vector<uint8_t> host_x;
  GroupedTensor t;

  // from_shapes: a CUDA tensor from host shapes instead (equal sizes: the all-same mode).
  Grouped(const QuantizerConfig& c, const std::vector<int64_t>& sizes, int64_t cap, int64_t cols,
          DType dt, test::InputKind kind, cudaStream_t s = nullptr, bool from_shapes = false)
      : config(c), n(static_cast<int64_t>(sizes.size())), capacity(cap), K(cols), dtype(dt),
        splits(static_cast<size_t>(4 * n), Device::cuda(0)),
        x(static_cast<size_t>(std::max<int64_t>(1, dtype_bytes(dt, cap * cols))),
          Device::cuda(0)) {
    set_splits(sizes);
    GroupedTensorOptions o;
    o.config = c;
    o.device = Device::cuda(0);
    o.capacity_rows = cap;
    if (from_shapes) {
      std::vector<std::array<int64_t, 2>> shapes;
      for (int64_t r : sizes) shapes.push_back({r, cols});
      o.capacity_rows = -1;
      t = GroupedTensor::from_shapes(shapes, o);
    } else {
      t = GroupedTensor::from_device_splits(splits_view(), cols, o, {}, {}, Stream{s});
      EXPECT_FALSE(t.has_host_metadata());
    }
    host_x = test::make_input(dt, cap, cols, kind, 77).bytes;
    int64_t live = 0;
    for (int64_t r : sizes) live += r;
    const test::HostInput nan = test::make_input(dt, 1, 1, test::InputKind::kSpecials, 1);
    const int64_t esz = dtype_bytes(dt, 1);
    for (int64_t e = live * cols; e < cap * cols; ++e) {  // capacity rows: NaN, never read
      std::copy(nan.bytes.begin(), nan.bytes.end(), host_x.begin() + e * esz);
    }
    copy_bytes(x.data(), Device::cuda(0), host_x.data(), Device::cpu(), host_x.size());
  }

  TensorView splits_view() const {
    return TensorView::contiguous(splits.data(), DType::kInt32, {n}, Device::cuda(0));
  }
  TensorView x_view() const {
    return TensorView::contiguous(x.data(), dtype, {capacity, K}, Device::cuda(0));
  }
  void set_splits(const std::vector<int64_t>& sizes) {
    std::vector<int32_t> s(sizes.begin(), sizes.end());
    copy_bytes(splits.data(), Device::cuda(0), s.data(), Device::cpu(), s.size() * 4);
  }
  std::vector<TensorView> outputs() const {
    const GroupedTensorView& v = t.view();
    return {v.data, v.columnwise_data, v.scale_inv, v.columnwise_scale_inv, v.amax,
            v.columnwise_amax};
  }
  void poison() {
    for (const TensorView& f : outputs()) {
      if (f.data != nullptr) {
        ASSERT_EQ(cudaMemset(f.data, kPoison, static_cast<size_t>(f.nbytes())), cudaSuccess);
      }
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
};

// Host state of a delayed-scaling quantizer (scale, history) to start the CPU oracle from.
struct DelayedState {
  std::vector<uint8_t> scale, history;
};

DelayedState read_state(const Quantizer& q) {
  if (!q.config().delayed) return {};
  return {to_host(q.scale()), to_host(q.amax_history())};
}

std::string first_diff(const std::vector<uint8_t>& got, int64_t at, const uint8_t* want,
                       int64_t bytes, const std::string& what) {
  for (int64_t i = 0; i < bytes; ++i) {
    const uint8_t g = got[static_cast<size_t>(at + i)];
    if (g != want[i]) {
      return what + " byte " + std::to_string(i) + ": " + std::to_string(g) + " vs CPU " +
             std::to_string(want[i]);
    }
  }
  return "";
}

std::string poison_kept(const std::vector<uint8_t>& b, int64_t from, int64_t to,
                        const std::string& what) {
  for (int64_t i = from; i < to && i < static_cast<int64_t>(b.size()); ++i) {
    if (b[static_cast<size_t>(i)] != kPoison) {
      return what + ": byte " + std::to_string(i) + " outside every member was written";
    }
  }
  return "";
}

// Member storage on the host, laid out exactly as a standalone QuantizedTensor of (rows, K)
// (as grouped_quantized_member describes a member), but never null: an empty member still has
// its per-tensor scale and amax, and the CPU backend needs non-null pointers for them.
struct HostMember {
  std::vector<Buffer> store;
  QuantizedTensorView v;

  HostMember(const QuantizerConfig& c, int64_t rows, int64_t K) {
    store.reserve(8);
    v.config = c;
    v.rows = rows;
    v.cols = K;
    v.device = Device::cpu();
    auto field = [&](DType dt, int64_t r, int64_t cols) {
      store.emplace_back(static_cast<size_t>(std::max<int64_t>(dtype_bytes(dt, r * cols), 1)),
                         Device::cpu());
      return TensorView::contiguous(store.back().data(), dt, {r, cols}, Device::cpu());
    };
    for (bool cw : {false, true}) {
      if (!(cw ? c.columnwise : c.rowwise)) continue;
      const MatrixShape ds = data_shape(c, rows, K, cw), ss = scale_shape(c, rows, K, cw);
      const int64_t dcols = ds.dtype == DType::kFloat4E2M1 ? (ds.cols + 1) / 2 * 2 : ds.cols;
      (cw ? v.columnwise_data : v.data) = field(ds.dtype, ds.rows, dcols);
      (cw ? v.columnwise_scale_inv : v.scale_inv) = field(ss.dtype, ss.rows, ss.cols);
      if (has_amax(c.mode)) (cw ? v.columnwise_amax : v.amax) = field(DType::kFloat32, 1, 1);
    }
  }
};

// "" when every member equals the CPU backend on it alone (one CPU Quantizer quantizing the
// members in order, started from `before` for delayed scaling), the device quantizer's state
// equals the CPU one after the loop, and nothing outside the members was written; else the
// first problem.
//
// poisoned: a member that breaks the NVFP4 columnwise storage contract (odd rows, or rows not a
// multiple of 16 with the Hadamard transform): its columnwise scales must all be the E4M3 NaN
// code (the kernel's poison), its rowwise copy must equal the CPU's rowwise-only quantization.
std::string check(const Grouped& f, const std::vector<int64_t>& sizes, const Quantizer& qg,
                  const DelayedState& before, int64_t poisoned = -1) {
  const QuantizerConfig& c = f.config;
  std::vector<std::vector<uint8_t>> got;
  for (const TensorView& v : f.outputs()) got.push_back(to_host(v));
  Quantizer qc(c);
  if (c.delayed) {
    std::memcpy(qc.scale().data, before.scale.data(), before.scale.size());
    std::memcpy(qc.amax_history().data, before.history.data(), before.history.size());
  }
  std::vector<int64_t> cols(sizes.size(), f.K);
  const std::vector<int64_t> so = grouped_scale_offsets(c, sizes, cols, false);
  const std::vector<int64_t> cso = grouped_scale_offsets(c, sizes, cols, true);
  const bool e2m1 = c.element == DType::kFloat4E2M1;
  const int64_t esz = dtype_bytes(f.dtype, 1);
  const int64_t sb = dtype_bytes(scale_shape(c, 1, f.K, false).dtype, 1);
  const int64_t csb = dtype_bytes(scale_shape(c, 1, f.K, true).dtype, 1);
  int64_t row = 0;
  for (int64_t g = 0; g < f.n; ++g) {
    const size_t gi = static_cast<size_t>(g);
    const int64_t r = sizes[gi];
    Buffer xin(static_cast<size_t>(std::max<int64_t>(r * f.K * esz, 16)), Device::cpu());
    std::memcpy(xin.data(), f.host_x.data() + row * f.K * esz, static_cast<size_t>(r * f.K * esz));
    const std::string tag = "member " + std::to_string(g) + " (" + std::to_string(r) + " rows) ";
    QuantizerConfig member_config = c;
    if (g == poisoned) {
      if (!c.columnwise) return "a poisoned member needs the columnwise usage";
      const int64_t bytes = HostMember(c, r, f.K).v.columnwise_scale_inv.nbytes();
      if (cso[gi] * csb + bytes > static_cast<int64_t>(got[3].size())) {
        return tag + "columnwise scales lie past the buffer";
      }
      for (int64_t i = 0; i < bytes; ++i) {
        if (got[3][static_cast<size_t>(cso[gi] * csb + i)] != 0x7F) {
          return tag + "breaks the columnwise contract but its scale byte " + std::to_string(i) +
                 " is not the NaN poison";
        }
      }
      member_config.columnwise = false;
    }
    Quantizer qm(member_config);
    HostMember ref(member_config, r, f.K);
    (g == poisoned ? qm : qc)
        .quantize(TensorView::contiguous(xin.data(), f.dtype, {r, f.K}, Device::cpu()), ref.v,
                  Backend::kCPU);
    const QuantizedTensorView& v = ref.v;
    const int64_t off = e2m1 ? row * f.K / 2 : row * f.K;
    const std::vector<std::tuple<const TensorView*, int, int64_t, const char*>> fields = {
        {&v.data, 0, off, "data"},
        {&v.columnwise_data, 1, off, "columnwise_data"},
        {&v.scale_inv, 2, so[gi] * sb, "scale_inv"},
        {&v.columnwise_scale_inv, 3, cso[gi] * csb, "columnwise_scale_inv"},
        {&v.amax, 4, g * 4, "amax"},
        {&v.columnwise_amax, 5, g * 4, "columnwise_amax"}};
    for (const auto& [want, k, at, what] : fields) {
      if (want->data == nullptr) continue;
      const std::string m = first_diff(got[static_cast<size_t>(k)], at,
                                       want->as<const uint8_t>(), want->nbytes(), tag + what);
      if (!m.empty()) return m;
    }
    // Scale slot slack between this member's matrix and the next slot: never written.
    if (g == poisoned) {
      row += r;
      continue;
    }
    for (const std::string& m :
         {c.rowwise ? poison_kept(got[2], so[gi] * sb + v.scale_inv.nbytes(), so[gi + 1] * sb,
                                  tag + "scale slot")
                    : std::string(),
          c.columnwise ? poison_kept(got[3], cso[gi] * csb + v.columnwise_scale_inv.nbytes(),
                                     cso[gi + 1] * csb, tag + "columnwise scale slot")
                       : std::string()}) {
      if (!m.empty()) return m;
    }
    row += r;
  }
  const int64_t live = e2m1 ? row * f.K / 2 : row * f.K;
  for (const std::string& m :
       {poison_kept(got[0], live, INT64_MAX, "data"),
        poison_kept(got[1], live, INT64_MAX, "columnwise_data"),
        poison_kept(got[2], so.back() * sb, INT64_MAX, "scale_inv"),
        poison_kept(got[3], cso.back() * csb, INT64_MAX, "columnwise_scale_inv")}) {
    if (!m.empty()) return m;
  }
  if (c.delayed) {
    if (to_host(qg.amax_history()) != to_host(qc.amax_history())) return "amax history differs";
    if (to_host(qg.scale()) != to_host(qc.scale())) return "delayed scale differs";
  }
  return "";
}

// A device quantizer; delayed scaling starts from a scale of 3 and a non-zero history.
Quantizer device_quantizer(const QuantizerConfig& c) {
  Quantizer q(c, Device::cuda(0));
  if (c.delayed) {
    const float scale = 3.0f;
    std::vector<float> h(static_cast<size_t>(c.amax_history_len));
    for (size_t i = 0; i < h.size(); ++i) h[i] = 0.5f + static_cast<float>(i);
    copy_bytes(q.scale().data, Device::cuda(0), &scale, Device::cpu(), 4);
    copy_bytes(q.amax_history().data, Device::cuda(0), h.data(), Device::cpu(), h.size() * 4);
  }
  return q;
}

class GroupedRecipesCuda : public ::testing::TestWithParam<RecipeCase> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(GroupedRecipesCuda, DeviceSplitsMatchCpuPerMember) {
  struct Split {
    std::vector<int64_t> sizes;
    int64_t capacity, K;
    test::InputKind kind;
  };
  const std::vector<Split> splits = {
      {{0, 5, 0, 33, 128, 1}, 300, 256, test::InputKind::kGaussian},  // empty first / middle
      {{128, 128, 744}, 1000, 96, test::InputKind::kGaussian},        // [128, 128, M - 256]
      {{100, 0, 200, 0}, 600, 7168, test::InputKind::kGaussian},      // half full, empty last
      {{3, 0, 0, 61}, 130, 100, test::InputKind::kSpecials},          // K % 16 != 0, NaN / inf
      {{77}, 96, 160, test::InputKind::kTiny},                        // one member
      {{0, 0, 0}, 64, 64, test::InputKind::kGaussian},                // every member empty
  };
  const QuantizerConfig& c = GetParam().config;
  // TESSERA_TEST_SUBSET (the sanitizer run): bfloat16 and K <= 1024 only.
  const bool subset = std::getenv("TESSERA_TEST_SUBSET") != nullptr;
  for (DType dt : {DType::kBFloat16, DType::kFloat32, DType::kFloat16}) {
    if (subset && dt != DType::kBFloat16) continue;
    for (const Split& s : splits) {
      if ((dt == DType::kFloat16 || subset) && s.K > 1024) continue;
      const std::vector<int64_t> sizes = aligned_splits(s.sizes, row_align(c));
      int64_t live = 0;
      for (int64_t r : sizes) live += r;
      Grouped f(c, sizes, std::max(s.capacity, live), s.K, dt, s.kind);
      Quantizer q = device_quantizer(c);
      f.poison();
      const DelayedState before = read_state(q);
      grouped_quantize_contiguous(q, f.x_view(), f.t);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::string m = check(f, sizes, q, before);
      ASSERT_TRUE(m.empty()) << GetParam().name << " " << dtype_name(dt) << " K=" << s.K
                             << " members=" << sizes.size() << ": " << m;
    }
  }
}

// Host shapes, all members equal: the all-same mode goes through the same grouped kernels.
TEST_P(GroupedRecipesCuda, AllSameShapesMatchCpuPerMember) {
  const QuantizerConfig& c = GetParam().config;
  const std::vector<int64_t> sizes(4, 48);
  Grouped f(c, sizes, 192, 160, DType::kBFloat16, test::InputKind::kGaussian, nullptr, true);
  ASSERT_EQ(f.t.view().mode, GroupedShapeMode::kAllSame);
  Quantizer q = device_quantizer(c);
  f.poison();
  const DelayedState before = read_state(q);
  grouped_quantize_contiguous(q, f.x_view(), f.t);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(check(f, sizes, q, before), "") << GetParam().name;
}

TEST_P(GroupedRecipesCuda, NoopFlagWritesNothing) {
  const QuantizerConfig& c = GetParam().config;
  const std::vector<int64_t> sizes = aligned_splits({100, 0, 150}, row_align(c));
  Grouped f(c, sizes, 300, 256, DType::kBFloat16, test::InputKind::kGaussian);
  Quantizer q = device_quantizer(c);
  Buffer noop(4, Device::cuda(0));
  const TensorView nv = TensorView::contiguous(noop.data(), DType::kFloat32, {1}, Device::cuda(0));
  const float one = 1.0f, zero = 0.0f;
  copy_bytes(noop.data(), Device::cuda(0), &one, Device::cpu(), 4);
  f.poison();
  const DelayedState before = read_state(q);
  grouped_quantize_contiguous(q, f.x_view(), f.t, nv);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (const TensorView& v : f.outputs()) {
    const std::vector<uint8_t> h = to_host(v);
    EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](uint8_t b) { return b == kPoison; }))
        << GetParam().name << ": a buffer was written under the noop flag";
  }
  if (c.delayed) {
    EXPECT_EQ(to_host(q.amax_history()), before.history) << "history written under noop";
  }
  copy_bytes(noop.data(), Device::cuda(0), &zero, Device::cpu(), 4);
  grouped_quantize_contiguous(q, f.x_view(), f.t, nv);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(check(f, sizes, q, before), "") << GetParam().name << " after the flag is cleared";
}

TEST_P(GroupedRecipesCuda, GraphReplaysFollowDeviceSplits) {
  const QuantizerConfig& c = GetParam().config;
  const int64_t a = row_align(c);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  Grouped f(c, aligned_splits({128, 128, 128, 128}, a), 608, 512, DType::kBFloat16,
            test::InputKind::kGaussian, s);
  Quantizer q = device_quantizer(c);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    grouped_quantize_contiguous(q, f.x_view(), f.t, {}, Stream{s});
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << GetParam().name << ": the grouped quantize broke the capture: " << e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const std::vector<std::vector<int64_t>> replays = {
      {128, 128, 128, 128}, {0, 300, 1, 77}, {31, 0, 0, 0}, {0, 0, 0, 0}, {200, 0, 200, 112}};
  for (const auto& raw : replays) {
    const std::vector<int64_t> sizes = aligned_splits(raw, a);
    f.set_splits(sizes);  // only the device metadata changes; the graph is not rebuilt
    f.t.update_from_device_splits(f.splits_view(), {}, {}, Stream{s});
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    f.poison();
    const DelayedState before = read_state(q);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::string m = check(f, sizes, q, before);
    EXPECT_TRUE(m.empty()) << GetParam().name << " replay " << sizes[0] << "," << sizes[1] << ","
                           << sizes[2] << "," << sizes[3] << ": " << m;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// NVFP4 columnwise members whose rows break the storage contract cannot be refused (the host
// never sees device split sizes): their columnwise scales come out as NaN codes (a dequantize or
// GEMM of them gives NaN, never silent garbage); every other member is exact.
TEST(GroupedRecipesCudaContract, Nvfp4ColumnwiseBadRowsArePoisoned) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  QuantizerConfig odd = make_config(ScalingMode::kNVFP4);
  QuantizerConfig rht = make_config(ScalingMode::kNVFP4_16x16);
  rht.random_hadamard = true;
  for (QuantizerConfig* c : {&odd, &rht}) c->rowwise = c->columnwise = true;
  const std::vector<std::pair<QuantizerConfig, std::vector<int64_t>>> cases = {
      {odd, {32, 17, 32}}, {rht, {32, 24, 32}}};
  for (const auto& [c, sizes] : cases) {
    Grouped f(c, sizes, 96, 64, DType::kBFloat16, test::InputKind::kGaussian);
    Quantizer q(c, Device::cuda(0));
    f.poison();
    grouped_quantize_contiguous(q, f.x_view(), f.t);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(check(f, sizes, q, {}, 1), "") << scaling_mode_name(c.mode) << " rht=" << c.random_hadamard;
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, GroupedRecipesCuda, ::testing::ValuesIn(recipe_cases()),
                         [](const auto& p) { return p.param.name; });

// A combination without a grouped kernel (K = 0: member rows are not recoverable from the
// element offsets) is refused with kUnsupported when the shapes live only on the device.
TEST(GroupedRecipesCudaRefusals, ZeroColumnsFromDeviceSplitsIsUnsupported) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const QuantizerConfig c = make_config(ScalingMode::kTensor);
  Grouped f(c, {32, 0, 64}, 128, 0, DType::kBFloat16, test::InputKind::kGaussian);
  Quantizer q(c, Device::cuda(0));
  try {
    grouped_quantize_contiguous(q, f.x_view(), f.t);
    ADD_FAILURE() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("K > 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
