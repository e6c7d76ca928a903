// Shared pieces of the expert-parallel routing tests: a case (tokens, top-k, experts, hidden,
// alignment or capacity, dtypes, fused quantization), random inputs, a runner that calls every
// op on one device and returns the bytes of every output, and the oracle — plain loops written
// from the contract in include/tessera/nn/moe_routing.h, with the quantization done by
// tessera's reference quantizer on the permuted tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/formats/half.h"
#include "tessera/nn/moe_routing.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::moe_testing {

using Bytes = std::vector<uint8_t>;

struct MoeCase {
  int64_t tokens = 37, top_k = 2, experts = 5, hidden = 64;
  int64_t align = 1, capacity = -1;
  DType index_dtype = DType::kInt64, map_dtype = DType::kInt64, x_dtype = DType::kBFloat16;
  ScalingMode quant = ScalingMode::kNone;  // kNone, kRowwise, kBlock1x128, kMXFP8
  DType element = DType::kFloat8E4M3;
  bool floor_rule = false, with_probs = true;
  uint32_t seed = 1;

  std::string name() const {
    std::ostringstream os;
    os << "T" << tokens << " k" << top_k << " E" << experts << " H" << hidden << " align"
       << align << " cap" << capacity << " " << dtype_name(index_dtype) << "/"
       << dtype_name(map_dtype) << "/" << dtype_name(x_dtype) << " " << scaling_mode_name(quant)
       << " " << dtype_name(element) << (floor_rule ? " floor" : "")
       << (with_probs ? "" : " noprobs");
    return os.str();
  }
  MoeRoutingOptions options() const {
    MoeRoutingOptions o;
    o.num_experts = experts;
    o.align = align;
    o.capacity = capacity;
    return o;
  }
  int64_t rows() const { return moe_permuted_rows(tokens, top_k, options()); }
  QuantizerConfig config() const {
    QuantizerConfig c = make_config(quant, element);
    if (floor_rule) c.e8m0_rounding = E8M0Rounding::kFloor;
    return c;
  }
};

// Everything the ops produce, as host bytes / values.
struct MoeOutputs {
  std::vector<int64_t> counts, padded_offsets, slot_map, row_pair;
  int64_t dropped = -1;
  Bytes permuted, scale_inv;  // permute (or permute + quantize)
  Bytes dx, combined, dy;     // permute backward, unpermute, unpermute backward
  std::vector<float> dprobs;
  // Quantized cases: dout permuted with the probabilities as weights (moe_permute_quantize's
  // weights), which must equal the quantizer applied to dy; dprobs from the dprobs-only backward.
  Bytes weighted, weighted_scale_inv;
  std::vector<float> dprobs_only;
};

// Inputs of a case, generated once (host).
struct MoeInputs {
  std::vector<int64_t> indices;  // (T, k)
  Bytes x;                       // (T, H) x_dtype
  Bytes d_permuted;              // (rows, H) x_dtype
  Bytes y;                       // (rows, H) x_dtype
  Bytes dout;                    // (T, H) x_dtype
  std::vector<float> probs;      // (T, k)
};

