// The sm90 grouped GEMM config heuristic (see grouped_gemm_config.h) and the two-way mapping
// between the public GroupedGemmConfig and the kernel's Sm90Config.
//
// Two kernels per element kind: cooperative 128 x 256 tiles and ping-pong 128 x 128 tiles (each
// consumer warpgroup a whole tile, its epilogue under the other's main loop). The host never sees
// the group sizes, so each rule was chosen on the harmonic mean of a balanced and an imbalanced
// run of each benchmark shape (docs/architecture.md), from same-run schedule sweeps on the H200
// (figures: bench/results/2026-11-21-gemm-cuda.md):
// - big groups (> 1024 rows or tokens per group) and enough 256-wide tiles to fill the SMs
//   twice: cooperative 256, 3 stages (TMA-store epilogue) or 4 (register epilogue);
// - M-grouped (forward, dgrad) with small groups: ping-pong, 6 stages (one 64-row staging
//   block), up to 4096 bytes of contraction per row; above, the epilogue is a small part of a
//   tile and cooperative 256 (half the A re-reads, m64n256 wgmma) wins;
// - K-grouped (wgrad): cooperative 256 unless too few tiles to fill the SMs twice (then
//   ping-pong with 5 stages: the whole tile staged, one bulk store); on the Qwen3 rows (256
//   tokens per group) cooperative 256 beats ping-pong balanced and skewed
//   (bench/results/2026-12-01-session20-h200.md);
// - big groups with TMA stores: tiles in bands of 8 m blocks (BF16/FP16) or 16 (FP8), so a
//   group's A is not streamed from DRAM once per n-block column (register epilogue: plain order);
// - one persistent CTA per SM; 2-CTA clusters only for the FP8 wgrad, plain and 1x128 block
//   (K-grouped, an even number of m blocks: each pair is one group's two m blocks of one n block,
//   B multicast): plain, ahead on that harmonic mean
//   (bench/results/2026-11-28-wgrad-clusters-maps.md); block, the step ~1 % faster in a same-run
//   A/B (bench/results/2026-12-01-session21-h200.md); elsewhere they measured no gain.
#include "gemm/cuda/heuristics/grouped_gemm_config.h"
#include "gemm/cuda/quantized_operands.h"

#include <cuda_runtime_api.h>

#include "tessera/core/cuda_check.h"
#include "gemm/gemm_backend.h"
#include "tessera/core/status.h"

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
  if (small && p.k_grouped) pingpong = few_tiles;
  if (small && !p.k_grouped) pingpong = p.k * elem_bytes <= 4096 || few_tiles;
  c.pingpong = pingpong;
  c.block_n = pingpong ? 128 : 256;
  if (pingpong) c.stages = p.k_grouped ? 5 : 6;
  else c.stages = c.tma_store ? 3 : 4;
  // Big groups (cooperative 256, TMA stores): tiles in bands of m blocks (16-bit operands 8, FP8
  // 16: about the same bytes of A per band).
  if (!small && c.tma_store) c.raster_band = elem_bytes == 2 ? 8 : 16;
  // Block-scaled FP8: the one kernel shape (cooperative 128 x 128, partial sums beside the
  // accumulators), as many stages as fit (the launcher caps them).
  if (is_block_scaled(g.elem)) {
    c.pingpong = false;
    c.block_n = 128;
    c.stages = 6;
  }
  // NVFP4 expanded in the kernel: ping-pong 128 x 128 (the FP16 stages plus the raw ring), as
  // many stages as fit.
  if (g.elem == ElemKind::kNvfp4) {
    c.pingpong = true;
    c.block_n = 128;
    c.stages = 6;
    c.raster_band = 0;
  }
  // Clusters of 2 CTAs (Sm90Config::cluster, TMA multicast of a tile pair's shared operand):
  // the FP8 wgrad (plain or block, not MXFP8) where its m blocks pair up (the launcher's rule);
  // elsewhere off, no gain measured (bench/results/2026-11-21-gemm-cuda.md, round 3).
  c.cluster = p.k_grouped && elem_bytes == 1 && k_grouped_pairs_share_b(g, c.raster_band) ? 2 : 1;
  return c;
}

GroupedGemmConfig public_config(const Sm90Config& c, bool fp8) {
  GroupedGemmConfig out;
  out.tile_m = gemm_sm90::kBlockM;
  out.tile_n = c.block_n;
  out.tile_k = gemm_sm90::kTileKBytes / (fp8 ? 1 : 2);
  out.stages = c.stages;
  out.variant = c.tma_store ? 0 : 1;
  out.cluster_m = c.cluster;  // CTAs per cluster along the tile order (Sm90Config::cluster)
  out.cluster_n = 1;
  out.num_sms = c.num_sms;
  out.raster_band = c.raster_band;
  return out;
}

Sm90Config sm90_config_of(const GroupedGemmConfig& c, bool fp8) {
  const int tile_k = gemm_sm90::kTileKBytes / (fp8 ? 1 : 2);
  TESSERA_CHECK_STATUS(c.tile_m == 0 || c.tile_m == gemm_sm90::kBlockM, Status::kUnsupported,
                       "config.tile_m: ", c.tile_m, "; the sm90 kernel's tiles have ",
                       gemm_sm90::kBlockM, " rows (or leave it 0)");
  TESSERA_CHECK_STATUS(c.tile_n == 0 || c.tile_n == 128 || c.tile_n == 256, Status::kUnsupported,
                       "config.tile_n: ", c.tile_n, "; expected 256 (cooperative), 128 "
                       "(ping-pong) or 0");
  TESSERA_CHECK_STATUS(c.tile_k == 0 || c.tile_k == tile_k, Status::kUnsupported,
                       "config.tile_k: ", c.tile_k, "; a stage holds ", gemm_sm90::kTileKBytes,
                       " bytes of contraction: ", tile_k, " elements here (or leave it 0)");
  TESSERA_CHECK_STATUS(c.stages >= 0 && c.num_sms >= 0 && c.raster_band >= 0,
                       Status::kUnsupported, "config.stages / num_sms / raster_band: ", c.stages,
                       " / ", c.num_sms, " / ", c.raster_band, " must not be negative");
  const int cm = c.cluster_m ? c.cluster_m : 1;
  const int cn = c.cluster_n ? c.cluster_n : 1;
  TESSERA_CHECK_STATUS(cn == 1 && (cm == 1 || cm == 2), Status::kUnsupported,
                       "config.cluster_m x cluster_n: the sm90 kernel runs 1 CTA, or clusters of "
                       "2 (cluster_m 2, cluster_n 1); got ", cm, " x ", cn);
  TESSERA_CHECK_STATUS((c.variant & ~1) == 0, Status::kUnsupported, "config.variant: ",
                       c.variant, "; only bit 0 (register-store epilogue) exists");
  Sm90Config k;
  k.block_n = c.tile_n ? c.tile_n : 256;
  k.pingpong = k.block_n == 128;
  k.stages = c.stages ? c.stages : (k.block_n == 256 ? 4 : 6);
  k.num_sms = c.num_sms;
  k.tma_store = (c.variant & 1) == 0;
  k.raster_band = c.raster_band;
  k.cluster = cm;
  return k;
}

}  // namespace tessera::gemm_cuda

namespace tessera::detail {

void grouped_gemm_cuda_check_config(const GroupedGemmProblem& p) {
  if (!p.config.is_default())
    gemm_cuda::sm90_config_of(p.config, gemm_cuda::one_byte_operands(p));
}

}  // namespace tessera::detail
