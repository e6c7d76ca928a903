// The PyTorch side of tessera's torch ops (PyTorch's stable C++ ABI): torch tensors as tessera
// TensorViews (no copies), torch's current stream, an Allocator over torch's caching allocator,
// and errors that reach Python with tessera's status. The only place of the project besides
// python/src that includes a framework header.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <optional>
#include <string>

#include "tessera/core/device.h"
#include "tessera/core/status.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/nn/allocator.h"

namespace tessera::torch_ext {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

Device device_of(const Tensor& t);
DType dtype_of(const Tensor& t, const char* arg);
// A view of `t` (strides kept as given, row-major for an empty tensor; checks that the dtype is
// one tessera reads).
TensorView view_of(const Tensor& t, const char* arg);
TensorView view_of(const OptTensor& t, const char* arg);  // empty view for None
// torch's current stream on the tensor's device (the legacy stream on the CPU).
Stream current_stream(Device device);

// A uint8 tensor made by TorchAllocator (or passed back by the caller) as an Allocation that
// keeps it alive: its bytes from its start (torch's allocators align it: 64 bytes on the CPU, 512
// on CUDA; the step carves pieces at 256-byte offsets from it).
nn::Allocation allocation_of(const Tensor& t);

// An Allocator whose memory is uint8 torch tensors from torch's allocator
// (the caching allocator on CUDA: stream-ordered on the current stream, as the step needs).
class TorchAllocator final : public nn::Allocator {
 public:
  nn::Allocation allocate(int64_t bytes, Device device, Stream stream) override;
};

// The tensor behind an Allocation made by TorchAllocator (an empty tensor for 0 bytes).
Tensor tensor_of(const nn::Allocation& a, Device device);

// A new tensor of `dtype` (tessera's) with `shape` on `device`.
Tensor new_tensor(std::initializer_list<int64_t> shape, DType dtype, Device device);
Tensor empty_like_none(Device device);  // a (0,) uint8 tensor: "nothing" in an op's outputs

// A tessera::Error as the std::runtime_error torch turns into a Python RuntimeError: its text
// starts with "[tessera:<status code>] " so that tessera.torch raises the matching tessera.Error
// subclass (python/tessera/torch/_errors.py), without the file:line prefix of the C++ check.
[[noreturn]] void rethrow_for_python(const Error& e);

// Runs `body` with tessera errors rethrown for Python.
template <class F>
decltype(auto) guarded(F&& body) {
  try {
    return body();
  } catch (const Error& e) {
    rethrow_for_python(e);
  }
}

}  // namespace tessera::torch_ext
