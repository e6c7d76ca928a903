// Internal launch API of the sm90 grouped GEMM (TMA + wgmma, persistent, warp-specialized).
// The public descriptor (tessera/gemm/grouped_gemm.h) is translated into an Sm90GroupedGemm by
// dispatch.cu; tests and the bench may also drive it directly. Host-only header (no CUDA types).
//
// Operands are K-major row-major matrices (contraction dim contiguous, 16-byte aligned base and
// row stride). Which rows/columns each group reads is described in kernels/grouped_gemm_params.h.
#pragma once

#include <cstdint>

#include "gemm/cuda/kernels/grouped_gemm_params.h"

namespace tessera::gemm_cuda {

// The (A, B) element pair of a launch (kernels/sm90_mma_kinds.cuh); both operands of a kind have
// the same byte width. kE5M2E4M3: A E5M2, B E4M3 (the HYBRID recipes' backward). The *Block
// kinds are the same FP8 pairs with FP32 block scales promoted every 128 K (KernelParams::bsa /
// bsb; cooperative 128 x 128 tiles only); the *Mx kinds the same pairs with MXFP8 E8M0 scales
// per 32 contraction elements, promoted after every wgmma k32.
enum class ElemKind : int {
  kBF16 = 0,
  kE4M3 = 1,
  kFP16 = 2,
  kE5M2E4M3 = 3,
  kE4M3Block = 4,
  kE5M2E4M3Block = 5,
  kE4M3Mx = 6,
  kE5M2E4M3Mx = 7,
  // NVFP4 x NVFP4 expanded to BF16 inside the kernel (KernelParams::fp4): a and b are the raw
  // E2M1 code matrices (cols and ld in bytes: two codes a byte), the BF16 kind's consumers;
  // M-grouped, ping-pong 128 x 128, 1-CTA clusters.
  kNvfp4 = 8,
};
constexpr bool is_mx_scaled(ElemKind e) {
  return e == ElemKind::kE4M3Mx || e == ElemKind::kE5M2E4M3Mx;
}
// Kinds with block scales in the main loop (FP8 block or MXFP8): cooperative 128 x 128 tiles.
constexpr bool is_block_scaled(ElemKind e) {
  return e == ElemKind::kE4M3Block || e == ElemKind::kE5M2E4M3Block || is_mx_scaled(e);
}

// A row-major (rows, cols) matrix, row stride `ld` elements. K-major operands: cols = the
// contraction. MN-major operands (Sm90GroupedGemm::a_mn_major / b_mn_major): rows = the
// contraction, cols = the operand's M or N.
struct KMajorMatrix {
  const void* ptr = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
};

// Tile configuration chosen by heuristics/grouped_gemm_config.h.
struct Sm90Config {
  // The two kernels: block_n 256 with pingpong = false (cooperative: both consumer warpgroups on
  // one 128 x 256 tile) or block_n 128 with pingpong = true (each consumer warpgroup a whole
  // 128 x 128 tile, in turns). Block-scaled kinds: block_n 128 with pingpong = false only (each
  // warpgroup 64 x 128, partial sums beside the accumulators). Other pairs are refused.
  int block_n = 256;
  bool pingpong = false;
  int stages = 4;     // capped by the launcher to what fits in shared memory
  int num_sms = 0;    // persistent CTAs (0 = all SMs)
  // Epilogue through shared memory + TMA stores where it applies (BF16/FP16 D, beta = 0; see
  // KernelParams::tma_store); its staging buffer takes shared memory from the stages.
  bool tma_store = true;
  // Tile order inside a group (KernelParams::raster_band): 0 = m blocks fastest, b > 0 = bands
  // of b m blocks.
  int raster_band = 0;
  // CTAs per cluster (KernelParams::cluster): 1, or 2 (the two CTAs take tile pairs and
  // multicast the operand the pair shares; K-grouped: where k_grouped_pairs_share_b).
  int cluster = 1;
};

struct Sm90GroupedGemm {
  // params: the group, epilogue and shape fields (see KernelParams); group_maps and stages are
  // filled by the launcher.
  gemm_sm90::KernelParams params;
  ElemKind elem = ElemKind::kBF16;
  // M-grouped: A = token matrix (capacity, k); B = all groups' weights (see b_group_rows/cols).
  // K-grouped: templates of the per-group operands: per-member blocks (A_g at base + start·m,
  //   (m, len_g)) or whole transposed tensors (m, capacity) whose columns [start_g, end_g) are A_g.
  KMajorMatrix a, b;
  bool a_per_member = false, b_per_member = false;  // K-grouped only
  // 16-bit operands read MN-major as stored (ElemKind kBF16 only): K-grouped A and B = the whole
  // (T, m) / (T, n) token matrices (contraction = rows, clipped per group by the setup kernel);
  // M-grouped B = (G, k, n) weights, b_mn_groups = G (a 3-D map: n, k, group). Not with clusters.
  bool a_mn_major = false, b_mn_major = false;
  int64_t b_mn_groups = 0;
  // K-grouped: each group's contraction [start, end) must start and end on multiples of
  // k_bound_block (an end at k_bound_exempt excepted) or its output is NaN
  // (GroupMapParams::bound_block; Hadamard-transformed NVFP4 copies); 0 = no such rule.
  int64_t k_bound_block = 0, k_bound_exempt = 0;
  Sm90Config config;
};

// Workspace bytes the launch needs (K-grouped: two 128-byte tensor maps per group).
int64_t sm90_workspace_bytes(const Sm90GroupedGemm& g);

// Whether a K-grouped launch of `g` can run on 2-CTA clusters with tiles in bands of
// `raster_band`: every group has the same tile count, and with an even number of 128-row m
// blocks (m fastest, no odd bands) the two tiles of every pair are one group's, one n block,
// sharing their B rows; both operands K-major (multicast) and no block scales.
bool k_grouped_pairs_share_b(const Sm90GroupedGemm& g, int raster_band);

// Enqueues the setup kernel (K-grouped) and the GEMM on `stream` (a cudaStream_t). Never syncs.
// Throws Error(kDeviceError) on a CUDA or tensor-map encoding failure.
void launch_grouped_gemm_sm90(const Sm90GroupedGemm& g, void* workspace, int64_t workspace_bytes,
                              void* stream);

}  // namespace tessera::gemm_cuda
