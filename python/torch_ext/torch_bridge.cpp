// torch tensors ↔ tessera views, torch's current stream, the torch-backed Allocator, errors.
#include "torch_bridge.h"

#include <dlfcn.h>

#include <algorithm>
#include <stdexcept>

#include "tessera/core/status.h"

namespace tessera::torch_ext {

namespace sh = torch::headeronly;

Device device_of(const Tensor& t) {
  if (t.is_cuda()) return Device::cuda(t.get_device_index());
  TESSERA_CHECK_STATUS(t.is_cpu(), Status::kUnsupported,
                       "tensors must live on the CPU or a CUDA device");
  return Device::cpu();
}

DType dtype_of(const Tensor& t, const char* arg) {
  switch (t.scalar_type()) {
    case sh::ScalarType::Float: return DType::kFloat32;
    case sh::ScalarType::BFloat16: return DType::kBFloat16;
    case sh::ScalarType::Half: return DType::kFloat16;
    case sh::ScalarType::Float8_e4m3fn: return DType::kFloat8E4M3;
    case sh::ScalarType::Float8_e5m2: return DType::kFloat8E5M2;
    case sh::ScalarType::Float8_e8m0fnu: return DType::kFloat8E8M0;
    case sh::ScalarType::Byte: return DType::kUInt8;
    case sh::ScalarType::Int: return DType::kInt32;
    case sh::ScalarType::Long: return DType::kInt64;
    case sh::ScalarType::Double: return DType::kFloat64;
    default:
      TESSERA_FAIL(Status::kDTypeMismatch, arg, ": dtype code ",
                   static_cast<int>(t.scalar_type()),
                   " is not one tessera reads (float32, bfloat16, float16, float8, uint8, int32, "
                   "int64)");
  }
}

TensorView view_of(const Tensor& t, const char* arg) {
  TESSERA_CHECK_STATUS(t.dim() <= kMaxDims, Status::kShapeMismatch, arg, ": ", t.dim(),
                       " dimensions, tessera takes at most ", kMaxDims);
  TensorView v;
  v.data = t.data_ptr();
  v.dtype = dtype_of(t, arg);
  v.device = device_of(t);
  v.ndim = static_cast<int>(t.dim());
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = t.size(i);
    v.strides[i] = t.stride(i);
  }
  if (t.numel() == 0) {  // no element is addressed: row-major strides (torch may hand any)
    int64_t stride = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
      v.strides[i] = stride;
      stride *= std::max<int64_t>(v.shape[i], 1);
    }
  }
  return v;
}

TensorView view_of(const OptTensor& t, const char* arg) {
  return t.has_value() ? view_of(*t, arg) : TensorView{};
}

Stream current_stream(Device device) {
  if (!device.is_cuda()) return {};
  // Resolved at run time from the libtorch_cuda that `import torch` loaded (locally: not in the
  // global scope), absent from CPU-only builds of torch (which then never reach here with a
  // CUDA tensor).
  using Fn = int32_t (*)(int32_t, void**);
  static const Fn get = [] {
    void* lib = dlopen("libtorch_cuda.so", RTLD_NOLOAD | RTLD_LAZY);
    void* sym = lib ? dlsym(lib, "aoti_torch_get_current_cuda_stream")
                    : dlsym(RTLD_DEFAULT, "aoti_torch_get_current_cuda_stream");
    return reinterpret_cast<Fn>(sym);
  }();
  TESSERA_CHECK_STATUS(get != nullptr, Status::kNoDevice,
                       "this PyTorch has no CUDA (aoti_torch_get_current_cuda_stream missing)");
  void* stream = nullptr;
  TESSERA_CHECK_STATUS(get(device.index, &stream) == 0, Status::kDeviceError,
                       "torch's current CUDA stream of device ", device.index,
                       " could not be read");
  return Stream{stream};
}

namespace {

sh::ScalarType scalar_type(DType dt) {
  switch (dt) {
    case DType::kFloat32: return sh::ScalarType::Float;
    case DType::kBFloat16: return sh::ScalarType::BFloat16;
    case DType::kFloat16: return sh::ScalarType::Half;
    case DType::kFloat8E4M3: return sh::ScalarType::Float8_e4m3fn;
    case DType::kFloat8E5M2: return sh::ScalarType::Float8_e5m2;
    case DType::kFloat8E8M0: return sh::ScalarType::Float8_e8m0fnu;
    case DType::kUInt8: return sh::ScalarType::Byte;
    case DType::kInt32: return sh::ScalarType::Int;
    case DType::kInt64: return sh::ScalarType::Long;
    default:
      TESSERA_FAIL(Status::kInternal, "no torch dtype for ", dtype_name(dt));
  }
}

}  // namespace

