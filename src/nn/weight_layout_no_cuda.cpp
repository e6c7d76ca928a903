// Builds without nvcc: the CUDA parts of the weight layout report that CUDA is absent.
#include "nn/weight_layout.h"
#include "tessera/core/status.h"

namespace tessera::nn::detail::cuda {

void transpose_bytes(const void*, void*, int64_t, int64_t, int64_t, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "transpose_bytes: tessera was built without CUDA");
}

void expand_rowwise(const QuantizedTensorView&, const TensorView&, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "expand_rowwise: tessera was built without CUDA");
}

}  // namespace tessera::nn::detail::cuda
