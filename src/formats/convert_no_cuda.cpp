// Stand-ins for the CUDA conversion entry points in a build without the CUDA backend.
#include "tessera/core/status.h"
#include "tessera/formats/convert.h"

namespace tessera::detail {

void encode_cuda(const TensorView& src, const TensorView&, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "encode: src is on ", to_string(src.device),
               " but tessera was built without CUDA");
}

void decode_cuda(const TensorView& src, const TensorView&, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "decode: src is on ", to_string(src.device),
               " but tessera was built without CUDA");
}

}  // namespace tessera::detail
