// The device amax reductions (quantize/cuda/device_io.cuh: abs bits, warp_max, block_max,
// atomic_amax) and the per-tensor amax launcher give scale_rules' amax for non-finite input: a
// NaN of any sign or payload anywhere wins over +/-inf and every finite value, whichever thread,
// warp or block holds it, and the stored word is the canonical NaN 0x7fc00000; an infinity
// without a NaN gives +inf. Oracle: the host loop of scale_rules (abs bits, unsigned max,
// amax_from_abs_bits). Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "quantize/cuda/device_io.cuh"
#include "quantize/cuda/launchers.h"
#include "tessera/core/device.h"
#include "tessera/formats/half.h"
#include "tessera/quantize/scale_rules.h"

namespace tessera {
namespace {

constexpr int kThreads = 256;

// Block b reduces v[b * kThreads + t] over its threads with block_max, and folds the result into
// *all (every block) and into per_block[b] with atomic_amax; warp w of block b also folds its
// warp_max into per_warp[b * 8 + w].
__global__ void reduce_kernel(const float* v, uint32_t* all, uint32_t* per_block,
                              uint32_t* per_warp) {
  __shared__ uint32_t scratch[kThreads / 32];
  using namespace detail::cuda_quant;
  const uint32_t mine = abs_bits(v[blockIdx.x * kThreads + threadIdx.x]);
  const uint32_t w = warp_max(mine);
  if (threadIdx.x % 32 == 0)
    atomic_amax(per_warp + blockIdx.x * (kThreads / 32) + threadIdx.x / 32, w);
  const uint32_t b = block_max<kThreads>(mine, scratch);
  if (threadIdx.x == 0) {
    atomic_amax(per_block + blockIdx.x, b);
    atomic_amax(all, b);
  }
}

uint32_t host_amax_bits(const float* v, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, scale_rules::abs_bits(v[i]));
  return formats::float_to_bits(scale_rules::amax_from_abs_bits(m));
}

template <class T>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(size_t n) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, n * sizeof(T)), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(p); }
  std::vector<T> get(size_t n) const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// Non-finite bit patterns: NaNs of both signs and several payloads (signalling included), ±inf.
const uint32_t kSpecials[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu,
                              0x7fffffffu, 0x7f800000u, 0xff800000u};

// One block of finite values (a large one included) with `a` at position pa and `b` at pb.
std::vector<float> block_values(int blocks, int at, uint32_t a, int at2, uint32_t b) {
  std::vector<float> v(static_cast<size_t>(blocks) * kThreads);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 7 == 0 ? -1.0f : 1.0f) * (1.0f + i % 13);
  v[v.size() / 3] = -3.0e38f;
  if (at >= 0) std::memcpy(&v[static_cast<size_t>(at)], &a, 4);
  if (at2 >= 0) std::memcpy(&v[static_cast<size_t>(at2)], &b, 4);
  return v;
}

std::string run_reduce(const std::vector<float>& v, int blocks) {
  DeviceArray<float> x(v.size());
  DeviceArray<uint32_t> all(1), per_block(blocks), per_warp(blocks * (kThreads / 32));
  EXPECT_EQ(cudaMemcpy(x.p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  reduce_kernel<<<blocks, kThreads>>>(x.p, all.p, per_block.p, per_warp.p);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto pb = per_block.get(blocks), pw = per_warp.get(blocks * (kThreads / 32));
  const uint32_t want = host_amax_bits(v.data(), v.size());
  if (all.get(1)[0] != want)
    return "all blocks: " + std::to_string(all.get(1)[0]) + " vs " + std::to_string(want);
  for (int b = 0; b < blocks; ++b) {
    if (pb[b] != host_amax_bits(&v[b * kThreads], kThreads)) return "block " + std::to_string(b);
    for (int w = 0; w < kThreads / 32; ++w) {
      if (pw[b * 8 + w] != host_amax_bits(&v[b * kThreads + w * 32], 32)) {
        return "block " + std::to_string(b) + " warp " + std::to_string(w);
      }
    }
  }
  return "";
}

TEST(CudaDeviceAmax, NonFiniteWinsAtEveryThreadOfABlock) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (uint32_t s : kSpecials) {
    for (int at = 0; at < kThreads; ++at) {
      const std::string m = run_reduce(block_values(1, at, s, -1, 0), 1);
      ASSERT_EQ(m, "") << "special 0x" << std::hex << s << std::dec << " at thread " << at;
    }
  }
}

TEST(CudaDeviceAmax, NanBeatsInfinityAcrossWarpsAndBlocks) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  constexpr int kBlocks = 64;
  for (int nan_at : {0, 31, 32, 255, 256 * 17 + 3, 256 * 63 + 255}) {
    for (int inf_at : {1, 200, 256 * 40, 256 * 63}) {
      for (uint32_t nan : {0x7fc00000u, 0xffc00001u}) {
        for (uint32_t inf : {0x7f800000u, 0xff800000u}) {
          const std::string m =
              run_reduce(block_values(kBlocks, nan_at, nan, inf_at, inf), kBlocks);
          ASSERT_EQ(m, "") << "NaN at " << nan_at << ", inf at " << inf_at;
        }
      }
      // Without the NaN: +inf.
      const std::string m = run_reduce(block_values(kBlocks, -1, 0, inf_at, 0xff800000u), kBlocks);
      ASSERT_EQ(m, "") << "-inf at " << inf_at;
    }
  }
}

// The per-tensor amax launcher (vector and scalar paths, every input dtype) on inputs with one
// non-finite element at positions in the vector body, the scalar tail and across grid strides.
TEST(CudaDeviceAmax, TensorAmaxLauncherPropagatesNonFinite) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 300007;  // odd: a scalar tail after the 16-byte vectors
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (int64_t at : {int64_t{0}, int64_t{5}, int64_t{4096 * 7 + 1}, n - 1}) {
      for (float bad :
           {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 37) % 1001) - 500.0f;
        v[static_cast<size_t>(at)] = bad;
        const int64_t esz = dtype_bytes(dt, 1);
        std::vector<uint8_t> bytes(static_cast<size_t>(n * esz));
        std::vector<float> stored(v.size());  // the values as the input dtype holds them
        for (int64_t i = 0; i < n; ++i) {
          uint16_t h = 0;
          if (dt == DType::kFloat32) std::memcpy(&bytes[i * 4], &v[i], 4);
          if (dt == DType::kBFloat16) h = formats::encode_bf16(v[i]);
          if (dt == DType::kFloat16) h = formats::encode_fp16(v[i]);
          if (dt != DType::kFloat32) std::memcpy(&bytes[i * 2], &h, 2);
          stored[i] = dt == DType::kFloat32    ? v[i]
                      : dt == DType::kBFloat16 ? formats::decode_bf16(h)
                                               : formats::decode_fp16(h);
        }
        // Offset by one element: the unaligned (scalar) path.
        for (int64_t skip : {int64_t{0}, int64_t{1}}) {
          DeviceArray<uint8_t> x(bytes.size());
          DeviceArray<uint32_t> amax(1);
          ASSERT_EQ(cudaMemcpy(x.p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
                    cudaSuccess);
          detail::cuda_quant::launch_tensor_amax(x.p + skip * esz, n - skip, dt, amax.p, nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const uint32_t got = amax.get(1)[0];
          const uint32_t want = host_amax_bits(stored.data() + skip, static_cast<size_t>(n - skip));
          EXPECT_EQ(got, want) << std::hex << got << " vs " << want << std::dec << " "
                               << dtype_name(dt) << " " << bad << " at " << at << " skip " << skip;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera
