// memset / memcpy of host byte ranges that may be empty.
//
// An empty tensor's data pointer may be null (Buffer: data() is nullptr iff bytes() == 0; NumPy
// and DLPack hand out null for empty arrays too), and std::memset / std::memcpy with a null
// pointer are undefined even for 0 bytes (C11 7.24.1p2; UBSan's nonnull-attribute check). Every
// host memset / memcpy whose size comes from a shape goes through these.
#pragma once

#include <cstddef>
#include <cstring>

namespace tessera {

inline void host_zero_bytes(void* dst, std::size_t bytes) {
  if (bytes != 0) std::memset(dst, 0, bytes);
}

inline void host_copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

}  // namespace tessera
