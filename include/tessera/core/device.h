// Where memory lives and work runs: the host CPU or CUDA device N.
#pragma once

#include "tessera/config.h"

#include <string>
#include <string_view>

namespace tessera {

enum class DeviceType : int { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static constexpr Device cpu() { return {DeviceType::kCPU, 0}; }
  static constexpr Device cuda(int ordinal = 0) { return {DeviceType::kCUDA, ordinal}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  friend bool operator==(const Device&, const Device&) = default;
};

std::string to_string(Device d);
// "cpu", "cuda", "cuda:N". Throws Error(kInvalidArgument) on anything else.
Device parse_device(std::string_view text);

// True when tessera was built with the CUDA backend.
bool cuda_compiled() noexcept;
// Number of CUDA devices usable now (0 without a driver/GPU or without the CUDA backend).
int cuda_device_count() noexcept;

}  // namespace tessera
