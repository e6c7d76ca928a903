// Device parsing and CUDA discovery (compiled with or without the CUDA toolkit).
#include "tessera/core/device.h"

#include <charconv>

#include "tessera/core/status.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tessera {

std::string to_string(Device d) {
  return d.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.substr(0, 5) == "cuda:") {
    const std::string_view digits = text.substr(5);
    int ordinal = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() &&
        ordinal >= 0) {
      return Device::cuda(ordinal);
    }
  }
  TESSERA_FAIL(Status::kInvalidArgument, "device '", echo(text),
               "' is not understood; expected 'cpu', 'cuda' or 'cuda:N' with N >= 0");
}

bool cuda_compiled() noexcept {
#if defined(TESSERA_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

int cuda_device_count() noexcept {
#if defined(TESSERA_WITH_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

}  // namespace tessera
