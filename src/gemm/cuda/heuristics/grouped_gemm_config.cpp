// The sm90 grouped GEMM config heuristic (see grouped_gemm_config.h).
//
// Two kernels per element kind: cooperative 128 x 256 tiles and ping-pong 128 x 128 tiles (each
// consumer warpgroup a whole tile, its epilogue under the other's main loop). Rules, each from
// the same-run schedule sweep on the H200 (docs/gemm_cuda.md, harmonic mean of the balanced and
// the imbalanced run of each DESIGN §10 shape, since the host never sees the group sizes):
// - big groups (> 1024 rows or tokens per group, Mixtral) and enough 256-wide tiles to fill the
//   SMs twice: cooperative 256, 3 stages (TMA-store epilogue) or 4 (register epilogue);
// - M-grouped (forward, dgrad) with small groups: ping-pong, 6 stages (one 64-row staging block),
//   up to 4096 bytes of contraction per row (32 stages of 128 B); above, the epilogue is a small
//   part of a tile and cooperative 256 (half the A re-reads, m64n256 wgmma) won (DSv3 fc1 BF16,
//   K = 14336 bytes: 661 vs 541 TFLOP/s; FP8, 7168 bytes, ncu one launch each: balanced 662 vs
//   653 us, imbalanced 736 vs 870 us, the ping-pong imbalanced run at 87 % of L2 throughput);
// - K-grouped (wgrad) with small groups: ping-pong with 5 stages (the whole tile staged, one bulk
//   store) up to 384 tokens per group (Qwen3), cooperative 256 above (DSv3: 512).
// - big groups (cooperative 256 with TMA stores): tile order in bands of 8 m blocks (BF16/FP16)
//   or 16 (FP8) instead of m blocks fastest over the whole group. Same-run sweep on the H200
//   (harmonic mean of balanced / imbalanced, TFLOP/s, plain order → bands of 8 / 16): Mixtral
//   fc1 wgrad BF16 535 → 655 / 637, FP8 949 → 1025 / 1033; fc1 forward BF16 651 → 673 / 658,
//   FP8 1199 → 1229 / 1298; fc2 forward and BF16 wgrad within ±2 %, FP8 fc2 wgrad 1095 → 1037 /
//   1056 (its plain-order balanced figure, 1388, is 11 % above the same config's main-table
//   figure of that run: noise). Not timed with the
//   register epilogue (FP32 D, beta = 1), which keeps the plain order.
// - one persistent CTA per SM, no clusters (measured: no gain, below).
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
  // The TMA-store epilogue applies to BF16/FP16 D with beta = 0 (staging in shared memory).
  c.tma_store = p.beta == 0.0f && p.out_type != gemm_sm90::OutType::kFP32;
  const int64_t per_group = p.num_groups > 0 ? p.capacity / p.num_groups : 0;
  const bool small = p.n <= 128 || tiles256 < 2 * num_sms || per_group <= 1024;
  const int elem_bytes = g.elem == ElemKind::kBF16 || g.elem == ElemKind::kFP16 ? 2 : 1;
  bool pingpong = false;
  const bool few_tiles = p.n <= 128 || tiles256 < 2 * num_sms;
  if (small && p.k_grouped) pingpong = per_group <= 384 || few_tiles;
  if (small && !p.k_grouped) pingpong = p.k * elem_bytes <= 4096 || few_tiles;
  c.pingpong = pingpong;
  c.block_n = pingpong ? 128 : 256;
  if (pingpong) c.stages = p.k_grouped ? 5 : 6;
  else c.stages = c.tma_store ? 3 : 4;
  // Big groups (cooperative 256, TMA stores): tiles in bands of m blocks (16-bit operands 8, FP8
  // 16: about the same bytes of A per band).
  if (!small && c.tma_store) c.raster_band = elem_bytes == 2 ? 8 : 16;
  // Clusters of 2 CTAs (Sm90Config::cluster, TMA multicast of the tile pair's shared operand)
  // stay off: on the H200 they measured no gain beyond the run's own noise on big groups
  // (Mixtral forward, bands as above, with / without: -4 % to +3 %, while the same config timed
  // twice in that run differed by up to 4 %) and lost 3-7 % on small groups (Qwen3; DSv3 fc2).
  c.cluster = 1;
  return c;
}

}  // namespace tessera::gemm_cuda
