// The nanobind module tessera._tessera: the exception hierarchy, error translation and the
// registration of each binding file (one per library layer).
#include <nanobind/nanobind.h>

#include <new>
#include <string>
#include <typeinfo>

#include "bindings.h"
#include "tessera/core/device.h"
#include "tessera/core/status.h"

namespace nb = nanobind;

namespace tessera::python {
namespace {

// One Python class per Status: tessera.Error(Exception) and its subclasses, each also deriving
// from the built-in exception that callers already catch (ValueError for bad input, as
// tessera.Error was before; MemoryError / RuntimeError for resources and devices).
struct ErrorClass {
  Status status;
  const char* name;
  const char* builtin;
};
constexpr ErrorClass kErrorClasses[] = {
    {Status::kInvalidArgument, "InvalidArgumentError", "ValueError"},
    {Status::kShapeMismatch, "ShapeError", "ValueError"},
    {Status::kDTypeMismatch, "DTypeError", "ValueError"},
    {Status::kMisaligned, "MisalignedError", "ValueError"},
    {Status::kUnsupported, "UnsupportedError", "ValueError"},
    {Status::kOutOfRange, "OutOfRangeError", "ValueError"},
    {Status::kBufferTooSmall, "BufferTooSmallError", "ValueError"},
    {Status::kOutOfMemory, "OutOfMemoryError", "MemoryError"},
    {Status::kDeviceError, "DeviceError", "RuntimeError"},
    {Status::kNoDevice, "NoDeviceError", "RuntimeError"},
    {Status::kInternal, "InternalError", "RuntimeError"},
};
constexpr int kStatusCount = static_cast<int>(Status::kInternal) + 1;

// Class objects, created once at import and kept for the life of the process.
PyObject* g_error = nullptr;
PyObject* g_by_status[kStatusCount] = {};
PyObject* g_type_error = nullptr;  // ArgumentTypeError(Error, TypeError): a value of a wrong type

nb::object make_class(nb::module_& m, const char* name, nb::tuple bases, const char* doc) {
  nb::dict ns;
  ns["__module__"] = "tessera";
  ns["__doc__"] = doc;
  nb::object cls = nb::module_::import_("builtins").attr("type")(name, bases, ns);
  m.attr(name) = cls;
  return cls;
}

void register_errors(nb::module_& m) {
  nb::object builtins = nb::module_::import_("builtins");
  nb::object error = make_class(m, "Error", nb::make_tuple(builtins.attr("Exception")),
                                "Base class of every error tessera raises. The message starts "
                                "with the status name ('tessera shape mismatch: ...').");
  g_error = error.release().ptr();
  for (const ErrorClass& c : kErrorClasses) {
    nb::object cls = make_class(m, c.name,
                                nb::make_tuple(nb::handle(g_error), builtins.attr(c.builtin)),
                                "A tessera.Error of one status (see tessera.Error).");
    cls.attr("status") = status_string(c.status);
    g_by_status[static_cast<int>(c.status)] = cls.release().ptr();
  }
  g_type_error = make_class(m, "ArgumentTypeError",
                            nb::make_tuple(nb::handle(g_error), builtins.attr("TypeError")),
                            "An argument of a type tessera does not take (a tessera.Error).")
                     .release()
                     .ptr();
  m.def("_error_class", [](int status) {
    PyObject* cls = status > 0 && status < kStatusCount && g_by_status[status] ? g_by_status[status]
                                                                              : g_error;
    return nb::borrow(cls);
  }, "The tessera.Error subclass of a status code (tessera.torch maps its ops' errors).");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const tessera::Error& e) {
      const int s = static_cast<int>(e.status());
      PyObject* cls = s > 0 && s < kStatusCount && g_by_status[s] ? g_by_status[s] : g_error;
      // Python users get the message, not the C++ check behind it: the trailing
      // " [file:line, check `...` failed]" (status.h) stays out, except for device errors and
      // broken invariants (what a bug report needs).
      std::string msg = e.what();
      const size_t bracket = msg.rfind(" [");
      const bool keep = e.status() == Status::kDeviceError || e.status() == Status::kInternal;
      if (!keep && bracket != std::string::npos && msg.back() == ']') msg.erase(bracket);
      PyErr_SetString(cls, msg.c_str());
    } catch (const nb::cast_error&) {
      PyErr_SetString(g_type_error, "tessera dtype mismatch: an argument has a type tessera "
                                    "does not take here (see the function's documentation)");
    } catch (const std::bad_alloc&) {
      PyErr_SetString(g_by_status[static_cast<int>(Status::kOutOfMemory)],
                      "tessera out of memory: a host allocation failed");
    }
  });
}

}  // namespace
}  // namespace tessera::python

NB_MODULE(_tessera, m) {
  m.doc() = "tessera: low-precision grouped tensors and grouped GEMM";
  tessera::python::register_errors(m);
  m.attr("__version__") = TESSERA_VERSION_STRING;
  m.def("cuda_compiled", &tessera::cuda_compiled,
        "Whether this build of tessera has its CUDA backend (nvcc was found at build time).");
  m.def("cuda_device_count", &tessera::cuda_device_count,
        "The CUDA devices this process sees (0 without a driver, a device or the CUDA backend).");
  tessera::python::register_formats(m);
  tessera::python::register_scan(m);
  tessera::python::register_gemm(m);
  tessera::python::register_dlpack_gemm(m);
  tessera::python::register_dlpack_quantize(m);
  tessera::python::register_quantize(m);
  tessera::python::register_grouped(m);
  tessera::python::register_moe(m);
  tessera::python::register_nn(m);
  tessera::python::register_step(m);
}
