// CUDA kernels of per-tensor scaling per member (member_scaling.h, MemberTensorArgs): each
// member's amax over its rows and the codes of its rows with its multiplier (current, or delayed
// with each member's scale; the wide passes of member_scaling.cu take the inputs they can), and
// the update of every member's delayed state. Same rules and bits as the CPU loops
// (scale_rules::current_scale / delayed_update, moe::encode_element; products by __fmul_rn).
#include <cuda_runtime.h>

#include "nn/member_scaling.h"
#include "nn/member_scaling_device.cuh"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/formats/half.h"

namespace tessera::nn::detail::cuda {
namespace {

constexpr int kRowWarps = 8;  // per CTA: one row per warp at a time
constexpr int kVec = 8;       // elements per lane per step when rows allow 16-byte loads

// The members' abs-bits maxima: each warp reduces a row and folds it into its member's slot
// (atomicMax of the bits; NaN wins). Rows in no member are skipped.
template <class In, bool kVecLoads>
__global__ void __launch_bounds__(kRowWarps * 32) member_amax_kernel(MemberTensorArgs a,
                                                                      uint32_t* amax_bits) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const auto* x = static_cast<const In*>(a.x);
  for (int64_t r = int64_t{blockIdx.x} * kRowWarps + warp; r < a.rows;
       r += int64_t{gridDim.x} * kRowWarps) {
    const int64_t g = a.members.member_of(r);
    const int64_t src = a.members.source_row(g, r);
    if (g < 0 || src < 0) continue;  // warp-uniform (a padding row adds nothing)
    const In* row = x + src * a.cols;
    uint32_t m = 0;
    if constexpr (kVecLoads) {
      for (int64_t c = int64_t{lane} * kVec; c < a.cols; c += 32 * kVec) {
        const uint4 v = *reinterpret_cast<const uint4*>(row + c);
        const In* e = reinterpret_cast<const In*>(&v);
#pragma unroll
        for (int i = 0; i < kVec; ++i) m = max(m, scale_rules::abs_bits(to_float(e[i])));
      }
    } else {
      for (int64_t c = lane; c < a.cols; c += 32) m = max(m, scale_rules::abs_bits(to_float(row[c])));
    }
#pragma unroll
    for (int s = 16; s > 0; s /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, s));
    if (lane == 0 && m != 0) atomicMax(amax_bits + g, m);
  }
}

// Codes of every row with its member's multiplier (rows in no member: 0); block 0 also writes
// the members' scale_inv and amax values (and, delayed, their history slot 0).
template <class In, bool kVecLoads>
__global__ void __launch_bounds__(kRowWarps * 32) member_encode_kernel(MemberTensorArgs a,
                                                                       const uint32_t* amax_bits,
                                                                       uint8_t* codes) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  if (blockIdx.x == 0) {
    for (int64_t g = threadIdx.x; g < a.members.groups; g += blockDim.x)
      write_member_scales(a, amax_bits[g], g);
  }
  const auto* x = static_cast<const In*>(a.x);
  for (int64_t r = int64_t{blockIdx.x} * kRowWarps + warp; r < a.rows;
       r += int64_t{gridDim.x} * kRowWarps) {
    const int64_t g = a.members.member_of(r);
    const int64_t src = a.members.source_row(g, r);
    const bool zero = g < 0 || src < 0;  // a row in no member, or padding: codes 0, not read
    const float f = zero ? 0.0f : member_multiplier(a, amax_bits[g], g);
    const In* row = x + (zero ? 0 : src) * a.cols;
    uint8_t* out = codes + r * a.cols;
    if constexpr (kVecLoads) {
      for (int64_t c = int64_t{lane} * kVec; c < a.cols; c += 32 * kVec) {
        const uint4 v = zero ? make_uint4(0, 0, 0, 0) : *reinterpret_cast<const uint4*>(row + c);
        const In* e = reinterpret_cast<const In*>(&v);
        alignas(8) uint8_t b[kVec];
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          b[i] = zero ? uint8_t{0} : code(a.quant, __fmul_rn(to_float(e[i]), f));
        *reinterpret_cast<uint2*>(out + c) = *reinterpret_cast<const uint2*>(b);
      }
    } else {
      for (int64_t c = lane; c < a.cols; c += 32)
        out[c] = zero ? uint8_t{0} : code(a.quant, __fmul_rn(to_float(row[c]), f));
    }
  }
}

// The delayed-scaling update of every member (scale_rules::delayed_update per member, in
// parallel): a CTA takes 32 members (lane x: member, contiguous in the (H, G) layout) and 32 slot
// lanes (y). Pass 1: each member's abs-bits maximum over its slots (or slot 0) and its next scale.
// Pass 2: the roll, h'[i] = h[i + 1] for i < H - 1, in tiles of kRollSlots slots in increasing
// order (a tile reads its slots' successors before the CTA writes them: syncthreads between),
// then h'[H - 1] = the old h[0] and slot 0 cleared.
constexpr int kStateMembers = 32, kStateSlotLanes = 32, kRollPer = 4;
constexpr int kRollSlots = kStateSlotLanes * kRollPer;

