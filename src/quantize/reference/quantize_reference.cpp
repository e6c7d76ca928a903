// The reference quantizer: docs/numerics.md as plain loops over a float copy of the input, one
// function per scaling family, scales written entry by entry (padding zero). The oracle of the
// tests.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/host_bytes.h"
#include "quantize/quantize_backend.h"
#include "quantize/reference/reference_rules.h"
#include "tessera/core/status.h"

namespace tessera::detail {
namespace {

using reference::AmaxAccumulator;
using reference::Matrix;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Where one usage goes: data codes, scales (with their padded/compact geometry), amax.
struct Target {
  uint8_t* data;
  uint8_t* scale;       // raw bytes of the scale_inv buffer
  int64_t scale_bytes;
  float* amax;          // nullptr when the mode has none
};

Target target_of(const QuantizedTensorView& out, bool columnwise) {
  const TensorView& d = columnwise ? out.columnwise_data : out.data;
  const TensorView& s = columnwise ? out.columnwise_scale_inv : out.scale_inv;
  const TensorView& a = columnwise ? out.columnwise_amax : out.amax;
  host_zero_bytes(s.data, static_cast<size_t>(s.nbytes()));
  host_zero_bytes(d.data, static_cast<size_t>(d.nbytes()));
  return {d.as<uint8_t>(), s.as<uint8_t>(), s.nbytes(), a.as<float>()};
}

// A NaN scale_inv (non-finite input in the unit) is stored as the canonical quiet NaN
// 0x7fc00000 (docs/numerics.md), whichever NaN the division gave.
void put_float_scale(const Target& t, int64_t index, float value) {
  if (std::isnan(value)) value = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(t.scale + index * 4, &value, 4);
}

// ---- FP8, FP32 scales --------------------------------------------------------------------

// One scale for the whole copy `a`: current scaling, or the delayed scale given.
void tensor_scaling(const QuantizerConfig& c, const Matrix& a, const Target& t, float amax,
                    float scale) {
  for (int64_t i = 0; i < a.rows * a.cols; ++i)
    t.data[i] = reference::fp8_code(a.v[static_cast<size_t>(i)] * scale, c.element);
  put_float_scale(t, 0, 1.0f / scale);
  *t.amax = amax;
}

void rowwise_scaling(const QuantizerConfig& c, const Matrix& a, const Target& t) {
  for (int64_t r = 0; r < a.rows; ++r) {
    AmaxAccumulator amax;
    for (int64_t k = 0; k < a.cols; ++k) amax.add(a.at(r, k));
    const float scale = reference::current_scaling_scale(amax.value(), c);
    for (int64_t k = 0; k < a.cols; ++k)
      t.data[r * a.cols + k] = reference::fp8_code(a.at(r, k) * scale, c.element);
    put_float_scale(t, r, 1.0f / scale);
  }
}

// Blocks of bh x bw of the copy `a` (the table's block shape); each scale entry at
// copy_scale_position (padding stays zero).
void block_scaling(const QuantizerConfig& c, const Matrix& a, const Target& t, bool columnwise) {
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  const int64_t bh = info.block_rows, bw = info.block_cols;
  for (int64_t br = 0; br < ceil_div(a.rows, bh); ++br) {
    for (int64_t bc = 0; bc < ceil_div(a.cols, bw); ++bc) {
      AmaxAccumulator amax;
      for (int64_t r = br * bh; r < std::min(a.rows, (br + 1) * bh); ++r)
        for (int64_t k = bc * bw; k < std::min(a.cols, (bc + 1) * bw); ++k) amax.add(a.at(r, k));
      const float scale = reference::current_scaling_scale(amax.value(), c);
      for (int64_t r = br * bh; r < std::min(a.rows, (br + 1) * bh); ++r)
        for (int64_t k = bc * bw; k < std::min(a.cols, (bc + 1) * bw); ++k)
          t.data[r * a.cols + k] = reference::fp8_code(a.at(r, k) * scale, c.element);
      const int64_t pos =
          reference::copy_scale_position(c, columnwise, br * bh, bc * bw, a.rows, a.cols);
      put_float_scale(t, pos, 1.0f / scale);
    }
  }
}

// ---- MXFP8 -------------------------------------------------------------------------------

// x (M, K). Rowwise: blocks 1x32; columnwise: blocks 32x1, data in the (M, K) layout; 32x32
// tiles: one exponent per tile, repeated in every scale entry the tile covers.
void mxfp8_scaling(const QuantizerConfig& c, const Matrix& x, const Target& t, bool columnwise) {
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  // The block in x's orientation: the table's block, transposed for the columnwise usage
  // (1x32 → 32x1; a 32x32 tile stays a tile).
  const int64_t bh = columnwise ? info.block_cols : info.block_rows;
  const int64_t bw = columnwise ? info.block_rows : info.block_cols;
  for (int64_t br = 0; br < ceil_div(x.rows, bh); ++br) {
    for (int64_t bc = 0; bc < ceil_div(x.cols, bw); ++bc) {
      const int64_t r0 = br * bh, r1 = std::min(x.rows, r0 + bh);
      const int64_t k0 = bc * bw, k1 = std::min(x.cols, k0 + bw);
      AmaxAccumulator amax;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t k = k0; k < k1; ++k) amax.add(x.at(r, k));
      const uint8_t e = reference::e8m0_exponent(amax.value(), c);
      const float mult = reference::e8m0_element_multiplier(e);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t k = k0; k < k1; ++k)
          t.data[r * x.cols + k] = reference::fp8_code(x.at(r, k) * mult, c.element);
      // Every scale entry of this block (tile).
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t k = k0; k < k1; ++k) {
          t.scale[reference::copy_scale_position(c, columnwise, r, k, x.rows, x.cols)] = e;
        }
      }
    }
  }
}

