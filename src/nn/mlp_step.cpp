// The grouped MLP training step (mlp_step.h): fc1 → SwiGLU (× probs) → fc2 over the linear step.
#include "tessera/nn/mlp_step.h"

#include "nn/row_ops.h"
#include "nn/step_memory.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"

namespace tessera::nn {

using detail::matrix;

namespace {

SavedSize dense_rows(int64_t cols, DType dtype) {
  return {dtype_bytes(dtype, cols), 0};
}

// probs (T) as float32: the caller's view, or a cast into `tmp`.
TensorView float_probs(const TensorView& probs, detail::StepArena& tmp, Stream stream) {
  if (probs.data == nullptr || probs.dtype == DType::kFloat32) return probs;
  TensorView f = TensorView::contiguous(tmp.take(probs.numel() * 4), DType::kFloat32,
                                        {probs.numel()}, probs.device);
  detail::cast(probs, f, stream);
  return f;
}

void check_probs(const TensorView& p, const char* arg, int64_t rows) {
  if (p.data == nullptr) return;
  check_view(p, arg, {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  TESSERA_CHECK_STATUS(p.numel() == rows, Status::kShapeMismatch, arg, ": expected (", rows,
                       "), got ", p.to_string());
}

}  // namespace

MlpSpec make_mlp_spec(const Recipe& recipe, const std::string& prefix, int64_t groups,
                      int64_t hidden, int64_t ffn, bool bias, std::optional<DType> dense_dtype) {
  return make_mlp_spec(recipe, recipe, prefix, groups, hidden, ffn, bias, dense_dtype);
}

MlpSpec make_mlp_spec(const Recipe& fc1_recipe, const Recipe& fc2_recipe,
                      const std::string& prefix, int64_t groups, int64_t hidden, int64_t ffn,
                      bool bias, std::optional<DType> dense_dtype) {
  TESSERA_CHECK(hidden >= 1 && ffn >= 1, "hidden ", hidden, " and ffn ", ffn, " must be >= 1");
  TESSERA_CHECK(fc1_recipe.quantized() == fc2_recipe.quantized(), "fc1's recipe (",
                echo(fc1_recipe.name), ") and fc2's (", echo(fc2_recipe.name),
                ") must both quantize or both not");
  MlpSpec s;
  s.fc1 = make_linear_spec(fc1_recipe, prefix + "fc1", groups, hidden,
                           checked_mul(2, ffn, "2 * ffn"), bias, dense_dtype);
  s.fc2 = make_linear_spec(fc2_recipe, prefix + "fc2", groups, ffn, hidden, bias, dense_dtype);
  return s;
}

MlpSavedSizes mlp_saved_sizes(const MlpSpec& s, DType activation, bool need_wgrad) {
  MlpSavedSizes z;
  z.fc1 = saved_size(s.fc1, need_wgrad);
  z.fc2 = saved_size(s.fc2, need_wgrad);
  z.h = dense_rows(2 * s.ffn(), activation);
  if (need_wgrad && !s.fc2.quantized()) z.a = dense_rows(s.ffn(), activation);
  return z;
}

MlpSaved view_mlp_saved(const MlpSpec& s, int64_t rows, DType activation, bool need_wgrad,
                        const Allocation& fc1, const Allocation& h, const Allocation& fc2,
                        const Allocation& a) {
  const MlpSavedSizes z = mlp_saved_sizes(s, activation, need_wgrad);
  for (const auto& [m, size, name] : {std::tuple{&h, z.h, "h"}, std::tuple{&a, z.a, "a"}}) {
    TESSERA_CHECK_STATUS(m->bytes >= size.at(rows), Status::kBufferTooSmall, "saved ", name, ": ",
                         m->bytes, " bytes, ", size.at(rows), " needed for ", rows, " rows");
  }
  MlpSaved saved;
  saved.rows = rows;
  saved.fc1 = view_linear_saved(s.fc1, rows, need_wgrad, fc1);
  saved.fc2 = view_linear_saved(s.fc2, rows, need_wgrad, fc2);
  saved.h = h;
  saved.a = a;
  saved.h_view = matrix(h.data, activation, rows, 2 * s.ffn(), h.device);
  if (z.a.per_row > 0) saved.a_view = matrix(a.data, activation, rows, s.ffn(), a.device);
  return saved;
}

MlpSaved mlp_forward(const MlpSpec& s, const MlpWeights& w, const MlpForwardArgs& args,
                     const MlpState& state, Allocator& alloc, Stream stream) {
  // x, or its rowwise copy (fc1's x_rowwise: linear_forward checks it); the activations then
  // take y's dtype.
  const bool given_q = x_rowwise_given(args.x, args.x_rowwise);
  if (given_q) {
    check_view(args.y, "y", {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  } else {
    check_view(args.x, "x", {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
    TESSERA_CHECK_STATUS(args.x.ndim == 2 && args.x.shape[1] == s.hidden(),
                         Status::kShapeMismatch, "x: expected (T, ", s.hidden(), "), got ",
                         args.x.to_string());
  }
  const int64_t t = given_q ? args.x_rowwise.rows : args.x.shape[0];
  const DType act = given_q ? args.y.dtype : args.x.dtype;
  const Device dev = given_q ? args.x_rowwise.device : args.x.device;
  check_probs(args.probs, "probs", t);
  TESSERA_CHECK_STATUS(args.y.data == nullptr || args.y.dtype == act, Status::kDTypeMismatch,
                       "y: expected x's dtype ", dtype_name(act), ", got ",
                       dtype_name(args.y.dtype));
  const MlpSavedSizes z = mlp_saved_sizes(s, act, args.need_wgrad);
  Allocation h = alloc.allocate(z.h.at(t), dev, stream);
  Allocation a = alloc.allocate(z.a.at(t), dev, stream);
  MlpSaved saved;
  saved.rows = t;
  saved.h = h;
  saved.a = a;
  saved.h_view = matrix(h.data, act, t, 2 * s.ffn(), dev);
  // Scratch (taken only when something is carved from it): fc2's input when it is not kept, a
  // float32 copy of probs.
  detail::StepArena tmp(
      alloc, (z.a.per_row > 0 ? 0 : dtype_bytes(act, t * s.ffn())) + t * 4 + 512, dev, stream);
  saved.a_view = matrix(z.a.per_row > 0 ? a.data : tmp.take(dtype_bytes(act, t * s.ffn())), act,
                        t, s.ffn(), dev);

  LinearForwardArgs f1{args.x,       args.offsets,     args.offsets_format, args.fc1_bias,
                       saved.h_view, args.need_wgrad, args.x_rowwise};
  saved.fc1 = linear_forward(s.fc1, w.fc1, f1, state.fc1, alloc, stream);
  const detail::GroupOffsets groups =
      detail::group_offsets_of(args.offsets, args.offsets_format, s.groups(), t);
  detail::swiglu_forward(saved.h_view, float_probs(args.probs, tmp, stream), groups,
                         saved.a_view, stream);
  LinearForwardArgs f2{saved.a_view, args.offsets, args.offsets_format, args.fc2_bias, args.y,
                       args.need_wgrad, {}};
  saved.fc2 = linear_forward(s.fc2, w.fc2, f2, state.fc2, alloc, stream);
  if (z.a.per_row == 0) saved.a_view = TensorView{};  // scratch: not kept
  return saved;
}

void mlp_backward(const MlpSpec& s, const MlpWeights& w, const MlpSaved& saved,
                  const MlpBackwardArgs& args, const MlpState& state, Allocator& alloc,
                  Stream stream) {
  const int64_t t = saved.rows;
  const DType act = saved.h_view.dtype;
  const Device dev =
      dy_rowwise_given(args.dy, args.dy_rowwise) ? args.dy_rowwise.device : args.dy.device;
  check_probs(args.probs, "probs", t);
  check_probs(args.dprobs, "dprobs", t);
  TESSERA_CHECK(args.dprobs.data == nullptr || args.probs.data != nullptr,
                "dprobs: asked for, but no probs were given (the forward's probs are needed)");
  const bool need_w = args.fc1_dw.data || args.fc2_dw.data;
  TESSERA_CHECK(!need_w || s.fc2.quantized() || saved.a_view.data || t == 0,
                "fc2 weight gradient: the forward did not save fc2's input (need_wgrad)");
  detail::StepArena tmp(
      alloc, dtype_bytes(act, t * s.ffn()) + dtype_bytes(act, t * 2 * s.ffn()) + 3 * t * 4 + 1024,
      dev, stream);
  const TensorView da = matrix(tmp.take(dtype_bytes(act, t * s.ffn())), act, t, s.ffn(), dev);
  LinearBackwardArgs b2{args.dy,     args.offsets, args.offsets_format, saved.a_view,
                        da,          args.fc2_dw,  args.fc2_db,         args.accumulate,
                        args.accumulate_bias, nullptr, args.dy_rowwise};
  linear_backward(s.fc2, w.fc2, saved.fc2, b2, state.fc2, alloc, stream);

  const TensorView dh = matrix(tmp.take(dtype_bytes(act, t * 2 * s.ffn())), act, t, 2 * s.ffn(),
                               dev);
  TensorView dprobs = args.dprobs;
  if (dprobs.data && dprobs.dtype != DType::kFloat32) {
    dprobs = TensorView::contiguous(tmp.take(t * 4), DType::kFloat32, {t}, dev);
  }
  if (t > 0) {
    const detail::GroupOffsets groups =
        detail::group_offsets_of(args.offsets, args.offsets_format, s.groups(), t);
    detail::swiglu_backward(saved.h_view, float_probs(args.probs, tmp, stream), da, groups,
                            dh, dprobs, stream);
    if (dprobs.data != args.dprobs.data) detail::cast(dprobs, args.dprobs, stream);
  }
  LinearBackwardArgs b1{dh,          args.offsets, args.offsets_format, args.x,
                        args.dx,     args.fc1_dw,  args.fc1_db,         args.accumulate,
                        args.accumulate_bias, nullptr, {}};
  linear_backward(s.fc1, w.fc1, saved.fc1, b1, state.fc1, alloc, stream);
}

}  // namespace tessera::nn
