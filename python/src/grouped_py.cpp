// tessera.GroupedTensor on NumPy arrays (CPU): create from shapes (unquantized or any recipe),
// quantize a list of members or one contiguous activation in place, member views as NumPy
// arrays sharing the grouped storage, dequantize, and a readable repr.
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "tessera/core/status.h"
#include "tessera/grouped/grouped_quantize.h"
#include "tessera/grouped/grouped_tensor.h"

namespace tessera::python {
namespace {

// A GroupedTensor plus the Quantizer that re-quantizes it (delayed-scaling state persists).
struct PyGrouped {
  GroupedTensor tensor;
  std::unique_ptr<Quantizer> quantizer;
  std::string recipe;
};

// `recipe`: a recipe or scaling mode name as tessera.quantize takes it (a recipe gives the config
// of its input role); the flags switch features on over that config.
QuantizerConfig config_from(const std::string& recipe, const std::string& element, bool rowwise,
                            bool columnwise, bool swizzled, bool e8m0_floor, bool random_hadamard,
                            bool stochastic_rounding, uint64_t rng_seed, bool delayed) {
  QuantizerConfig c = config_from_name(recipe, "input", false, "recipe");
  if (!element.empty()) c.element = parse_dtype(element);
  c.rowwise = rowwise;
  c.columnwise = columnwise;
  if (swizzled) c.scale_layout = ScaleLayout::kSwizzled;
  if (e8m0_floor) c.e8m0_rounding = E8M0Rounding::kFloor;
  c.random_hadamard = c.random_hadamard || random_hadamard;
  c.stochastic_rounding = c.stochastic_rounding || stochastic_rounding;
  if (rng_seed != 0) c.rng_seed = rng_seed;
  c.delayed = c.delayed || delayed;
  return c;
}

// A C-contiguous CPU view of a NumPy float32/float16/bfloat16 (ml_dtypes) array; `keep` holds
// the converted array alive.
TensorView input_view(nb::handle x, const char* arg, std::vector<nb::object>& keep) {
  nb::object np = nb::module_::import_("numpy");
  nb::object arr = np.attr("ascontiguousarray")(x);
  const std::string name = nb::cast<std::string>(arr.attr("dtype").attr("name"));
  bool bf16_bits = false;
  if (name == "bfloat16") {
    arr = arr.attr("view")("uint16");
    bf16_bits = true;
  }
  keep.push_back(arr);
  const ReadArray a = nb::cast<ReadArray>(arr);
  const TensorView v = view_of(a, bf16_bits ? DType::kBFloat16 : array_dtype(a, arg), arg);
  TESSERA_CHECK(v.device.is_cpu(), arg, ": tessera.GroupedTensor takes host (NumPy) arrays");
  return v;
}

nb::dlpack::dtype raw_of(DType dt) {
  if (dt == DType::kFloat32) return raw_float32();
  if (dt == DType::kInt64) {
    nb::dlpack::dtype t{};
    t.code = static_cast<uint8_t>(nb::dlpack::dtype_code::Int);
    t.bits = 64;
    t.lanes = 1;
    return t;
  }
  return raw_uint(dtype_bits(dt) == 16 ? 16 : 8);  // bf16/fp16 bits, fp8/fp4 codes (packed)
}

// A NumPy array over `v` (kept alive by `owner`); E2M1 as packed bytes, bfloat16 as
// ml_dtypes.bfloat16 when available (else uint16 bits), float16 as float16.
nb::object numpy_view(const TensorView& v, nb::handle owner) {
  if (v.data == nullptr) return nb::none();
  std::vector<size_t> shape(static_cast<size_t>(v.ndim));
  for (int i = 0; i < v.ndim; ++i) shape[static_cast<size_t>(i)] = static_cast<size_t>(v.shape[i]);
  if (v.dtype == DType::kFloat4E2M1 && !shape.empty()) shape.back() = (shape.back() + 1) / 2;
  nb::ndarray<nb::numpy> arr(v.data, shape.size(), shape.data(), owner, nullptr, raw_of(v.dtype));
  nb::object out = arr.cast();
  if (v.dtype == DType::kFloat16) return out.attr("view")("float16");
  if (v.dtype == DType::kBFloat16) {
    nb::object ml_dtypes;
    try {
      ml_dtypes = nb::module_::import_("ml_dtypes");
    } catch (const nb::python_error&) {
      TESSERA_FAIL(Status::kUnsupported, "bfloat16 data is returned as ml_dtypes.bfloat16 "
                   "arrays, and ml_dtypes is not installed (pip install ml_dtypes)");
    }
    return out.attr("view")(ml_dtypes.attr("bfloat16"));
  }
  return out;
}

nb::object int64_array(const TensorView& v) {
  if (v.data == nullptr) return nb::none();
  void* data = nullptr;
  nb::object out = new_numpy({v.numel()}, raw_of(DType::kInt64), &data);
  copy_bytes(data, Device::cpu(), v.data, v.device, static_cast<size_t>(v.nbytes()));
  return out;
}

PyGrouped* create(const std::vector<std::array<int64_t, 2>>& shapes, const std::string& dtype,
                  const std::string& recipe, const std::string& element, bool rowwise,
                  bool columnwise, int64_t capacity_rows, const std::optional<std::string>& mode,
                  bool swizzled, bool e8m0_floor, bool random_hadamard, bool stochastic_rounding,
                  uint64_t rng_seed, bool delayed) {
  GroupedTensorOptions o;
  o.dtype = parse_dtype(dtype);
  o.capacity_rows = capacity_rows;
  if (mode) {
    const GroupedShapeMode all[] = {GroupedShapeMode::kAllSame, GroupedShapeMode::kVaryingFirst,
                                    GroupedShapeMode::kVaryingLast, GroupedShapeMode::kVaryingBoth};
    bool found = false;
    for (GroupedShapeMode m : all) {
      if (*mode == grouped_shape_mode_name(m)) {
        o.mode = m;
        found = true;
      }
    }
    TESSERA_CHECK(found, "mode: '", echo(*mode), "' is not known; expected 'all same', 'varying first', "
                  "'varying last' or 'varying both'");
  }
  auto p = std::make_unique<PyGrouped>();
  p->recipe = recipe;
  if (recipe != "none") {
    o.config = config_from(recipe, element, rowwise, columnwise, swizzled, e8m0_floor,
                           random_hadamard, stochastic_rounding, rng_seed, delayed);
    p->quantizer = std::make_unique<Quantizer>(o.config);
  }
  p->tensor = GroupedTensor::from_shapes(shapes, o);
  return p.release();
}

Quantizer& quantizer_of(PyGrouped& g) {
  TESSERA_CHECK(g.quantizer != nullptr, "GroupedTensor: an unquantized (recipe='none') tensor "
                "cannot be quantized; create it with a recipe");
  return *g.quantizer;
}

void quantize_list(PyGrouped& g, const nb::list& inputs) {
  std::vector<nb::object> keep;
  std::vector<TensorView> views;
  for (size_t i = 0; i < inputs.size(); ++i) {
    views.push_back(input_view(inputs[i], "inputs[i]", keep));
  }
  Quantizer& q = quantizer_of(g);
  nb::gil_scoped_release release;
  grouped_quantize_list(q, views, g.tensor);
}

void quantize_contiguous(PyGrouped& g, nb::handle x) {
  std::vector<nb::object> keep;
  const TensorView v = input_view(x, "x", keep);
  Quantizer& q = quantizer_of(g);
  nb::gil_scoped_release release;
  grouped_quantize_contiguous(q, v, g.tensor);
}

nb::object member(nb::handle self, int64_t i) {
  PyGrouped& g = nb::cast<PyGrouped&>(self);
  if (!g.tensor.view().quantized()) return numpy_view(g.tensor.member(i), self);
  const QuantizedTensorView q = g.tensor.quantized_member(i);
  nb::dict d;
  d["data"] = numpy_view(q.data, self);
  d["scale_inv"] = numpy_view(q.scale_inv, self);
  d["columnwise_data"] = numpy_view(q.columnwise_data, self);
  d["columnwise_scale_inv"] = numpy_view(q.columnwise_scale_inv, self);
  d["amax"] = numpy_view(q.amax, self);
  d["columnwise_amax"] = numpy_view(q.columnwise_amax, self);
  return d;
}

nb::list dequantize_py(PyGrouped& g, bool columnwise) {
  const GroupedTensorView& v = g.tensor.view();
  std::vector<TensorView> outs;
  nb::list result;
  for (int64_t i = 0; i < v.num_tensors; ++i) {
    const auto s = g.tensor.member_shape(i);
    void* data = nullptr;
    result.append(new_numpy({s[0], s[1]}, raw_float32(), &data));
    outs.push_back(TensorView::contiguous(data, DType::kFloat32, {s[0], s[1]}));
  }
  {
    nb::gil_scoped_release release;
    grouped_dequantize_list(v, outs, columnwise);
  }
  return result;
}

}  // namespace

void register_grouped(nb::module_& m) {
  nb::class_<PyGrouped>(m, "GroupedTensor",
                        "N member tensors in one allocation per field (host memory, NumPy).")
      .def("__init__",
           [](PyGrouped* self, const std::vector<std::array<int64_t, 2>>& shapes,
              const std::string& dtype, const std::string& recipe, const std::string& element,
              bool rowwise, bool columnwise, int64_t capacity_rows,
              const std::optional<std::string>& mode, bool swizzled, bool e8m0_floor,
              bool random_hadamard, bool stochastic_rounding, nb::handle rng_seed, bool delayed) {
             std::unique_ptr<PyGrouped> p(create(shapes, dtype, recipe, element, rowwise,
                                                 columnwise, capacity_rows, mode, swizzled,
                                                 e8m0_floor, random_hadamard, stochastic_rounding,
                                                 arg_uint64(rng_seed, "rng_seed"), delayed));
             new (self) PyGrouped(std::move(*p));
           },
           nb::arg("shapes"), nb::arg("dtype") = "float32", nb::arg("recipe") = "none",
           nb::arg("element") = "", nb::arg("rowwise") = true, nb::arg("columnwise") = false,
           nb::arg("capacity_rows") = -1, nb::arg("mode") = nb::none(),
           nb::arg("swizzled") = false, nb::arg("e8m0_floor") = false,
           nb::arg("random_hadamard") = false, nb::arg("stochastic_rounding") = false,
           nb::arg("rng_seed") = 0, nb::arg("delayed") = false,
           "shapes: list of (rows, cols). recipe: 'none' (dtype float32/float16/bfloat16), a "
           "recipe as tessera.quantize takes it ('fp8_current', 'fp8_delayed', "
           "'fp8_current:e4m3', 'fp8_rowwise', 'fp8_block', 'mxfp8', 'nvfp4': the config of its "
           "input role) or a scaling mode ('tensor', 'rowwise', 'block1x128', 'block128x128', "
           "'mxfp8', 'mxfp8_32x32', 'nvfp4', 'nvfp4_16x16'). The flags (swizzled, e8m0_floor, "
           "random_hadamard, stochastic_rounding, delayed) switch features on over that config.")
      .def("quantize", &quantize_list, nb::arg("inputs"),
           "Quantize one high-precision array per member into the grouped storage (in place).")
      .def("quantize_contiguous", &quantize_contiguous, nb::arg("x"),
           "Quantize one (logical_rows, cols) array whose rows are the members, in order.")
      .def("member", &member, nb::arg("index"),
           "Member i as a NumPy array (unquantized) or a dict of NumPy arrays (data, scale_inv, "
           "columnwise_data, columnwise_scale_inv, amax, columnwise_amax), sharing storage.")
      .def("dequantize", &dequantize_py, nb::arg("columnwise") = false,
           "One float32 array per member.")
      .def_prop_ro("num_tensors", [](const PyGrouped& g) { return g.tensor.num_tensors(); })
      .def_prop_ro("mode", [](const PyGrouped& g) {
        return std::string(grouped_shape_mode_name(g.tensor.view().mode));
      })
      .def_prop_ro("recipe", [](const PyGrouped& g) { return g.recipe; })
      .def_prop_ro("logical_shape", [](const PyGrouped& g) {
        return std::array<int64_t, 2>{g.tensor.view().logical_rows, g.tensor.view().logical_cols};
      })
      .def_prop_ro("tensor_offsets",
                   [](const PyGrouped& g) { return int64_array(g.tensor.view().tensor_offsets); })
      .def_prop_ro("scale_offsets",
                   [](const PyGrouped& g) { return int64_array(g.tensor.view().scale_offsets); })
      .def_prop_ro("columnwise_scale_offsets", [](const PyGrouped& g) {
        return int64_array(g.tensor.view().columnwise_scale_offsets);
      })
      .def_prop_ro("data", [](nb::handle self) {
        return numpy_view(nb::cast<PyGrouped&>(self).tensor.view().data, self);
      })
      .def_prop_ro("storage_bytes", [](const PyGrouped& g) { return g.tensor.storage_bytes(); })
      .def("__repr__", [](const PyGrouped& g) { return g.tensor.to_string(); });
}

}  // namespace tessera::python
