// DLPack plumbing between nb::ndarray (NumPy, PyTorch, CuPy, JAX) and tessera::TensorView.
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"

namespace tessera::python {

DType dlpack_dtype(nb::dlpack::dtype t, const char* arg) {
  const auto code = static_cast<nb::dlpack::dtype_code>(t.code);
  if (t.lanes == 1) {
    if (code == nb::dlpack::dtype_code::Float && t.bits == 32) return DType::kFloat32;
    if (code == nb::dlpack::dtype_code::Float && t.bits == 64) return DType::kFloat64;
    if (code == nb::dlpack::dtype_code::Float && t.bits == 16) return DType::kFloat16;
    if (code == nb::dlpack::dtype_code::Bfloat && t.bits == 16) return DType::kBFloat16;
    if (code == nb::dlpack::dtype_code::UInt && t.bits == 8) return DType::kUInt8;
    if (code == nb::dlpack::dtype_code::Int && t.bits == 32) return DType::kInt32;
    if (code == nb::dlpack::dtype_code::Int && t.bits == 64) return DType::kInt64;
  }
  TESSERA_FAIL(Status::kDTypeMismatch, arg, ": array element type (DLPack code ",
               static_cast<int>(t.code), ", ", static_cast<int>(t.bits),
               " bits) is not accepted; expected float32, float16, bfloat16, uint8, int32 or "
               "int64 (pass FP8/FP4 codes as uint8)");
}

DType array_dtype(const AnyArray& a, const char* arg) { return dlpack_dtype(a.dtype(), arg); }
DType array_dtype(const ReadArray& a, const char* arg) { return dlpack_dtype(a.dtype(), arg); }

namespace {

template <class Array>
TensorView view_of_array(const Array& a, DType dtype, const char* arg) {
  TESSERA_CHECK(a.ndim() <= static_cast<size_t>(kMaxDims), arg, ": ", a.ndim(),
                "-D arrays are not accepted; at most ", kMaxDims, " dimensions");
  int64_t shape[kMaxDims];
  for (size_t i = 0; i < a.ndim(); ++i) shape[i] = static_cast<int64_t>(a.shape(i));
  Device dev = Device::cpu();
  if (a.device_type() == nb::device::cuda::value) {
    dev = Device::cuda(a.device_id());
  } else {
    TESSERA_CHECK(a.device_type() == nb::device::cpu::value, arg,
                  ": arrays must live on the CPU or a CUDA device (DLPack device type ",
                  a.device_type(), ")");
  }
  return TensorView::contiguous(const_cast<void*>(a.data()), dtype, shape,
                                static_cast<int>(a.ndim()), dev);
}

}  // namespace

TensorView view_of(const AnyArray& a, DType dtype, const char* arg) {
  return view_of_array(a, dtype, arg);
}
TensorView view_of(const ReadArray& a, DType dtype, const char* arg) {
  return view_of_array(a, dtype, arg);
}

DType array_dtype(const DeviceArray& a, const char* arg) { return dlpack_dtype(a.dtype(), arg); }

Device array_device(const DeviceArray& a, const char* arg) {
  if (a.device_type() == nb::device::cuda::value) return Device::cuda(a.device_id());
  TESSERA_CHECK(a.device_type() == nb::device::cpu::value, arg,
                ": arrays must live on the CPU or a CUDA device (DLPack device type ",
                a.device_type(), ")");
  return Device::cpu();
}

TensorView device_view(const DeviceArray& a, DType dtype, const char* arg) {
  TESSERA_CHECK(a.ndim() <= static_cast<size_t>(kMaxDims), arg, ": ", a.ndim(),
                "-D arrays are not accepted; at most ", kMaxDims, " dimensions");
  const int array_bits = a.dtype().bits * a.dtype().lanes;
  TESSERA_CHECK_STATUS(dtype_bits(dtype) == array_bits ||
                           (dtype == DType::kFloat4E2M1 && array_bits == 8),
                       Status::kDTypeMismatch, arg, ": cannot read ", array_bits,
                       "-bit array elements as ", dtype_name(dtype));
  int64_t shape[kMaxDims];
  // C-contiguous check; size-1 dims may have any stride. DLPack producers may leave strides
  // NULL, which means compact row-major.
  const int64_t* strides = a.stride_ptr();
  int64_t expected_stride = 1;
  bool contiguous = true;
  for (int i = static_cast<int>(a.ndim()) - 1; i >= 0; --i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    if (strides != nullptr && shape[i] != 1 && strides[i] != expected_stride) contiguous = false;
    expected_stride *= shape[i];
  }
  TESSERA_CHECK(contiguous || expected_stride == 0, arg,
                ": the array must be C-contiguous (tessera never copies a caller's array); call "
                ".contiguous() / np.ascontiguousarray first");
  return TensorView::contiguous(const_cast<void*>(a.data()), dtype, shape,
                                static_cast<int>(a.ndim()), array_device(a, arg));
}

TensorView device_view(const DeviceArray& a, const char* arg) {
  return device_view(a, array_dtype(a, arg), arg);
}

TensorView codes_view(const DeviceArray& a, DType element, const char* arg) {
  if (element != DType::kFloat4E2M1) return device_view(a, element, arg);
  const TensorView bytes = device_view(a, DType::kUInt8, arg);
  TESSERA_CHECK_STATUS(bytes.ndim == 2, Status::kShapeMismatch, arg,
                       ": packed e2m1 codes must be a 2-D (rows, ceil(cols/2)) uint8 array, got ",
                       bytes.to_string());
  return TensorView::contiguous(bytes.data, DType::kFloat4E2M1,
                                {bytes.shape[0], checked_mul(bytes.shape[1], 2, arg)},
                                bytes.device);
}

namespace {

[[noreturn]] void bad_arg(nb::handle v, const char* arg, const char* expected) {
  std::string got;
  try {
    got = nb::cast<std::string>(nb::repr(v));
  } catch (const std::exception&) {
    got = "?";
  }
  const std::string type = nb::cast<std::string>(nb::handle(Py_TYPE(v.ptr())).attr("__name__"));
  TESSERA_FAIL(Status::kInvalidArgument, arg, ": expected ", expected, ", got ", echo(got), " (",
               echo(type), ")");
}

}  // namespace

uint64_t arg_uint64(nb::handle v, const char* arg) {
  if (PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr())) {
    const unsigned long long x = PyLong_AsUnsignedLongLong(v.ptr());
    if (!(x == static_cast<unsigned long long>(-1) && PyErr_Occurred())) return x;
    PyErr_Clear();
  }
  bad_arg(v, arg, "an integer in [0, 2**64)");
}

