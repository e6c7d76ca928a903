// Shared pieces of the nanobind module: array <-> TensorView plumbing (DLPack through
// nb::ndarray) and the registration function of each binding file.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/tensor_view.h"

namespace tessera::python {

namespace nb = nanobind;

using AnyArray = nb::ndarray<nb::c_contig>;

// The DType of an array's DLPack element type; `hint` overrides raw uint16 (bfloat16/float16
// carried as uint16) and uint8 (fp8/fp4 codes). Throws a tessera::Error naming `arg`.
DType array_dtype(const AnyArray& a, const char* arg);
// A view of a C-contiguous array (CPU or CUDA memory), dtype given.
TensorView view_of(const AnyArray& a, DType dtype, const char* arg);
// Raw DLPack element types of the NumPy arrays tessera returns.
nb::dlpack::dtype raw_uint(int bits);
nb::dlpack::dtype raw_float32();
// A new NumPy array of `shape` and element type `raw` owning a tessera::Buffer; `*data`
// receives its (256-byte aligned) storage.
nb::object new_numpy(const std::vector<int64_t>& shape, nb::dlpack::dtype raw, void** data);

void register_formats(nb::module_& m);
void register_scan(nb::module_& m);

}  // namespace tessera::python
