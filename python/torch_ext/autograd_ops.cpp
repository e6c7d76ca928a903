// torch.ops.tessera.linear / mlp: the grouped linear and grouped MLP steps as C++ autograd nodes
// over the step's ops (step_ops.cpp: linear_fwd / linear_bwd, mlp_fwd / mlp_bwd), so that an
// eager step runs no Python between the layer's forward and the optimizer: the node's forward
// calls the forward op, the autograd engine calls the node's backward, which calls the backward
// op. What the nodes save and pass is what tessera.torch's Python autograd functions (linear.py,
// mlp.py; used under torch.compile, whose graphs those trace) save and pass.
//
// PyTorch's stable ABI has no autograd, so this module alone is built with PyTorch's C++ API
// against the installed torch; tessera.torch loads it only into that torch version (the version
// file beside it) and otherwise runs the Python functions. Errors of the backward op and the
// refusal of create_graph=True are raised through torch.ops.tessera.step_error, an op that
// tessera.torch implements in Python, so that they reach the caller of backward() as the same
// tessera.Error subclasses as the Python functions raise.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>

namespace tessera::torch_ext {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptTensor = std::optional<Tensor>;
using Stack = std::vector<c10::IValue>;

c10::OperatorHandle tessera_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

// The op's outputs for `args`, called boxed (the step's ops are boxed kernels of the stable ABI).
Stack call(const c10::OperatorHandle& op, Stack args) {
  op.callBoxed(&args);
  return args;
}

c10::IValue opt(const OptTensor& t) { return t ? c10::IValue(*t) : c10::IValue(); }
c10::IValue opt(const Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); }
c10::IValue dtype_value(int64_t code) { return c10::IValue(static_cast<at::ScalarType>(code)); }
int64_t dtype_code(at::ScalarType t) { return static_cast<int64_t>(t); }

// Raises the error of a backward in Python (torch.ops.tessera.step_error): `message` the text of
// a step op's error ("[tessera:<status>] ..."), or empty for the refusal of create_graph=True.
[[noreturn]] void step_error(const std::string& layer, const std::string& message) {
  static const c10::OperatorHandle op = tessera_op("tessera::step_error");
  call(op, {c10::IValue(layer), c10::IValue(message)});
  TORCH_CHECK(false, "tessera.step_error returned for ", layer, ": ", message);
}

// Runs a backward op call, its tessera errors ("[tessera:<status>] ...") raised as step_error
// does; other errors pass unchanged.
template <class F>
Stack backward_call(const std::string& layer, F&& body) {
  const auto tessera_text = [](const char* text) {
    return std::string_view(text).find("[tessera:") != std::string_view::npos;
  };
  try {
    return body();
  } catch (const c10::Error& e) {
    if (!tessera_text(e.what_without_backtrace())) throw;
    step_error(layer, e.what_without_backtrace());
  } catch (const std::exception& e) {  // the stable ABI's kernels' errors, rethrown
    if (!tessera_text(e.what())) throw;
    step_error(layer, e.what());
  }
}

// Which of `inputs` require grad, bit i for input i: the gradients a backward computes, fixed
// at the forward as the Python functions' ctx.needs_input_grad (so that a backward asked for some
// inputs only still adds to a main grad, as the Python functions and TransformerEngine do).
int64_t grad_mask(std::initializer_list<const Tensor*> inputs) {
  int64_t mask = 0, bit = 1;
  for (const Tensor* t : inputs) {
    if (t != nullptr && t->defined() && t->requires_grad()) mask |= bit;
    bit <<= 1;
  }
  return mask;
}

// ---- grouped linear ---------------------------------------------------------------------------

