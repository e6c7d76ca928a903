// TensorView construction, queries and argument checks.
#include "tessera/core/tensor_view.h"

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

std::string TensorView::to_string() const {
  std::ostringstream os;
  os << dtype_name(dtype) << '[';
  for (int i = 0; i < ndim; ++i) os << (i ? ", " : "") << shape[i];
  os << "] " << tessera::to_string(device);
  return os.str();
}

void check_view(const TensorView& v, const char* arg, std::initializer_list<DType> allowed) {
  if (allowed.size() != 0) {
    bool ok = false;
    std::ostringstream names;
    for (DType d : allowed) {
      ok = ok || d == v.dtype;
      names << (names.tellp() > 0 ? ", " : "") << dtype_name(d);
    }
    TESSERA_CHECK_STATUS(ok, Status::kDTypeMismatch, arg, ": dtype ", dtype_name(v.dtype),
                         " is not accepted; expected ", names.str());
  }
  TESSERA_CHECK(v.data != nullptr || v.numel() == 0, arg, ": null data pointer for ",
                v.to_string());
  TESSERA_CHECK(v.is_contiguous(), arg, ": must be contiguous (row-major), got ", v.to_string());
}

}  // namespace tessera
