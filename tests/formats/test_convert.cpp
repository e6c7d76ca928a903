// Bulk encode/decode: CPU == scalar codecs, CUDA == CPU (skipped without a GPU), bad input.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/convert.h"

namespace tessera {
namespace {

// Random magnitudes over the whole float range, exact ties of every format, specials.
std::vector<float> stress_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v;
  v.reserve(n);
  const float specials[] = {0.0f, -0.0f, 448.0f, 449.0f, 464.0f, 480.0f, 57344.0f, 61440.0f,
                            6.0f, 5.0f, 0.25f, 0.75f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(), 1e-40f};
  for (float s : specials) v.push_back(s);
  while (static_cast<int64_t>(v.size()) < n) {
    switch (rng() % 3) {
      case 0: v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng()))); break;
      case 1: {  // uniform exponent in the fp8 ranges, random mantissa
        const int e = static_cast<int>(rng() % 40) - 24;
        v.push_back(std::ldexp(1.0f + (rng() % 4096) / 4096.0f, e) * ((rng() & 1) ? -1 : 1));
        break;
      }
      default: {  // a tie: mantissa with a single bit just below the kept bits of some format
        const int e = static_cast<int>(rng() % 30) - 16;
        const int man_bits = 1 + static_cast<int>(rng() % 3);
        v.push_back(std::ldexp(1.0f + std::ldexp(float(rng() % (1u << man_bits)) + 0.5f, -man_bits), e));
      }
    }
  }
  return v;
}

std::vector<uint8_t> encode_on(Device dev, const std::vector<float>& x, DType fmt) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t out_bytes = dtype_bytes(fmt, n);
  std::vector<uint8_t> out(out_bytes);
  if (dev.is_cpu()) {
    encode(TensorView::contiguous(const_cast<float*>(x.data()), DType::kFloat32, {n}),
           TensorView::contiguous(out.data(), fmt, {n}));
    return out;
  }
  Buffer din(n * 4, dev), dout(out_bytes, dev);
  copy_bytes(din.data(), dev, x.data(), Device::cpu(), n * 4);
  encode(TensorView::contiguous(din.data(), DType::kFloat32, {n}, dev),
         TensorView::contiguous(dout.data(), fmt, {n}, dev));
  copy_bytes(out.data(), Device::cpu(), dout.data(), dev, out_bytes);
  return out;
}

constexpr DType kEncodable[] = {DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kFloat8E8M0,
                                DType::kFloat4E2M1, DType::kBFloat16, DType::kFloat16};

TEST(Convert, CpuBulkEqualsScalarCodecs) {
  const auto x = stress_values(1 << 16, 7);
  const int64_t n = static_cast<int64_t>(x.size());
  auto e4 = encode_on(Device::cpu(), x, DType::kFloat8E4M3);
  auto e2 = encode_on(Device::cpu(), x, DType::kFloat4E2M1);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(e4[i], formats::encode_e4m3(x[i])) << i;
    ASSERT_EQ((e2[i / 2] >> (4 * (i % 2))) & 0xF, formats::encode_e2m1(x[i])) << i;
  }
  std::vector<float> back(n);
  decode(TensorView::contiguous(e2.data(), DType::kFloat4E2M1, {n}),
         TensorView::contiguous(back.data(), DType::kFloat32, {n}));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], formats::decode_e2m1(formats::encode_e2m1(x[i])));
}

TEST(Convert, BFloat16InputMatchesItsFloatValue) {
  const auto x = stress_values(4096, 3);
  std::vector<bf16> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16::from_float(x[i]);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> out(n);
  encode(TensorView::contiguous(xb.data(), DType::kBFloat16, {n}),
         TensorView::contiguous(out.data(), DType::kFloat8E5M2, {n}));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], formats::encode_e5m2(xb[i].to_float())) << i;
}

TEST(Convert, CudaEqualsCpuOnTenMillionValues) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto x = stress_values(10'000'000, 11);
  for (DType fmt : kEncodable) {
    const auto cpu = encode_on(Device::cpu(), x, fmt);
    const auto gpu = encode_on(Device::cuda(0), x, fmt);
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      ASSERT_EQ(cpu[i], gpu[i]) << dtype_name(fmt) << " byte " << i << " (x=" << x[i] << ")";
    }
    // Decode on the device and compare with the CPU decode, bit for bit.
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<float> dcpu(n), dgpu(n);
    decode(TensorView::contiguous(const_cast<uint8_t*>(cpu.data()), fmt, {n}),
           TensorView::contiguous(dcpu.data(), DType::kFloat32, {n}));
    Buffer dc(cpu.size(), Device::cuda(0)), df(n * 4, Device::cuda(0));
    copy_bytes(dc.data(), dc.device(), cpu.data(), Device::cpu(), cpu.size());
    decode(TensorView::contiguous(dc.data(), fmt, {n}, dc.device()),
           TensorView::contiguous(df.data(), DType::kFloat32, {n}, df.device()));
    copy_bytes(dgpu.data(), Device::cpu(), df.data(), df.device(), n * 4);
    ASSERT_EQ(std::memcmp(dcpu.data(), dgpu.data(), n * 4), 0) << dtype_name(fmt);
  }
}

TEST(Convert, BadInputIsAClearError) {
  float x[8] = {};
  uint8_t y[8] = {};
  auto src = TensorView::contiguous(x, DType::kFloat32, {8});
  EXPECT_THROW(encode(src, TensorView::contiguous(y, DType::kFloat8E4M3, {7})), Error);
  EXPECT_THROW(encode(src, TensorView::contiguous(y, DType::kInt32, {8})), Error);
  EXPECT_THROW(encode(TensorView::contiguous(y, DType::kUInt8, {8}),
                      TensorView::contiguous(y, DType::kFloat8E4M3, {8})),
               Error);
  auto strided = TensorView::contiguous(x, DType::kFloat32, {4, 2});
  strided.strides[0] = 3;
  EXPECT_THROW(encode(strided, TensorView::contiguous(y, DType::kFloat8E4M3, {4, 2})), Error);
  EXPECT_THROW(encode(TensorView::contiguous(nullptr, DType::kFloat32, {8}),
                      TensorView::contiguous(y, DType::kFloat8E4M3, {8})),
               Error);
  EXPECT_THROW(decode(TensorView::contiguous(y, DType::kFloat8E4M3, {8}),
                      TensorView::contiguous(y, DType::kUInt8, {8})),
               Error);
}

}  // namespace
}  // namespace tessera
