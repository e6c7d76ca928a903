// Stand-in for the CUDA metadata kernel in a build without the CUDA backend.
#include "grouped/grouped_backend.h"
#include "tessera/core/status.h"

namespace tessera::detail {

void grouped_fill_metadata_cuda(const TensorView& splits, int64_t*, std::span<int64_t* const>,
                                std::span<const int64_t>, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "grouped: splits are on ", to_string(splits.device),
               " but tessera was built without CUDA");
}

}  // namespace tessera::detail
