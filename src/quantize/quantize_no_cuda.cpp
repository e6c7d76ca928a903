// Stand-ins for the CUDA quantize entry points in a build without the CUDA backend.
#include "quantize/quantize_backend.h"
#include "tessera/core/status.h"

namespace tessera::detail {

void quantize_cuda(const QuantizerConfig&, const TensorView& x, const QuantizedTensorView&,
                   const QuantizeRequest&, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "quantize: x is on ", to_string(x.device),
               " but tessera was built without CUDA");
}

void quantize_empty_cuda(const QuantizerConfig&, const QuantizedTensorView&,
                         const QuantizeRequest&, Device device, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "quantize: x is on ", to_string(device),
               " but tessera was built without CUDA");
}

void dequantize_cuda(const QuantizedTensorView& q, const TensorView&, bool, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "dequantize: the tensor is on ", to_string(q.device),
               " but tessera was built without CUDA");
}

void delayed_update_cuda(const QuantizerConfig&, float*, float*, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "Quantizer::update: the state is on a CUDA device but tessera "
               "was built without CUDA");
}

bool has_grouped_quantize_kernel(const QuantizerConfig&, int64_t) { return false; }

void grouped_quantize_contiguous_cuda(const QuantizerConfig&, const TensorView& x,
                                      const GroupedTensorView&, const TensorView&, Stream,
                                      const GroupedDelayedState&) {
  TESSERA_FAIL(Status::kNoDevice, "grouped quantize: x is on ", to_string(x.device),
               " but tessera was built without CUDA");
}

void quantize_nvfp4_members_cuda(const QuantizerConfig&, const TensorView& x, const int64_t*,
                                 int64_t, const QuantizedTensorView&, Stream, const int64_t*) {
  TESSERA_FAIL(Status::kNoDevice, "quantize_nvfp4_members: x is on ", to_string(x.device),
               " but tessera was built without CUDA");
}

void quantize_through_layout_cuda(const QuantizerConfig&, const TensorView& x,
                                  const LayoutRows&, const QuantizedTensorView&,
                                  const QuantizeRequest&, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "quantize_through_layout: x is on ", to_string(x.device),
               " but tessera was built without CUDA");
}

}  // namespace tessera::detail
