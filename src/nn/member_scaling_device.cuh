// Device helpers shared by the per-member scaling kernels (member_scaling.cu: per (member,
// column), the chunked passes; member_scaling_wide.cu: the wide passes; member_tensor.cu: the
// per-tensor row kernels).
#pragma once

#include <cstdint>

#include "nn/member_scaling.h"
#include "quantize/cuda/device_io.cuh"

namespace tessera::nn::detail::cuda {

// One FP8 code of a product: the hardware cvt.rn.satfinite, bit for bit
// scale_rules::fp8_element (= moe::encode_element, the CPU loops' rule; device_io.cuh).
__device__ __forceinline__ uint8_t code(const moe::RowQuant& q, float y) {
  return static_cast<uint8_t>(q.e5m2 ? ::tessera::detail::cuda_quant::encode_fp8<DType::kFloat8E5M2>(y)
                                     : ::tessera::detail::cuda_quant::encode_fp8<DType::kFloat8E4M3>(y));
}

// Member g's multiplier from its amax bits, writing its scale_inv (and scale_inv2), amax (and
// amax2) and, delayed, its history slot 0: what a per-tensor quantization stores per member.
__device__ __forceinline__ float write_member_scales(const MemberTensorArgs& a, uint32_t amax_bits,
                                                     int64_t g) {
  const float mult = member_multiplier(a, amax_bits, g, a.scale_inv + g);
  if (a.scale_inv2) a.scale_inv2[g] = a.scale_inv[g];
  const float am = scale_rules::amax_from_abs_bits(amax_bits);
  if (a.amax) a.amax[g] = am;
  if (a.amax2) a.amax2[g] = am;
  if (a.history) a.history[g] = am;
  return mult;
}

}  // namespace tessera::nn::detail::cuda
