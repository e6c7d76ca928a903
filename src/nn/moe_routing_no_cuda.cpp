// Builds without nvcc: the CUDA entry points of the expert-parallel routing ops report that CUDA
// is absent.
#include "nn/moe_kernels.h"
#include "tessera/core/status.h"

namespace tessera::detail::moe {

int64_t routing_workspace_bytes_cuda(int64_t, int64_t) {
  TESSERA_FAIL(Status::kNoDevice, "moe routing: tessera was built without CUDA");
}
void routing_cuda(const RoutingArgs&, Device, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "moe_routing: tessera was built without CUDA");
}
void permute_cuda(const PermuteArgs&, Device, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "moe_permute: tessera was built without CUDA");
}
void gather_add_cuda(const GatherAddArgs&, Device, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "moe gather-add: tessera was built without CUDA");
}
void scatter_cuda(const ScatterArgs&, Device, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "moe_unpermute_backward: tessera was built without CUDA");
}

void dequantize_cuda(const DequantizeArgs&, Device, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "moe_dequantize_rows: tessera was built without CUDA");
}

void regroup_cuda(const RegroupArgs&, Device, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "moe_regroup_index: tessera was built without CUDA");
}

}  // namespace tessera::detail::moe
