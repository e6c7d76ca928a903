// The nanobind module tessera._tessera: error translation and the registration of each binding
// file (one per library layer).
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "tessera/core/device.h"
#include "tessera/core/status.h"

namespace nb = nanobind;

NB_MODULE(_tessera, m) {
  m.doc() = "tessera: low-precision grouped tensors and grouped GEMM";
  // tessera::Error surfaces as tessera.Error (a ValueError); the message starts with the status
  // name ("tessera shape mismatch: ...").
  nb::exception<tessera::Error>(m, "Error", PyExc_ValueError);
  m.attr("__version__") = TESSERA_VERSION_STRING;
  m.def("cuda_compiled", &tessera::cuda_compiled);
  m.def("cuda_device_count", &tessera::cuda_device_count);
  tessera::python::register_formats(m);
  tessera::python::register_scan(m);
  tessera::python::register_gemm(m);
  tessera::python::register_torch_gemm(m);
  tessera::python::register_torch_quantize(m);
  tessera::python::register_quantize(m);
  tessera::python::register_grouped(m);
  tessera::python::register_moe(m);
}
