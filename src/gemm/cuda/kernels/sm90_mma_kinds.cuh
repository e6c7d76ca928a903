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
// kPromote: the operands carry FP32 block scales (KernelParams::bsa / bsb, FP8 block modes): each
// stage's 128 contraction elements go into fresh partial sums (scale_d = 0 on the first MMA),
// which are multiplied by their blocks' scales and added to the accumulators (as DeepGEMM
// promotes every 128 K).
// kPromoteK: the contraction elements one block scale covers, i.e. how often partial sums are
// promoted: 128 (FP8 block, FP32 scales: the stage's 4 wgmma into one partial sum) or 32 (MXFP8,
// E8M0 scales: each wgmma k32 into its own partial sum, promoted with its 32-block's scales, the
// exact MXFP8 product); 0 for kinds without block scales. A later block size or scale type is a
// new row here plus its scale lookup (BlockScales), not a new kernel.
#pragma once

#include <cstdint>

#include "gemm/cuda/kernels/wgmma_ops.cuh"

namespace tessera::gemm_sm90 {

// Dense BF16 x BF16; A and/or B MN-major (dgrad: B = W (G, K, N) as stored; wgrad: A = dy and
// B = x, both (T, ·) token rows) or K-major.
template <bool kAMnMajor, bool kBMnMajor>
struct ElemBF16Major {
  static constexpr int kBytes = 2;
  static constexpr bool kAMn = kAMnMajor, kBMn = kBMnMajor, kPromote = false;
  static constexpr int kPromoteK = 0;
  template <int N>
  __device__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d = 1) {
    if constexpr (N == 256) wgmma_m64n256k16_bf16<kAMn, kBMn>(d, a, b, scale_d);
    else wgmma_m64n128k16_bf16<kAMn, kBMn>(d, a, b, scale_d);
  }
};
using ElemBF16 = ElemBF16Major<false, false>;    // TN: forward
using ElemBF16BMn = ElemBF16Major<false, true>;  // NN: dgrad
using ElemBF16AbMn = ElemBF16Major<true, true>;  // K-grouped on token rows: wgrad

// Dense FP16 x FP16 (K-major operands).
struct ElemFP16 {
  static constexpr int kBytes = 2;
  static constexpr bool kAMn = false, kBMn = false, kPromote = false;
  static constexpr int kPromoteK = 0;
  template <int N>
  __device__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d = 1) {
    if constexpr (N == 256) wgmma_m64n256k16_f16<0, 0>(d, a, b, scale_d);
    else wgmma_m64n128k16_f16<0, 0>(d, a, b, scale_d);
  }
};

// NVFP4 x NVFP4 expanded inside the kernel (KernelParams::fp4): the consumers run the FP16 kind
// on stages the producer warpgroup's converter threads write from the raw E2M1 codes (FP16, not
// BF16: the hardware converts E4M3 pairs to FP16 in one instruction, kernels/fp4_stage.cuh).
struct ElemNvfp4 : ElemFP16 {
  static constexpr bool kFp4 = true;
};
// Whether a kind is the NVFP4 in-kernel one.
template <class Elem>
inline constexpr bool kFp4Kind = requires { Elem::kFp4; };

// FP8 E4M3 x E4M3 (forward of every FP8 recipe; backward of the E4M3-only ones).
struct ElemE4M3 {
  static constexpr int kBytes = 1;
  static constexpr bool kAMn = false, kBMn = false, kPromote = false;
  static constexpr int kPromoteK = 0;
  template <int N>
  __device__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d = 1) {
    if constexpr (N == 256) wgmma_m64n256k32_e4m3_e4m3(d, a, b, scale_d);
    else if constexpr (N == 128) wgmma_m64n128k32_e4m3_e4m3(d, a, b, scale_d);
    else wgmma_m64n64k32_e4m3_e4m3(d, a, b, scale_d);
  }
};

// FP8 A = E5M2, B = E4M3: the HYBRID recipes' backward (dgrad dy x W, wgrad dyᵀ x x).
struct ElemE5M2E4M3 {
  static constexpr int kBytes = 1;
  static constexpr bool kAMn = false, kBMn = false, kPromote = false;
  static constexpr int kPromoteK = 0;
  template <int N>
  __device__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d = 1) {
    if constexpr (N == 256) wgmma_m64n256k32_e5m2_e4m3(d, a, b, scale_d);
    else if constexpr (N == 128) wgmma_m64n128k32_e5m2_e4m3(d, a, b, scale_d);
    else wgmma_m64n64k32_e5m2_e4m3(d, a, b, scale_d);
  }
};

// An FP8 kind with block scales (see kPromote above): E4M3 x E4M3 or E5M2 x E4M3 operands of
// the FP8 block recipes (1x128 activations and gradients, 128x128 or 1x128 weights).
template <class Fp8Kind>
struct ElemBlockScaled : Fp8Kind {
  static constexpr bool kPromote = true;
  static constexpr int kPromoteK = 128;
};
using ElemE4M3Block = ElemBlockScaled<ElemE4M3>;
using ElemE5M2E4M3Block = ElemBlockScaled<ElemE5M2E4M3>;

// An FP8 kind with MXFP8 scales (one E8M0 per 32 contraction elements of a row; mxfp8 1x32
// activations and gradients, mxfp8_32x32 or 1x32 weights): every wgmma k32 is its own partial
// sum, promoted with its block's two scales (issued as two n64 halves, main_loop_mx).
template <class Fp8Kind>
struct ElemMxScaled : Fp8Kind {
  static constexpr bool kPromote = true;
  static constexpr int kPromoteK = 32;
};
using ElemE4M3Mx = ElemMxScaled<ElemE4M3>;
using ElemE5M2E4M3Mx = ElemMxScaled<ElemE5M2E4M3>;

}  // namespace tessera::gemm_sm90