std::string arg_string(nb::handle v, const char* arg) {
  if (!PyUnicode_Check(v.ptr())) bad_arg(v, arg, "a str");
  return nb::cast<std::string>(v);
}

bool arg_bool(nb::handle v, const char* arg) {
  if (!PyBool_Check(v.ptr())) bad_arg(v, arg, "True or False");
  return v.ptr() == Py_True;
}

float arg_float(nb::handle v, const char* arg) {
  if ((PyFloat_Check(v.ptr()) || PyLong_Check(v.ptr())) && !PyBool_Check(v.ptr())) {
    const double x = PyFloat_AsDouble(v.ptr());
    if (!(x == -1.0 && PyErr_Occurred())) return static_cast<float>(x);
    PyErr_Clear();
  }
  bad_arg(v, arg, "a number");
}

nb::dlpack::dtype raw_uint(int bits) {
  nb::dlpack::dtype t{};
  t.code = static_cast<uint8_t>(nb::dlpack::dtype_code::UInt);
  t.bits = static_cast<uint8_t>(bits);
  t.lanes = 1;
  return t;
}

nb::dlpack::dtype raw_float32() {
  nb::dlpack::dtype t{};
  t.code = static_cast<uint8_t>(nb::dlpack::dtype_code::Float);
  t.bits = 32;
  t.lanes = 1;
  return t;
}

nb::object new_numpy(const std::vector<int64_t>& shape, nb::dlpack::dtype raw, void** data) {
  size_t numel = 1;
  for (int64_t s : shape) numel *= static_cast<size_t>(s);
  auto* buffer = new Buffer(numel * raw.bits / 8);
  nb::capsule owner(buffer, [](void* p) noexcept { delete static_cast<Buffer*>(p); });
  std::vector<size_t> ushape(shape.begin(), shape.end());
  nb::ndarray<nb::numpy> arr(buffer->data(), ushape.size(), ushape.data(), owner, nullptr, raw);
  *data = buffer->data();
  return arr.cast();
}

}  // namespace tessera::python
