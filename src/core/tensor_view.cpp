// TensorView construction, queries and argument checks.
#include "tessera/core/tensor_view.h"

#include <algorithm>
#include <sstream>

#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"

namespace tessera {

TensorView TensorView::contiguous(void* data, DType dtype, const int64_t* shape, int ndim,
                                  Device device) {
  TESSERA_CHECK(ndim >= 0 && ndim <= kMaxDims, "TensorView: ndim ", ndim, " must be in [0, ",
                kMaxDims, "]");
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = ndim;
  for (int i = 0; i < ndim; ++i)
    TESSERA_CHECK(shape[i] >= 0, "TensorView: shape[", i, "] = ", shape[i], " is negative");
  // kOutOfRange when the element count (of the non-zero extents) or the byte size overflows;
  // after it every stride below fits.
  (void)checked_dtype_bytes(dtype, checked_numel(shape, ndim, "TensorView: shape"),
                            "TensorView: bytes");
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.strides[i] = stride;
    stride *= shape[i];
  }
  return v;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  return contiguous(data, dtype, shape.begin(), static_cast<int>(shape.size()), device);
}

int64_t TensorView::size(int dim) const {
  const int d = dim < 0 ? dim + ndim : dim;
  TESSERA_CHECK_STATUS(d >= 0 && d < ndim, Status::kOutOfRange, "dimension ", dim,
                       " out of range for a ", ndim, "-D tensor");
  return shape[d];
}

int64_t TensorView::numel() const { return checked_numel(shape.data(), ndim, "TensorView: shape"); }

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != stride) return false;
    stride = checked_mul(stride, shape[i], "TensorView: shape");
  }
  return true;
}

ByteRange byte_range(const TensorView& v) {
  if (v.data == nullptr) return {};
  int64_t lo = 0, hi = 0;  // element offsets of the first and the last element from v.data
  for (int i = 0; i < v.ndim; ++i) {
    if (v.shape[i] == 0) return {};
    const int64_t reach = checked_mul(v.shape[i] - 1, v.strides[i], "byte_range: extent");
    if (reach < 0) {
      lo = checked_add(lo, reach, "byte_range: extent");
    } else {
      hi = checked_add(hi, reach, "byte_range: extent");
    }
  }
  // Byte offsets of the first and one past the last element (sub-byte elements: floor / ceil
  // over the elements a byte holds), in bytes so that a view whose byte size fits never overflows.
  const int bits = dtype_bits(v.dtype);
  const int64_t past = checked_add(hi, 1, "byte_range: extent");
  int64_t begin = 0, end = 0;
  if (bits >= 8) {
    begin = checked_mul(lo, bits / 8, "byte_range: bytes");
    end = checked_mul(past, bits / 8, "byte_range: bytes");
  } else {
    const int64_t per_byte = 8 / bits;  // lo <= 0: '/' truncates toward zero, floor needs -1
    begin = lo / per_byte - (lo % per_byte != 0 ? 1 : 0);
    end = ceil_div_nonneg(past, per_byte);
  }
  const auto base = reinterpret_cast<uintptr_t>(v.data);
  return {base + static_cast<uintptr_t>(begin), base + static_cast<uintptr_t>(end)};
}

std::string TensorView::to_string() const {
  std::ostringstream os;
  os << dtype_name(dtype) << '[';
  for (int i = 0; i < ndim; ++i) os << (i ? ", " : "") << shape[i];
  os << "] " << tessera::to_string(device);
  return os.str();
}

void check_view(const TensorView& v, const char* arg, std::initializer_list<DType> allowed) {
  const bool ok =
      allowed.size() == 0 || std::find(allowed.begin(), allowed.end(), v.dtype) != allowed.end();
  if (!ok) {  // the list of names is built only for the message (this runs many times a step)
    std::ostringstream names;
    for (DType d : allowed) names << (names.tellp() > 0 ? ", " : "") << dtype_name(d);
    TESSERA_FAIL(Status::kDTypeMismatch, arg, ": dtype ", dtype_name(v.dtype),
                 " is not accepted; expected ", names.str());
  }
  TESSERA_CHECK(v.data != nullptr || v.numel() == 0, arg, ": null data pointer for ",
                v.to_string());
  TESSERA_CHECK(v.is_contiguous(), arg, ": must be contiguous (row-major), got ", v.to_string());
}

}  // namespace tessera
