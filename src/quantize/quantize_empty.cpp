// Quantization of an input without elements (M == 0 or K == 0), for every backend. No block has
// an element, so the work is proportional to the output, never to the empty rows or columns: a
// (2^40, 0) input returns at once. The memory writes go through an EmptyWriter; the host one is
// here, the device one in cuda/empty.cu.
#include <algorithm>
#include <cstring>

#include "quantize/quantize_backend.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera::detail {
namespace {

// One usage: data and padding zero; the FP32-scaled modes with one scale per tensor or per row
// store the scale of an all-zero block (amax 0); the amax buffers hold 0. Every other mode has a
// scale matrix without entries when M or K is 0 (types.h, scale_shape).
void empty_usage(const QuantizerConfig& c, const TensorView& data, const TensorView& scale,
                 const TensorView& amax, const QuantizeRequest& req, const EmptyWriter& w) {
  w.zero(data.data, data.nbytes());
  w.zero(scale.data, scale.nbytes());
  if (amax.data != nullptr) w.zero(amax.data, sizeof(float));
  if (c.mode == ScalingMode::kTensor || c.mode == ScalingMode::kRowwise) {
    const float zero_block_scale = scale_rules::current_scale(
        0.0f, fp8_max_finite(c.element), c.amax_epsilon, c.power_of_two_scales);
    w.fill_scale_inv(scale.as<float>(), scale.numel(), zero_block_scale,
                     c.delayed ? req.delayed_scale : nullptr);
    return;
  }
  TESSERA_CHECK_STATUS(scale.numel() == 0, Status::kInternal, "quantize of an empty input: ",
                       scaling_mode_name(c.mode), " has ", scale.numel(),
                       " scales for an input without elements");
}

class HostEmptyWriter final : public EmptyWriter {
 public:
  void zero(void* p, int64_t bytes) const override {
    if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
  }
  void fill_scale_inv(float* dst, int64_t n, float scale,
                      const float* delayed_scale) const override {
    std::fill(dst, dst + n, scale_rules::reciprocal(delayed_scale ? *delayed_scale : scale));
  }
};

}  // namespace

void quantize_empty(const QuantizerConfig& config, const QuantizedTensorView& out,
                    const QuantizeRequest& req, const EmptyWriter& writer) {
  if (config.delayed) writer.zero(req.amax_history, sizeof(float));
  if (req.rowwise) empty_usage(config, out.data, out.scale_inv, out.amax, req, writer);
  if (req.columnwise) {
    empty_usage(config, out.columnwise_data, out.columnwise_scale_inv, out.columnwise_amax, req,
                writer);
  }
}

void quantize_empty_host(const QuantizerConfig& config, const QuantizedTensorView& out,
                         const QuantizeRequest& req) {
  quantize_empty(config, out, req, HostEmptyWriter{});
}

}  // namespace tessera::detail
