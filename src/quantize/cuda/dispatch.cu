// Placeholder of the CUDA quantize backend so that the CUDA build links; the CUDA engineer
// replaces it with src/quantize/cuda/<format>/ kernels behind these entry points.
#include "quantize/quantize_backend.h"
#include "tessera/core/status.h"

namespace tessera::detail {

void quantize_cuda(const QuantizerConfig& config, const TensorView&, const QuantizedTensorView&,
                   const QuantizeRequest&, Stream) {
  TESSERA_FAIL(Status::kUnsupported, "quantize: ", scaling_mode_name(config.mode),
               " is not yet implemented on CUDA");
}

void dequantize_cuda(const QuantizedTensorView& q, const TensorView&, bool, Stream) {
  TESSERA_FAIL(Status::kUnsupported, "dequantize: ", scaling_mode_name(q.config.mode),
               " is not yet implemented on CUDA");
}

void delayed_update_cuda(const QuantizerConfig&, float*, float*, Stream) {
  TESSERA_FAIL(Status::kUnsupported, "Quantizer::update: delayed scaling is not yet implemented "
               "on CUDA");
}

}  // namespace tessera::detail