struct LinearNode : torch::autograd::Function<LinearNode> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight,
                               const Tensor& offs, const OptTensor& bias, const OptTensor& wcache,
                               const std::string& recipe, const std::string& name,
                               const OptTensor& scale, const OptTensor& history,
                               const OptTensor& main_grad, bool save) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const c10::OperatorHandle fwd = tessera_op("tessera::linear_fwd");
    const bool requantize = !wcache.has_value();
    Stack out = call(fwd, {x, weight, offs, opt(bias), opt(wcache), requantize, recipe, name,
                           opt(scale), opt(history), save});
    Tensor y = out[0].toTensor(), saved = out[1].toTensor(), made = out[2].toTensor();
    // The wgrad reads the step's saved copy of x, or (dense recipes: none saved) x itself.
    const Tensor dense_x = saved.numel() == 0 && save ? x : Tensor();
    ctx->save_for_backward({offs, dense_x, weight, requantize ? made : *wcache, saved,
                            scale.value_or(Tensor()), history.value_or(Tensor()),
                            main_grad.value_or(Tensor())});
    ctx->saved_data["recipe"] = recipe;
    ctx->saved_data["name"] = name;
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->saved_data["needs"] = grad_mask({&x, &weight, bias ? &*bias : nullptr});
    ctx->saved_data["dtypes"] = std::vector<int64_t>{
        dtype_code(x.scalar_type()), dtype_code(weight.scalar_type()),
        dtype_code(bias ? bias->scalar_type() : x.scalar_type())};
    ctx->mark_non_differentiable({made});
    ctx->set_materialize_grads(false);  // no zero tensor for the copies' (unused) gradient
    return {y, made};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (at::GradMode::is_enabled()) step_error("grouped_linear", "");
    variable_list result(11);  // one per forward argument; undefined: no gradient
    if (!grads[0].defined()) return result;  // y took no part in the loss
    const variable_list s = ctx->get_saved_variables();
    const Tensor &offs = s[0], &x = s[1], &weight = s[2], &copies = s[3], &saved = s[4];
    const Tensor &scale = s[5], &history = s[6], &main_grad = s[7];
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const std::vector<int64_t> dt = ctx->saved_data["dtypes"].toIntVector();
    const int64_t needs = ctx->saved_data["needs"].toInt();
    const bool need_dx = needs & 1, need_dw = needs & 2, need_db = has_bias && (needs & 4);
    const Tensor dy = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    at::AutoDispatchBelowADInplaceOrView below;
    static const c10::OperatorHandle bwd = tessera_op("tessera::linear_bwd");
    Stack out = backward_call("grouped_linear", [&] {
      return call(bwd, {dy, offs, opt(x), weight, copies.numel() ? opt(copies) : c10::IValue(),
                        saved, ctx->saved_data["recipe"], ctx->saved_data["name"], has_bias,
                        opt(scale), opt(history), opt(main_grad), need_dx, need_dw, need_db,
                        dtype_value(dt[0]), dtype_value(dt[1]), dtype_value(dt[2])});
    });
    if (need_dx) result[0] = out[0].toTensor();
    if (need_dw && !main_grad.defined()) result[1] = out[1].toTensor();
    if (need_db) result[3] = out[2].toTensor();
    return result;
  }
};

std::tuple<Tensor, Tensor> linear(const Tensor& x, const Tensor& weight, const Tensor& offs,
                                  const OptTensor& bias, const OptTensor& wcache,
                                  c10::string_view recipe, c10::string_view name,
                                  const OptTensor& scale, const OptTensor& history,
                                  const OptTensor& main_grad) {
  const bool save = at::GradMode::is_enabled() && weight.requires_grad();
  variable_list out = LinearNode::apply(x, weight, offs, bias, wcache, std::string(recipe),
                                        std::string(name), scale, history, main_grad, save);
  return {out[0], out[1]};
}

// ---- grouped MLP --------------------------------------------------------------------------------

