// The C API's shared argument checks (c_api_args.h).
#include "c_api/c_api_args.h"

#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"

namespace tessera::c_api {

DType dtype_arg(int32_t value, const char* arg) {
  TESSERA_CHECK(value >= 0 && value < kNumDTypes, arg, ": value ", value,
                " is not a tessera_dtype (0 to ", kNumDTypes - 1, ")");
  return static_cast<DType>(value);
}

Device device_arg(tessera_device d) {
  TESSERA_CHECK(d.device_type == 0 || d.device_type == 1, "device: device_type ", d.device_type,
                " must be 0 (CPU) or 1 (CUDA)");
  TESSERA_CHECK(d.device_index >= 0, "device: device_index ", d.device_index, " is negative");
  return d.device_type == 0 ? Device::cpu() : Device::cuda(d.device_index);
}

bool flag_arg(int32_t value, const char* arg) {
  TESSERA_CHECK(value == 0 || value == 1, arg, ": value ", value, " must be 0 or 1");
  return value == 1;
}

int64_t count_arg(int64_t value, const char* arg) {
  TESSERA_CHECK(value >= 0, arg, ": ", value, " is negative");
  return value;
}

int64_t elements_arg(int64_t rows, int64_t cols) {
  return checked_mul(count_arg(rows, "rows"), count_arg(cols, "cols"), "rows * cols");
}

}  // namespace tessera::c_api
