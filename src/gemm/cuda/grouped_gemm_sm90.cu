// Host side of the sm90 grouped GEMM: tensor-map encoding (cuTensorMapEncodeTiled through the
// runtime's driver entry point, so libcuda is not linked), the K-grouped setup kernel that
// derives each group's tensor maps ON THE DEVICE from the group offsets (tensormap.replace in
// shared memory, then tensormap.cp_fenceproxy to the workspace), and the kernel instantiations:
// {BF16 (K-major, MN-major B, MN-major A and B), FP16, E4M3 x E4M3, E5M2 x E4M3} x {cooperative
// 128 x 256, ping-pong 128 x 128}, plus the FP8 block and MXFP8 scaled E4M3 x E4M3 and
// E5M2 x E4M3 (cooperative 128 x 128), and NVFP4 expanded in the kernel (ping-pong 128 x 128) —
// seventeen.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cuda/ptx>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "gemm/cuda/grouped_gemm_sm90.h"
#include "gemm/cuda/kernels/grouped_gemm_sm90.cuh"
#include "tessera/core/cuda_check.h"
#include "tessera/core/status.h"

namespace tessera::gemm_cuda {
namespace {

using gemm_sm90::GroupMapParams;
using gemm_sm90::KernelParams;

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    TESSERA_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    TESSERA_CHECK_STATUS(q == cudaDriverEntryPointSuccess && p != nullptr, Status::kDeviceError,
                         "cuTensorMapEncodeTiled is not available from the driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

int elem_bytes(ElemKind e) { return e == ElemKind::kBF16 || e == ElemKind::kFP16 ? 2 : 1; }

// 2-D map over the raw E2M1 codes of an NVFP4 operand (kNvfp4: rows x cols bytes, row stride ld
// bytes), box = (32 bytes = one stage's 64 contraction elements, box_rows rows), no swizzle (the
// converter threads read it), zero fill out of bounds.
CUtensorMap make_raw_fp4_map(const KMajorMatrix& m, int box_rows) {
  TESSERA_CHECK_STATUS(reinterpret_cast<uintptr_t>(m.ptr) % 16 == 0 && m.ld % 16 == 0,
                       Status::kMisaligned, "NVFP4 operand codes: base and row stride must be ",
                       "16-byte aligned (ld = ", m.ld, " bytes)");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(m.cols > 0 ? m.cols : 1),
                              static_cast<cuuint64_t>(m.rows > 0 ? m.rows : 1)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(m.ld > 0 ? m.ld : 16)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(gemm_sm90::kFp4RawRowBytes),
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_fn()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(m.ptr), dims, strides, box,
      elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TESSERA_CHECK_STATUS(r == CUDA_SUCCESS, Status::kDeviceError,
                       "cuTensorMapEncodeTiled (NVFP4 codes) failed with CUresult ",
                       static_cast<int>(r), " (rows ", m.rows, ", cols ", m.cols, ", ld ", m.ld, ")");
  return map;
}

// The tensor-map element type of a kind (FP8 codes travel as bytes).
CUtensorMapDataType map_dtype(ElemKind e) {
  if (e == ElemKind::kBF16) return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  if (e == ElemKind::kFP16) return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

// 2-D map over a K-major (rows, cols) matrix, box = (128 bytes of contraction, box_rows rows),
// 128-byte swizzle, zero fill out of bounds.
CUtensorMap make_map(const KMajorMatrix& m, ElemKind e, int box_rows) {
  const int eb = elem_bytes(e);
  TESSERA_CHECK_STATUS(reinterpret_cast<uintptr_t>(m.ptr) % 16 == 0 && (m.ld * eb) % 16 == 0,
                       Status::kMisaligned, "grouped GEMM operand base and row stride must be ",
                       "16-byte aligned (ld = ", m.ld, " elements)");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(m.cols > 0 ? m.cols : 1),
                              static_cast<cuuint64_t>(m.rows > 0 ? m.rows : 1)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>((m.ld > 0 ? m.ld : 16) * eb)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(gemm_sm90::kTileKBytes / eb),
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_fn()(
      &map, map_dtype(e), 2, const_cast<void*>(m.ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TESSERA_CHECK_STATUS(r == CUDA_SUCCESS, Status::kDeviceError,
                       "cuTensorMapEncodeTiled failed with CUresult ", static_cast<int>(r),
                       " (rows ", m.rows, ", cols ", m.cols, ", ld ", m.ld, ")");
  return map;
}

// Map over an MN-major 16-bit (rows = contraction, cols = M or N) matrix, or with groups > 0 over
// `groups` such matrices one after the other (dims: cols, rows, group): box 64 x 64 (one 128-byte
// swizzle row of MN by 64 contraction rows), zero fill out of bounds (so a group's contraction
// past its rows reads zeros, never the next group's).
CUtensorMap make_map_mn(const KMajorMatrix& m, ElemKind e, int64_t groups) {
  const int eb = elem_bytes(e);
  TESSERA_CHECK_STATUS(reinterpret_cast<uintptr_t>(m.ptr) % 16 == 0 && (m.ld * eb) % 16 == 0,
                       Status::kMisaligned, "grouped GEMM MN-major operand base and row stride ",
                       "must be 16-byte aligned (ld = ", m.ld, " elements)");
  CUtensorMap map{};
  const cuuint32_t rank = groups > 0 ? 3 : 2;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(m.cols > 0 ? m.cols : 1),
                              static_cast<cuuint64_t>(m.rows > 0 ? m.rows : 1),
                              static_cast<cuuint64_t>(groups > 0 ? groups : 1)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(m.ld * eb),
                                 static_cast<cuuint64_t>(m.ld * eb * (m.rows > 0 ? m.rows : 1))};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(gemm_sm90::kTileKBytes / eb), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode_fn()(
      &map, map_dtype(e), rank, const_cast<void*>(m.ptr), dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TESSERA_CHECK_STATUS(r == CUDA_SUCCESS, Status::kDeviceError,
                       "cuTensorMapEncodeTiled (MN-major) failed with CUresult ", static_cast<int>(r),
                       " (rows ", m.rows, ", cols ", m.cols, ", ld ", m.ld, ", groups ", groups, ")");
  return map;
}

// 2-D map over D (rows, n) BF16/FP16 for the TMA-store epilogue: box 64 columns x box_rows rows
// (64: row blocks inside a group; 8: the rows of a block that crosses a group end), 128-byte
// swizzle (the staging layout of the epilogue).
CUtensorMap make_store_map(const KernelParams& p, int64_t rows, uint32_t box_rows) {
  TESSERA_CHECK_STATUS(reinterpret_cast<uintptr_t>(p.d) % 16 == 0 && (p.ldd * 2) % 16 == 0,
                       Status::kMisaligned, "D must be 16-byte aligned with a 16-byte row stride");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.n), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.ldd * 2)};
  const cuuint32_t box[2] = {gemm_sm90::kStoreBoxCols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_fn()(
      &map, p.out_type == gemm_sm90::OutType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                    : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      2, p.d, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TESSERA_CHECK_STATUS(r == CUDA_SUCCESS, Status::kDeviceError,
                       "cuTensorMapEncodeTiled (D) failed with CUresult ", static_cast<int>(r));
  return map;
}

__device__ int64_t map_group_start(const GroupMapParams& q, int i) {
  return gemm_cuda::device_group_start(q.offsets, q.offsets_int64, q.offsets_start, q.capacity, i);
}

constexpr int kSetupWarps = 8;

// One warp per (group, operand): copy the template map to shared memory, replace the fields that
// depend on the group, publish it to the workspace with a release of the tensor-map proxy.
__global__ void build_group_maps_kernel(const __grid_constant__ CUtensorMap tmpl_a,
                                        const __grid_constant__ CUtensorMap tmpl_b,
                                        const __grid_constant__ GroupMapParams q,
                                        CUtensorMap* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ alignas(128) CUtensorMap maps[kSetupWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slot = blockIdx.x * kSetupWarps + warp;
  const int g = slot / 2, which = slot % 2;
  if (g >= q.num_groups) return;
  const CUtensorMap& tmpl = which ? tmpl_b : tmpl_a;
  reinterpret_cast<uint32_t*>(&maps[warp])[lane] = reinterpret_cast<const uint32_t*>(&tmpl)[lane];
  __syncwarp();
  if (lane == 0) {
    namespace ptx = cuda::ptx;
    const int64_t start = map_group_start(q, g);
    int64_t end = map_group_start(q, g + 1);
    end = end > start ? end : start;
    if (which == 0) {
      bool ok = true;
      for (int o = 0; o < 2; ++o) {
        if (q.contraction_dim[o] == 1) continue;  // a row coordinate: any start
        const int64_t first = q.per_member[o] ? start * q.rows[o] : start;
        ok = ok && (first * q.elem_bytes) % 16 == 0;
        if (q.per_member[o]) ok = ok && ((end - start) * q.elem_bytes) % 16 == 0;
      }
      if (q.bound_block > 0 && end > start)
        ok = ok && start % q.bound_block == 0 &&
             (end % q.bound_block == 0 || end == q.bound_exempt);
      q.group_ok[g] = ok ? 1 : 0;
    }
    if (q.origin_at_start[which]) {  // columns [start, end) of the whole tensor
      const auto* base = static_cast<const uint8_t*>(q.base[which]);
      ptx::tensormap_replace_global_address(
          ptx::space_shared, &maps[warp], reinterpret_cast<uint64_t>(base + start * q.elem_bytes));
      ptx::tensormap_replace_global_dim(ptx::space_shared, &maps[warp], ptx::n32_t<0>{},
                                        static_cast<uint32_t>(end - start > 0 ? end - start : 1));
    } else if (q.per_member[which]) {
      const int64_t len = end - start > 0 ? end - start : 1;
      const auto* base = static_cast<const uint8_t*>(q.base[which]);
      const uint64_t addr =
          reinterpret_cast<uint64_t>(base + start * q.rows[which] * q.elem_bytes);
      ptx::tensormap_replace_global_address(ptx::space_shared, &maps[warp], addr);
      ptx::tensormap_replace_global_dim(ptx::space_shared, &maps[warp], ptx::n32_t<0>{},
                                        static_cast<uint32_t>(len));
      ptx::tensormap_replace_global_stride(ptx::space_shared, &maps[warp], ptx::n32_t<0>{},
                                           static_cast<uint64_t>(len * q.elem_bytes));
    } else if (q.contraction_dim[which] == 1) {
      ptx::tensormap_replace_global_dim(ptx::space_shared, &maps[warp], ptx::n32_t<1>{},
                                        static_cast<uint32_t>(end > 0 ? end : 1));
    } else {
      ptx::tensormap_replace_global_dim(ptx::space_shared, &maps[warp], ptx::n32_t<0>{},
                                        static_cast<uint32_t>(end > 0 ? end : 1));
    }
  }
  __syncwarp();
  cuda::ptx::tensormap_cp_fenceproxy(cuda::ptx::sem_release, cuda::ptx::scope_gpu,
                                     &out[2 * g + which], &maps[warp], cuda::ptx::n32_t<128>{});
#endif
}

// Shared memory of a launch (plus 1 KiB to align the base to 1024 bytes).
int64_t smem_bytes(const KernelParams& p, int block_n, gemm_sm90::Schedule s) {
  return gemm_sm90::smem_layout(block_n, s, p.stages, p.tma_store, gemm_sm90::col_vectors(p),
                                p.staging_blocks, gemm_sm90::stage_scale_bytes(p), p.fp4)
             .total +
         1024;
}

// The launch configuration of `grid` CTAs of kNumThreads in clusters of `cluster` CTAs along x.
// Not copyable: cfg.attrs points into the object.
struct ClusterLaunch {
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t cfg{};
  ClusterLaunch(int grid, int cluster, int64_t smem, cudaStream_t stream) {
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(gemm_sm90::kNumThreads);
    cfg.dynamicSmemBytes = static_cast<size_t>(smem);
    cfg.stream = stream;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(cluster);
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// Persistent grid of a clustered launch: a whole number of clusters, no more than can be resident
// at once (a second wave of clusters would wait for the first). Queried once per (thread, device,
// kernel, shared memory size).
template <class Kernel>
int clustered_grid(Kernel kernel, int grid, int cluster, int64_t smem, int dev) {
  grid = std::max(grid, cluster);
  thread_local struct { const void* fn; int dev; int64_t smem; int clusters; } cache[8] = {};
  thread_local int next = 0;
  for (const auto& c : cache)
    if (c.fn == reinterpret_cast<const void*>(kernel) && c.dev == dev && c.smem == smem)
      return std::min(grid / cluster, c.clusters) * cluster;
  const ClusterLaunch query(grid / cluster * cluster, cluster, smem, nullptr);
  int clusters = 0;
  TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &query.cfg));
  TESSERA_CHECK_STATUS(clusters > 0, Status::kUnsupported, "no cluster of ", cluster,
                       " CTAs with ", smem, " bytes of shared memory each fits on this device");
  cache[next] = {reinterpret_cast<const void*>(kernel), dev, smem, clusters};
  next = (next + 1) % 8;
  return std::min(grid / cluster, clusters) * cluster;
}

template <class Elem, int kBlockN, gemm_sm90::Schedule kSchedule>
void launch_kernel(const CUtensorMap& ma, const CUtensorMap& mb, const CUtensorMap& mah,
                   const CUtensorMap& mbh, const CUtensorMap& md, const CUtensorMap& md8,
                   const KernelParams& p, int grid, cudaStream_t stream) {
  auto kernel = gemm_sm90::grouped_gemm_sm90_kernel<Elem, kBlockN, kSchedule>;
  const int64_t smem = smem_bytes(p, kBlockN, kSchedule);
  // The dynamic shared-memory limit is an attribute of the kernel, shared by every thread (the
  // autograd engine launches backward GEMMs from its own thread): raised under a lock, only ever
  // upwards, to what a launch needs; a launch that needs no more than the recorded value reads
  // it without the lock (the attribute is set before the value is published).
  static std::atomic<int64_t> raised[64];  // per instantiation (this function), by device
  static std::mutex raise_mutex;
  int dev = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 64 || raised[dev].load(std::memory_order_acquire) < smem) {
    std::lock_guard<std::mutex> lock(raise_mutex);
    if (dev >= 64 || raised[dev].load(std::memory_order_relaxed) < smem) {
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      if (dev < 64) raised[dev].store(smem, std::memory_order_release);
    }
  }
  if (p.cluster <= 1) {
    kernel<<<grid, gemm_sm90::kNumThreads, smem, stream>>>(ma, mb, mah, mbh, md, md8, p);
    TESSERA_CUDA_CHECK_LAUNCH();
    return;
  }
  const ClusterLaunch launch(clustered_grid(kernel, grid, p.cluster, smem, dev), p.cluster, smem,
                             stream);
  TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&launch.cfg, kernel, ma, mb, mah, mbh, md, md8, p));
}

// The instantiation list: every element kind the public API produces x {cooperative block_n
// 256, ping-pong block_n 128}.
// BF16 also with MN-major operands: B (dgrad on the weights as stored) or A and B (wgrad on the
// token matrices); FP16 and FP8 K-major only.
void launch_kind(const Sm90GroupedGemm& g, const CUtensorMap& ma, const CUtensorMap& mb,
                 const CUtensorMap& mah, const CUtensorMap& mbh, const CUtensorMap& md,
                 const CUtensorMap& md8, const KernelParams& p, int grid, cudaStream_t stream) {
  using namespace gemm_sm90;
  constexpr Schedule kCoop = Schedule::kCooperative, kPing = Schedule::kPingpong;
  const bool pingpong = g.config.pingpong;
  switch (g.elem) {
    case ElemKind::kBF16:
      if (g.a_mn_major)
        return pingpong ? launch_kernel<ElemBF16AbMn, 128, kPing>(ma, mb, mah, mbh, md, md8, p, grid, stream)
                        : launch_kernel<ElemBF16AbMn, 256, kCoop>(ma, mb, mah, mbh, md, md8, p, grid, stream);
      if (g.b_mn_major)
        return pingpong ? launch_kernel<ElemBF16BMn, 128, kPing>(ma, mb, mah, mbh, md, md8, p, grid, stream)
                        : launch_kernel<ElemBF16BMn, 256, kCoop>(ma, mb, mah, mbh, md, md8, p, grid, stream);
      return pingpong ? launch_kernel<ElemBF16, 128, kPing>(ma, mb, mah, mbh, md, md8, p, grid, stream)
                      : launch_kernel<ElemBF16, 256, kCoop>(ma, mb, mah, mbh, md, md8, p, grid, stream);
    case ElemKind::kFP16:
      return pingpong ? launch_kernel<ElemFP16, 128, kPing>(ma, mb, mah, mbh, md, md8, p, grid, stream)
                      : launch_kernel<ElemFP16, 256, kCoop>(ma, mb, mah, mbh, md, md8, p, grid, stream);
    case ElemKind::kE4M3:
      return pingpong ? launch_kernel<ElemE4M3, 128, kPing>(ma, mb, mah, mbh, md, md8, p, grid, stream)
                      : launch_kernel<ElemE4M3, 256, kCoop>(ma, mb, mah, mbh, md, md8, p, grid, stream);
    case ElemKind::kE5M2E4M3:
      return pingpong ? launch_kernel<ElemE5M2E4M3, 128, kPing>(ma, mb, mah, mbh, md, md8, p, grid, stream)
                      : launch_kernel<ElemE5M2E4M3, 256, kCoop>(ma, mb, mah, mbh, md, md8, p, grid, stream);
    case ElemKind::kE4M3Block:
      return launch_kernel<ElemE4M3Block, 128, kCoop>(ma, mb, mah, mbh, md, md8, p, grid, stream);
    case ElemKind::kE5M2E4M3Block:
      return launch_kernel<ElemE5M2E4M3Block, 128, kCoop>(ma, mb, mah, mbh, md, md8, p, grid, stream);
    case ElemKind::kE4M3Mx:
      return launch_kernel<ElemE4M3Mx, 128, kCoop>(ma, mb, mah, mbh, md, md8, p, grid, stream);
    case ElemKind::kE5M2E4M3Mx:
      return launch_kernel<ElemE5M2E4M3Mx, 128, kCoop>(ma, mb, mah, mbh, md, md8, p, grid, stream);
    case ElemKind::kNvfp4:
      return launch_kernel<ElemNvfp4, 128, kPing>(ma, mb, mah, mbh, md, md8, p, grid, stream);
  }
  TESSERA_FAIL(Status::kInvalidArgument, "unknown grouped GEMM element kind ",
               static_cast<int>(g.elem));
}

}  // namespace

int64_t sm90_workspace_bytes(const Sm90GroupedGemm& g) {
  // K-grouped: 2 tensor maps per group, then one int32 flag per group.
  return g.params.k_grouped
             ? int64_t{g.params.num_groups} * (2 * int64_t{sizeof(CUtensorMap)} + 4)
             : 0;
}

bool k_grouped_pairs_share_b(const Sm90GroupedGemm& g, int raster_band) {
  const int64_t m_blocks = (g.params.m + gemm_sm90::kBlockM - 1) / gemm_sm90::kBlockM;
  return m_blocks % 2 == 0 && raster_band % 2 == 0 && !is_mx_scaled(g.elem) &&
         !g.a_mn_major && !g.b_mn_major;
}

void launch_grouped_gemm_sm90(const Sm90GroupedGemm& g, void* workspace, int64_t workspace_bytes,
                              void* stream_handle) {
  auto stream = static_cast<cudaStream_t>(stream_handle);
  const Sm90Config& cfg = g.config;
  TESSERA_CHECK_STATUS(cfg.block_n == 128 || cfg.block_n == 256, Status::kInvalidArgument,
                       "block_n must be 128 or 256, got ", cfg.block_n);
  const bool block_scaled = is_block_scaled(g.elem);
  if (block_scaled)
    TESSERA_CHECK_STATUS(cfg.block_n == 128 && !cfg.pingpong &&
                             (cfg.cluster == 1 || !is_mx_scaled(g.elem)),
                         Status::kInvalidArgument,
                         "block-scaled FP8 runs cooperative 128 x 128 tiles (MXFP8 on 1-CTA clusters) "
                         "(got block_n ", cfg.block_n, cfg.pingpong ? ", ping-pong" : ", cooperative",
                         ", cluster ", cfg.cluster, ")");
  else
    TESSERA_CHECK_STATUS(cfg.pingpong == (cfg.block_n == 128), Status::kInvalidArgument,
                         "block_n 128 runs the ping-pong schedule, 256 the cooperative one (got ",
                         cfg.block_n, cfg.pingpong ? ", ping-pong)" : ", cooperative)");
  TESSERA_CHECK_STATUS(block_scaled == (g.params.bsa.ptr != nullptr && g.params.bsb.ptr != nullptr),
                       Status::kInvalidArgument,
                       "block scales (bsa, bsb) are given exactly for the block-scaled kinds");
  const bool fp4 = g.elem == ElemKind::kNvfp4;
  TESSERA_CHECK_STATUS(!fp4 || (cfg.block_n == 128 && cfg.pingpong && cfg.cluster == 1 &&
                                !g.params.k_grouped && !g.a_mn_major && !g.b_mn_major),
                       Status::kInvalidArgument,
                       "NVFP4 expanded in the kernel runs M-grouped ping-pong 128 x 128 tiles on "
                       "1-CTA clusters with K-major codes");
  KernelParams p = g.params;
  p.fp4 = fp4 ? 1 : 0;
  p.stages = cfg.stages;
  TESSERA_CHECK_STATUS(cfg.raster_band >= 0, Status::kInvalidArgument,
                       "raster_band must be >= 0, got ", cfg.raster_band);
  p.raster_band = cfg.raster_band;
  TESSERA_CHECK_STATUS(cfg.cluster == 1 || cfg.cluster == 2, Status::kInvalidArgument,
                       "cluster must be 1 or 2, got ", cfg.cluster);
  TESSERA_CHECK_STATUS(cfg.cluster == 1 || (!g.a_mn_major && !g.b_mn_major),
                       Status::kInvalidArgument,
                       "clusters of 2 CTAs multicast K-major operands only (this launch reads an "
                       "MN-major operand)");
  // K-grouped clusters: equal k blocks in both CTAs of a pair, B (the pair's shared rows)
  // multicast through the tile's B map (the whole operand's or the group's, both with 64-row
  // boxes).
  TESSERA_CHECK_STATUS(cfg.cluster == 1 || !p.k_grouped ||
                           k_grouped_pairs_share_b(g, cfg.raster_band),
                       Status::kInvalidArgument,
                       "K-grouped clusters of 2 CTAs need an even number of 128-row m blocks (m = ",
                       p.m, "), an even raster band (", cfg.raster_band,
                       ") and no MXFP8 scales: the two tiles of a pair must share their B rows");
  TESSERA_CHECK_STATUS((!g.a_mn_major && !g.b_mn_major) || g.elem == ElemKind::kBF16,
                       Status::kInvalidArgument, "MN-major operands are BF16 only");
  TESSERA_CHECK_STATUS(!g.a_mn_major || (p.k_grouped && g.b_mn_major), Status::kInvalidArgument,
                       "an MN-major A is read by the K-grouped kernel with an MN-major B only");
  p.cluster = cfg.cluster;
  TESSERA_CHECK_STATUS(p.stages >= 2 && p.stages <= gemm_sm90::kMaxStages, Status::kInvalidArgument,
                       "stages must be in [2, ", gemm_sm90::kMaxStages, "], got ", p.stages);
  if (p.num_groups == 0) return;
  // TMA-store epilogue: BF16/FP16 D, beta = 0. Its staging buffer (and the column vectors of
  // the scales / bias) take shared memory: the stage count is capped to what fits.
  p.tma_store = cfg.tma_store && p.beta == 0.0f && p.out_type != gemm_sm90::OutType::kFP32;
  const auto schedule = cfg.pingpong ? gemm_sm90::Schedule::kPingpong
                                     : gemm_sm90::Schedule::kCooperative;
  int dev = 0, smem_max = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
  TESSERA_CUDA_CHECK(
      cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  // Ping-pong stages its whole 128-row tile when the requested stages fit that way, else one
  // 64-row block at a time.
  p.staging_blocks = cfg.pingpong ? 2 : 1;
  if (p.staging_blocks == 2 && smem_bytes(p, cfg.block_n, schedule) > smem_max)
    p.staging_blocks = 1;
  while (p.stages > 2 && smem_bytes(p, cfg.block_n, schedule) > smem_max) --p.stages;
  CUtensorMap md{}, md8{};
  if (p.tma_store) {
    const int64_t d_rows = p.k_grouped ? int64_t{p.num_groups} * p.m : p.capacity;
    md = make_store_map(p, d_rows, 64);
    md8 = make_store_map(p, d_rows, 8);
  }
  // Per-member K-grouped operands: the template's address/width/stride are replaced per group;
  // give it a valid 16-byte stride.
  KMajorMatrix ta = g.a, tb = g.b;
  const int64_t align = 16 / elem_bytes(g.elem);
  if (p.k_grouped && g.a_per_member) ta.ld = ta.cols = (ta.cols + align - 1) / align * align;
  if (p.k_grouped && g.b_per_member) tb.ld = tb.cols = (tb.cols + align - 1) / align * align;
  const CUtensorMap ma = fp4            ? make_raw_fp4_map(ta, gemm_sm90::kBlockM)
                         : g.a_mn_major ? make_map_mn(ta, g.elem, 0)
                                        : make_map(ta, g.elem, gemm_sm90::kBlockM);
  const CUtensorMap mb = fp4            ? make_raw_fp4_map(tb, cfg.block_n)
                         : g.b_mn_major ? make_map_mn(tb, g.elem, p.k_grouped ? 0 : g.b_mn_groups)
                                        : make_map(tb, g.elem, cfg.block_n);
  // Clusters: 64-row boxes for the half of a shared operand each CTA multicasts.
  const CUtensorMap mah = p.cluster > 1 ? make_map(ta, g.elem, 64) : ma;
  const CUtensorMap mbh = p.cluster > 1 ? make_map(tb, g.elem, 64) : mb;
  if (p.k_grouped) {
    TESSERA_CHECK_STATUS(workspace_bytes >= sm90_workspace_bytes(g) &&
                             reinterpret_cast<uintptr_t>(workspace) % 128 == 0,
                         Status::kBufferTooSmall,
                         "K-grouped GEMM needs a 128-byte aligned workspace of ",
                         sm90_workspace_bytes(g), " bytes");
    GroupMapParams q;
    q.offsets = p.offsets;
    q.offsets_int64 = p.offsets_int64;
    q.offsets_start = p.offsets_start;
    q.num_groups = p.num_groups;
    q.capacity = p.capacity;
    q.base[0] = g.a.ptr;
    q.base[1] = g.b.ptr;
    q.rows[0] = g.a.rows;
    q.rows[1] = g.b.rows;
    q.per_member[0] = g.a_per_member;
    q.per_member[1] = g.b_per_member;
    q.contraction_dim[0] = g.a_mn_major ? 1 : 0;
    q.contraction_dim[1] = g.b_mn_major ? 1 : 0;
    q.origin_at_start[0] = block_scaled && !g.a_per_member;
    q.origin_at_start[1] = block_scaled && !g.b_per_member;
    q.elem_bytes = elem_bytes(g.elem);
    q.bound_block = g.k_bound_block;
    q.bound_exempt = g.k_bound_exempt;
    q.group_ok = reinterpret_cast<int32_t*>(static_cast<CUtensorMap*>(workspace) + 2 * p.num_groups);
    const int blocks = (2 * p.num_groups + kSetupWarps - 1) / kSetupWarps;
    // Clusters: B's per-group maps with 64-row boxes (each CTA multicasts half of the B rows).
    build_group_maps_kernel<<<blocks, 32 * kSetupWarps, 0, stream>>>(
        ma, p.cluster > 1 ? mbh : mb, q, static_cast<CUtensorMap*>(workspace));
    TESSERA_CUDA_CHECK_LAUNCH();
    p.group_maps = workspace;
    p.group_ok = q.group_ok;
    p.a_k_origin_start = g.a_per_member ? 0 : 1;
    p.b_k_origin_start = g.b_per_member ? 0 : 1;
    p.k_interior_global = g.a_per_member || g.b_per_member ? 0 : 1;
  }
  int grid = cfg.num_sms;
  if (grid <= 0)
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&grid, cudaDevAttrMultiProcessorCount, dev));
  // K-grouped clusters always multicast B (both tiles of a pair are one group's, one n block):
  // its whole-operand map is the 64-row-box one, as its group maps are.
  launch_kind(g, ma, p.k_grouped && p.cluster > 1 ? mbh : mb, mah, mbh, md, md8, p, grid, stream);
}

}  // namespace tessera::gemm_cuda
