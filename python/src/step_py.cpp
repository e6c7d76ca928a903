// What tessera.torch reads of the training step without running it (the step itself runs in the
// PyTorch ops, python/torch_ext): the byte sizes of the tensors its ops return, for their fake
// (meta) implementations under torch.compile, and the check of a recipe text.
//   _linear_step_sizes(recipe, name, groups, in, out, bias, weight_dtype)
//       -> (saved_per_row, saved_fixed, weight_copies_bytes, wgrad_align)
//   _mlp_step_sizes(recipe1, recipe2, prefix, groups, hidden, ffn, bias, weight_dtype, activation_dtype,
//                   need_wgrad) -> ((per_row, fixed) of saved fc1, h, saved fc2, a;
//                                   weight copies bytes of fc1, fc2)
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "bindings.h"
#include "tessera/nn/linear_step.h"
#include "tessera/nn/mlp_step.h"

namespace tessera::python {
namespace {

using Size = std::pair<int64_t, int64_t>;

Size size_of(const nn::SavedSize& s) { return {s.per_row, s.fixed}; }

std::tuple<int64_t, int64_t, int64_t, int64_t> linear_step_sizes(const std::string& recipe,
                                                        const std::string& name, int64_t groups,
                                                        int64_t in, int64_t out, bool bias,
                                                        const std::string& weight_dtype) {
  const DType wdt = parse_dtype(weight_dtype);
  const nn::LinearSpec s = nn::make_linear_spec(parse_recipe_spec(recipe), name, groups, in, out,
                                                bias, nn::dense_dtype_of_weight(wdt));
  const nn::SavedSize z = nn::saved_size(s, true);
  return {z.per_row, z.fixed, nn::weight_copies_bytes(s, wdt), s.wgrad_align};
}

std::tuple<Size, Size, Size, Size, int64_t, int64_t> mlp_step_sizes(
    const std::string& recipe1, const std::string& recipe2, const std::string& prefix, int64_t groups, int64_t hidden,
    int64_t ffn, bool bias, const std::string& weight_dtype, const std::string& activation,
    bool need_wgrad) {
  const DType wdt = parse_dtype(weight_dtype);
  const nn::MlpSpec s =
      nn::make_mlp_spec(parse_recipe_spec(recipe1), parse_recipe_spec(recipe2), prefix, groups,
                        hidden, ffn, bias, nn::dense_dtype_of_weight(wdt));
  const nn::MlpSavedSizes z = nn::mlp_saved_sizes(s, parse_dtype(activation), need_wgrad);
  return {size_of(z.fc1), size_of(z.h), size_of(z.fc2), size_of(z.a),
          nn::weight_copies_bytes(s.fc1, wdt), nn::weight_copies_bytes(s.fc2, wdt)};
}

}  // namespace

void register_step(nb::module_& m) {
  m.def("_linear_step_sizes", &linear_step_sizes, nb::arg("recipe"), nb::arg("name"),
        nb::arg("groups"), nb::arg("in_features"), nb::arg("out_features"), nb::arg("bias"),
        nb::arg("weight_dtype"),
        "(saved bytes per row, saved fixed bytes, weight copies bytes, wgrad alignment) of a "
        "linear step: the sizes of the uint8 tensors torch.ops.tessera.linear_fwd returns, and "
        "the rows every group of the wgrad's columnwise copies starts on.");
  m.def("_mlp_step_sizes", &mlp_step_sizes, nb::arg("recipe1"), nb::arg("recipe2"),
        nb::arg("prefix"),
        nb::arg("groups"), nb::arg("hidden"), nb::arg("ffn"), nb::arg("bias"),
        nb::arg("weight_dtype"), nb::arg("activation_dtype"), nb::arg("need_wgrad"),
        "((per_row, fixed) of the saved fc1, h, saved fc2 and a tensors, fc1 and fc2 weight "
        "copies bytes) of an MLP step: what torch.ops.tessera.mlp_fwd returns.");
  m.def(
      "_check_recipe_spec",
      [](const std::string& spec, const std::string& name) {
        // A linear layer of one group: resolves every role (custom configs included) and checks
        // that the step can pair them.
        nn::make_linear_spec(parse_recipe_spec(spec), name, 1, 32, 32, false);
      },
      nb::arg("spec"), nb::arg("name") = "",
      "Raises a tessera.Error naming the problem when the recipe text cannot run as a step.");
}

}  // namespace tessera::python
