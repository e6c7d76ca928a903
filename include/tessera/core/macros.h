// Portability macros shared by host and device code.
#pragma once

#include "tessera/config.h"

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__ __forceinline__
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HD inline
#define TESSERA_HOST_DEVICE
#endif
