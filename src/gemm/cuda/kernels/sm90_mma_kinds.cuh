// The element kinds of the sm90 grouped GEMM kernel: the (A, B) element pair of one wgmma kind,
// its byte width and the MMA it issues per 32 bytes of contraction. The kernel
// (grouped_gemm_sm90.cuh) is a template over one of these; the launcher (grouped_gemm_sm90.cu)
// instantiates only the kinds the public API produces.
//
// Invariant: A and B of a kind have the same byte width (a stage holds 128 bytes of contraction
// of both operands), so a kind is one template argument: 16-bit kinds k16, FP8 kinds k32.
// kAMn / kBMn: the operand sits MN-major in shared memory (its M / N index contiguous, loaded by
// TMA boxes of 64 MN x 64 K, kernels/grouped_gemm_sm90.cuh) and the wgmma reads it transposed.
// Only 16-bit wgmma can: FP8 kinds are K-major (their columnwise copies are stored transposed).
#pragma once

#include <cstdint>

#include "gemm/cuda/kernels/wgmma_ops.cuh"

namespace tessera::gemm_sm90 {

// Dense BF16 x BF16; A and/or B MN-major (dgrad: B = W (G, K, N) as stored; wgrad: A = dy and
// B = x, both (T, ·) token rows) or K-major.
template <bool kAMnMajor, bool kBMnMajor>
struct ElemBF16Major {
  static constexpr int kBytes = 2;
  static constexpr bool kAMn = kAMnMajor, kBMn = kBMnMajor;
  template <int N>
  __device__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b) {
    if constexpr (N == 256) wgmma_m64n256k16_bf16<kAMn, kBMn>(d, a, b, 1);
    else wgmma_m64n128k16_bf16<kAMn, kBMn>(d, a, b, 1);
  }
};
using ElemBF16 = ElemBF16Major<false, false>;    // TN: forward
using ElemBF16BMn = ElemBF16Major<false, true>;  // NN: dgrad
using ElemBF16AbMn = ElemBF16Major<true, true>;  // K-grouped on token rows: wgrad

// Dense FP16 x FP16 (K-major operands).
struct ElemFP16 {
  static constexpr int kBytes = 2;
  static constexpr bool kAMn = false, kBMn = false;
  template <int N>
  __device__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b) {
    if constexpr (N == 256) wgmma_m64n256k16_f16<0, 0>(d, a, b, 1);
    else wgmma_m64n128k16_f16<0, 0>(d, a, b, 1);
  }
};

// FP8 E4M3 x E4M3 (forward of every FP8 recipe; backward of the E4M3-only ones).
struct ElemE4M3 {
  static constexpr int kBytes = 1;
  static constexpr bool kAMn = false, kBMn = false;
  template <int N>
  __device__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b) {
    if constexpr (N == 256) wgmma_m64n256k32_e4m3_e4m3(d, a, b, 1);
    else wgmma_m64n128k32_e4m3_e4m3(d, a, b, 1);
  }
};

// FP8 A = E5M2, B = E4M3: the HYBRID recipes' backward (dgrad dy x W, wgrad dyᵀ x x).
struct ElemE5M2E4M3 {
  static constexpr int kBytes = 1;
  static constexpr bool kAMn = false, kBMn = false;
  template <int N>
  __device__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b) {
    if constexpr (N == 256) wgmma_m64n256k32_e5m2_e4m3(d, a, b, 1);
    else wgmma_m64n128k32_e5m2_e4m3(d, a, b, 1);
  }
};

}  // namespace tessera::gemm_sm90
