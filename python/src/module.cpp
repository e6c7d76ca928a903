// The nanobind module tessera._tessera: error translation and the registration of each binding
// file (one per library layer).
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "tessera/core/device.h"
#include "tessera/core/status.h"

namespace nb = nanobind;

NB_MODULE(_tessera, m) {
  m.doc() = "tessera: low-precision grouped tensors and grouped GEMM";
  static nb::object error_type = nb::object(nb::handle(PyErr_NewException(
      "tessera.Error", PyExc_ValueError, nullptr)), nb::detail::steal_t{});
  m.attr("Error") = error_type;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const tessera::Error& e) {
      nb::object err = error_type(e.what());
      nb::setattr(err, "status", nb::str(tessera::status_string(e.status())));
      PyErr_SetObject(error_type.ptr(), err.ptr());
    }
  });
  m.attr("__version__") = TESSERA_VERSION_STRING;
  m.def("cuda_compiled", &tessera::cuda_compiled);
  m.def("cuda_device_count", &tessera::cuda_device_count);
  tessera::python::register_formats(m);
}
