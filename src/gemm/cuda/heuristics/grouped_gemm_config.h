// Tile/config heuristic of the sm90 grouped GEMM, kept apart from the kernels: a function of the
// problem's host-known sizes (capacity, n, k or m, group count) and the device's SM count. Group
// sizes live on the device and are never read here.
#pragma once

#include "gemm/cuda/grouped_gemm_sm90.h"

namespace tessera::gemm_cuda {

// num_sms: the device's multiprocessor count (0 = query the current device).
Sm90Config select_sm90_config(const Sm90GroupedGemm& g, int num_sms);

}  // namespace tessera::gemm_cuda
