// Quantization of an input without elements (M == 0 or K == 0) in host memory, for every host
// backend. No block has an element, so the work is proportional to the output, never to the
// empty rows or columns: a (2^40, 0) input returns at once.
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
                 const TensorView& amax, const QuantizeRequest& req) {
  std::memset(data.data, 0, static_cast<size_t>(data.nbytes()));
  std::memset(scale.data, 0, static_cast<size_t>(scale.nbytes()));
  if (amax.data != nullptr) *amax.as<float>() = 0.0f;
  if (c.mode == ScalingMode::kTensor || c.mode == ScalingMode::kRowwise) {
    const float empty_scale =
        c.delayed ? *req.delayed_scale
                  : scale_rules::current_scale(0.0f, fp8_max_finite(c.element), c.amax_epsilon,
                                               c.power_of_two_scales);
    float* s = scale.as<float>();
    std::fill(s, s + scale.numel(), scale_rules::reciprocal(empty_scale));
    return;
  }
  TESSERA_CHECK_STATUS(scale.numel() == 0, Status::kInternal, "quantize of an empty input: ",
                       scaling_mode_name(c.mode), " has ", scale.numel(),
                       " scales for an input without elements");
}

}  // namespace

void quantize_empty_host(const QuantizerConfig& config, const QuantizedTensorView& out,
                         const QuantizeRequest& req) {
  if (config.delayed) req.amax_history[0] = 0.0f;
  if (req.rowwise) empty_usage(config, out.data, out.scale_inv, out.amax, req);
  if (req.columnwise) {
    empty_usage(config, out.columnwise_data, out.columnwise_scale_inv, out.columnwise_amax, req);
  }
}

}  // namespace tessera::detail
