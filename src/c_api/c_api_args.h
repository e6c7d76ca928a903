// The C API's argument checks, shared by every extern "C" function: an int32 enum value in range,
// an int32 flag that is 0 or 1, a count that is not negative, a (rows, cols) pair whose element
// count fits int64. Each throws Error(kInvalidArgument) — kOutOfRange for a product past int64 —
// with a message naming the parameter and what it accepts.
#pragma once

#include <cstdint>

#include "tessera/c_api.h"
#include "tessera/core/device.h"
#include "tessera/core/dtype.h"

namespace tessera::c_api {

// A tessera_dtype value (0 .. kNumDTypes - 1).
DType dtype_arg(int32_t value, const char* arg);
// device_type 0 (CPU) or 1 (CUDA), device_index >= 0.
Device device_arg(tessera_device d);
// A boolean passed as int32: 0 or 1 (2, -1, ... are refused, not read as true).
bool flag_arg(int32_t value, const char* arg);
// value >= 0.
int64_t count_arg(int64_t value, const char* arg);
// rows * cols for rows, cols >= 0 (each named when negative); kOutOfRange "rows * cols" when the
// product does not fit int64.
int64_t elements_arg(int64_t rows, int64_t cols);

}  // namespace tessera::c_api
