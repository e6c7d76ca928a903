// tessera.nn on NumPy arrays (CPU): the C++ nn layers GroupedLinear and GroupedMLP themselves —
// not a re-implementation — with their FP32 master weights shown as NumPy views of the layers'
// own buffers, explicit forward / backward and the saved contexts.
//
// Recipes: a built-in name (parse_recipe: "fp32", "bf16", "fp8_current:e4m3", "mxfp8", ...) or a
// Python callable factory(module_type, tensor_type, name) -> {"mode": ..., "element": ...}, the
// C++ CustomRecipe path (the layer's constructor calls it once per role; it is released after).
// The GIL is held through every call (the layers are serial objects).
#include <nanobind/stl/string.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "tessera/core/status.h"
#include "tessera/nn/grouped_linear.h"
#include "tessera/nn/grouped_mlp.h"
#include "tessera/quantize/recipe.h"

namespace tessera::python {
namespace {

using nn::GroupedLinear;
using nn::GroupedLinearContext;
using nn::GroupedMLP;
using nn::GroupedMLPContext;

// A Python recipe factory, held only while a layer is being built: every role's quantizer is
// made in the layer's constructor (the factory is called there, once per role), after which the
// reference is dropped, so no layer keeps a Python object alive through C++ (a cycle the garbage
// collector could not see: factory -> its globals -> the layer -> the factory).
struct FactoryRef {
  nb::object fn;
};

// The C++ recipe of a Python `recipe` argument (module doc); `factory` receives the holder of a
// custom recipe's callable (release it once the layer is built).
Recipe recipe_of(nb::handle recipe, int64_t token_alignment,
                 std::shared_ptr<FactoryRef>& factory) {
  if (nb::isinstance<nb::str>(recipe)) {
    TESSERA_CHECK(token_alignment == 0, "token_alignment: only a custom recipe (a factory) takes "
                  "one; a built-in recipe has its own");
    return parse_recipe(nb::cast<std::string>(recipe));
  }
  TESSERA_CHECK(PyCallable_Check(recipe.ptr()), "recipe: expected a recipe name (str) or a "
                "factory(module_type, tensor_type, name) -> {'mode': ..., 'element': ...}, got ",
                nb::type_name(recipe.type()).c_str());
  TESSERA_CHECK(token_alignment >= 0 && token_alignment <= (1 << 20), "token_alignment: ",
                token_alignment, " is outside [0, 2**20] (0: the custom recipe default, 16)");
  factory = std::make_shared<FactoryRef>();
  factory->fn = nb::borrow(recipe);
  CustomRecipe custom;
  custom.factory = [ref = factory](const QuantizerRole& role) {
    TESSERA_CHECK_STATUS(ref->fn.is_valid(), Status::kInternal, "recipe factory: asked for role ",
                         role.to_string(), " after the layer was built");
    return config_from_factory(
        ref->fn(role.module_type, tensor_type_name(role.tensor_type), role.name));
  };
  if (token_alignment > 0) custom.token_alignment = static_cast<int>(token_alignment);
  return custom.to_recipe();
}

// Builds a layer in place with the recipe of a Python argument, then drops the factory.
template <class Layer, class Make>
void build_layer(Layer* self, nb::handle recipe, int64_t token_alignment, Make make) {
  std::shared_ptr<FactoryRef> factory;
  const Recipe r = recipe_of(recipe, token_alignment, factory);
  new (self) Layer(make(r));
  if (factory) factory->fn = nb::object();
}

// np.asarray(x), with NumPy's own refusals (a ragged list, an object that is no array) turned
// into a tessera error naming `arg`.
nb::object as_numpy(nb::handle x, const char* arg) {
  try {
    return nb::module_::import_("numpy").attr("asarray")(x);
  } catch (nb::python_error& e) {
    TESSERA_FAIL(Status::kInvalidArgument, arg, ": not an array NumPy can read (",
                 e.what(), ")");
  }
}

// A C-contiguous host float32 view of `x`: any real floating array (float16/32/64, ml_dtypes
// bfloat16), converted (a copy only when needed); `keep` holds it alive for the call.
TensorView float_array(nb::handle x, const char* arg, std::vector<nb::object>& keep) {
  nb::object np = nb::module_::import_("numpy");
  nb::object arr = as_numpy(x, arg);
  nb::object dtype = arr.attr("dtype");
  const std::string kind = nb::cast<std::string>(dtype.attr("kind"));
  const std::string name = nb::cast<std::string>(dtype.attr("name"));
  TESSERA_CHECK_STATUS(kind == "f" || name == "bfloat16", Status::kDTypeMismatch, arg,
                       ": expected a real floating array (float32; float16, float64 and "
                       "bfloat16 are converted), got ", name.c_str());
  arr = np.attr("ascontiguousarray")(arr, np.attr("float32"));
  keep.push_back(arr);
  const TensorView v = view_of(nb::cast<ReadArray>(arr), DType::kFloat32, arg);
  TESSERA_CHECK(v.device.is_cpu(), arg, ": tessera.nn takes host (NumPy) arrays");
  return v;
}

// splits (G,) group sizes as int64 on the host: an integer array or list (an empty list too).
TensorView splits_array(nb::handle splits, std::vector<nb::object>& keep) {
  nb::object np = nb::module_::import_("numpy");
  nb::object arr = as_numpy(splits, "splits");
  const std::string kind = nb::cast<std::string>(arr.attr("dtype").attr("kind"));
  const bool empty = nb::cast<int64_t>(arr.attr("size")) == 0;
  TESSERA_CHECK_STATUS(kind == "i" || kind == "u" || empty, Status::kDTypeMismatch,
                       "splits: expected integer group sizes, got ",
                       nb::cast<std::string>(arr.attr("dtype").attr("name")).c_str());
  arr = np.attr("ascontiguousarray")(arr, np.attr("int64"));
  keep.push_back(arr);
  return view_of(nb::cast<ReadArray>(arr), DType::kInt64, "splits");
}

// A new float32 NumPy array and its view. Token-row outputs (y, dx, dprobs) are zeroed first:
// the layers leave the rows past the groups (a capacity buffer's tail) unwritten, and tessera.nn
// returns them as zeros. Weight gradients are written whole by the layers.
enum class Fill { kNone, kZeros };
TensorView new_float32(const std::vector<int64_t>& shape, nb::object& out,
                       Fill fill = Fill::kNone) {
  void* data = nullptr;
  out = new_numpy(shape, raw_float32(), &data);
  const TensorView v = TensorView::contiguous(data, DType::kFloat32, shape.data(),
                                              static_cast<int>(shape.size()));
  if (fill == Fill::kZeros && v.numel() > 0) {
    std::memset(data, 0, static_cast<size_t>(v.nbytes()));
  }
  return v;
}

// A caller's float32 C-contiguous writable array of `shape`, used in place (main-grad buffers).
TensorView inout_float32(nb::handle a, const std::vector<int64_t>& shape, const char* arg) {
  nb::object np = nb::module_::import_("numpy");
  TESSERA_CHECK(nb::isinstance(a, np.attr("ndarray")), arg, ": expected a NumPy array");
  const bool ok = nb::cast<std::string>(a.attr("dtype").attr("name")) == "float32" &&
                  nb::cast<bool>(a.attr("flags").attr("c_contiguous")) &&
                  nb::cast<bool>(a.attr("flags").attr("writeable"));
  TESSERA_CHECK_STATUS(ok, Status::kDTypeMismatch, arg, ": must be a writable C-contiguous "
                       "float32 array (it is accumulated into in place)");
  const TensorView v = view_of(nb::cast<AnyArray>(a), DType::kFloat32, arg);
  bool same = v.ndim == static_cast<int>(shape.size());
  for (int i = 0; same && i < v.ndim; ++i) same = v.shape[i] == shape[static_cast<size_t>(i)];
  TESSERA_CHECK_STATUS(same, Status::kShapeMismatch, arg, ": expected shape ",
                       TensorView::contiguous(nullptr, DType::kFloat32, shape.data(),
                                              static_cast<int>(shape.size()))
                           .to_string(),
                       ", got ", v.to_string());
  return v;
}

// A NumPy float32 view of a layer parameter (nothing copied; `owner` keeps the layer alive).
nb::object parameter_view(const TensorView& v, nb::handle owner) {
  if (v.data == nullptr) return nb::none();
  std::vector<size_t> shape;
  for (int i = 0; i < v.ndim; ++i) shape.push_back(static_cast<size_t>(v.shape[i]));
  return nb::ndarray<nb::numpy, float>(v.data, shape.size(), shape.data(), owner).cast();
}

nb::object int64_numpy(const std::vector<int64_t>& values) {
  nb::object np = nb::module_::import_("numpy");
  nb::list l;
  for (int64_t v : values) l.append(v);
  return np.attr("array")(l, np.attr("int64"));
}

nn::ForwardMode forward_mode(bool training, bool requantize_weights) {
  nn::ForwardMode mode;
  mode.training = training;
  mode.requantize_weights = requantize_weights;
  return mode;
}

nn::SavedOperand saved_operand(const std::string& which) {
  if (which == "input") return nn::SavedOperand::kInput;
  if (which == "weight") return nn::SavedOperand::kWeight;
  TESSERA_CHECK(which == "grad_output", "operand: '", which,
                "' is not known; expected input, weight or grad_output");
  return nn::SavedOperand::kGradOutput;
}

// A context plus the layer it belongs to (kept alive) and its row count.
struct PyLinearContext {
  GroupedLinearContext ctx;
  nb::object layer;
  int64_t rows = 0;  // T of the forward's x
};

struct PyMlpContext {
  GroupedMLPContext ctx;
  nb::object layer;
  int64_t rows = 0;
  bool has_probs = false;
};

// The dequantized value of a saved operand as the GEMMs saw it, (rows, cols) float32: input
// (padded T, in), weight (G·out, in), grad_output (padded T, out; after a backward).
nb::object linear_context_value(const PyLinearContext& pc, const std::string& which,
                                bool columnwise) {
  TESSERA_CHECK(pc.ctx.valid(), "context: empty (an eval forward saves nothing)");
  const GroupedLinear& layer = nb::cast<const GroupedLinear&>(pc.layer);
  const int64_t cols = which == "grad_output" ? layer.out_features() : layer.in_features();
  const std::vector<float> v = pc.ctx.operand_value(saved_operand(which), columnwise);
  nb::object out;
  const TensorView dst = new_float32({static_cast<int64_t>(v.size()) / cols, cols}, out);
  std::copy(v.begin(), v.end(), dst.as<float>());
  return out;
}

// x (T, cols) and splits of a forward, as host views (`keep` holds the converted arrays).
std::pair<TensorView, TensorView> forward_inputs(nb::handle x, nb::handle splits, int64_t cols,
                                                 std::vector<nb::object>& keep) {
  const TensorView xv = float_array(x, "x", keep);
  TESSERA_CHECK_STATUS(xv.ndim == 2, Status::kShapeMismatch, "x: expected a 2-D (T, ", cols,
                       ") array, got ", xv.to_string());
  return {xv, splits_array(splits, keep)};
}

// The Python context of a forward of layer `self` over `rows` tokens.
template <class PyContext, class Context>
nb::object context_object(Context ctx, nb::handle self, int64_t rows) {
  PyContext pc;
  pc.ctx = std::move(ctx);
  pc.layer = nb::borrow(self);
  pc.rows = rows;
  return nb::cast(std::move(pc));
}

// A backward's context must be a training context of this layer.
template <class PyContext>
void check_context(const PyContext& pc, nb::handle self) {
  TESSERA_CHECK(pc.layer.is(self), "ctx: belongs to another layer");
  TESSERA_CHECK(pc.ctx.valid(), "ctx: empty (an eval forward, training=False, saves nothing "
                "for backward)");
}

nb::tuple linear_forward(nb::handle self, nb::handle x, nb::handle splits, bool training,
                         bool requantize_weights) {
  GroupedLinear& layer = nb::cast<GroupedLinear&>(self);
  std::vector<nb::object> keep;
  const auto [xv, sv] = forward_inputs(x, splits, layer.in_features(), keep);
  nb::object y;
  const TensorView yv = new_float32({xv.shape[0], layer.out_features()}, y, Fill::kZeros);
  return nb::make_tuple(y, context_object<PyLinearContext>(
                               layer.forward(xv, sv, yv, forward_mode(training, requantize_weights)),
                               self, xv.shape[0]));
}

nb::tuple linear_backward(nb::handle self, const PyLinearContext& pc, nb::handle dy, bool need_dx,
                          bool need_weight_grads, nb::handle accumulate_into) {
  GroupedLinear& layer = nb::cast<GroupedLinear&>(self);
  check_context(pc, self);
  std::vector<nb::object> keep;
  const TensorView dyv = float_array(dy, "dy", keep);
  const bool has_bias = layer.bias().data != nullptr;
  const int64_t g = layer.num_groups(), in = layer.in_features(), out = layer.out_features();
  nb::object dx = nb::none(), dw = nb::none(), db = nb::none();
  nn::GroupedLinearGrads grads;
  if (need_dx) grads.dx = new_float32({pc.rows, in}, dx, Fill::kZeros);
  if (!accumulate_into.is_none()) {
    TESSERA_CHECK(need_weight_grads, "accumulate_into: given, but need_weight_grads is False");
    TESSERA_CHECK(nb::isinstance<nb::tuple>(accumulate_into) &&
                      nb::len(accumulate_into) == (has_bias ? 2u : 1u),
                  "accumulate_into: expected a tuple ", has_bias ? "(dw, db)" : "(dw,)",
                  " of FP32 arrays (G, out, in)", has_bias ? " and (G, out)" : "");
    grads.dw = inout_float32(accumulate_into[0], {g, out, in}, "accumulate_into[0] (dw)");
    dw = nb::borrow(accumulate_into[0]);
    if (has_bias) {
      grads.db = inout_float32(accumulate_into[1], {g, out}, "accumulate_into[1] (db)");
      db = nb::borrow(accumulate_into[1]);
    }
    grads.accumulate = true;
  } else if (need_weight_grads) {
    grads.dw = new_float32({g, out, in}, dw);
    if (has_bias) grads.db = new_float32({g, out}, db);
  }
  layer.backward(pc.ctx, dyv, grads);
  return nb::make_tuple(dx, dw, db);
}

nb::tuple mlp_forward(nb::handle self, nb::handle x, nb::handle splits, nb::handle probs,
                      bool training, bool requantize_weights) {
  GroupedMLP& mlp = nb::cast<GroupedMLP&>(self);
  std::vector<nb::object> keep;
  const auto [xv, sv] = forward_inputs(x, splits, mlp.hidden(), keep);
  TensorView pv;
  if (!probs.is_none()) pv = float_array(probs, "probs", keep);
  nb::object y;
  const TensorView yv = new_float32({xv.shape[0], mlp.hidden()}, y, Fill::kZeros);
  nb::object ctx = context_object<PyMlpContext>(
      mlp.forward(xv, sv, pv, yv, forward_mode(training, requantize_weights)), self, xv.shape[0]);
  nb::cast<PyMlpContext&>(ctx).has_probs = !probs.is_none();
  return nb::make_tuple(y, ctx);
}

nb::dict mlp_backward(nb::handle self, const PyMlpContext& pc, nb::handle dy, bool need_dx,
                      bool need_weight_grads, nb::handle accumulate_into) {
  GroupedMLP& mlp = nb::cast<GroupedMLP&>(self);
  check_context(pc, self);
  std::vector<nb::object> keep;
  const TensorView dyv = float_array(dy, "dy", keep);
  const int64_t g = mlp.num_groups(), h = mlp.hidden(), f = mlp.ffn();
  const bool has_bias = mlp.fc1().bias().data != nullptr;
  nb::dict out;
  nn::GroupedMLPGrads grads;
  nb::object dx = nb::none(), dprobs = nb::none();
  if (need_dx) grads.dx = new_float32({pc.rows, h}, dx, Fill::kZeros);
  if (pc.has_probs) grads.dprobs = new_float32({pc.rows}, dprobs, Fill::kZeros);
  out["dx"] = dx;
  out["dprobs"] = dprobs;
  const char* names[4] = {"fc1_dw", "fc1_db", "fc2_dw", "fc2_db"};
  const std::vector<int64_t> shapes[4] = {{g, 2 * f, h}, {g, 2 * f}, {g, h, f}, {g, h}};
  TensorView* views[4] = {&grads.fc1_dw, &grads.fc1_db, &grads.fc2_dw, &grads.fc2_db};
  if (!accumulate_into.is_none()) {
    TESSERA_CHECK(need_weight_grads, "accumulate_into: given, but need_weight_grads is False");
    TESSERA_CHECK(nb::isinstance<nb::dict>(accumulate_into), "accumulate_into: expected a dict "
                  "{'fc1_dw': ..., 'fc2_dw': ...", has_bias ? ", 'fc1_db': ..., 'fc2_db': ..." : "",
                  "} of FP32 arrays");
    const nb::dict acc = nb::borrow<nb::dict>(accumulate_into);
    for (int i = 0; i < 4; ++i) {
      const bool wanted = i % 2 == 0 || has_bias;
      TESSERA_CHECK(acc.contains(names[i]) == wanted, "accumulate_into: ",
                    wanted ? "needs" : "has no use for", " the key '", names[i], "'");
      if (!wanted) continue;
      const std::string arg = std::string("accumulate_into['") + names[i] + "']";
      *views[i] = inout_float32(acc[names[i]], shapes[i], arg.c_str());
      out[names[i]] = acc[names[i]];
    }
    TESSERA_CHECK(nb::len(acc) == (has_bias ? 4u : 2u), "accumulate_into: unknown keys; "
                  "expected fc1_dw, fc2_dw", has_bias ? ", fc1_db, fc2_db" : "");
    grads.accumulate = true;
  } else {
    for (int i = 0; i < 4; ++i) {
      nb::object a = nb::none();
      if (need_weight_grads && (i % 2 == 0 || has_bias)) *views[i] = new_float32(shapes[i], a);
      out[names[i]] = a;
    }
  }
  mlp.backward(pc.ctx, dyv, grads);
  return out;
}

}  // namespace

void register_nn(nb::module_& m) {
  nb::module_ nn_m = m.def_submodule("nn", "The C++ nn layers on NumPy arrays (tessera.nn).");

  nb::class_<PyLinearContext>(nn_m, "GroupedLinearContext",
                              "What a training forward of a GroupedLinear saved for backward.")
      .def_prop_ro("valid", [](const PyLinearContext& c) { return c.ctx.valid(); })
      .def_prop_ro("saved_bytes", [](const PyLinearContext& c) {
        return c.ctx.valid() ? c.ctx.saved_bytes() : int64_t{0};
      })
      .def_prop_ro("offsets", [](const PyLinearContext& c) {
        TESSERA_CHECK(c.ctx.valid(), "context: empty");
        return int64_numpy(nn::host_offsets(c.ctx.layout(), false));
      })
      .def_prop_ro("padded_offsets", [](const PyLinearContext& c) {
        TESSERA_CHECK(c.ctx.valid(), "context: empty");
        return int64_numpy(nn::host_offsets(c.ctx.layout(), true));
      })
      .def("operand_value", &linear_context_value, nb::arg("operand"),
           nb::arg("columnwise") = false,
           "float32 (rows, cols) value of a saved operand as the GEMMs saw it (dequantized): "
           "'input' (padded T, in), 'weight' (G*out, in), 'grad_output' (padded T, out; after a "
           "backward); columnwise: the copy the wgrad / dgrad read.");

  nb::class_<PyMlpContext>(nn_m, "GroupedMLPContext",
                           "What a training forward of a GroupedMLP saved for backward.")
      .def_prop_ro("valid", [](const PyMlpContext& c) { return c.ctx.valid(); })
      .def_prop_ro("saved_bytes", [](const PyMlpContext& c) {
        return c.ctx.valid() ? c.ctx.saved_bytes() : int64_t{0};
      });

  nb::class_<GroupedLinear>(nn_m, "GroupedLinear")
      .def("__init__",
           [](GroupedLinear* self, int64_t groups, int64_t in, int64_t out, nb::handle recipe,
              bool bias, const std::string& name, bool save_original_input,
              int64_t token_alignment) {
             nn::GroupedLinearOptions o;
             o.name = name;
             o.save_original_input = save_original_input;
             build_layer(self, recipe, token_alignment, [&](const Recipe& r) {
               return GroupedLinear(groups, in, out, r, bias, o);
             });
           },
           nb::arg("num_groups"), nb::arg("in_features"), nb::arg("out_features"),
           nb::arg("recipe"), nb::arg("bias") = false, nb::kw_only(),
           nb::arg("name") = "grouped_linear", nb::arg("save_original_input") = false,
           nb::arg("token_alignment") = 0)
      .def_prop_ro("num_groups", &GroupedLinear::num_groups)
      .def_prop_ro("in_features", &GroupedLinear::in_features)
      .def_prop_ro("out_features", &GroupedLinear::out_features)
      .def_prop_ro("token_alignment", &GroupedLinear::token_alignment)
      .def_prop_ro("name", &GroupedLinear::name)
      .def_prop_ro("weight", [](nb::handle self) {
        return parameter_view(nb::cast<GroupedLinear&>(self).weight(), self);
      })
      .def_prop_ro("bias", [](nb::handle self) {
        return parameter_view(nb::cast<GroupedLinear&>(self).bias(), self);
      })
      .def("reset_parameters", &GroupedLinear::reset_parameters, nb::arg("seed"))
      .def("forward", &linear_forward, nb::arg("x"), nb::arg("splits"), nb::kw_only(),
           nb::arg("training") = true, nb::arg("requantize_weights") = true)
      .def("backward", &linear_backward, nb::arg("ctx"), nb::arg("dy"), nb::kw_only(),
           nb::arg("need_dx") = true, nb::arg("need_weight_grads") = true,
           nb::arg("accumulate_into").none() = nb::none());

  nb::class_<GroupedMLP>(nn_m, "GroupedMLP")
      .def("__init__",
           [](GroupedMLP* self, int64_t groups, int64_t hidden, int64_t ffn, nb::handle recipe,
              bool bias, const std::string& name, bool save_original_input,
              int64_t token_alignment) {
             nn::GroupedMLPOptions o;
             o.name = name;
             o.bias = bias;
             o.save_original_input = save_original_input;
             build_layer(self, recipe, token_alignment, [&](const Recipe& r) {
               return GroupedMLP(groups, hidden, ffn, r, o);
             });
           },
           nb::arg("num_groups"), nb::arg("hidden"), nb::arg("ffn"), nb::arg("recipe"),
           nb::arg("bias") = false, nb::kw_only(), nb::arg("name") = "mlp",
           nb::arg("save_original_input") = false, nb::arg("token_alignment") = 0)
      .def_prop_ro("num_groups", &GroupedMLP::num_groups)
      .def_prop_ro("hidden", &GroupedMLP::hidden)
      .def_prop_ro("ffn", &GroupedMLP::ffn)
      .def_prop_ro("fc1", [](GroupedMLP& m) -> GroupedLinear& { return m.fc1(); },
                   nb::rv_policy::reference_internal)
      .def_prop_ro("fc2", [](GroupedMLP& m) -> GroupedLinear& { return m.fc2(); },
                   nb::rv_policy::reference_internal)
      .def("reset_parameters", &GroupedMLP::reset_parameters, nb::arg("seed"))
      .def("forward", &mlp_forward, nb::arg("x"), nb::arg("splits"),
           nb::arg("probs").none() = nb::none(), nb::kw_only(), nb::arg("training") = true,
           nb::arg("requantize_weights") = true)
      .def("backward", &mlp_backward, nb::arg("ctx"), nb::arg("dy"), nb::kw_only(),
           nb::arg("need_dx") = true, nb::arg("need_weight_grads") = true,
           nb::arg("accumulate_into").none() = nb::none());
}

}  // namespace tessera::python
