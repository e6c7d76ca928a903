// C API of the quantizers: opaque tessera_quantizer handles over tessera::Quantizer (checked live
// at every call, c_api_handle.h), caller-owned buffers described by tessera_quantized_buffers,
// every call behind the exception firewall.
#include <memory>
#include <string>

#include "c_api/c_api_args.h"
#include "c_api/c_api_guard.h"
#include "c_api/c_api_handle.h"
#include "tessera/c_api.h"
#include "tessera/core/checked_math.h"
#include "tessera/quantize/quantizer.h"
#include "tessera/quantize/recipe.h"

struct tessera_quantizer_s : tessera::c_api::Handle<tessera::Quantizer> {
  static constexpr uint64_t kMagic = tessera::c_api::magic_word("tsr:qntz");
  static constexpr const char* kTypeName = "tessera_quantizer";
};

namespace tessera::c_api {
namespace {

QuantizerConfig from_c(const tessera_quantizer_config& c) {
  TESSERA_CHECK(c.mode >= 0 && c.mode <= static_cast<int32_t>(ScalingMode::kNVFP4_16x16),
                "config.mode: value ", c.mode, " is not a tessera_scaling_mode");
  TESSERA_CHECK(c.element >= 0 && c.element < kNumDTypes, "config.element: value ", c.element,
                " is not a tessera_dtype");
  QuantizerConfig q;
  q.mode = static_cast<ScalingMode>(c.mode);
  q.element = static_cast<DType>(c.element);
  q.rowwise = flag_arg(c.rowwise, "config.rowwise");
  q.columnwise = flag_arg(c.columnwise, "config.columnwise");
  q.scale_layout = static_cast<ScaleLayout>(c.scale_layout);
  q.delayed = flag_arg(c.delayed, "config.delayed");
  q.amax_history_len = c.amax_history_len;
  q.amax_algo = static_cast<AmaxHistoryAlgo>(c.amax_algo);
  q.margin = c.margin;
  q.amax_epsilon = c.amax_epsilon;
  q.power_of_two_scales = flag_arg(c.power_of_two_scales, "config.power_of_two_scales");
  q.e8m0_rounding = static_cast<E8M0Rounding>(c.e8m0_rounding);
  q.random_hadamard = flag_arg(c.random_hadamard, "config.random_hadamard");
  q.stochastic_rounding = flag_arg(c.stochastic_rounding, "config.stochastic_rounding");
  q.rng_seed = c.rng_seed;
  q.rng_offset = c.rng_offset;
  validate_config(q);  // enum values out of range are reported here, before any use
  return q;
}

tessera_quantizer_config to_c(const QuantizerConfig& q) {
  tessera_quantizer_config c{};
  c.mode = static_cast<int32_t>(q.mode);
  c.element = static_cast<int32_t>(q.element);
  c.rowwise = q.rowwise;
  c.columnwise = q.columnwise;
  c.scale_layout = static_cast<int32_t>(q.scale_layout);
  c.delayed = q.delayed;
  c.amax_history_len = q.amax_history_len;
  c.amax_algo = static_cast<int32_t>(q.amax_algo);
  c.margin = q.margin;
  c.amax_epsilon = q.amax_epsilon;
  c.power_of_two_scales = q.power_of_two_scales;
  c.e8m0_rounding = static_cast<int32_t>(q.e8m0_rounding);
  c.random_hadamard = q.random_hadamard;
  c.stochastic_rounding = q.stochastic_rounding;
  c.rng_seed = q.rng_seed;
  c.rng_offset = q.rng_offset;
  return c;
}

Quantizer& quantizer_of(tessera_quantizer q) { return handle_object(q, "quantizer"); }

// A view of one caller buffer (`name`, its size `name`_bytes): the size must cover `want`.
TensorView buffer_view(void* p, int64_t bytes, const MatrixShape& want, Device dev, const char* name) {
  count_arg(bytes, (std::string(name) + "_bytes").c_str());
  TESSERA_CHECK_STATUS(bytes >= want.bytes(), Status::kBufferTooSmall, name, ": ", bytes,
                       " bytes given but (", want.rows, ", ", want.cols, ") ", dtype_name(want.dtype),
                       " needs ", want.bytes());
  const int64_t cols = want.dtype == DType::kFloat4E2M1 ? checked_round_up(want.cols, 2, name)
                                                        : want.cols;
  return TensorView::contiguous(p, want.dtype, {want.rows, cols}, dev);
}

QuantizedTensorView view_of(const Quantizer& q, const tessera_quantized_buffers* b, int64_t rows,
                            int64_t cols) {
  TESSERA_CHECK(b != nullptr, "buffers: NULL");
  const QuantizerConfig& c = q.config();
  const Device dev = q.device();
  QuantizedTensorView v;
  v.config = c;
  v.rows = rows;
  v.cols = cols;
  v.device = dev;
  if (b->data != nullptr) {
    v.data = buffer_view(b->data, b->data_bytes, data_shape(c, rows, cols, false), dev, "data");
    TESSERA_CHECK(b->scale_inv != nullptr, "scale_inv: NULL while data is given");
    v.scale_inv = buffer_view(b->scale_inv, b->scale_inv_bytes, scale_shape(c, rows, cols, false), dev, "scale_inv");
    if (b->amax != nullptr) v.amax = TensorView::contiguous(b->amax, DType::kFloat32, {1}, dev);
  }
  if (b->columnwise_data != nullptr) {
    v.columnwise_data = buffer_view(b->columnwise_data, b->columnwise_data_bytes,
                                    data_shape(c, rows, cols, true), dev, "columnwise_data");
    TESSERA_CHECK(b->columnwise_scale_inv != nullptr, "columnwise_scale_inv: NULL while columnwise_data is given");
    v.columnwise_scale_inv = buffer_view(b->columnwise_scale_inv, b->columnwise_scale_inv_bytes,
                                         scale_shape(c, rows, cols, true), dev, "columnwise_scale_inv");
    if (b->columnwise_amax != nullptr)
      v.columnwise_amax = TensorView::contiguous(b->columnwise_amax, DType::kFloat32, {1}, dev);
  }
  return v;
}

}  // namespace
}  // namespace tessera::c_api

