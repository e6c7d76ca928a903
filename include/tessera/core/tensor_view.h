// TensorView: a non-owning description of a strided tensor (pointer, shape, strides, dtype, device).
//
// Invariants: 0 <= ndim <= kMaxDims; shape[i] >= 0; strides are in elements; for packed sub-byte
// dtypes (E2M1) only contiguous views are meaningful and the byte size is rounded up.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"

namespace tessera {

inline constexpr int kMaxDims = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device{};
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};

  // A row-major contiguous view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::cpu());
  static TensorView contiguous(void* data, DType dtype, const int64_t* shape, int ndim,
                               Device device = Device::cpu());

  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const;
  int64_t nbytes() const { return dtype_bytes(dtype, numel()); }
  bool is_contiguous() const;
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
  std::string to_string() const;  // "e4m3[128, 256] cpu"
};

// The bytes a view's elements occupy, [begin, end) as addresses; empty (begin == end) when the
// view has no element or no data. From data, shape, strides (negative ones included) and dtype
// (sub-byte elements: the bytes holding any of their bits). kOutOfRange when a byte offset does
// not fit int64.
struct ByteRange {
  uintptr_t begin = 0, end = 0;
  bool empty() const { return begin == end; }
  bool overlaps(const ByteRange& o) const {
    return !empty() && !o.empty() && begin < o.end && o.begin < end;
  }
};
ByteRange byte_range(const TensorView& v);

// Throws a clear Error naming `arg` unless the view is contiguous, on a valid device and of a
// dtype in `allowed` (empty = any). Used by every public entry point that takes a view.
void check_view(const TensorView& v, const char* arg, std::initializer_list<DType> allowed = {});

}  // namespace tessera