// Through the shim's aoti_torch_empty_strided (one C call into at::empty_strided, the CPU one
// directly) rather than torch::stable::empty, which boxes its arguments and looks aten::empty up
// by name in the dispatcher on every call: a step makes ~10 tensors (outputs, scratch), and each
// cost ~7k instructions that way, ~13 % of a small step's host time. Same allocator (torch's
// caching allocator on the current device and stream; CPU: the default allocator), contiguous
// strides; the contents are uninitialized as before (every byte the step reads it writes first).
Tensor new_tensor(std::initializer_list<int64_t> shape, DType dtype, Device device) {
  constexpr size_t kMaxRank = 4;
  TESSERA_CHECK(shape.size() <= kMaxRank, "new_tensor: rank ", shape.size(), " > ", kMaxRank);
  int64_t sizes[kMaxRank] = {}, strides[kMaxRank] = {};
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::copy(shape.begin(), shape.end(), sizes);
  int64_t stride = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= std::max<int64_t>(sizes[i], 1);
  }
  AtenTensorHandle handle = nullptr;
  const int32_t device_type =
      device.is_cuda() ? aoti_torch_device_type_cuda() : aoti_torch_device_type_cpu();
  TESSERA_CHECK_STATUS(
      aoti_torch_empty_strided(rank, sizes, strides, static_cast<int32_t>(scalar_type(dtype)),
                               device_type, device.is_cuda() ? device.index : 0,
                               &handle) == AOTI_TORCH_SUCCESS,
      Status::kOutOfMemory, "torch could not allocate a ", dtype_name(dtype), " tensor of ", rank,
      " dimensions on ", to_string(device));
  return Tensor(handle);
}

Tensor empty_like_none(Device device) { return new_tensor({0}, DType::kUInt8, device); }

nn::Allocation allocation_of(const Tensor& t) {
  nn::Allocation a;
  a.device = device_of(t);
  a.bytes = t.numel() * static_cast<int64_t>(t.element_size());
  a.owner = std::make_shared<Tensor>(t);
  if (a.bytes == 0) return a;
  a.data = t.data_ptr();
  // Pieces are carved at 256-byte offsets from the start: the start itself must be aligned as
  // torch's allocators align (64 bytes on the CPU, 512 on CUDA), never a view into a tensor.
  TESSERA_CHECK_STATUS(reinterpret_cast<uintptr_t>(a.data) % 64 == 0, Status::kMisaligned,
                       "a saved tessera buffer must start 64-byte aligned (pass back the tensor "
                       "the op returned, not a view of it)");
  return a;
}

nn::Allocation TorchAllocator::allocate(int64_t bytes, Device device, Stream) {
  TESSERA_CHECK(bytes >= 0, "allocate: bytes ", bytes, " must be >= 0");
  return allocation_of(new_tensor({bytes}, DType::kUInt8, device));
}

Tensor tensor_of(const nn::Allocation& a, Device device) {
  if (a.owner) return *std::static_pointer_cast<Tensor>(a.owner);
  return new_tensor({0}, DType::kUInt8, device);
}

void rethrow_for_python(const Error& e) {
  std::string msg = e.what();
  // "tessera <status>: <message> [file:line, check `...` failed]" → "<message>"; device errors
  // and broken invariants keep the location (what a bug report needs).
  const std::string head = std::string("tessera ") + status_string(e.status()) + ": ";
  if (msg.compare(0, head.size(), head) == 0) msg.erase(0, head.size());
  const size_t bracket = msg.rfind(" [");
  const bool keep = e.status() == Status::kDeviceError || e.status() == Status::kInternal;
  if (!keep && bracket != std::string::npos && msg.back() == ']') msg.erase(bracket);
  throw std::runtime_error("[tessera:" + std::to_string(static_cast<int>(e.status())) + "] " +
                           msg);
}

}  // namespace tessera::torch_ext
