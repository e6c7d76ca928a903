// The quantized weight copies of a linear step: placement in one Allocation, quantization of both
// usages in one pass, the MXFP8 Wᵀ form.
#include "nn/weight_layout.h"

#include <algorithm>

#include "core/cpu_parallel.h"
#include "gemm/gemm_backend.h"
#include "nn/member_scaling.h"
#include "nn/step_memory.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/half.h"
#include "tessera/formats/scaling_modes.h"

namespace tessera::nn::detail {

using ::tessera::detail::kParallelWork;
namespace {

bool rowwise_family(const LinearSpec& s) {
  return is_family(s.weight.config.mode, ScaleFamily::kRowwise);
}

// The config of Wᵀ's rowwise copy: the weight's (rowwise family: one scale per row of Wᵀ), or
// for MXFP8 1x32 blocks along out.
QuantizerConfig wt_config(const LinearSpec& s) {
  QuantizerConfig c = s.weight.config;
  if (rowwise_family(s)) return c;
  c.mode = ScalingMode::kMXFP8;  // 32x32 tiles store their scales as 1x32 ones (scaling_modes.h)
  return c;
}

void carve(const LinearSpec& s, Carver& carver, Device device, WeightCopies& c) {
  const int64_t rows = s.groups * s.out;
  if (weight_columnwise_is_wt(s)) {
    c.q = carve_quantized(s.weight.config, rows, s.in, true, false, carver, device, s.groups);
    c.wt = carve_quantized(wt_config(s), s.groups * s.in, s.out, true, false, carver, device);
  } else {
    // W_g on whole blocks (make_linear_spec): NVFP4's global amax per expert.
    c.q = carve_quantized(s.weight.config, rows, s.in, true, true, carver, device, s.groups);
  }
  if (weight_has_image(s)) {
    const auto image = [&](int64_t r, int64_t cols) {
      return TensorView::contiguous(carver.take(dtype_bytes(DType::kBFloat16, r * cols)),
                                    DType::kBFloat16, {r, cols}, device);
    };
    c.expanded = image(rows, s.in);
    if (weight_columnwise_is_wt(s)) c.expanded_wt = image(s.groups * s.in, s.out);  // MXFP8
  }
}

// A BF16 image from a rowwise copy: code value × block scale, exact in BF16 (NVFP4: E2M1 × E4M3;
// MXFP8: E4M3 / E5M2 × E8M0).
void write_image(const QuantizedTensorView& q, const TensorView& out, Stream stream) {
  if (q.rows * q.cols == 0) return;
  if (out.device.is_cuda()) return cuda::expand_rowwise(q, out, stream);
  const scale_rules::ScaleGeometry geo = scale_geometry(q.config, q.rows, q.cols, false);
  const bool fp4 = q.config.element == DType::kFloat4E2M1;
  const auto* codes = q.data.as<uint8_t>();
  const auto* scales = q.scale_inv.as<uint8_t>();
  auto* dst = static_cast<bf16*>(out.data);
  const int64_t row_bytes = fp4 ? (q.cols + 1) / 2 : q.cols;
  float value[256];  // each code's value
  for (int i = 0; i < (fp4 ? 16 : 256); ++i) {
    const auto b = static_cast<uint8_t>(i);
    value[i] = fp4 ? formats::decode_e2m1(b)
                   : (q.config.element == DType::kFloat8E5M2 ? formats::decode_e5m2(b)
                                                              : formats::decode_e4m3(b));
  }
#pragma omp parallel for schedule(static) if (q.rows * q.cols >= kParallelWork)
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c0 = 0; c0 < q.cols; c0 += geo.block_cols) {  // one scale per block
      const uint8_t sb = scales[scale_rules::scale_index(geo, r, c0)];
      const float scale = fp4 ? formats::decode_e4m3(sb) : formats::decode_e8m0(sb);
      for (int64_t c = c0; c < std::min(q.cols, c0 + geo.block_cols); ++c) {
        const uint8_t b = fp4 ? codes[r * row_bytes + c / 2] : codes[r * row_bytes + c];
        const uint8_t code = fp4 ? (c % 2 == 0 ? b & 0xF : b >> 4) : b;
        dst[r * q.cols + c] = bf16::from_float(value[code] * scale);
      }
    }
  }
}

}  // namespace

bool weight_has_image(const LinearSpec& s) {
  if (!s.quantized() || s.in % 8 != 0) return false;
  const ScalingMode m = s.weight.config.mode;
  return is_family(m, ScaleFamily::kNVFP4) ||
         (is_family(m, ScaleFamily::kMXFP8) && ::tessera::detail::mxfp8_weight_images());
}

