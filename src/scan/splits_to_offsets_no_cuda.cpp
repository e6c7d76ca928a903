// Stand-in for the CUDA scan launch in a build without the CUDA backend.
#include "tessera/core/status.h"
#include "tessera/scan/splits_to_offsets.h"

namespace tessera::detail {

void splits_to_offsets_cuda(const TensorView& splits, std::span<const OffsetsSpec>,
                            std::span<const TensorView>, std::span<const int64_t>,
                            const ScanOptions&, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "splits_to_offsets: splits are on ", to_string(splits.device),
               " but tessera was built without CUDA");
}

}  // namespace tessera::detail
