// Shared pieces of the nanobind module: array <-> TensorView plumbing (DLPack through
// nb::ndarray) and the registration function of each binding file.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/quantize/types.h"

namespace tessera::python {

namespace nb = nanobind;

// A C-contiguous array the binding may write (an output). A read-only array is refused.
using AnyArray = nb::ndarray<nb::c_contig>;
// A C-contiguous array the binding only reads (an input): read-only arrays are taken too.
using ReadArray = nb::ndarray<nb::ro, nb::c_contig>;

// The DType of an array's DLPack element type; `hint` overrides raw uint16 (bfloat16/float16
// carried as uint16) and uint8 (fp8/fp4 codes). Throws a tessera::Error naming `arg`.
DType array_dtype(const AnyArray& a, const char* arg);
DType array_dtype(const ReadArray& a, const char* arg);
// A view of a C-contiguous array (CPU or CUDA memory), dtype given. The view of a ReadArray is
// only read (TensorView has no const form).
TensorView view_of(const AnyArray& a, DType dtype, const char* arg);
TensorView view_of(const ReadArray& a, DType dtype, const char* arg);
// Raw DLPack element types of the NumPy arrays tessera returns.
nb::dlpack::dtype raw_uint(int bits);
nb::dlpack::dtype raw_float32();
// A new NumPy array of `shape` and element type `raw` owning a tessera::Buffer; `*data`
// receives its (256-byte aligned) storage.
nb::object new_numpy(const std::vector<int64_t>& shape, nb::dlpack::dtype raw, void** data);

// ---- Caller-owned arrays on any device (zero-copy in and out) ---------------------------------
// DeviceArray takes any DLPack producer (NumPy, PyTorch CPU/CUDA, CuPy, JAX, a raw DLPack capsule)
// as it is: no dtype, layout or device constraint, so nanobind never converts or copies it. Bind
// such arguments with .noconvert(). Outputs (out= arrays) are DeviceArrays written in place.
using DeviceArray = nb::ndarray<>;

// The DType of a DLPack element type (float32/64, float16, bfloat16, uint8, int32, int64).
DType dlpack_dtype(nb::dlpack::dtype t, const char* arg);
DType array_dtype(const DeviceArray& a, const char* arg);
// Where a DLPack array lives: Device::cpu() or Device::cuda(id); anything else throws.
Device array_device(const DeviceArray& a, const char* arg);
// A view of a C-contiguous DeviceArray read as `dtype` (element size must match the array's),
// or — when dtype is omitted — as its own element type. Throws an Error naming `arg` when the
// array is not C-contiguous: tessera never copies a caller's array behind its back.
TensorView device_view(const DeviceArray& a, const char* arg);
TensorView device_view(const DeviceArray& a, DType dtype, const char* arg);
// A C-contiguous 2-D array of quantized codes read as `element`: 8-bit codes as they are; E2M1
// codes are the packed bytes (R, B), two codes per byte, seen as the (R, 2·B) E2M1 view of the
// storage contract (quantize/types.h: rows start on a byte).
TensorView codes_view(const DeviceArray& a, DType element, const char* arg);
// The tessera::Stream of a raw cudaStream_t handle passed from Python as an integer
// (torch.cuda.current_stream().cuda_stream, cupy's stream.ptr); 0 = the legacy default stream.
inline Stream stream_of(uintptr_t handle) { return Stream{reinterpret_cast<void*>(handle)}; }

// ---- Python scalars and names with messages naming the argument -----------------------------
// An int in [0, 2**64) (a bool is refused); throws Error(kInvalidArgument) naming `arg`.
uint64_t arg_uint64(nb::handle v, const char* arg);
// A str; a bool; a float (an int is accepted). Throw Error(kInvalidArgument) naming `arg`.
std::string arg_string(nb::handle v, const char* arg);
bool arg_bool(nb::handle v, const char* arg);
float arg_float(nb::handle v, const char* arg);

// The QuantizerConfig of a recipe ("fp8_current:e4m3", ...: the config of `role`) or of a
// scaling mode ("nvfp4", "block1x128", ...); "mxfp8"/"nvfp4" mean the mode unless `role_given`.
// Throws naming `arg` and the accepted names. Shared by quantize() and GroupedTensor().
QuantizerConfig config_from_name(const std::string& what, const std::string& role,
                                 bool role_given, const char* arg);

// The config a Python recipe factory returned for one role: a dict {"mode": a scaling-mode name,
// "element": optional}; every other field takes the mode's defaults. Throws naming the problem.
QuantizerConfig config_from_factory(nb::handle out);


void register_formats(nb::module_& m);
void register_step(nb::module_& m);
void register_scan(nb::module_& m);
void register_gemm(nb::module_& m);
void register_dlpack_gemm(nb::module_& m);
void register_dlpack_quantize(nb::module_& m);
void register_quantize(nb::module_& m);
void register_grouped(nb::module_& m);
void register_moe(nb::module_& m);  // expert-parallel routing ops (moe_py.cpp)
void register_nn(nb::module_& m);   // the C++ nn layers on NumPy arrays (nn_py.cpp)

}  // namespace tessera::python
