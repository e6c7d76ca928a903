// Hopper (sm_90a) building blocks of the grouped GEMM kernels, as thin inline-PTX wrappers:
// shared-memory mbarriers, TMA tile loads (cp.async.bulk.tensor) completing on an mbarrier,
// wgmma fences / commit / wait, shared-memory matrix descriptors for 128-byte-swizzled K-major
// tiles, register reallocation (setmaxnreg) and the tensor-map proxy fences needed when a kernel
// uses tensor maps that an earlier kernel wrote to global memory.
#pragma once

#include <cstdint>

namespace tessera::gemm_sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier -------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival plus `bytes` of expected TMA transactions.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Blocks until the phase with parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- thread-block clusters -------------------------------------------------------------------
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_id_x() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t num_clusters_x() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}
// All threads of all CTAs of the cluster (release / acquire at cluster scope).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
               ::: "memory");
}
// One arrival on the mbarrier at the offset of `bar` in CTA `cta` of the cluster. Default
// semantics (release at CTA scope), as a consumer's release of a multicast ring slot needs: the
// slot's reads were wgmma operand reads, complete at wgmma.wait_group.
__device__ __forceinline__ void mbar_arrive_remote(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n\t.reg .b32 remote;\n\tmapa.shared::cluster.u32 remote, %0, %1;\n\t"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}" ::"r"(smem_addr(bar)),
      "r"(cta)
      : "memory");
}

// ---- TMA --------------------------------------------------------------------------------------
// Loads the box at (c0 = inner/contiguous coordinate, c1 = row) of the 2-D tensor map at
// `tmap` (a generic address: kernel parameter or global memory) into shared memory `dst`;
// completion is signalled on `bar` as transaction bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const void* tmap, uint64_t* bar, int32_t c0,
                                            int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
// As tma_load_2d on a 3-D tensor map (c2 = the outermost coordinate, e.g. the group).
__device__ __forceinline__ void tma_load_3d(void* dst, const void* tmap, uint64_t* bar, int32_t c0,
                                            int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// As tma_load_2d, but the box lands at the same shared-memory offset `dst` in every CTA of the
// cluster named in `cta_mask`, each completing on its own mbarrier at the offset of `bar`.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const void* tmap, uint64_t* bar,
                                                      int32_t c0, int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}
// Stores the shared-memory box at `src` to (c0, c1) of the 2-D tensor map (clipped at the
// tensor's bounds); completion is tracked by bulk groups (bulk_commit / bulk_wait_read).
__device__ __forceinline__ void tma_store_2d(const void* tmap, const void* src, int32_t c0,
                                             int32_t c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Waits until at most kPending bulk groups of this thread still READ their shared memory.
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
// Waits until at most kPending bulk groups of this thread are incomplete (writes done).
template <int kPending>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}
// Makes this thread's ordinary shared-memory stores visible to the async (TMA) proxy.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Shared-memory store / load at a shared-window address (STS / LDS, not generic ST / LD).
// volatile: kept in program order with the barriers and fences around them.
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
// Four 8x8 matrices of 16-bit values (STSM): register m of every lane holds two adjacent values
// of matrix m in the MMA fragment layout (row lane / 4, columns 2·(lane % 4), +1); lane L gives
// the address of row L % 8 of matrix L / 8 (16 bytes).
__device__ __forceinline__ void st_shared_matrix_x4(uint32_t addr, uint32_t r0, uint32_t r1,
                                                    uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ float ld_shared_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ float2 ld_shared_f2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
// Barrier among `threads` threads (a multiple of 32) on hardware barrier `id` (1..15).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// bar.sync with an OR of `pred` over the `threads` arriving threads, returned to each of them.
__device__ __forceinline__ bool named_barrier_or(int id, int threads, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n .reg .pred q, r;\n setp.ne.u32 q, %1, 0;\n bar.red.or.pred r, %2, %3, q;\n"
      " selp.u32 %0, 1, 0, r;\n}"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}
// Arrives on hardware barrier `id` without waiting (the other `threads` - 32·warps arrive by
// bar.sync): one side of a producer/consumer hand-over between warpgroups.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void prefetch_tmap(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}
// Acquire side of the tensor-map proxy pattern: a tensor map written in global memory by an
// earlier kernel (tensormap.cp_fenceproxy ... release) becomes safe to use by this thread.
__device__ __forceinline__ void tmap_acquire(const void* tmap) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(
                   reinterpret_cast<uint64_t>(tmap))
               : "memory");
}

// ---- wgmma ------------------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across wgmma fences and waits.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Matrix descriptor of a K-major tile whose rows are 128 bytes, written by TMA with
// CU_TENSOR_MAP_SWIZZLE_128B (8-row, 1024-byte swizzle atoms; tile base 1024-byte aligned).
// Stride byte offset = 1024 (next 8-row group); leading byte offset unused for this layout.
__device__ __forceinline__ uint64_t smem_desc_k_major_sw128(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  uint64_t desc = (addr & 0x3FFFFull) >> 4;
  desc |= uint64_t{1} << 16;            // leading byte offset (16 B; ignored when swizzled)
  desc |= uint64_t{1024 >> 4} << 32;    // stride byte offset
  desc |= uint64_t{1} << 62;            // layout: 128-byte swizzle
  return desc;
}

// Matrix descriptor of an MN-major 16-bit operand: 64-element (128-byte) MN chunks, each a TMA
// box of 64 contraction rows x 128 bytes written with CU_TENSOR_MAP_SWIZZLE_128B, chunk after
// chunk (kMnChunkBytes apart; tile base 1024-byte aligned). In the canonical MN-major 128-byte
// swizzled layout ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO)) the leading byte offset is the step
// between MN chunks and the stride byte offset the step between groups of 8 contraction rows.
inline constexpr uint32_t kMnChunkBytes = 64 * 128;
__device__ __forceinline__ uint64_t smem_desc_mn_major_sw128(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  uint64_t desc = (addr & 0x3FFFFull) >> 4;
  desc |= uint64_t{kMnChunkBytes >> 4} << 16;  // leading byte offset: next 64-element MN chunk
  desc |= uint64_t{1024 >> 4} << 32;           // stride byte offset: next 8 contraction rows
  desc |= uint64_t{1} << 62;                   // layout: 128-byte swizzle
  return desc;
}

// Descriptor `desc` advanced by `units` 16-byte units inside its tile: the start-address field
// (bits 0..13, address / 16 of a shared-memory tile) never carries out within a tile, so the add
// is on the low word alone (the high word, stride offset and swizzle mode, stays as it is; a
// 64-bit add costs the main loop a carry chain and register moves per wgmma).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t units) {
  const uint32_t lo = static_cast<uint32_t>(desc) + units;
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// ---- registers --------------------------------------------------------------------------------
template <int kRegs>
__device__ __forceinline__ void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

}  // namespace tessera::gemm_sm90
