// Builds without nvcc: the CUDA group-starts kernel reports that CUDA is absent.
#include "nn/step_layout.h"
#include "tessera/core/status.h"

namespace tessera::nn::detail::cuda {

void group_starts(const GroupOffsets&, int64_t, int64_t*, int64_t*, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "group_starts: tessera was built without CUDA");
}

}  // namespace tessera::nn::detail::cuda
