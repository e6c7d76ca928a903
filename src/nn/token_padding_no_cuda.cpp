// Stand-ins for the CUDA token-padding entry points in a build without the CUDA backend.
#include "tessera/core/status.h"
#include "tessera/nn/token_padding.h"

namespace tessera::detail {

void regroup_rows_cuda(const RegroupRows&, Device device, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "token padding: tensors are on ", to_string(device),
               " but tessera was built without CUDA");
}

void upload_async(void*, const void*, int64_t, Device device, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "token padding: offsets are on ", to_string(device),
               " but tessera was built without CUDA");
}

}  // namespace tessera::detail