struct MlpNode : torch::autograd::Function<MlpNode> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& w1,
                               const Tensor& w2, const Tensor& offs, const OptTensor& probs,
                               const OptTensor& b1, const OptTensor& b2, const OptTensor& wc1,
                               const OptTensor& wc2, const std::string& spec1,
                               const std::string& spec2, const std::string& prefix,
                               const OptTensor& ds1, const OptTensor& ah1, const OptTensor& ds2,
                               const OptTensor& ah2, const OptTensor& mg1, const OptTensor& mg2,
                               bool need_wgrad, const OptTensor& x_codes,
                               const OptTensor& x_scale_inv) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const c10::OperatorHandle fwd = tessera_op("tessera::mlp_fwd");
    const bool requantize = !wc1.has_value();
    Stack out = call(fwd, {x, w1, w2, offs, opt(probs), opt(b1), opt(b2), opt(wc1), opt(wc2),
                           requantize, spec1, spec2, prefix, opt(ds1), opt(ah1), opt(ds2),
                           opt(ah2), need_wgrad, opt(x_codes), opt(x_scale_inv)});
    Tensor y = out[0].toTensor(), s1 = out[1].toTensor(), h = out[2].toTensor();
    Tensor s2 = out[3].toTensor(), a = out[4].toTensor();
    Tensor made1 = out[5].toTensor(), made2 = out[6].toTensor();
    // fc1's weight gradient reads x itself where the step saved no copy of it (dense recipes).
    const Tensor dense_x = s1.numel() == 0 && need_wgrad ? x : Tensor();
    const auto value = [](const OptTensor& t) { return t.value_or(Tensor()); };
    ctx->save_for_backward({offs, dense_x, value(probs), w1, w2, requantize ? made1 : *wc1,
                            requantize ? made2 : *wc2, s1, h, s2, a, value(ds1), value(ah1),
                            value(ds2), value(ah2), value(mg1), value(mg2)});
    ctx->saved_data["recipe1"] = spec1;
    ctx->saved_data["recipe2"] = spec2;
    ctx->saved_data["prefix"] = prefix;
    ctx->saved_data["has_bias"] = b1.has_value();
    ctx->saved_data["needs"] = grad_mask({&x, &w1, &w2, probs ? &*probs : nullptr,
                                          b1 ? &*b1 : nullptr, b2 ? &*b2 : nullptr});
    ctx->saved_data["dtypes"] = std::vector<int64_t>{
        dtype_code(w1.scalar_type()), dtype_code(b1 ? b1->scalar_type() : w1.scalar_type()),
        dtype_code(probs ? probs->scalar_type() : at::kFloat)};
    ctx->mark_non_differentiable({made1, made2});
    ctx->set_materialize_grads(false);
    return {y, made1, made2};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (at::GradMode::is_enabled()) step_error("GroupedMLP", "");
    variable_list result(21);  // one per forward argument
    if (!grads[0].defined()) return result;
    const variable_list s = ctx->get_saved_variables();
    const Tensor &offs = s[0], &x = s[1], &probs = s[2], &w1 = s[3], &w2 = s[4];
    const Tensor &c1 = s[5], &c2 = s[6];
    const Tensor &mg1 = s[15], &mg2 = s[16];
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const std::vector<int64_t> dt = ctx->saved_data["dtypes"].toIntVector();
    const int64_t needs = ctx->saved_data["needs"].toInt();  // x, w1, w2, probs, b1, b2
    const bool need_dx = needs & 1, need_w1 = needs & 2, need_w2 = needs & 4;
    const bool need_dprobs = needs & 8, need_db = has_bias && (needs & 48);
    const Tensor dy = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    at::AutoDispatchBelowADInplaceOrView below;
    static const c10::OperatorHandle bwd = tessera_op("tessera::mlp_bwd");
    Stack out = backward_call("GroupedMLP", [&] {
      return call(bwd, {dy, offs, opt(x), opt(probs), w1, w2, c1.numel() ? opt(c1) : c10::IValue(),
                        c2.numel() ? opt(c2) : c10::IValue(), s[7], s[8], s[9], s[10],
                        ctx->saved_data["recipe1"], ctx->saved_data["recipe2"],
                        ctx->saved_data["prefix"], has_bias, opt(s[11]),
                        opt(s[12]), opt(s[13]), opt(s[14]), opt(mg1), opt(mg2), need_dx,
                        need_dprobs, need_w1 || need_w2, need_db, dtype_value(dt[0]),
                        dtype_value(dt[1]), dtype_value(dt[2]), c10::IValue(), c10::IValue()});
    });
    const bool accumulate = mg1.defined();
    if (need_dx) result[0] = out[0].toTensor();
    if (need_w1 && !accumulate) result[1] = out[2].toTensor();
    if (need_w2 && !accumulate) result[2] = out[4].toTensor();
    if (need_dprobs) result[4] = out[1].toTensor();
    if (need_db) {
      result[5] = out[3].toTensor();
      result[6] = out[5].toTensor();
    }
    return result;
  }
};

