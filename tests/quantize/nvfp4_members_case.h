// NVFP4 per member in place (quantize_nvfp4_members, the training step's per-expert global amax):
// the fixture both the CPU test (against the standalone quantizer) and the CUDA test (against the
// CPU, byte for byte) use — a (rows, K) input whose members are given by their row counts (each
// a multiple of 16, empty allowed) with `tail` rows after the last member, and the whole copies
// with one global amax per member.
#pragma once

#include <numeric>
#include <string>
#include <vector>

#include "quantize/quantize_backend.h"
#include "quantize/quantize_cases.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::test {

struct MembersShape {
  std::vector<int64_t> rows;  // per member, multiples of 16
  int64_t tail = 0;           // rows past the last member
  int64_t K = 64;
  int64_t total() const { return std::accumulate(rows.begin(), rows.end(), tail); }
  // Element offsets (groups + 1).
  std::vector<int64_t> offsets() const {
    std::vector<int64_t> o(1, 0);
    for (int64_t r : rows) o.push_back(o.back() + r * K);
    return o;
  }
  std::string name() const {
    std::string s;
    for (int64_t r : rows) s += std::to_string(r) + "_";
    return s + "t" + std::to_string(tail) + "_K" + std::to_string(K);
  }
};

inline std::vector<MembersShape> members_shapes() {
  return {{{16, 32, 48}, 0, 64},     {{32, 0, 16, 64}, 32, 64}, {{16}, 16, 48},
          {{48, 16}, 0, 40},         {{0, 16, 0}, 16, 32},      {{128, 16, 32, 16}, 48, 96}};
}

// The NVFP4 configs of quantize_cases.h (compact and swizzled, 16x16 tiles, RHT, stochastic
// rounding), both usages.
inline std::vector<NamedConfig> nvfp4_configs() {
  std::vector<NamedConfig> out;
  for (NamedConfig nc : all_configs()) {
    if (!is_family(nc.config.mode, ScaleFamily::kNVFP4)) continue;
    nc.config.rowwise = nc.config.columnwise = true;
    out.push_back(nc);
  }
  return out;
}

// Host storage of the whole copies of a (rows, K) input with `groups` global amaxes per copy.
struct MembersOutput {
  QuantizedTensor q;
  std::vector<float> amax, col_amax;
  MembersOutput(const QuantizerConfig& c, int64_t rows, int64_t K, int64_t groups)
      : q(c, rows, K, Device::cpu()), amax(groups), col_amax(groups) {
    q.ensure_usage(true, true);
    q.view().amax = TensorView::contiguous(amax.data(), DType::kFloat32, {groups});
    q.view().columnwise_amax = TensorView::contiguous(col_amax.data(), DType::kFloat32, {groups});
  }
  QuantizedTensorView& view() { return q.view(); }
};

}  // namespace tessera::test
