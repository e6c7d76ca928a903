// Owning aligned buffers on the host or a CUDA device.
#include "tessera/core/buffer.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tessera/core/status.h"

#if defined(TESSERA_WITH_CUDA)
#include "tessera/core/cuda_check.h"
#endif

namespace tessera {
namespace {

std::atomic<std::uint64_t> g_buffer_allocations{0};

void require_cuda_device(Device d) {
  TESSERA_CHECK_STATUS(cuda_compiled(), Status::kNoDevice,
                       "device ", to_string(d), " requested but tessera was built without CUDA");
  const int count = cuda_device_count();
  TESSERA_CHECK_STATUS(d.index < count, Status::kNoDevice, "device ", to_string(d),
                       " requested but ", count, " CUDA device(s) are visible");
}

#if defined(TESSERA_WITH_CUDA)
// Invariant of fill_bytes / copy_bytes (buffer.h: "synchronous"): when they return, the device
// bytes are written, as seen from EVERY stream. cudaMemset (device memory), cudaMemcpy
// device→device and cudaMemcpy from pageable host memory only ENQUEUE their write on the
// default stream and may return before it lands; streams created with cudaStreamNonBlocking
// (torch's side streams, the graph-replay streams of the grouped quantize tests) are not
// ordered after the default stream, so a kernel launched on one right after the call could read
// the old bytes, or have its output overwritten by the late memset (issue 19: graph replays on a
// non-blocking stream saw poison bytes and stale split sizes when other processes shared the
// GPU). Waiting for the default stream restores the invariant.
void wait_default_stream() { TESSERA_CUDA_CHECK(cudaStreamSynchronize(nullptr)); }
#endif

}  // namespace

std::uint64_t buffer_allocation_count() noexcept {
  return g_buffer_allocations.load(std::memory_order_relaxed);
}

Buffer::Buffer(std::size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  g_buffer_allocations.fetch_add(1, std::memory_order_relaxed);
  if (device.is_cpu()) {
    const std::size_t rounded = (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    data_ = std::aligned_alloc(kBufferAlignment, rounded);
    if (data_ == nullptr) {
      bytes_ = 0;
      TESSERA_FAIL(Status::kOutOfMemory, "host allocation of ", bytes, " bytes failed");
    }
    return;
  }
  require_cuda_device(device);
#if defined(TESSERA_WITH_CUDA)
  int previous = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&previous));
  TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
  const cudaError_t err = cudaMalloc(&data_, bytes);  // cudaMalloc aligns to >= 256 bytes
  (void)cudaSetDevice(previous);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    data_ = nullptr;
    bytes_ = 0;
    TESSERA_FAIL(Status::kOutOfMemory, "cudaMalloc of ", bytes, " bytes on ", to_string(device),
                 " failed: ", cudaGetErrorString(err));
  }
#endif
}

void Buffer::release() noexcept {
  if (data_ == nullptr) return;
  if (device_.is_cpu()) {
    std::free(data_);
  } else {
#if defined(TESSERA_WITH_CUDA)
    (void)cudaFree(data_);
#endif
  }
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), device_(other.device_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    device_ = other.device_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Buffer::fill_bytes(int value) {
  if (bytes_ == 0) return;
  if (device_.is_cpu()) {
    std::memset(data_, value, bytes_);
    return;
  }
#if defined(TESSERA_WITH_CUDA)
  TESSERA_CUDA_CHECK(cudaMemset(data_, value, bytes_));
  wait_default_stream();
#endif
}

namespace {
// What copy_bytes and copy_bytes_async do before a device copy: nothing for 0 bytes, the null
// check, a host-to-host memcpy, the CUDA device check. True when a CUDA copy is still to be made.
bool copy_needs_cuda(void* dst, Device dst_device, const void* src, Device src_device,
                     std::size_t bytes, const char* who) {
  if (bytes == 0) return false;
  TESSERA_CHECK(dst != nullptr && src != nullptr, who, ": null pointer for ", bytes, " bytes");
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return false;
  }
  require_cuda_device(dst_device.is_cuda() ? dst_device : src_device);
  return true;
}
}  // namespace

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                std::size_t bytes) {
  if (!copy_needs_cuda(dst, dst_device, src, src_device, bytes, "copy_bytes")) return;
#if defined(TESSERA_WITH_CUDA)
  TESSERA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  if (dst_device.is_cuda()) wait_default_stream();  // a copy to the host has already finished
#endif
}

void fill_bytes_async(void* dst, Device device, int value, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  TESSERA_CHECK(dst != nullptr, "fill_bytes_async: null pointer for ", bytes, " bytes");
  if (device.is_cpu()) {
    std::memset(dst, value, bytes);
    return;
  }
  require_cuda_device(device);
#if defined(TESSERA_WITH_CUDA)
  TESSERA_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream.as<cudaStream_t>()));
#else
  (void)stream;
#endif
}

void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device,
                      std::size_t bytes, Stream stream) {
  if (!copy_needs_cuda(dst, dst_device, src, src_device, bytes, "copy_bytes_async")) return;
#if defined(TESSERA_WITH_CUDA)
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream.as<cudaStream_t>()));
#else
  (void)stream;
#endif
}

}  // namespace tessera
