// Plain, independent statements of the docs/numerics.md rules for the reference backend.
#include "quantize/reference/reference_rules.h"

#include <cfloat>
#include <cmath>
#include <limits>

#include "tessera/formats/codecs.h"
#include "tessera/formats/half.h"

namespace tessera::reference {

Matrix load_matrix(const TensorView& x) {
  Matrix m{x.shape[0], x.shape[1], {}};
  m.v.resize(static_cast<size_t>(m.rows * m.cols));
  for (int64_t i = 0; i < m.rows * m.cols; ++i) {
    if (x.dtype == DType::kFloat32) m.v[static_cast<size_t>(i)] = x.as<const float>()[i];
    if (x.dtype == DType::kBFloat16)
      m.v[static_cast<size_t>(i)] = formats::decode_bf16(x.as<const uint16_t>()[i]);
    if (x.dtype == DType::kFloat16)
      m.v[static_cast<size_t>(i)] = formats::decode_fp16(x.as<const uint16_t>()[i]);
  }
  return m;
}

Matrix transposed(const Matrix& a) {
  Matrix t{a.cols, a.rows, std::vector<float>(a.v.size())};
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t c = 0; c < a.cols; ++c) t.at(c, r) = a.at(r, c);
  return t;
}

void AmaxAccumulator::add(float v) {
  if (std::isnan(v)) {
    nan_ = true;
  } else if (std::fabs(v) > max_) {
    max_ = std::fabs(v);
  }
}

float AmaxAccumulator::value() const {
  return nan_ ? std::numeric_limits<float>::quiet_NaN() : max_;
}

float elem_max(DType element) { return element == DType::kFloat8E5M2 ? 57344.0f : 448.0f; }

uint8_t fp8_code(float v, DType element) {
  if (std::isnan(v)) return 0x7f;
  return element == DType::kFloat8E5M2 ? formats::encode_e5m2(v) : formats::encode_e4m3(v);
}

float current_scaling_scale(float amax, const QuantizerConfig& c) {
  // Non-finite input in the scaling unit: the scale is NaN (the unit encodes and decodes as NaN).
  if (std::isnan(amax) || std::isinf(amax)) return std::numeric_limits<float>::quiet_NaN();
  float a = amax;
  if (a < c.amax_epsilon) a = c.amax_epsilon;
  if (a == 0.0f) return 1.0f;
  float s = elem_max(c.element) / a;
  if (std::isinf(s)) s = FLT_MAX;
  if (c.power_of_two_scales) s = std::ldexp(1.0f, std::ilogb(s));  // largest 2^k <= s
  return s;
}

uint8_t e8m0_exponent(float amax, const QuantizerConfig& c) {
  if (c.e8m0_rounding == E8M0Rounding::kFloor) {
    if (std::isnan(amax) || std::isinf(amax)) return 0xff;  // non-finite in the block: NaN scale
    if (amax == 0.0f) return 0x00;
    const int emax = c.element == DType::kFloat8E5M2 ? 15 : 8;
    int e = std::ilogb(amax) - emax;
    if (e < -127) e = -127;
    if (e > 127) e = 127;
    return static_cast<uint8_t>(e + 127);
  }
  const float inv = 1.0f / elem_max(c.element);
  const float v = amax * inv;
  if (std::isnan(v) || std::isinf(v)) return 0xff;  // non-finite in the block: NaN scale
  if (v == 0.0f) return 0x00;
  int exp2;
  const float mant = std::frexp(v, &exp2);            // v = mant * 2^exp2, mant in [0.5, 1)
  const int ceil_log2 = mant == 0.5f ? exp2 - 1 : exp2;
  int biased = ceil_log2 + 127;
  if (biased < 0) biased = 0;
  if (biased > 254) biased = 254;
  return static_cast<uint8_t>(biased);
}

float e8m0_element_multiplier(uint8_t e) {
  if (e == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, 127 - static_cast<int>(e));
}

float nvfp4_s_enc(float global_amax) {
  // Non-finite input anywhere in the copy: E2M1 holds no NaN/inf, so the copy's scale is NaN.
  if (std::isnan(global_amax) || std::isinf(global_amax)) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  if (global_amax == 0.0f) return 1.0f;
  float s = (448.0f * 6.0f) / global_amax;
  if (std::isnan(s) || std::isinf(s)) s = FLT_MAX;
  if (s == 0.0f) s = 1.0f;
  return s;
}

uint8_t nvfp4_scale_byte(float block_amax, float s_enc) {
  const float one_sixth = 1.0f / 6.0f;
  return formats::encode_e4m3(block_amax * (s_enc * one_sixth));
}

float nvfp4_dec(uint8_t s_b, float s_enc) { return formats::decode_e4m3(s_b) * (1.0f / s_enc); }

float nvfp4_enc(uint8_t s_b, float s_enc) {
  const float enc = 1.0f / nvfp4_dec(s_b, s_enc);
  return (std::isnan(enc) || std::isinf(enc)) ? FLT_MAX : enc;
}

uint8_t e2m1_nearest(float v) { return formats::encode_e2m1(v); }

