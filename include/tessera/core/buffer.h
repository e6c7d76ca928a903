// Buffer: owning, 256-byte aligned memory on the host or on a CUDA device.
//
// Invariants: data() is nullptr iff bytes() == 0; data() is a multiple of kBufferAlignment;
// moving leaves the source empty; the destructor frees on the device that allocated.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/core/device.h"
#include "tessera/core/stream.h"

namespace tessera {

inline constexpr std::size_t kBufferAlignment = 256;

class Buffer {
 public:
  Buffer() = default;
  // Allocates `bytes` on `device`; contents are uninitialized. Throws kOutOfMemory / kNoDevice.
  Buffer(std::size_t bytes, Device device = Device::cpu());
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool empty() const { return bytes_ == 0; }
  // Sets every byte to `value`; synchronous: on return the bytes are written as seen from every
  // stream (cudaStreamNonBlocking ones included, which the default stream does not order).
  void fill_bytes(int value);

 private:
  void release() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_{};
};

// Stream-ordered forms. On CUDA they are enqueued on `stream` (cudaMemsetAsync / cudaMemcpyAsync)
// and ordered with that stream's work only; on the host (both sides on the CPU) they are done on
// return. A host source of a host→device copy may be reused on return (pageable memory is staged).
void fill_bytes_async(void* dst, Device device, int value, std::size_t bytes, Stream stream);
void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device,
                      std::size_t bytes, Stream stream);

// Number of Buffers of one byte or more allocated by this process so far (host and device).
// For tests that prove a code path allocates nothing (e.g. a layer's second step, docs/nn.md).
std::uint64_t buffer_allocation_count() noexcept;

// Copies `bytes` between any two devices (cpu/cuda); synchronous: on return the destination
// holds the bytes as seen from every stream (non-blocking ones included). Not stream-ordered: a
// device source written by pending work on another stream must be synchronized by the caller.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);

}  // namespace tessera
