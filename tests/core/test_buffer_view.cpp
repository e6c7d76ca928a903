// Buffer ownership/alignment, host byte helpers, and TensorView queries and checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "core/host_bytes.h"
#include "tessera/core/buffer.h"
#include "tessera/core/status.h"
#include "tessera/core/tensor_view.h"

namespace tessera {
namespace {

TEST(Buffer, HostBuffersAreAlignedAndMovable) {
  for (std::size_t bytes : {1u, 255u, 256u, 1000u, 1u << 20}) {
    Buffer b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % kBufferAlignment, 0u);
    b.fill_bytes(0xAB);
    EXPECT_EQ(b.as<uint8_t>()[bytes - 1], 0xAB);
    Buffer moved = std::move(b);
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_EQ(b.bytes(), 0u);
    EXPECT_EQ(moved.bytes(), bytes);
  }
  Buffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(Buffer, CudaWithoutADeviceIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  try {
    Buffer b(16, Device::cuda(0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNoDevice);
  }
}

TEST(Buffer, CopyBytesRoundTripsThroughTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Buffer host(1024), back(1024), dev(1024, Device::cuda(0));
  for (int i = 0; i < 1024; ++i) host.as<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
  copy_bytes(dev.data(), dev.device(), host.data(), host.device(), 1024);
  copy_bytes(back.data(), back.device(), dev.data(), dev.device(), 1024);
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(back.as<uint8_t>()[i], static_cast<uint8_t>(i * 7));
}

TEST(Buffer, AllocationCountCountsNonEmptyBuffers) {
  const std::uint64_t before = buffer_allocation_count();
  { Buffer empty(0), moved_from(64); Buffer moved_to(std::move(moved_from)); }
  EXPECT_EQ(buffer_allocation_count(), before + 1) << "only the 64-byte allocation counts";
}

TEST(Buffer, StreamOrderedFillAndCopyOnTheHost) {
  Buffer a(300), b(300);
  fill_bytes_async(a.data(), a.device(), 0x5C, a.bytes(), Stream{});
  copy_bytes_async(b.data(), b.device(), a.data(), a.device(), b.bytes(), Stream{});
  for (int i = 0; i < 300; ++i) ASSERT_EQ(b.as<uint8_t>()[i], 0x5C);
}

TEST(Buffer, StreamOrderedFillAndCopyThroughTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Buffer host(1024), back(1024), dev(1024, Device::cuda(0));
  for (int i = 0; i < 1024; ++i) host.as<uint8_t>()[i] = static_cast<uint8_t>(i * 5);
  copy_bytes_async(dev.data(), dev.device(), host.data(), host.device(), 1024, Stream{});
  fill_bytes_async(dev.as<uint8_t>() + 512, dev.device(), 0x11, 256, Stream{});
  copy_bytes(back.data(), back.device(), dev.data(), dev.device(), 1024);  // after the stream
  for (int i = 0; i < 1024; ++i) {
    const auto want = i >= 512 && i < 768 ? uint8_t{0x11} : static_cast<uint8_t>(i * 5);
    ASSERT_EQ(back.as<uint8_t>()[i], want) << "byte " << i;
  }
}

// The buffers of an empty tensor are null (Buffer: data() is nullptr iff bytes() == 0), and
// memset / memcpy of a null pointer are undefined even for 0 bytes: the host helpers touch
// nothing then (under -DTESSERA_SANITIZE=ON, UBSan's nonnull-attribute check watches this).
TEST(HostBytes, EmptyRangesOfNullBuffersAreNotTouched) {
  Buffer empty(0), full(64);
  ASSERT_EQ(empty.data(), nullptr);
  host_zero_bytes(empty.data(), empty.bytes());
  host_copy_bytes(empty.data(), full.data(), 0);
  host_copy_bytes(full.data(), empty.data(), 0);
  full.fill_bytes(0xAB);
  host_zero_bytes(full.data(), 32);
  EXPECT_EQ(full.as<uint8_t>()[31], 0);
  EXPECT_EQ(full.as<uint8_t>()[32], 0xAB);
  host_copy_bytes(full.as<uint8_t>() + 32, full.data(), 16);
  EXPECT_EQ(full.as<uint8_t>()[47], 0);
  EXPECT_EQ(full.as<uint8_t>()[48], 0xAB);
}

TEST(TensorView, ContiguousShapesAndStrides) {
  float data[24];
  auto v = TensorView::contiguous(data, DType::kFloat32, {2, 3, 4});
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_EQ(v.size(-1), 4);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.to_string(), "float32[2, 3, 4] cpu");
  v.strides[0] = 13;
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_THROW(v.size(3), Error);
  EXPECT_THROW(TensorView::contiguous(data, DType::kFloat32, {-1}), Error);
}

TEST(TensorView, CheckViewNamesTheArgument) {
  float data[4];
  auto v = TensorView::contiguous(data, DType::kFloat32, {4});
  EXPECT_NO_THROW(check_view(v, "x", {DType::kFloat32}));
  try {
    check_view(v, "weight", {DType::kBFloat16, DType::kFloat16});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kDTypeMismatch);
    EXPECT_NE(std::string(e.what()).find("weight"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bfloat16, float16"), std::string::npos);
  }
  auto null_view = TensorView::contiguous(nullptr, DType::kFloat32, {4});
  EXPECT_THROW(check_view(null_view, "x"), Error);
  auto empty_view = TensorView::contiguous(nullptr, DType::kFloat32, {0});
  EXPECT_NO_THROW(check_view(empty_view, "x"));
}

}  // namespace
}  // namespace tessera
