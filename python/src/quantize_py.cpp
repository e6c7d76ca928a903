// tessera._tessera.quantize: a recipe or scaling mode applied to a NumPy (host) array, returning a
// QuantizedTensor object whose buffers come back as NumPy arrays (copies) and which dequantizes;
// _recipe_config: the quantizer config a recipe gives a role (what tessera.torch builds on);
// _custom_recipe_config: the same for a CustomRecipe whose factory is a Python callable;
// recipe_table and scaling_mode_table: the C++ tables as lists of dicts.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "bindings.h"
#include "core/host_bytes.h"
#include "tessera/core/status.h"
#include "tessera/quantize/quantizer.h"
#include "tessera/quantize/recipe.h"

namespace tessera::python {
namespace {

struct PyQuantized {
  QuantizedTensor tensor;
};

TensorType parse_tensor_type(const std::string& s) {
  for (TensorType t : {TensorType::kInput, TensorType::kWeight, TensorType::kOutput,
                       TensorType::kGradOutput, TensorType::kGradInput, TensorType::kGradWeight}) {
    if (s == tensor_type_name(t)) return t;
  }
  TESSERA_FAIL(Status::kInvalidArgument, "role: '", echo(s), "' is not known; expected input, weight, "
               "output, grad_output, grad_input or grad_weight");
}

// The family column of the scaling-mode table, for front ends that pair modes as the GEMM does
// (modes of one family can meet in one GEMM).
const char* scale_family_name(ScaleFamily f) {
  switch (f) {
    case ScaleFamily::kNone: return "none";
    case ScaleFamily::kTensor: return "tensor";
    case ScaleFamily::kRowwise: return "rowwise";
    case ScaleFamily::kBlock: return "block";
    case ScaleFamily::kMXFP8: return "mxfp8";
    case ScaleFamily::kNVFP4: return "nvfp4";
  }
  TESSERA_FAIL(Status::kInvalidArgument, "scale family ", static_cast<int>(f),
               " is not known; expected none, tensor, rowwise, block, mxfp8 or nvfp4");
}

}  // namespace

QuantizerConfig config_from_name(const std::string& what, const std::string& role,
                                 bool role_given, const char* arg) {
  const std::string base = what.substr(0, what.find(':'));
  bool is_mode = false;  // a quantizing mode of the scaling-mode table
  for (const ScalingModeInfo& m : scaling_mode_table()) {
    is_mode = is_mode || (m.family != ScaleFamily::kNone && what == m.name);
  }
  if (is_mode && !role_given) return make_config(scaling_mode_from_name(what.c_str()));
  for (const RecipeInfo& r : recipe_table()) {
    if (base == r.name && r.activation_mode != ScalingMode::kNone) {
      return parse_recipe(what).config_for({"python", parse_tensor_type(role), ""});
    }
  }
  TESSERA_FAIL(Status::kInvalidArgument, arg, ": '", echo(what), "' is neither a recipe (",
               "fp8_delayed, fp8_current[:e4m3|:e5m2|:hybrid], fp8_rowwise, fp8_block, mxfp8, "
               "nvfp4) nor a scaling mode (", scaling_mode_names(), ")");
}

namespace {

void apply_option(QuantizerConfig& c, const std::string& key, nb::handle v, Backend& backend) {
  const char* k = key.c_str();
  if (key == "element") {
    c.element = parse_dtype(arg_string(v, k));
  } else if (key == "layout") {
    const std::string s = arg_string(v, k);
    TESSERA_CHECK(s == "compact" || s == "swizzled", "layout: '", echo(s),
                  "' is not known; expected compact or swizzled");
    c.scale_layout = s == "compact" ? ScaleLayout::kCompact : ScaleLayout::kSwizzled;
  } else if (key == "power_of_two_scales") {
    c.power_of_two_scales = arg_bool(v, k);
  } else if (key == "e8m0_rounding") {
    const std::string s = arg_string(v, k);
    TESSERA_CHECK(s == "round_up" || s == "floor", "e8m0_rounding: '", echo(s),
                  "' is not known; expected round_up or floor");
    c.e8m0_rounding = s == "floor" ? E8M0Rounding::kFloor : E8M0Rounding::kRoundUp;
  } else if (key == "random_hadamard") {
    c.random_hadamard = arg_bool(v, k);
  } else if (key == "stochastic_rounding") {
    c.stochastic_rounding = arg_bool(v, k);
  } else if (key == "seed") {
    c.rng_seed = arg_uint64(v, k);
  } else if (key == "offset") {
    c.rng_offset = arg_uint64(v, k);
  } else if (key == "amax_epsilon") {
    c.amax_epsilon = arg_float(v, k);
  } else if (key == "backend") {
    const std::string s = arg_string(v, k);
    TESSERA_CHECK(s == "cpu" || s == "reference", "backend: '", echo(s),
                  "' is not known; expected cpu or reference");
    backend = s == "cpu" ? Backend::kCPU : Backend::kReference;
  } else if (key != "role") {
    TESSERA_FAIL(Status::kInvalidArgument, "option '", echo(key), "' is not known; expected element, "
                 "layout, power_of_two_scales, e8m0_rounding, random_hadamard, "
                 "stochastic_rounding, seed, offset, amax_epsilon, role or backend");
  }
}

PyQuantized quantize_py(const ReadArray& x, const std::string& what, const std::string& src_dtype,
                        bool rowwise, bool columnwise, const nb::dict& options) {
  std::string role = "input";
  const bool role_given = options.contains("role");
  if (role_given) role = arg_string(options["role"], "role");
  QuantizerConfig c = config_from_name(what, role, role_given, "recipe_or_mode");
  c.rowwise = rowwise;
  c.columnwise = columnwise;
  Backend backend = Backend::kCPU;
  for (auto [k, v] : options) apply_option(c, arg_string(k, "option name"), v, backend);
  const DType in = src_dtype.empty() ? array_dtype(x, "x") : parse_dtype(src_dtype);
  const TensorView xv = view_of(x, in, "x");
  TESSERA_CHECK(xv.device.is_cpu(), "x: tessera.quantize takes host arrays; got ",
                to_string(xv.device));
  TESSERA_CHECK_STATUS(xv.ndim == 2, Status::kShapeMismatch, "x: must be 2-D (M, K), got ",
                       xv.to_string());
  Quantizer q(c);
  PyQuantized out{q.allocate(xv.shape[0], xv.shape[1])};
  {
    nb::gil_scoped_release release;
    q.quantize(xv, out.tensor.view(), backend);
  }
  return out;
}

// A NumPy copy of a buffer: FP32 buffers as float32, codes as uint8, with the view's 2-D shape
// (E2M1 data: (rows, ceil(cols/2)) bytes).
nb::object copy_out(const TensorView& v) {
  if (v.data == nullptr) return nb::none();
  std::vector<int64_t> shape(v.shape.begin(), v.shape.begin() + v.ndim);
  if (v.dtype == DType::kFloat4E2M1) shape.back() = (shape.back() + 1) / 2;
  void* data = nullptr;
  nb::object arr = new_numpy(shape, v.dtype == DType::kFloat32 ? raw_float32() : raw_uint(8), &data);
  host_copy_bytes(data, v.data, static_cast<size_t>(v.nbytes()));
  return arr;
}

nb::object dequantize_py(const PyQuantized& q, bool columnwise, const std::string& backend) {
  const QuantizedTensorView& v = q.tensor.view();
  void* data = nullptr;
  nb::object out = new_numpy({v.rows, v.cols}, raw_float32(), &data);
  TESSERA_CHECK(backend == "cpu" || backend == "reference", "backend: '", echo(backend),
                "' is not known; expected cpu or reference");
  {
    nb::gil_scoped_release release;
    dequantize(v, TensorView::contiguous(data, DType::kFloat32, {v.rows, v.cols}), columnwise,
               backend == "cpu" ? Backend::kCPU : Backend::kReference);
  }
  return out;
}

// A quantizer config as a dict (what front ends read): mode, element, usages, delayed-scaling
// options, power_of_two_scales, NVFP4's Hadamard transform, stochastic rounding and rng seed,
// and the recipe's token alignment.
nb::dict config_dict(const QuantizerConfig& c, int token_alignment) {
  nb::dict d;
  d["mode"] = scaling_mode_name(c.mode);
  d["element"] = dtype_name(c.element);
  d["rowwise"] = c.rowwise;
  d["columnwise"] = c.columnwise;
  d["delayed"] = c.delayed;
  d["amax_history_len"] = c.amax_history_len;
  d["amax_compute_algo"] = c.amax_algo == AmaxHistoryAlgo::kMax ? "max" : "most_recent";
  d["margin"] = c.margin;
  d["amax_epsilon"] = c.amax_epsilon;
  d["power_of_two_scales"] = c.power_of_two_scales;
  d["random_hadamard"] = c.random_hadamard;
  d["stochastic_rounding"] = c.stochastic_rounding;
  d["rng_seed"] = c.rng_seed;
  d["token_alignment"] = token_alignment;
  return d;
}

// The config a CustomRecipe gives a role, its factory a Python callable
// factory(module_type, tensor_type, name) -> dict (tessera.torch.CustomRecipe wraps the user's
// factory, which takes a role object): the C++ CustomRecipe / Recipe::config_for path, then
// validate_config; every tessera error names the recipe and role.
nb::dict custom_recipe_config(nb::callable factory, const std::string& recipe,
                              const std::string& module_type, const std::string& tensor_type,
                              const std::string& name) {
  CustomRecipe custom;
  custom.name = recipe;
  custom.factory = [&factory](const QuantizerRole& role) {
    return config_from_factory(
        factory(role.module_type, tensor_type_name(role.tensor_type), role.name));
  };
  const Recipe r = custom.to_recipe();
  const QuantizerRole role{module_type, parse_tensor_type(tensor_type), name};
  QuantizerConfig c;
  try {
    c = r.config_for(role);
    validate_config(c);
  } catch (const Error& e) {
    throw Error(e.status(), "recipe '" + recipe + "', role " + role.to_string() + ": " + e.what());
  }
  return config_dict(c, r.token_alignment);
}

// The quantizer config the C++ recipe gives a role (Recipe::config_for: element per format,
// HYBRID = E5M2 for gradients; mode per tensor type; usages; delayed-scaling options), for front
// ends that build their quantizers from the same recipe (tessera.torch). Options override the
// built-in recipe's: amax_history_len, amax_compute_algo, margin.
nb::dict recipe_config(const std::string& recipe, const std::string& module_type,
                       const std::string& tensor_type, const std::string& name,
                       const nb::dict& options) {
  Recipe r = parse_recipe(recipe);
  for (auto [k, v] : options) {
    const std::string key = arg_string(k, "option name");
    if (key == "amax_history_len") {
      const uint64_t n = arg_uint64(v, "amax_history_len");
      TESSERA_CHECK(n >= 1 && n <= (1u << 24), "amax_history_len: ", n,
                    " is outside [1, 2**24]");
      r.amax_history_len = static_cast<int>(n);
    } else if (key == "amax_compute_algo") {
      r.amax_algo = amax_algo_from_name(arg_string(v, "amax_compute_algo"));
    } else if (key == "margin") {
      r.margin = nb::cast<int>(v);
    } else {
      TESSERA_FAIL(Status::kInvalidArgument, "option '", echo(key), "' is not known; expected "
                   "amax_history_len, amax_compute_algo or margin");
    }
  }
  TESSERA_CHECK(r.quantized(), "recipe: '", echo(recipe), "' does not quantize; it has no roles");
  const QuantizerConfig c = r.config_for({module_type, parse_tensor_type(tensor_type), name});
  validate_config(c);
  return config_dict(c, r.token_alignment);
}

}  // namespace

// The config a Python factory returned for one role: a dict with "mode" (a name of the
// scaling-mode table) and optionally "element" (default: the mode's, make_config; checked by
// validate_config); every other field takes the mode's defaults (current scaling, compact
// scales, power-of-two scales for the block modes).
QuantizerConfig config_from_factory(nb::handle out) {
  TESSERA_CHECK(nb::isinstance<nb::dict>(out), "the factory must return a dict "
                "{'mode': ..., 'element': ...} (tessera.torch.QuantizerConfig converts), got ",
                nb::type_name(out.type()).c_str());
  const nb::dict d = nb::borrow<nb::dict>(out);
  for (auto [k, v] : d) {
    const std::string key = arg_string(k, "config key");
    TESSERA_CHECK(key == "mode" || key == "element", "config key '", echo(key),
                  "' is not known; expected mode and element (the other fields take the "
                  "mode's defaults)");
  }
  TESSERA_CHECK(d.contains("mode"), "the config has no 'mode'; expected one of ",
                scaling_mode_names());
  const std::string mode = arg_string(d["mode"], "config mode");
  bool known = false;
  for (const ScalingModeInfo& m : scaling_mode_table()) {
    known = known || (m.family != ScaleFamily::kNone && mode == m.name);
  }
  TESSERA_CHECK(known, "mode '", echo(mode), "' is not a scaling mode; expected one of ",
                scaling_mode_names());
  QuantizerConfig c = make_config(scaling_mode_from_name(mode.c_str()));
  if (d.contains("element")) c.element = parse_dtype(arg_string(d["element"], "config element"));
  return c;
}

void register_quantize(nb::module_& m) {
  nb::class_<PyQuantized>(m, "QuantizedTensor",
                          "A quantized (rows, cols) tensor as tessera.quantize makes it: the usages "
                          "present (rowwise, columnwise), their codes and scales (read as NumPy "
                          "copies), its mode and element format.")
      .def_prop_ro("data", [](const PyQuantized& q) { return copy_out(q.tensor.view().data); })
      .def_prop_ro("scale_inv", [](const PyQuantized& q) { return copy_out(q.tensor.view().scale_inv); })
      .def_prop_ro("columnwise_data",
                   [](const PyQuantized& q) { return copy_out(q.tensor.view().columnwise_data); })
      .def_prop_ro("columnwise_scale_inv",
                   [](const PyQuantized& q) { return copy_out(q.tensor.view().columnwise_scale_inv); })
      .def_prop_ro("amax", [](const PyQuantized& q) { return copy_out(q.tensor.view().amax); })
      .def_prop_ro("columnwise_amax",
                   [](const PyQuantized& q) { return copy_out(q.tensor.view().columnwise_amax); })
      .def_prop_ro("shape", [](const PyQuantized& q) {
        return nb::make_tuple(q.tensor.view().rows, q.tensor.view().cols);
      })
      .def_prop_ro("mode", [](const PyQuantized& q) { return std::string(scaling_mode_name(q.tensor.view().config.mode)); })
      .def_prop_ro("element", [](const PyQuantized& q) { return std::string(dtype_name(q.tensor.view().config.element)); })
      .def_prop_ro("rowwise", [](const PyQuantized& q) { return q.tensor.has_rowwise(); })
      .def_prop_ro("columnwise", [](const PyQuantized& q) { return q.tensor.has_columnwise(); })
      .def("dequantize", &dequantize_py, nb::arg("columnwise") = false, nb::arg("backend") = "cpu",
           "The (rows, cols) float32 values of one usage (columnwise=True: the columnwise copy, "
           "returned in the logical orientation), decoded with its scales by `backend`: \"cpu\" or "
           "\"reference\" (the plain reference loops).");
  m.def("_recipe_config", &recipe_config, nb::arg("recipe"), nb::arg("module_type"),
        nb::arg("tensor_type"), nb::arg("name"), nb::arg("options"),
        "The quantizer config (a dict) that the C++ recipe gives the role (module_type, "
        "tensor_type, name); options: amax_history_len, amax_compute_algo, margin.");
  m.def("_custom_recipe_config", &custom_recipe_config, nb::arg("factory"), nb::arg("recipe"),
        nb::arg("module_type"), nb::arg("tensor_type"), nb::arg("name"),
        "The quantizer config (a dict, as _recipe_config's) that a C++ CustomRecipe whose factory "
        "is factory(module_type, tensor_type, name) -> {'mode': ..., 'element': ...} gives the "
        "role; the config is checked by validate_config.");
  m.def("quantize", &quantize_py, nb::arg("x"), nb::arg("recipe_or_mode"), nb::arg("src_dtype"),
        nb::arg("rowwise"), nb::arg("columnwise"), nb::arg("options"));
  nb::list recipes;
  for (const RecipeInfo& r : recipe_table()) {
    nb::dict d;
    d["name"] = r.name;
    d["activation_mode"] = scaling_mode_name(r.activation_mode);
    d["weight_mode"] = scaling_mode_name(r.weight_mode);
    d["format"] = element_format_name(r.default_format);
    d["scale_dtype"] = dtype_name(r.scale_dtype);
    d["block"] = nb::make_tuple(r.block_rows, r.block_cols);
    d["token_alignment"] = r.token_alignment;
    recipes.append(d);
  }
  m.attr("recipe_table") = recipes;
  // The scaling-mode table (formats/scaling_modes.h), for front ends that size scale buffers
  // themselves (tessera.torch's scale_shape works on symbolic shapes under torch.compile).
  nb::list modes;
  for (const ScalingModeInfo& s : scaling_mode_table()) {
    if (s.family == ScaleFamily::kNone) continue;
    nb::dict d;
    d["name"] = s.name;
    d["family"] = scale_family_name(s.family);
    d["scale_dtype"] = dtype_name(s.scale_dtype);
    d["fp4"] = s.fp4;
    d["block"] = nb::make_tuple(s.block_rows, s.block_cols);
    d["scale_block"] = nb::make_tuple(s.scale_block_rows, s.scale_block_cols);
    d["pad"] = nb::make_tuple(s.pad_rows, s.pad_cols);
    d["columnwise_transposed"] = s.columnwise_transposed;
    d["has_amax"] = s.has_amax;
    d["swizzle"] = s.swizzle;
    d["power_of_two_default"] = s.power_of_two_default;
    d["delayed"] = s.delayed;
    modes.append(d);
  }
  m.attr("scaling_mode_table") = modes;
}

}  // namespace tessera::python