__global__ void __launch_bounds__(kStateMembers * kStateSlotLanes)
    member_state_update_kernel(float* scale, float* history, int64_t groups, int len,
                               bool most_recent, float fp8_max, int margin) {
  __shared__ uint32_t part[kStateSlotLanes][kStateMembers + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t g = int64_t{blockIdx.x} * kStateMembers + tx;
  const bool live = g < groups;
  float* h = history + (live ? g : 0);
  const float h0 = live ? h[0] : 0.0f;
  uint32_t m = 0;
  for (int i = ty; live && i < (most_recent ? 1 : len); i += kStateSlotLanes) {
    m = max(m, scale_rules::abs_bits(h[i * groups]));
  }
  part[ty][tx] = m;
  __syncthreads();
  if (ty == 0 && live) {
    for (int i = 1; i < kStateSlotLanes; ++i) m = max(m, part[i][tx]);
    scale[g] = scale_rules::delayed_scale(scale_rules::amax_from_abs_bits(m), scale[g], fp8_max,
                                          margin);
  }
  for (int s0 = 0; s0 < len - 1; s0 += kRollSlots) {
    float v[kRollPer];
#pragma unroll
    for (int j = 0; j < kRollPer; ++j) {
      const int i = s0 + ty + kStateSlotLanes * j;
      v[j] = live && i < len - 1 ? h[(i + 1) * groups] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kRollPer; ++j) {
      const int i = s0 + ty + kStateSlotLanes * j;
      if (live && i < len - 1) h[i * groups] = v[j];
    }
    __syncthreads();
  }
  if (ty == 0 && live) {
    h[(len - 1) * groups] = h0;
    h[0] = 0.0f;
  }
}

unsigned row_grid(int64_t rows) {
  const int64_t ctas = (rows + kRowWarps - 1) / kRowWarps;
  return static_cast<unsigned>(ctas < 65536 ? (ctas > 0 ? ctas : 1) : 65536);
}

// 16-byte loads and 8-byte stores: every row a whole number of 8-element chunks, bases aligned.
bool vec_rows(const MemberTensorArgs& a, const void* codes) {
  const auto aligned = [](const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; };
  return a.cols % kVec == 0 && dtype_bytes(a.x_dtype, 1) == 2 && aligned(a.x, 16) &&
         (codes == nullptr || aligned(codes, 8));
}

}  // namespace

namespace {
__global__ void member_offsets_kernel(Members m, int64_t cols, int64_t* offsets) {
  const int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (g < m.groups) offsets[g] = m.begin(g) * cols;
  if (g == m.groups - 1) offsets[m.groups] = m.end(g) * cols;
}
}  // namespace

void member_element_offsets(const Members& members, int64_t cols, int64_t* offsets,
                            Stream stream) {
  if (members.groups == 0) return;
  const unsigned grid = static_cast<unsigned>((members.groups + 255) / 256);
  member_offsets_kernel<<<grid, 256, 0, stream.as<cudaStream_t>()>>>(members, cols, offsets);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void member_tensor_amax(const MemberTensorArgs& a, uint32_t* amax_bits, Stream stream) {
  const auto s = stream.as<cudaStream_t>();
  TESSERA_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, 4 * a.members.groups, s));
  if (a.rows * a.cols == 0) return;
  dispatch_float_input(a.x_dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    auto* k = vec_rows(a, nullptr) ? member_amax_kernel<In, true> : member_amax_kernel<In, false>;
    k<<<row_grid(a.rows), kRowWarps * 32, 0, s>>>(a, amax_bits);
    TESSERA_CUDA_CHECK(cudaGetLastError());
  });
}

void member_tensor_encode(const MemberTensorArgs& a, const uint32_t* amax_bits, uint8_t* codes,
                          Stream stream) {
  dispatch_float_input(a.x_dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    auto* k = vec_rows(a, codes) ? member_encode_kernel<In, true> : member_encode_kernel<In, false>;
    k<<<row_grid(a.rows), kRowWarps * 32, 0, stream.as<cudaStream_t>()>>>(a, amax_bits, codes);
    TESSERA_CUDA_CHECK(cudaGetLastError());
  });
}

void update_member_state(float* scale, float* history, int64_t groups, int len, bool most_recent,
                         float fp8_max, int margin, Stream stream) {
  if (groups == 0) return;
  const dim3 block(kStateMembers, kStateSlotLanes);
  const auto grid = static_cast<unsigned>((groups + kStateMembers - 1) / kStateMembers);
  member_state_update_kernel<<<grid, block, 0, stream.as<cudaStream_t>()>>>(
      scale, history, groups, len, most_recent, fp8_max, margin);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::nn::detail::cuda
