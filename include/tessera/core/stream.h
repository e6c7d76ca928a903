// A CUDA stream handle that host-only code can carry without including CUDA headers.
#pragma once

namespace tessera {

// Wraps a cudaStream_t (as void*). The default-constructed stream is the legacy default stream;
// CPU work ignores it. Non-owning.
struct Stream {
  void* handle = nullptr;
  template <class T>
  T as() const {
    return reinterpret_cast<T>(handle);
  }
};

}  // namespace tessera
