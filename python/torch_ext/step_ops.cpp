// torch.ops.tessera.linear_fwd / linear_bwd / mlp_fwd / mlp_bwd: the training step of
// tessera.torch's GroupedLinear / GroupedMLP, one call per direction (PyTorch's stable ABI).
// Each converts its tensors once, runs the C++ step (tessera/nn/linear_step.h, mlp_step.h) on
// torch's current stream with torch's allocator, and returns what the autograd function keeps:
// saved contexts and weight copies as uint8 tensors whose layout the step defines.
#include "step_common.h"

#include "tessera/core/status.h"

namespace tessera::torch_ext {
namespace {

namespace sh = torch::headeronly;

using LinearOut = std::tuple<Tensor, Tensor, Tensor>;

// y, saved, new weight copies ((0,) when not re-made).
LinearOut linear_fwd(Tensor x, Tensor weight, Tensor offs, OptTensor bias, OptTensor wcache,
                     bool requantize, std::string recipe, std::string name,
                     OptTensor delayed_scale, OptTensor amax_history, bool save) {
  return guarded([&]() -> LinearOut {
    const CallScope scope(x);
    const TensorView xv = view_of(x, "x");
    check_view(xv, "x", {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
    TESSERA_CHECK_STATUS(xv.ndim == 2 && weight.dim() == 3 && weight.size(2) == xv.shape[1],
                         Status::kShapeMismatch, "x (T, in) and weight (G, out, in): got ",
                         xv.to_string(), " and ", view_of(weight, "weight").to_string());
    const int64_t g = weight.size(0), out = weight.size(1), in = weight.size(2);
    const nn::LinearSpec& spec = linear_spec(recipe, name, g, in, out, bias.has_value(),
                                             dtype_of(weight, "weight"));
    TorchAllocator alloc;
    const nn::LinearState state = linear_state(delayed_scale, amax_history);
    Tensor made = empty_like_none(scope.device());
    const nn::WeightCopies w = weight_copies(spec, weight, wcache, requantize, state, alloc,
                                             scope.stream(), &made);
    Tensor y = new_tensor({xv.shape[0], out}, xv.dtype, scope.device());
    nn::LinearForwardArgs a{xv,  offsets_view(offs, g), GroupOffsetsFormat::kEndOffsets,
                            view_of(bias, "bias"), view_of(y, "y"), save, {}};
    const nn::LinearSaved saved = nn::linear_forward(spec, w, a, state, alloc, scope.stream());
    return {y, tensor_of(saved.storage, scope.device()), made};
  });
}

// dx, dw, db ((0,) for those not asked for; dw also when main_grad took it).
LinearOut linear_bwd(Tensor dy, Tensor offs, OptTensor x, Tensor weight, OptTensor wcache,
                     Tensor saved, std::string recipe, std::string name, bool has_bias,
                     OptTensor delayed_scale, OptTensor amax_history, OptTensor main_grad,
                     bool need_dx, bool need_dw, bool need_db, sh::ScalarType dx_dtype,
                     sh::ScalarType dw_dtype, sh::ScalarType db_dtype) {
  return guarded([&]() -> LinearOut {
    const CallScope scope(dy);
    const Device dev = scope.device();
    const TensorView dyv = view_of(dy, "dy");
    const int64_t g = weight.size(0), out = weight.size(1), in = weight.size(2);
    const int64_t t = dyv.shape[0];
    const nn::LinearSpec& spec =
        linear_spec(recipe, name, g, in, out, has_bias, dtype_of(weight, "weight"));
    TorchAllocator alloc;
    const nn::LinearState state = linear_state(delayed_scale, amax_history);
    const nn::WeightCopies w =
        weight_copies(spec, weight, wcache, false, state, alloc, scope.stream(), nullptr);
    const nn::LinearSaved sv = nn::view_linear_saved(spec, t, spec.quantized() && saved.numel() > 0,
                                                     allocation_of(saved));
    Tensor dx = need_dx ? new_tensor({t, in}, dtype_arg(dx_dtype, "dx_dtype"), dev)
                        : empty_like_none(dev);
    const bool accumulate = main_grad.has_value();
    Tensor dw = need_dw && !accumulate ? new_tensor({g, out, in}, dtype_arg(dw_dtype, "dw_dtype"), dev)
                                       : empty_like_none(dev);
    Tensor db = need_db ? new_tensor({g, out}, dtype_arg(db_dtype, "db_dtype"), dev)
                        : empty_like_none(dev);
    nn::LinearBackwardArgs a;
    a.dy = dyv;
    a.offsets = offsets_view(offs, g);
    a.x = view_of(x, "x");
    a.dx = need_dx ? view_of(dx, "dx") : TensorView{};
    a.dw = !need_dw ? TensorView{} : accumulate ? view_of(*main_grad, "main_grad") : view_of(dw, "dw");
    a.db = need_db ? view_of(db, "db") : TensorView{};
    a.accumulate = accumulate;
    nn::linear_backward(spec, w, sv, a, state, alloc, scope.stream());
    return {dx, dw, db};
  });
}

// A tensor's rowwise copy given as codes (uint8 or the element's float8 dtype, (t, cols),
// contiguous) and their compact scales (scale_shape's shape; E8M0 as uint8 or
// float8_e8m0fnu), in the quantization `role` makes: LinearForwardArgs::x_rowwise (name "x")
// or LinearBackwardArgs::dy_rowwise ("dy"); the arguments are <name>_codes, <name>_scale_inv.
QuantizedTensorView rowwise_input(const nn::RoleFormat& role, const Tensor& codes,
                                  const Tensor& scale_inv, int64_t t, int64_t cols,
                                  const std::string& name = "x") {
  const std::string codes_arg = name + "_codes", scales_arg = name + "_scale_inv";
  TESSERA_CHECK_STATUS(role.quantized, Status::kDTypeMismatch, codes_arg,
                       ": the recipe does not quantize ", name, " (a dense step takes ", name,
                       " itself)");
  QuantizerConfig c = role.config;
  c.rowwise = true;
  c.columnwise = false;
  c.scale_layout = ScaleLayout::kCompact;
  TensorView d = view_of(codes, codes_arg.c_str());
  TESSERA_CHECK_STATUS(d.dtype == DType::kUInt8 || d.dtype == c.element, Status::kDTypeMismatch,
                       codes_arg, ": expected uint8 or ", dtype_name(c.element), " codes, got ",
                       dtype_name(d.dtype));
  TESSERA_CHECK_STATUS(d.ndim == 2 && d.shape[0] == t && d.shape[1] == cols && d.is_contiguous(),
                       Status::kShapeMismatch, codes_arg, ": expected contiguous (", t, ", ",
                       cols, "), got ", d.to_string());
  d.dtype = c.element;
  const MatrixShape ss = scale_shape(c, t, cols, false);
  TensorView sv = view_of(scale_inv, scales_arg.c_str());
  const bool e8m0 = ss.dtype == DType::kFloat8E8M0;
  TESSERA_CHECK_STATUS(sv.dtype == ss.dtype || (e8m0 && sv.dtype == DType::kUInt8),
                       Status::kDTypeMismatch, scales_arg, ": expected ", dtype_name(ss.dtype),
                       e8m0 ? " (or uint8)" : "", " scales, got ", dtype_name(sv.dtype));
  TESSERA_CHECK_STATUS(sv.numel() == ss.rows * ss.cols && sv.is_contiguous(),
                       Status::kShapeMismatch, scales_arg, ": expected ", ss.rows * ss.cols,
                       " contiguous scales (", ss.rows, " x ", ss.cols, " for ",
                       scaling_mode_name(c.mode), "), got ", sv.to_string());
  QuantizedTensorView q;
  q.config = c;
  q.rows = t;
  q.cols = cols;
  q.device = d.device;
  q.data = d;
  q.scale_inv = TensorView::contiguous(sv.data, ss.dtype, {ss.rows, ss.cols}, sv.device);
  return q;
}

using MlpFwdOut = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;

// y, saved fc1, h, saved fc2, a, new fc1 copies, new fc2 copies.
MlpFwdOut mlp_fwd(Tensor x, Tensor w1, Tensor w2, Tensor offs, OptTensor probs, OptTensor b1,
                  OptTensor b2, OptTensor wc1, OptTensor wc2, bool requantize, std::string recipe1,
                  std::string recipe2, std::string prefix, OptTensor ds1, OptTensor ah1, OptTensor ds2, OptTensor ah2,
                  bool need_wgrad, OptTensor x_codes, OptTensor x_scale_inv) {
  return guarded([&]() -> MlpFwdOut {
    const CallScope scope(x);
    const Device dev = scope.device();
    // With x_codes, x gives the activations' dtype and the shape only (its values are not read:
    // it may be an expanded tensor).
    TensorView xv = view_of(x, "x");
    TESSERA_CHECK(x_codes.has_value() == x_scale_inv.has_value(),
                  "x_codes and x_scale_inv: give both or neither");
    if (x_codes) {
      TESSERA_CHECK_STATUS(xv.dtype == DType::kFloat32 || xv.dtype == DType::kBFloat16 ||
                               xv.dtype == DType::kFloat16,
                           Status::kDTypeMismatch, "x: dtype ", dtype_name(xv.dtype),
                           " is not an activation dtype (float32, bfloat16 or float16)");
    } else {
      check_view(xv, "x", {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
    }
    TESSERA_CHECK_STATUS(xv.ndim == 2 && w1.dim() == 3 && w2.dim() == 3 &&
                             w1.size(2) == xv.shape[1] && w2.size(1) == xv.shape[1] &&
                             w1.size(1) == 2 * w2.size(2),
                         Status::kShapeMismatch,
                         "x (T, hidden), fc1 weight (G, 2·ffn, hidden), fc2 weight (G, hidden, "
                         "ffn): got ", xv.to_string(), ", ", view_of(w1, "w1").to_string(), ", ",
                         view_of(w2, "w2").to_string());
    const int64_t g = w1.size(0), hidden = w1.size(2), ffn = w2.size(2);
    const nn::MlpSpec& spec = mlp_spec(recipe1, recipe2, prefix, g, hidden, ffn, b1.has_value(),
                                       dtype_of(w1, "w1"));
    TorchAllocator alloc;
    const nn::MlpState state{linear_state(ds1, ah1), linear_state(ds2, ah2)};
    Tensor made1 = empty_like_none(dev), made2 = empty_like_none(dev);
    const nn::MlpWeights w{
        weight_copies(spec.fc1, w1, wc1, requantize, state.fc1, alloc, scope.stream(), &made1),
        weight_copies(spec.fc2, w2, wc2, requantize, state.fc2, alloc, scope.stream(), &made2)};
    Tensor y = new_tensor({xv.shape[0], hidden}, xv.dtype, dev);
    nn::MlpForwardArgs a{xv,
                         offsets_view(offs, g),
                         GroupOffsetsFormat::kEndOffsets,
                         view_of(probs, "probs"),
                         view_of(b1, "fc1 bias"),
                         view_of(b2, "fc2 bias"),
                         view_of(y, "y"),
                         need_wgrad,
                         {}};
    if (x_codes) {
      a.x = TensorView{};
      a.x_rowwise = rowwise_input(spec.fc1.input, *x_codes, *x_scale_inv, xv.shape[0], hidden);
    }
    const nn::MlpSaved s = nn::mlp_forward(spec, w, a, state, alloc, scope.stream());
    return {y,
            tensor_of(s.fc1.storage, dev),
            tensor_of(s.h, dev),
            tensor_of(s.fc2.storage, dev),
            tensor_of(s.a, dev),
            made1,
            made2};
  });
}

using MlpBwdOut = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;

// dx, dprobs, fc1 dw, fc1 db, fc2 dw, fc2 db ((0,) for those not asked for).
MlpBwdOut mlp_bwd(Tensor dy, Tensor offs, OptTensor x, OptTensor probs, Tensor w1, Tensor w2,
                  OptTensor wc1, OptTensor wc2, Tensor saved1, Tensor h, Tensor saved2, Tensor a,
                  std::string recipe1, std::string recipe2, std::string prefix, bool has_bias, OptTensor ds1,
                  OptTensor ah1, OptTensor ds2, OptTensor ah2, OptTensor mg1, OptTensor mg2,
                  bool need_dx, bool need_dprobs, bool need_dw, bool need_db,
                  sh::ScalarType w_dtype, sh::ScalarType b_dtype, sh::ScalarType p_dtype,
                  OptTensor dy_codes, OptTensor dy_scale_inv) {
  return guarded([&]() -> MlpBwdOut {
    // With dy_codes, dy gives the activations' dtype and the shape only (its values are not
    // read: an expanded tensor will do); fc2's backward reads the codes (dy_rowwise).
    TESSERA_CHECK(dy_codes.has_value() == dy_scale_inv.has_value(),
                  "dy_codes and dy_scale_inv: give both or neither");
    const CallScope scope(dy);
    const Device dev = scope.device();
    const TensorView dyv = view_of(dy, "dy");
    const int64_t g = w1.size(0), hidden = w1.size(2), ffn = w2.size(2);
    const int64_t t = dyv.shape[0];
    const nn::MlpSpec& spec =
        mlp_spec(recipe1, recipe2, prefix, g, hidden, ffn, has_bias, dtype_of(w1, "w1"));
    TorchAllocator alloc;
    const nn::MlpState state{linear_state(ds1, ah1), linear_state(ds2, ah2)};
    const nn::MlpWeights w{
        weight_copies(spec.fc1, w1, wc1, false, state.fc1, alloc, scope.stream(), nullptr),
        weight_copies(spec.fc2, w2, wc2, false, state.fc2, alloc, scope.stream(), nullptr)};
    // Whether the forward kept what weight gradients read: the copies (quantized) or a (dense).
    const bool saved_copies = spec.fc1.quantized() ? saved1.numel() > 0 : a.numel() > 0;
    const nn::MlpSaved sv =
        nn::view_mlp_saved(spec, t, dyv.dtype, saved_copies, allocation_of(saved1),
                           allocation_of(h), allocation_of(saved2), allocation_of(a));
    const bool accumulate = mg1.has_value() && mg2.has_value();
    const DType wdt = dtype_arg(w_dtype, "w_dtype"), bdt = dtype_arg(b_dtype, "b_dtype");
    const auto make = [&](bool need, std::initializer_list<int64_t> shape, DType dt) {
      return need ? new_tensor(shape, dt, dev) : empty_like_none(dev);
    };
    Tensor dx = make(need_dx, {t, hidden}, dyv.dtype);
    Tensor dprobs = make(need_dprobs, {t}, dtype_arg(p_dtype, "p_dtype"));
    Tensor dw1 = make(need_dw && !accumulate, {g, 2 * ffn, hidden}, wdt);
    Tensor dw2 = make(need_dw && !accumulate, {g, hidden, ffn}, wdt);
    Tensor db1 = make(need_db, {g, 2 * ffn}, bdt), db2 = make(need_db, {g, hidden}, bdt);
    const auto dw_view = [&](const Tensor& own, const OptTensor& mg, const char* arg) {
      if (!need_dw) return TensorView{};
      return accumulate ? view_of(*mg, arg) : view_of(own, arg);
    };
    nn::MlpBackwardArgs b;
    if (dy_codes) {
      b.dy_rowwise = rowwise_input(spec.fc2.grad_output, *dy_codes, *dy_scale_inv, t, hidden, "dy");
    } else {
      b.dy = dyv;
    }
    b.offsets = offsets_view(offs, g);
    b.x = view_of(x, "x");
    b.probs = view_of(probs, "probs");
    b.dx = need_dx ? view_of(dx, "dx") : TensorView{};
    b.dprobs = need_dprobs ? view_of(dprobs, "dprobs") : TensorView{};
    b.fc1_dw = dw_view(dw1, mg1, "fc1 main_grad");
    b.fc2_dw = dw_view(dw2, mg2, "fc2 main_grad");
    b.fc1_db = need_db ? view_of(db1, "fc1 db") : TensorView{};
    b.fc2_db = need_db ? view_of(db2, "fc2 db") : TensorView{};
    b.accumulate = accumulate;
    nn::mlp_backward(spec, w, sv, b, state, alloc, scope.stream());
    return {dx, dprobs, dw1, db1, dw2, db2};
  });
}

int64_t get_rng_offset() { return static_cast<int64_t>(nn::current_rng_offset()); }
void set_rng_offset(int64_t value) {
  guarded([&] {
    TESSERA_CHECK(value >= 0, "offset: ", value, " must be >= 0");
    nn::reset_rng_offset(static_cast<uint64_t>(value));
  });
}

}  // namespace

// Schemas: tensors the op writes in place are marked (a!) so that functionalization and
// torch.compile see the mutation (delayed-scaling state, main grads).
STABLE_TORCH_LIBRARY_FRAGMENT(tessera, m) {
  m.def("linear_fwd(Tensor x, Tensor weight, Tensor offs, Tensor? bias, Tensor? wcache, "
        "bool requantize, str recipe, str name, Tensor(a!)? delayed_scale, "
        "Tensor(b!)? amax_history, bool save) -> (Tensor, Tensor, Tensor)");
  m.def("linear_bwd(Tensor dy, Tensor offs, Tensor? x, Tensor weight, Tensor? wcache, "
        "Tensor saved, str recipe, str name, bool has_bias, Tensor(a!)? delayed_scale, "
        "Tensor(b!)? amax_history, Tensor(c!)? main_grad, bool need_dx, bool need_dw, "
        "bool need_db, ScalarType dx_dtype, ScalarType dw_dtype, ScalarType db_dtype) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("mlp_fwd(Tensor x, Tensor w1, Tensor w2, Tensor offs, Tensor? probs, Tensor? b1, "
        "Tensor? b2, Tensor? wc1, Tensor? wc2, bool requantize, str recipe1, str recipe2, "
        "str prefix, "
        "Tensor(a!)? ds1, Tensor(b!)? ah1, Tensor(c!)? ds2, Tensor(d!)? ah2, bool need_wgrad, "
        "Tensor? x_codes=None, Tensor? x_scale_inv=None) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("mlp_bwd(Tensor dy, Tensor offs, Tensor? x, Tensor? probs, Tensor w1, Tensor w2, "
        "Tensor? wc1, Tensor? wc2, Tensor saved1, Tensor h, Tensor saved2, Tensor a, str recipe1, "
        "str recipe2, str prefix, bool has_bias, Tensor(a!)? ds1, Tensor(b!)? ah1, Tensor(c!)? ds2, "
        "Tensor(d!)? ah2, Tensor(e!)? mg1, Tensor(f!)? mg2, bool need_dx, bool need_dprobs, "
        "bool need_dw, bool need_db, ScalarType w_dtype, ScalarType b_dtype, "
        "ScalarType p_dtype, Tensor? dy_codes=None, Tensor? dy_scale_inv=None) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("get_rng_offset() -> int");
  m.def("set_rng_offset(int offset) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(tessera, CompositeExplicitAutograd, m) {
  m.impl("linear_fwd", TORCH_BOX(&linear_fwd));
  m.impl("linear_bwd", TORCH_BOX(&linear_bwd));
  m.impl("mlp_fwd", TORCH_BOX(&mlp_fwd));
  m.impl("mlp_bwd", TORCH_BOX(&mlp_bwd));
  m.impl("get_rng_offset", TORCH_BOX(&get_rng_offset));
  m.impl("set_rng_offset", TORCH_BOX(&set_rng_offset));
}

}  // namespace tessera::torch_ext