bool weight_columnwise_is_wt(const LinearSpec& s) {
  if (!s.quantized()) return false;
  return rowwise_family(s) || (is_family(s.weight.config.mode, ScaleFamily::kMXFP8) &&
                               s.out % 32 == 0);
}

int64_t weight_layout_bytes(const LinearSpec& s) {
  if (s.weight_layout > 0) return s.weight_layout;  // measured once by make_linear_spec
  Carver measure;
  WeightCopies c;
  carve(s, measure, Device::cpu(), c);
  return measure.used();
}

void place_weight_layout(const LinearSpec& s, const Allocation& storage, Device device,
                         WeightCopies& c) {
  TESSERA_CHECK_STATUS(storage.bytes >= weight_layout_bytes(s), Status::kBufferTooSmall,
                       "weight copies: ", storage.bytes, " bytes, ", weight_layout_bytes(s),
                       " needed");
  Carver carver(storage.data, storage.bytes);
  carve(s, carver, device, c);
}

void quantize_weight_layout(const LinearSpec& s, const TensorView& w, const LinearState& state,
                            Allocator& alloc, WeightCopies& c, Stream stream) {
  const Device dev = w.device;
  const int64_t rows = s.groups * s.out;
  const TensorView w2 = TensorView::contiguous(w.data, w.dtype, {rows, s.in}, dev);
  Members experts{nullptr, s.groups, s.out};  // W_g = rows [g·out, (g+1)·out)
  experts.aligned16 = s.out % 16 == 0;
  if (rowwise_family(s)) {  // the rowwise copy and Wᵀ per group with per-expert scales
    MemberColumnsArgs a{w.data, w.dtype, rows, s.in, experts,
                        moe::row_quant_of(wt_config(s), s.out), c.wt.data.as<uint8_t>(),
                        s.in * s.out, s.out, 0, c.wt.scale_inv.as<float>()};
    if (dev.is_cuda()) {  // both copies from two reads of W where the wide kernels take it
      a.row_data = c.q.data.as<uint8_t>();
      a.row_scale_inv = c.q.scale_inv.as<float>();
      a.row_quant = moe::row_quant_of(s.weight.config, s.in);
      if (!cuda::lines_fused(a)) a.row_data = nullptr, a.row_scale_inv = nullptr;
    }
    if (a.row_data == nullptr) {
      Quantizer q = role_quantizer(s.weight, true, false, dev);
      q.quantize(w2, c.q, stream);
    }
    quantize_member_columns(a, alloc, dev, stream);
    return;
  }
  if (!c.columnwise_is_wt()) {
    quantize_role_members(s.weight, true, true, state.weight, w2, experts, c.q, alloc, stream,
                          "weight");
    if (c.expanded.data != nullptr) write_image(c.q, c.expanded, stream);
    return;
  }
  Quantizer q = role_quantizer(s.weight, true, true, dev);
  // Both usages in one pass, the columnwise copy into scratch, then moved per group into Wᵀ.
  Carver measure;
  carve_quantized(s.weight.config, rows, s.in, false, true, measure, dev);
  Scratch tmp = scratch(alloc, measure.used(), dev, stream);
  const QuantizedTensorView cw =
      carve_quantized(s.weight.config, rows, s.in, false, true, tmp.carver, dev);
  QuantizedTensorView both = c.q;
  both.columnwise_data = cw.columnwise_data;
  both.columnwise_scale_inv = cw.columnwise_scale_inv;
  both.config.columnwise = true;
  q.quantize(w2, both, stream);
  // codes (G·out, in) → per group (in, out); E8M0 scales (G·out/32, in) → per group (in, out/32)
  transpose_bytes(cw.columnwise_data.data, c.wt.data.data, s.groups, s.out, s.in, dev,
                  stream);
  transpose_bytes(cw.columnwise_scale_inv.data, c.wt.scale_inv.data, s.groups,
                  s.out / 32, s.in, dev, stream);
  if (c.expanded.data != nullptr) write_image(c.q, c.expanded, stream);
  if (c.expanded_wt.data != nullptr) write_image(c.wt, c.expanded_wt, stream);
}

void transpose_bytes(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
                     Device device, Stream stream) {
  if (batch * rows * cols == 0) return;
  if (device.is_cuda()) return cuda::transpose_bytes(in, out, batch, rows, cols, stream);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
#pragma omp parallel for schedule(static) if (batch * rows * cols >= kParallelWork)
  for (int64_t b = 0; b < batch; ++b) {
    const uint8_t* s = src + b * rows * cols;
    uint8_t* d = dst + b * rows * cols;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) d[c * rows + r] = s[r * cols + c];
    }
  }
}

}  // namespace tessera::nn::detail