// ---- NVFP4 -------------------------------------------------------------------------------

// a: the copy (R, C) (x, or xᵀ for the columnwise usage); blocks 1x16 or 16x16 tiles.
void nvfp4_scaling(const QuantizerConfig& c, Matrix a, const Target& t, bool columnwise,
                   int64_t stream_base) {
  if (columnwise && c.random_hadamard) {
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t k = 0; k + 16 <= a.cols; k += 16) {
        float block[16];
        reference::hadamard_forward(&a.v[static_cast<size_t>(r * a.cols + k)], block);
        for (int j = 0; j < 16; ++j) a.at(r, k + j) = block[j];
      }
  }
  AmaxAccumulator global;
  for (float v : a.v) global.add(v);
  const float s_enc = reference::nvfp4_s_enc(global.value());
  *t.amax = global.value();
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  const int64_t bh = info.block_rows, bw = info.block_cols;
  const int64_t s_cols = ceil_div(a.cols, bw);
  const int64_t row_bytes = ceil_div(a.cols, 2);
  for (int64_t br = 0; br < ceil_div(a.rows, bh); ++br) {
    for (int64_t bc = 0; bc < s_cols; ++bc) {
      const int64_t r0 = br * bh, r1 = std::min(a.rows, r0 + bh);
      const int64_t k0 = bc * bw, k1 = std::min(a.cols, k0 + bw);
      AmaxAccumulator amax;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t k = k0; k < k1; ++k) amax.add(a.at(r, k));
      const uint8_t s_b = reference::nvfp4_scale_byte(amax.value(), s_enc);
      const float enc = reference::nvfp4_enc(s_b, s_enc);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t k = k0; k < k1; ++k) {
          float v = a.at(r, k) * enc;
          if (v > 6.0f) v = 6.0f;
          if (v < -6.0f) v = -6.0f;
          const uint8_t q =
              c.stochastic_rounding
                  ? reference::e2m1_stochastic(
                        v, reference::philox_word(c.rng_seed, c.rng_offset,
                                                  stream_base + r * a.cols + k))
                  : reference::e2m1_nearest(v);
          t.data[r * row_bytes + k / 2] |= static_cast<uint8_t>(k % 2 == 0 ? q : q << 4);
        }
        t.scale[reference::copy_scale_position(c, columnwise, r, k0, a.rows, a.cols)] = s_b;
      }
    }
  }
}

void quantize_usage(const QuantizerConfig& c, const Matrix& x, const QuantizedTensorView& out,
                    const QuantizeRequest& req, bool columnwise, float tensor_amax) {
  const Target t = target_of(out, columnwise);
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  const Matrix a = columnwise && info.columnwise_transposed ? reference::transposed(x) : x;
  switch (info.family) {
    case ScaleFamily::kTensor: {
      const float scale = c.delayed ? *req.delayed_scale
                                    : reference::current_scaling_scale(tensor_amax, c);
      return tensor_scaling(c, a, t, tensor_amax, scale);
    }
    case ScaleFamily::kRowwise: return rowwise_scaling(c, a, t);
    case ScaleFamily::kBlock: return block_scaling(c, a, t, columnwise);
    case ScaleFamily::kMXFP8: return mxfp8_scaling(c, x, t, columnwise);
    case ScaleFamily::kNVFP4:
      return nvfp4_scaling(c, a, t, columnwise, columnwise ? x.rows * x.cols : 0);
    case ScaleFamily::kNone: break;
  }
  TESSERA_FAIL(Status::kInternal, "reference: mode ", info.name, " does not quantize");
}

}  // namespace

void quantize_reference(const QuantizerConfig& config, const TensorView& x,
                        const QuantizedTensorView& out, const QuantizeRequest& req) {
  const Matrix m = reference::load_matrix(x);
  AmaxAccumulator amax;
  for (float v : m.v) amax.add(v);
  if (config.delayed) req.amax_history[0] = amax.value();
  if (req.rowwise) quantize_usage(config, m, out, req, false, amax.value());
  if (req.columnwise) quantize_usage(config, m, out, req, true, amax.value());
}

}  // namespace tessera::detail
