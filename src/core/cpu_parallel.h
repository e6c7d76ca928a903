// The one threshold of the CPU backend's OpenMP loops: a loop over less work than this (elements,
// or bytes for plain copies) runs on the calling thread. Starting a team costs microseconds on an
// idle machine, but in a torch process the OpenMP workers of torch's own runtime keep spinning
// after its regions, and a team of ours then waits for cores they hold (on 2 cores, up to a
// scheduler time slice: bench/results/2026-11-29-cpu-fp32-gemm-onednn.md).
#pragma once

#include <cstdint>

namespace tessera::detail {

inline constexpr int64_t kParallelWork = int64_t{1} << 16;

}  // namespace tessera::detail
