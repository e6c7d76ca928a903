// The sm90 grouped GEMM config heuristic (see grouped_gemm_config.h).
//
// Rules, each from a measurement on the H200 (docs/gemm_cuda.md):
// - block_n 256 (128x256 tiles, 4 stages of 48 KiB) when the tile count at that width fills the
//   SMs at least twice over; otherwise block_n 128 (6 stages of 32 KiB) to double the tiles.
// - one persistent CTA per SM.
// - BF16/FP16 D with beta = 0: epilogue staged through shared memory and written by TMA stores,
//   overlapped with the next tile's main loop (3 / 5 stages then), and 128-wide tiles when the
//   groups are small (≤ 1024 rows, or tokens per group for wgrad).
#include "gemm/cuda/heuristics/grouped_gemm_config.h"

#include <cuda_runtime_api.h>

#include "tessera/core/cuda_check.h"

namespace tessera::gemm_cuda {

Sm90Config select_sm90_config(const Sm90GroupedGemm& g, int num_sms) {
  if (num_sms <= 0) {
    int dev = 0;
    TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev));
  }
  const auto& p = g.params;
  // Tiles at block_n = 256, from host bounds: M-grouped rows ≤ capacity (+1 partial tile per
  // group at most, not counted), K-grouped G·m rows.
  const int64_t rows = p.k_grouped ? int64_t{p.num_groups} * ((p.m + 127) / 128) * 128 : p.capacity;
  const int64_t tiles256 = ((rows + 127) / 128) * ((p.n + 255) / 256);
  Sm90Config c;
  c.num_sms = num_sms;
  // The TMA-store epilogue applies to BF16/FP16 D with beta = 0; its staging buffer takes one
  // stage's shared memory. With it, 128-wide tiles won whenever groups are small (≤ 1024 rows
  // or contraction per group; DSv3 / Qwen3 shapes, forward and wgrad, +10-35%), 256-wide tiles
  // on Mixtral's 4096-token groups.
  c.tma_store = p.beta == 0.0f && p.out_type != gemm_sm90::OutType::kFP32;
  const int64_t per_group = p.num_groups > 0 ? p.capacity / p.num_groups : 0;
  const bool narrow = p.n <= 128 || tiles256 < 2 * num_sms || (c.tma_store && per_group <= 1024);
  c.block_n = narrow ? 128 : 256;
  // 128-wide forward tiles run the ping-pong schedule: each consumer's epilogue overlaps the
  // other's main loop.
  c.pingpong = narrow && !p.k_grouped;
  c.stages = narrow ? 6 : (c.tma_store ? 3 : 4);
  return c;
}

}  // namespace tessera::gemm_cuda