using tessera::c_api::guard;

extern "C" {

tessera_status tessera_quantizer_config_default(int32_t mode, tessera_quantizer_config* out) {
  return guard([&] {
    TESSERA_CHECK(out != nullptr, "out: NULL");
    TESSERA_CHECK(mode >= 1 && mode <= 8, "mode: value ", mode, " is not a quantizing tessera_scaling_mode (1-8)");
    *out = tessera::c_api::to_c(tessera::make_config(static_cast<tessera::ScalingMode>(mode)));
  });
}

tessera_status tessera_quantizer_create(const tessera_quantizer_config* config,
                                        tessera_device device, tessera_quantizer* out) {
  return guard([&] {
    TESSERA_CHECK(config != nullptr && out != nullptr, "config and out must not be NULL");
    *out = nullptr;
    auto q = std::make_unique<tessera::Quantizer>(tessera::c_api::from_c(*config),
                                                  tessera::c_api::device_arg(device));
    *out = tessera::c_api::create_handle<tessera_quantizer_s>(std::move(q));
  });
}

tessera_status tessera_quantizer_create_from_recipe(const char* recipe, int32_t tensor_type,
                                                    tessera_device device, tessera_quantizer* out) {
  return guard([&] {
    TESSERA_CHECK(recipe != nullptr && out != nullptr, "recipe and out must not be NULL");
    TESSERA_CHECK(tensor_type >= 0 && tensor_type <= 5, "tensor_type: value ", tensor_type,
                  " is not a tessera_tensor_type (0-5)");
    *out = nullptr;
    const tessera::QuantizerRole role{"c_api", static_cast<tessera::TensorType>(tensor_type), ""};
    auto q = std::make_unique<tessera::Quantizer>(tessera::parse_recipe(recipe).config_for(role),
                                                  tessera::c_api::device_arg(device));
    *out = tessera::c_api::create_handle<tessera_quantizer_s>(std::move(q));
  });
}

tessera_status tessera_quantizer_destroy(tessera_quantizer q) {
  return guard([&] { tessera::c_api::destroy_handle(q, "quantizer"); });
}

tessera_status tessera_quantizer_get_config(tessera_quantizer q, tessera_quantizer_config* out) {
  return guard([&] {
    TESSERA_CHECK(out != nullptr, "out: NULL");
    *out = tessera::c_api::to_c(tessera::c_api::quantizer_of(q).config());
  });
}

tessera_status tessera_quantizer_buffer_sizes(tessera_quantizer q, int64_t rows, int64_t cols,
                                              int32_t columnwise, int64_t* data_bytes,
                                              int64_t* scale_inv_bytes) {
  return guard([&] {
    using namespace tessera::c_api;
    const tessera::QuantizerConfig& c = quantizer_of(q).config();
    TESSERA_CHECK(data_bytes != nullptr && scale_inv_bytes != nullptr, "outputs must not be NULL");
    const bool cw = flag_arg(columnwise, "columnwise");
    (void)elements_arg(rows, cols);  // a shape tessera_quantize takes: rows * cols fits int64
    *data_bytes = tessera::data_shape(c, rows, cols, cw).bytes();
    *scale_inv_bytes = tessera::scale_shape(c, rows, cols, cw).bytes();
  });
}

tessera_status tessera_quantize(tessera_quantizer q, const void* x, int32_t x_dtype, int64_t rows,
                                int64_t cols, const tessera_quantized_buffers* out, void* stream) {
  return guard([&] {
    using namespace tessera;
    Quantizer& qz = c_api::quantizer_of(q);
    const DType xd = c_api::dtype_arg(x_dtype, "x_dtype");
    const int64_t numel = c_api::elements_arg(rows, cols);
    TESSERA_CHECK(x != nullptr || numel == 0, "x: NULL");
    (void)checked_dtype_bytes(xd, numel, "x: rows * cols elements");
    QuantizedTensorView v = c_api::view_of(qz, out, rows, cols);
    const TensorView xv =
        TensorView::contiguous(const_cast<void*>(x), xd, {rows, cols}, qz.device());
    qz.quantize(xv, v, Stream{stream});
  });
}

tessera_status tessera_dequantize(tessera_quantizer q, const tessera_quantized_buffers* in,
                                  int64_t rows, int64_t cols, int32_t columnwise, float* out,
                                  void* stream) {
  return guard([&] {
    using namespace tessera;
    Quantizer& qz = c_api::quantizer_of(q);
    const bool cw = c_api::flag_arg(columnwise, "columnwise");
    const int64_t numel = c_api::elements_arg(rows, cols);
    TESSERA_CHECK(out != nullptr || numel == 0, "out: NULL");
    (void)checked_dtype_bytes(DType::kFloat32, numel, "out: rows * cols float32");
    const QuantizedTensorView v = c_api::view_of(qz, in, rows, cols);
    dequantize(v, TensorView::contiguous(out, DType::kFloat32, {rows, cols}, qz.device()), cw,
               Stream{stream});
  });
}

tessera_status tessera_quantizer_update(tessera_quantizer q, void* stream) {
  return guard([&] { tessera::c_api::quantizer_of(q).update(tessera::Stream{stream}); });
}

}  // extern "C"
