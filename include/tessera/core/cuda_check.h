// TESSERA_CUDA_CHECK(call): throws tessera::Error{kDeviceError} with the CUDA error name and text.
// Only for translation units built with the CUDA toolkit's headers.
#pragma once

#include <cuda_runtime_api.h>

#include "tessera/core/status.h"

#define TESSERA_CUDA_CHECK(call)                                                             \
  do {                                                                                       \
    const cudaError_t tessera_cuda_err_ = (call);                                           \
    if (tessera_cuda_err_ != cudaSuccess) {                                                  \
      ::tessera::detail::throw_error(::tessera::Status::kDeviceError, __FILE__, __LINE__,    \
                                     #call,                                                  \
                                     ::tessera::detail::concat(                              \
                                         cudaGetErrorName(tessera_cuda_err_), ": ",          \
                                         cudaGetErrorString(tessera_cuda_err_)));            \
    }                                                                                        \
  } while (0)

// After a kernel launch: reports launch-configuration errors without synchronizing.
#define TESSERA_CUDA_CHECK_LAUNCH() TESSERA_CUDA_CHECK(cudaGetLastError())