uint8_t e2m1_stochastic(float v, uint32_t random) {
  if (std::isnan(v)) return 0x7;
  static constexpr double kGrid[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  const double a = std::fabs(static_cast<double>(v));
  int lo = 0;
  while (lo < 7 && kGrid[lo + 1] <= a) ++lo;
  int code = lo;
  if (lo < 7) {
    const double p = (a - kGrid[lo]) / (kGrid[lo + 1] - kGrid[lo]);
    const double u = static_cast<double>(random >> 8) / 16777216.0;
    if (p > u) code = lo + 1;
  }
  return static_cast<uint8_t>(code | (std::signbit(v) ? 0x8 : 0x0));
}

namespace {

// Sylvester construction: H1 = [1], H2n = [[Hn, Hn], [Hn, -Hn]].
struct Hadamard16 {
  float h[16][16];
  Hadamard16() {
    h[0][0] = 1.0f;
    for (int n = 1; n < 16; n *= 2)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          h[i][j + n] = h[i][j];
          h[i + n][j] = h[i][j];
          h[i + n][j + n] = -h[i][j];
        }
  }
};

const Hadamard16 kH;
constexpr float kSigns[16] = {+1, +1, +1, -1, +1, -1, -1, -1, -1, -1, -1, +1, -1, +1, -1, -1};

}  // namespace

void hadamard_forward(const float* in, float* out) {
  for (int i = 0; i < 16; ++i) {
    float acc = 0.0f;
    for (int j = 0; j < 16; ++j) acc += (kH.h[i][j] * kSigns[j]) * in[j];
    out[i] = acc * 0.25f;
  }
}

void hadamard_inverse(const float* in, float* out) {
  for (int j = 0; j < 16; ++j) {
    float acc = 0.0f;
    for (int i = 0; i < 16; ++i) acc += kH.h[i][j] * in[i];
    out[j] = kSigns[j] * (acc * 0.25f);
  }
}

uint32_t philox_word(uint64_t seed, uint64_t offset, uint64_t e) {
  const uint64_t group = e / 4;
  uint32_t x[4] = {static_cast<uint32_t>(group & 0xffffffffu), static_cast<uint32_t>(group >> 32),
                   static_cast<uint32_t>(offset & 0xffffffffu), static_cast<uint32_t>(offset >> 32)};
  uint32_t key[2] = {static_cast<uint32_t>(seed & 0xffffffffu), static_cast<uint32_t>(seed >> 32)};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += 0x9E3779B9u;
      key[1] += 0xBB67AE85u;
    }
    const uint64_t a = uint64_t{0xD2511F53u} * x[0];
    const uint64_t b = uint64_t{0xCD9E8D57u} * x[2];
    const uint32_t y0 = static_cast<uint32_t>(b >> 32) ^ x[1] ^ key[0];
    const uint32_t y1 = static_cast<uint32_t>(b);
    const uint32_t y2 = static_cast<uint32_t>(a >> 32) ^ x[3] ^ key[1];
    const uint32_t y3 = static_cast<uint32_t>(a);
    x[0] = y0;
    x[1] = y1;
    x[2] = y2;
    x[3] = y3;
  }
  return x[e % 4];
}

int64_t scale_position(ScaleLayout layout, int64_t r, int64_t c, int64_t compact_cols,
                       int64_t padded_cols) {
  if (layout == ScaleLayout::kCompact) return r * compact_cols + c;
  const int64_t tiles_per_row = padded_cols / 4;
  const int64_t tile = (r / 128) * tiles_per_row + (c / 4);
  const int64_t row_in_tile = r % 128;
  return tile * 512 + (row_in_tile % 32) * 16 + (row_in_tile / 32) * 4 + (c % 4);
}

int64_t copy_scale_position(const QuantizerConfig& c, bool columnwise, int64_t r, int64_t k,
                            int64_t R, int64_t C) {
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  const bool swizzled = c.scale_layout == ScaleLayout::kSwizzled && info.swizzle;
  auto blocks = [](int64_t n, int64_t b) { return b == 0 ? int64_t{1} : (n + b - 1) / b; };
  auto block = [](int64_t i, int64_t b) { return b == 0 ? int64_t{0} : i / b; };
  auto pad = [](int64_t n, int64_t a) { return (n + a - 1) / a * a; };
  if (columnwise && !info.columnwise_transposed) {
    // Copy (M, K) blocked along its rows: the scales of xᵀ (K, ceil(M/bw)), kept compact in the
    // data's orientation (ceil(M/bw), K) and swizzled as (K, ceil(M/bw)).
    const int64_t br = block(r, info.scale_block_cols), bc = block(k, info.scale_block_rows);
    const int64_t width = blocks(R, info.scale_block_cols);
    if (swizzled) return scale_position(ScaleLayout::kSwizzled, bc, br, 0, pad(width, 4));
    return scale_position(ScaleLayout::kCompact, br, bc, C, 0);
  }
  const int64_t br = block(r, info.scale_block_rows), bc = block(k, info.scale_block_cols);
  const int64_t width = blocks(C, info.scale_block_cols);
  if (swizzled) return scale_position(ScaleLayout::kSwizzled, br, bc, 0, pad(width, 4));
  return scale_position(ScaleLayout::kCompact, br, bc, pad(width, info.pad_cols), 0);
}

}  // namespace tessera::reference
