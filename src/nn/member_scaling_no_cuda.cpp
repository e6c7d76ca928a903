// Builds without nvcc: the CUDA kernels of the per-member scaling report that CUDA is absent.
#include "nn/member_scaling.h"
#include "tessera/core/status.h"

namespace tessera::nn::detail::cuda {

void member_element_offsets(const Members&, int64_t, int64_t*, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "member_element_offsets: tessera was built without CUDA");
}
int64_t member_columns_scratch_bytes(const MemberColumnsArgs&) { return 0; }
bool lines_fused(const MemberColumnsArgs&) { return false; }
bool columns_from_codes(const MemberColumnsArgs&) { return false; }
void quantize_member_columns(const MemberColumnsArgs&, void*, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "quantize_member_columns: tessera was built without CUDA");
}
void member_tensor_amax(const MemberTensorArgs&, uint32_t*, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "member_tensor_amax: tessera was built without CUDA");
}
void member_tensor_encode(const MemberTensorArgs&, const uint32_t*, uint8_t*, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "member_tensor_encode: tessera was built without CUDA");
}

bool member_tensor_wide(const MemberTensorArgs&) { return false; }
int64_t member_tensor_wide_scratch_bytes(const MemberTensorArgs&) { return 0; }
void quantize_member_tensor_wide(const MemberTensorArgs&, void*, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "quantize_member_tensor_wide: tessera was built without CUDA");
}

void update_member_state(float*, float*, int64_t, int, bool, float, int, Stream) {
  TESSERA_FAIL(Status::kNoDevice, "update_member_state: tessera was built without CUDA");
}

}  // namespace tessera::nn::detail::cuda