inline Bytes random_values(int64_t n, DType dt, std::mt19937& rng, bool specials) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp_shift(-20, 20);
  Bytes out(static_cast<size_t>(dtype_bytes(dt, n)));
  for (int64_t i = 0; i < n; ++i) {
    float v = d(rng) * std::ldexp(1.0f, exp_shift(rng) / 4);
    // FP32 subnormals in every tensor (their products and sums reach the 16-bit stores'
    // rounding, which the CUDA chunk stores do by hardware conversion)
    if (i % 499 == 17) v = (i % 2 ? 3.0e-39f : -1.7e-39f);
    if (specials && i % 97 == 5) v = 0.0f;
    if (specials && i % 211 == 7) v = -0.0f;
    if (specials && i % 389 == 11) v = 1e30f;
    if (specials && i % 997 == 13) v = std::numeric_limits<float>::quiet_NaN();
    if (dt == DType::kFloat32) {
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else {
      const uint16_t b =
          dt == DType::kBFloat16 ? formats::encode_bf16(v) : formats::encode_fp16(v);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

inline float load(const Bytes& b, DType dt, int64_t i) {
  if (dt == DType::kFloat32) {
    float v;
    std::memcpy(&v, b.data() + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, b.data() + 2 * i, 2);
  return dt == DType::kBFloat16 ? formats::decode_bf16(h) : formats::decode_fp16(h);
}

inline void store(Bytes& b, DType dt, int64_t i, float v) {
  if (dt == DType::kFloat32) {
    std::memcpy(b.data() + 4 * i, &v, 4);
    return;
  }
  const uint16_t h = dt == DType::kBFloat16 ? formats::encode_bf16(v) : formats::encode_fp16(v);
  std::memcpy(b.data() + 2 * i, &h, 2);
}

// Expert choices: skewed (expert 0 popular, so capacity drops happen), distinct within a token
// when k <= E, repeated otherwise.
inline MoeInputs make_inputs(const MoeCase& c) {
  std::mt19937 rng(c.seed);
  MoeInputs in;
  in.indices.resize(static_cast<size_t>(c.tokens * c.top_k));
  std::uniform_int_distribution<int64_t> pick(0, c.experts - 1);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t j = 0; j < c.top_k; ++j) {
      int64_t e = (rng() % 3 == 0) ? 0 : pick(rng);
      for (int tries = 0; tries < 64 && c.top_k <= c.experts; ++tries) {
        bool dup = false;
        for (int64_t i = 0; i < j; ++i)
          dup |= in.indices[static_cast<size_t>(t * c.top_k + i)] == e;
        if (!dup) break;
        e = pick(rng);
      }
      in.indices[static_cast<size_t>(t * c.top_k + j)] = e;
    }
  }
  const int64_t rows = c.rows();
  in.x = random_values(c.tokens * c.hidden, c.x_dtype, rng, true);
  in.d_permuted = random_values(rows * c.hidden, c.x_dtype, rng, false);
  in.y = random_values(rows * c.hidden, c.x_dtype, rng, false);
  in.dout = random_values(c.tokens * c.hidden, c.x_dtype, rng, false);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  in.probs.resize(in.indices.size());
  for (float& p : in.probs) p = u(rng);
  return in;
}

// ---- oracle ----------------------------------------------------------------------------------
inline MoeOutputs oracle(const MoeCase& c, const MoeInputs& in) {
  const int64_t t_n = c.tokens, k = c.top_k, e_n = c.experts, h = c.hidden, rows = c.rows();
  MoeOutputs o;
  o.slot_map.assign(static_cast<size_t>(t_n * k), -1);
  o.row_pair.assign(static_cast<size_t>(rows), -1);
  o.padded_offsets.push_back(0);
  o.dropped = 0;
  for (int64_t e = 0; e < e_n; ++e) {  // the pairs of expert e, in pair order
    std::vector<int64_t> mine;
    for (int64_t p = 0; p < t_n * k; ++p)
      if (in.indices[static_cast<size_t>(p)] == e) mine.push_back(p);
    const int64_t routed = static_cast<int64_t>(mine.size());
    const int64_t kept = c.capacity < 0 ? routed : std::min(routed, c.capacity);
    int64_t group = c.capacity;
    if (c.capacity < 0) {
      group = kept;
      while (group % c.align != 0) ++group;
    }
    for (int64_t i = 0; i < kept; ++i) {
      const int64_t row = o.padded_offsets.back() + i;
      o.slot_map[static_cast<size_t>(mine[static_cast<size_t>(i)])] = row;
      o.row_pair[static_cast<size_t>(row)] = mine[static_cast<size_t>(i)];
    }
    o.counts.push_back(kept);
    o.dropped += routed - kept;
    o.padded_offsets.push_back(o.padded_offsets.back() + group);
  }
  // Permuted tensor in x's dtype, then (optionally) tessera's reference quantizer on it.
  Bytes perm(static_cast<size_t>(dtype_bytes(c.x_dtype, rows * h)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = o.row_pair[static_cast<size_t>(r)];
    for (int64_t i = 0; i < h && p >= 0; ++i)
      store(perm, c.x_dtype, r * h + i, load(in.x, c.x_dtype, (p / k) * h + i));
  }
  if (c.quant == ScalingMode::kNone) {
    o.permuted = perm;
  } else {
    Quantizer q(c.config());
    QuantizedTensor qt = q.allocate(rows, h);
    q.quantize(TensorView::contiguous(perm.data(), c.x_dtype, {rows, h}), qt.view(),
               Backend::kReference);
    const auto& v = qt.view();
    o.permuted.assign(v.data.as<uint8_t>(), v.data.as<uint8_t>() + v.data.nbytes());
    o.scale_inv.assign(v.scale_inv.as<uint8_t>(), v.scale_inv.as<uint8_t>() + v.scale_inv.nbytes());
  }
  // Gather-adds and the scatter, in the contract's order.
  o.dx.resize(static_cast<size_t>(dtype_bytes(c.x_dtype, t_n * h)));
  o.combined = o.dx;
  o.dy.resize(static_cast<size_t>(dtype_bytes(c.x_dtype, rows * h)));
  o.dprobs.assign(static_cast<size_t>(t_n * k), 0.0f);
  for (int64_t t = 0; t < t_n; ++t) {
    for (int64_t i = 0; i < h; ++i) {
      float dx = 0.0f, comb = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t s = o.slot_map[static_cast<size_t>(t * k + j)];
        if (s < 0) continue;
        dx += load(in.d_permuted, c.x_dtype, s * h + i);
        const float w = c.with_probs ? in.probs[static_cast<size_t>(t * k + j)] : 1.0f;
        const float prod = w * load(in.y, c.x_dtype, s * h + i);
        comb += prod;
      }
      store(o.dx, c.x_dtype, t * h + i, dx);
      store(o.combined, c.x_dtype, t * h + i, comb);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = o.row_pair[static_cast<size_t>(r)];
    const float w = p >= 0 && c.with_probs ? in.probs[static_cast<size_t>(p)] : 1.0f;
    for (int64_t i = 0; i < h; ++i)
      store(o.dy, c.x_dtype, r * h + i,
            p < 0 ? 0.0f : w * load(in.dout, c.x_dtype, (p / k) * h + i));
  }
  if (c.quant != ScalingMode::kNone) {  // the weighted permute: the quantizer on dy
    Quantizer q(c.config());
    QuantizedTensor qt = q.allocate(rows, h);
    q.quantize(TensorView::contiguous(o.dy.data(), c.x_dtype, {rows, h}), qt.view(),
               Backend::kReference);
    const auto& v = qt.view();
    o.weighted.assign(v.data.as<uint8_t>(), v.data.as<uint8_t>() + v.data.nbytes());
    o.weighted_scale_inv.assign(v.scale_inv.as<uint8_t>(),
                                v.scale_inv.as<uint8_t>() + v.scale_inv.nbytes());
  }
  for (int64_t p = 0; p < t_n * k && c.with_probs; ++p) {
    const int64_t s = o.slot_map[static_cast<size_t>(p)];
    if (s < 0) continue;
    float part[256] = {};  // partial floor(i / 8) mod 256, i ascending; then the halving tree
    for (int64_t i = 0; i < h; ++i) {
      const float prod =
          load(in.dout, c.x_dtype, (p / k) * h + i) * load(in.y, c.x_dtype, s * h + i);
      part[(i / 8) % 256] += prod;
    }
    for (int w = 128; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) part[l] += part[l + w];
    o.dprobs[static_cast<size_t>(p)] = part[0];
  }
  o.dprobs_only = o.dprobs;
  return o;
}

// ---- runner: every op on one device ------------------------------------------------------------
struct DeviceArray {
  Buffer buf;
  TensorView view;
  DeviceArray(const void* host, int64_t bytes, DType dt, std::initializer_list<int64_t> shape,
              Device dev)
      : buf(static_cast<size_t>(std::max<int64_t>(bytes, 1)), dev) {
    if (host != nullptr && bytes > 0)
      copy_bytes(buf.data(), dev, host, Device::cpu(), static_cast<size_t>(bytes));
    view = TensorView::contiguous(buf.data(), dt, shape, dev);
  }
  Bytes host(int64_t bytes) const {
    Bytes b(static_cast<size_t>(bytes));
    if (bytes > 0)
      copy_bytes(b.data(), Device::cpu(), buf.data(), buf.device(), static_cast<size_t>(bytes));
    return b;
  }
};

inline std::vector<int64_t> as_i64(const Bytes& b, DType dt) {
  const int64_t w = dt == DType::kInt32 ? 4 : 8;
  std::vector<int64_t> v(b.size() / static_cast<size_t>(w));
  for (size_t i = 0; i < v.size(); ++i) {
    if (w == 4) {
      int32_t x;
      std::memcpy(&x, b.data() + 4 * i, 4);
      v[i] = x;
    } else {
      std::memcpy(&v[i], b.data() + 8 * i, 8);
    }
  }
  return v;
}

inline Bytes from_i64(const std::vector<int64_t>& v, DType dt) {
  Bytes b(v.size() * (dt == DType::kInt32 ? 4 : 8));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::kInt32) {
      const int32_t x = static_cast<int32_t>(v[i]);
      std::memcpy(b.data() + 4 * i, &x, 4);
    } else {
      std::memcpy(b.data() + 8 * i, &v[i], 8);
    }
  }
  return b;
}

// Runs routing, permute(+quantize), permute backward, unpermute and its backward on `dev`.
// error_flag (CUDA) receives the routing error bits.
inline MoeOutputs run_ops(const MoeCase& c, const MoeInputs& in, Device dev,
                          int32_t* error_flag_host = nullptr) {
  const int64_t t_n = c.tokens, k = c.top_k, e_n = c.experts, h = c.hidden, rows = c.rows();
  const int64_t mw = c.map_dtype == DType::kInt32 ? 4 : 8;
  const Bytes idx = from_i64(in.indices, c.index_dtype);
  DeviceArray indices(idx.data(), static_cast<int64_t>(idx.size()), c.index_dtype, {t_n, k}, dev);
  DeviceArray counts(nullptr, e_n * 8, DType::kInt64, {e_n}, dev);
  DeviceArray offsets(nullptr, (e_n + 1) * 8, DType::kInt64, {e_n + 1}, dev);
  DeviceArray dropped(nullptr, 8, DType::kInt64, {1}, dev);
  DeviceArray slot(nullptr, t_n * k * mw, c.map_dtype, {t_n, k}, dev);
  DeviceArray row_pair(nullptr, rows * mw, c.map_dtype, {rows}, dev);
  MoeRoutingOptions opt = c.options();
  const int64_t ws_bytes = moe_routing_workspace_bytes(t_n, k, opt, dev);
  DeviceArray ws(nullptr, ws_bytes, DType::kUInt8, {ws_bytes}, dev);
  DeviceArray flag(nullptr, 4, DType::kInt32, {1}, dev);
  if (dev.is_cuda()) {
    flag.buf.fill_bytes(0);
    opt.error_flag = flag.view.as<int32_t>();
  }
  moe_routing(indices.view, opt,
              {counts.view, offsets.view, slot.view, row_pair.view, dropped.view}, ws.view);
  MoeOutputs o;
  o.counts = as_i64(counts.host(e_n * 8), DType::kInt64);
  o.padded_offsets = as_i64(offsets.host((e_n + 1) * 8), DType::kInt64);
  o.dropped = as_i64(dropped.host(8), DType::kInt64)[0];
  o.slot_map = as_i64(slot.host(t_n * k * mw), c.map_dtype);
  o.row_pair = as_i64(row_pair.host(rows * mw), c.map_dtype);
  if (error_flag_host != nullptr) *error_flag_host = as_i64(flag.host(4), DType::kInt32)[0];
  const int64_t xb = dtype_bytes(c.x_dtype, 1);
  DeviceArray x(in.x.data(), t_n * h * xb, c.x_dtype, {t_n, h}, dev);
  if (c.quant == ScalingMode::kNone) {
    DeviceArray out(nullptr, rows * h * xb, c.x_dtype, {rows, h}, dev);
    moe_permute(x.view, row_pair.view, k, out.view);
    o.permuted = out.host(rows * h * xb);
  } else {
    QuantizedTensor qt(c.config(), rows, h, dev);
    moe_permute_quantize(x.view, row_pair.view, k, qt.view());
    const auto& v = qt.view();
    o.permuted.resize(static_cast<size_t>(v.data.nbytes()));
    o.scale_inv.resize(static_cast<size_t>(v.scale_inv.nbytes()));
    copy_bytes(o.permuted.data(), Device::cpu(), v.data.data, dev, o.permuted.size());
    copy_bytes(o.scale_inv.data(), Device::cpu(), v.scale_inv.data, dev, o.scale_inv.size());
  }
  DeviceArray dperm(in.d_permuted.data(), rows * h * xb, c.x_dtype, {rows, h}, dev);
  DeviceArray dx(nullptr, t_n * h * xb, c.x_dtype, {t_n, h}, dev);
  moe_permute_backward(dperm.view, slot.view, dx.view);
  o.dx = dx.host(t_n * h * xb);
  DeviceArray y(in.y.data(), rows * h * xb, c.x_dtype, {rows, h}, dev);
  DeviceArray probs(in.probs.data(), t_n * k * 4, DType::kFloat32, {t_n, k}, dev);
  const TensorView pv = c.with_probs ? probs.view : TensorView{};
  DeviceArray comb(nullptr, t_n * h * xb, c.x_dtype, {t_n, h}, dev);
  moe_unpermute(y.view, slot.view, pv, comb.view);
  o.combined = comb.host(t_n * h * xb);
  DeviceArray dout(in.dout.data(), t_n * h * xb, c.x_dtype, {t_n, h}, dev);
  DeviceArray dy(nullptr, rows * h * xb, c.x_dtype, {rows, h}, dev);
  DeviceArray dprobs(nullptr, t_n * k * 4, DType::kFloat32, {t_n, k}, dev);
  moe_unpermute_backward(dout.view, y.view, slot.view, row_pair.view, pv, dy.view,
                         c.with_probs ? dprobs.view : TensorView{});
  o.dy = dy.host(rows * h * xb);
  const auto host_floats = [&](DeviceArray& a) {
    std::vector<float> f(static_cast<size_t>(t_n * k), 0.0f);
    const Bytes b = a.host(t_n * k * 4);
    if (!b.empty()) std::memcpy(f.data(), b.data(), b.size());
    return f;
  };
  o.dprobs = c.with_probs ? host_floats(dprobs) : std::vector<float>(static_cast<size_t>(t_n * k));
  o.dprobs_only = o.dprobs;
  if (c.with_probs) {  // dy left empty: the probabilities' gradient alone
    DeviceArray only(nullptr, t_n * k * 4, DType::kFloat32, {t_n, k}, dev);
    moe_unpermute_backward(dout.view, y.view, slot.view, row_pair.view, pv, TensorView{},
                           only.view);
    o.dprobs_only = host_floats(only);
  }
  if (c.quant != ScalingMode::kNone) {
    QuantizedTensor qw(c.config(), rows, h, dev);
    moe_permute_quantize(dout.view, row_pair.view, k, pv, qw.view());
    const auto& v = qw.view();
    o.weighted.resize(static_cast<size_t>(v.data.nbytes()));
    o.weighted_scale_inv.resize(static_cast<size_t>(v.scale_inv.nbytes()));
    copy_bytes(o.weighted.data(), Device::cpu(), v.data.data, dev, o.weighted.size());
    copy_bytes(o.weighted_scale_inv.data(), Device::cpu(), v.scale_inv.data, dev,
               o.weighted_scale_inv.size());
  }
  return o;
}

// Index of the first differing byte, or -1.
inline int64_t first_mismatch(const Bytes& a, const Bytes& b) {
  if (a.size() != b.size()) return -2;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

inline void expect_same(const MoeOutputs& got, const MoeOutputs& want, const std::string& name) {
  EXPECT_EQ(got.counts, want.counts) << name;
  EXPECT_EQ(got.padded_offsets, want.padded_offsets) << name;
  EXPECT_EQ(got.dropped, want.dropped) << name;
  EXPECT_EQ(got.slot_map, want.slot_map) << name;
  EXPECT_EQ(got.row_pair, want.row_pair) << name;
  EXPECT_EQ(first_mismatch(got.permuted, want.permuted), -1) << name << ": permuted data";
  const int64_t bad_scale = first_mismatch(got.scale_inv, want.scale_inv);
  std::string scale_note;
  if (bad_scale >= 0 && got.scale_inv.size() % 4 == 0) {  // the FP32 words around the byte
    const size_t w = static_cast<size_t>(bad_scale) / 4 * 4;
    float g = 0, e = 0;
    std::memcpy(&g, got.scale_inv.data() + w, 4);
    std::memcpy(&e, want.scale_inv.data() + w, 4);
    scale_note = " (as FP32 word " + std::to_string(w / 4) + ": got " + std::to_string(g) +
                 ", want " + std::to_string(e) + ")";
  }
  EXPECT_EQ(bad_scale, -1) << name << ": scale_inv" << scale_note;
  EXPECT_EQ(first_mismatch(got.dx, want.dx), -1) << name << ": permute backward";
  EXPECT_EQ(first_mismatch(got.combined, want.combined), -1) << name << ": unpermute";
  EXPECT_EQ(first_mismatch(got.dy, want.dy), -1) << name << ": unpermute backward dy";
  Bytes gp(got.dprobs.size() * 4), wp(want.dprobs.size() * 4);
  if (!gp.empty()) std::memcpy(gp.data(), got.dprobs.data(), gp.size());
  if (!wp.empty()) std::memcpy(wp.data(), want.dprobs.data(), wp.size());
  EXPECT_EQ(first_mismatch(gp, wp), -1) << name << ": dprobs";
  Bytes go(got.dprobs_only.size() * 4);
  if (!go.empty()) std::memcpy(go.data(), got.dprobs_only.data(), go.size());
  EXPECT_EQ(first_mismatch(go, wp), -1) << name << ": dprobs without dy";
  EXPECT_EQ(first_mismatch(got.weighted, want.weighted), -1) << name << ": weighted permute";
  EXPECT_EQ(first_mismatch(got.weighted_scale_inv, want.weighted_scale_inv), -1)
      << name << ": weighted permute scale_inv";
}

}  // namespace tessera::moe_testing
