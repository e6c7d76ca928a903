// Tile/config heuristic of the sm90 grouped GEMM, kept apart from the kernels: a function of the
// problem's host-known sizes (capacity, n, k or m, group count) and the device's SM count. Group
// sizes live on the device and are never read here.
#pragma once

#include "gemm/cuda/grouped_gemm_sm90.h"
#include "tessera/gemm/grouped_gemm.h"

namespace tessera::gemm_cuda {

// num_sms: the device's multiprocessor count (0 = query the current device).
Sm90Config select_sm90_config(const Sm90GroupedGemm& g, int num_sms);

// The public form of a kernel config; public → sm90_config_of gives `c` back, so the heuristic's
// choice round-trips through GroupedGemmProblem::config. fp8: operands of one byte.
GroupedGemmConfig public_config(const Sm90Config& c, bool fp8);
// An explicit (non-default) public config as the kernel's: fields left 0 take the kernel's
// defaults (tile_n 256, stages 4 for 256 / 6 for 128, 1 CTA, TMA-store epilogue, m blocks
// fastest). Throws kUnsupported naming a field whose value the sm90 kernel does not take.
Sm90Config sm90_config_of(const GroupedGemmConfig& c, bool fp8);

}  // namespace tessera::gemm_cuda
