// Builds without nvcc: the CUDA entry points of the nn row ops report that CUDA is absent.
#include "nn/row_ops.h"
#include "tessera/core/status.h"

namespace tessera::nn::detail::cuda {

void grouped_row_sum(const TensorView&, const GroupOffsets&, const TensorView&, bool, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "grouped_row_sum: tessera was built without CUDA");
}
void swiglu_forward(const TensorView&, const TensorView&, const GroupOffsets&, const TensorView&,
                    Stream) {
  TESSERA_FAIL(Status::kNoDevice, "swiglu_forward: tessera was built without CUDA");
}
void swiglu_backward(const TensorView&, const TensorView&, const TensorView&,
                     const GroupOffsets&, const TensorView&, const TensorView&, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "swiglu_backward: tessera was built without CUDA");
}

}  // namespace tessera::nn::detail::cuda
