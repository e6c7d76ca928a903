// Stand-in for detail::grouped_quantize_cuda while the CUDA grouped quantize kernels
// (src/quantize/cuda/grouped_quantize.cu) are not part of the build, or without CUDA.
#include "grouped/grouped_backend.h"
#include "tessera/core/device.h"
#include "tessera/core/status.h"

namespace tessera::detail {

void grouped_quantize_cuda(Quantizer&, std::span<const TensorView>, const GroupedTensorView& out,
                           const TensorView&, Stream) {
  TESSERA_CHECK_STATUS(cuda_compiled(), Status::kNoDevice, "grouped_quantize: out is on ",
                       to_string(out.device), " but tessera was built without CUDA");
  TESSERA_FAIL(Status::kUnsupported, "grouped_quantize: the CUDA grouped quantize kernels are not "
               "built yet (no definition under src/quantize/cuda/); quantize on the CPU");
}

}  // namespace tessera::detail