std::tuple<Tensor, Tensor, Tensor> mlp(const Tensor& x, const Tensor& w1, const Tensor& w2,
                                       const Tensor& offs, const OptTensor& probs,
                                       const OptTensor& b1, const OptTensor& b2,
                                       const OptTensor& wc1, const OptTensor& wc2,
                                       c10::string_view spec1, c10::string_view spec2,
                                       c10::string_view prefix, const OptTensor& ds1,
                                       const OptTensor& ah1, const OptTensor& ds2,
                                       const OptTensor& ah2, const OptTensor& mg1,
                                       const OptTensor& mg2, const OptTensor& x_codes,
                                       const OptTensor& x_scale_inv) {
  const bool need_wgrad =
      at::GradMode::is_enabled() && (w1.requires_grad() || w2.requires_grad());
  variable_list out =
      MlpNode::apply(x, w1, w2, offs, probs, b1, b2, wc1, wc2, std::string(spec1),
                     std::string(spec2), std::string(prefix), ds1, ah1, ds2, ah2, mg1, mg2,
                     need_wgrad, x_codes, x_scale_inv);
  return {out[0], out[1], out[2]};
}

}  // namespace

// wcache / wc1 / wc2: the weight copies to read, or None to make them now (then the second
// output(s), for the caller's cache; (0,) when none were made). main_grad(s) are added to by the
// backward (weight.grad then stays untouched); the delayed state is updated by both directions.
TORCH_LIBRARY_FRAGMENT(tessera, m) {
  m.def("linear(Tensor x, Tensor weight, Tensor offs, Tensor? bias, Tensor? wcache, str recipe, "
        "str name, Tensor(a!)? delayed_scale, Tensor(b!)? amax_history, Tensor? main_grad) "
        "-> (Tensor, Tensor)");
  m.def("mlp(Tensor x, Tensor w1, Tensor w2, Tensor offs, Tensor? probs, Tensor? b1, "
        "Tensor? b2, Tensor? wc1, Tensor? wc2, str recipe1, str recipe2, str prefix, "
        "Tensor(a!)? ds1, Tensor(b!)? ah1, Tensor(c!)? ds2, Tensor(d!)? ah2, Tensor? mg1, "
        "Tensor? mg2, Tensor? x_codes=None, Tensor? x_scale_inv=None) "
        "-> (Tensor, Tensor, Tensor)");
  // Implemented in Python (tessera/torch/_ext.py): raises the tessera.Error of `message`
  // ("[tessera:<status>] ..."), or, for an empty one, the refusal of create_graph=True.
  m.def("step_error(str layer, str message) -> ()");
}

TORCH_LIBRARY_IMPL(tessera, Autograd, m) {
  m.impl("linear", &linear);
  m.impl("mlp", &mlp);
}

// Tensors without autograd keys (inference mode) reach the same kernels here: with grad mode
// off, Function::apply records no node and the forward saves nothing.
TORCH_LIBRARY_IMPL(tessera, CompositeExplicitAutograd, m) {
  m.impl("linear", &linear);
  m.impl("mlp", &mlp);
}

}  // namespace tessera::torch_ext
