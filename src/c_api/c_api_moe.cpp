// C API of the expert-parallel routing ops (tessera/nn/moe_routing.h): flat caller-owned
// buffers described by pointer, dtype and sizes (every size product overflow-checked), every call
// behind the exception firewall.
#include <cstdint>

#include "c_api/c_api_args.h"
#include "c_api/c_api_guard.h"
#include "tessera/c_api.h"
#include "tessera/core/checked_math.h"
#include "tessera/nn/moe_routing.h"
#include "tessera/quantize/types.h"

namespace tessera::c_api {
namespace {

MoeRoutingOptions options_of(const tessera_moe_routing_options* o) {
  TESSERA_CHECK(o != nullptr, "options is NULL");
  MoeRoutingOptions r;
  r.num_experts = o->num_experts;
  r.align = o->align;
  r.capacity = o->capacity;
  r.error_flag = o->error_flag;
  return r;
}

// The sizes every op takes, each named when out of range: counts >= 0, top_k >= 1.
void check_sizes(int64_t num_tokens, int64_t top_k, int64_t rows, int64_t hidden) {
  count_arg(num_tokens, "num_tokens");
  TESSERA_CHECK(top_k >= 1, "top_k: ", top_k, " must be >= 1");
  count_arg(rows, "rows");
  count_arg(hidden, "hidden");
}

// A (rows, cols) view; its element count and byte size must fit int64 (kOutOfRange naming
// `arg`) and a NULL pointer is allowed only when it is empty.
TensorView matrix(const void* p, DType dt, int64_t rows, int64_t cols, Device dev,
                  const char* arg) {
  TESSERA_CHECK(rows >= 0 && cols >= 0, arg, ": sizes ", rows, " x ", cols, " are negative");
  const int64_t n = checked_mul(rows, cols, arg);
  (void)checked_dtype_bytes(dt, n, arg);
  TESSERA_CHECK(p != nullptr || n == 0, arg, " is NULL");
  return TensorView::contiguous(const_cast<void*>(p), dt, {rows, cols}, dev);
}

TensorView vector(const void* p, DType dt, int64_t n, Device dev, const char* arg) {
  TESSERA_CHECK(n >= 0, arg, ": size ", n, " is negative");
  (void)checked_dtype_bytes(dt, n, arg);
  TESSERA_CHECK(p != nullptr || n == 0, arg, " is NULL");
  return TensorView::contiguous(const_cast<void*>(p), dt, {n}, dev);
}

}  // namespace
}  // namespace tessera::c_api

using tessera::c_api::guard;

extern "C" {

tessera_status tessera_moe_permuted_rows(int64_t num_tokens, int64_t top_k,
                                         const tessera_moe_routing_options* options,
                                         int64_t* rows) {
  return guard([&] {
    TESSERA_CHECK(rows != nullptr, "rows is NULL");
    *rows = tessera::moe_permuted_rows(num_tokens, top_k, tessera::c_api::options_of(options));
  });
}

tessera_status tessera_moe_routing_workspace_bytes(int64_t num_tokens, int64_t top_k,
                                                   const tessera_moe_routing_options* options,
                                                   tessera_device device, int64_t* bytes) {
  return guard([&] {
    using namespace tessera::c_api;
    TESSERA_CHECK(bytes != nullptr, "bytes is NULL");
    *bytes = tessera::moe_routing_workspace_bytes(num_tokens, top_k, options_of(options),
                                                  device_arg(device));
  });
}

tessera_status tessera_moe_routing(const void* indices, int32_t index_dtype, int64_t num_tokens,
                                   int64_t top_k, const tessera_moe_routing_options* options,
                                   int64_t* counts, int64_t* padded_offsets, void* slot_map,
                                   void* row_pair, int32_t map_dtype, int64_t rows,
                                   int64_t* dropped, void* workspace, int64_t workspace_bytes,
                                   tessera_device device, void* stream) {
  return guard([&] {
    using namespace tessera::c_api;
    check_sizes(num_tokens, top_k, rows, 0);
    using tessera::DType;
    const tessera::Device dev = device_arg(device);
    const tessera::MoeRoutingOptions o = options_of(options);
    const DType map = dtype_arg(map_dtype, "map_dtype");
    TESSERA_CHECK(o.num_experts >= 1, "options->num_experts ", o.num_experts, " must be >= 1");
    const tessera::MoeRouting out{
        vector(counts, DType::kInt64, o.num_experts, dev, "counts"),
        vector(padded_offsets, DType::kInt64,
               tessera::checked_add(o.num_experts, 1, "padded_offsets: num_experts + 1"), dev,
               "padded_offsets"),
        matrix(slot_map, map, num_tokens, top_k, dev, "slot_map"),
        vector(row_pair, map, rows, dev, "row_pair"),
        vector(dropped, DType::kInt64, 1, dev, "dropped")};
    tessera::moe_routing(
        matrix(indices, dtype_arg(index_dtype, "index_dtype"), num_tokens, top_k, dev, "indices"),
        o, out, vector(workspace, DType::kUInt8, workspace_bytes, dev, "workspace"),
        tessera::Stream{stream});
  });
}

tessera_status tessera_moe_permute(const void* x, int32_t x_dtype, int64_t num_tokens,
                                   int64_t hidden, const void* row_pair, int32_t map_dtype,
                                   int64_t rows, int64_t top_k, int32_t quant_mode,
                                   int32_t element, int32_t e8m0_rounding, void* out,
                                   void* scale_inv, int64_t scale_inv_bytes,
                                   tessera_device device, void* stream) {
  return guard([&] {
    using namespace tessera::c_api;
    check_sizes(num_tokens, top_k, rows, hidden);
    using tessera::DType;
    const tessera::Device dev = device_arg(device);
    const DType xd = dtype_arg(x_dtype, "x_dtype");
    const tessera::TensorView xv = matrix(x, xd, num_tokens, hidden, dev, "x");
    const tessera::TensorView rp =
        vector(row_pair, dtype_arg(map_dtype, "map_dtype"), rows, dev, "row_pair");
    // Enums and sizes in range even where quant_mode NONE does not read them.
    const DType elem = dtype_arg(element, "element");
    TESSERA_CHECK(e8m0_rounding == 0 || e8m0_rounding == 1, "e8m0_rounding: value ",
                  e8m0_rounding, " must be 0 (round-up) or 1 (floor)");
    count_arg(scale_inv_bytes, "scale_inv_bytes");
    if (quant_mode == TESSERA_SCALING_NONE) {
      tessera::moe_permute(xv, rp, top_k, matrix(out, xd, rows, hidden, dev, "out"),
                           tessera::Stream{stream});
      return;
    }
    TESSERA_CHECK(quant_mode == TESSERA_SCALING_ROWWISE ||
                      quant_mode == TESSERA_SCALING_BLOCK_1X128 ||
                      quant_mode == TESSERA_SCALING_MXFP8,
                  "quant_mode: value ", quant_mode, " is not NONE, ROWWISE, BLOCK_1X128 or MXFP8");
    tessera::QuantizerConfig c =
        tessera::make_config(static_cast<tessera::ScalingMode>(quant_mode), elem);
    c.e8m0_rounding = static_cast<tessera::E8M0Rounding>(e8m0_rounding);
    tessera::validate_config(c);
    const tessera::MatrixShape ss = tessera::scale_shape(c, rows, hidden, false);
    TESSERA_CHECK_STATUS(scale_inv_bytes >= ss.bytes(), tessera::Status::kBufferTooSmall,
                         "scale_inv: ", ss.bytes(), " bytes needed, ", scale_inv_bytes, " given");
    tessera::QuantizedTensorView q;
    q.config = c;
    q.rows = rows;
    q.cols = hidden;
    q.device = dev;
    q.data = matrix(out, c.element, rows, hidden, dev, "out");
    q.scale_inv = matrix(scale_inv, ss.dtype, ss.rows, ss.cols, dev, "scale_inv");
    tessera::moe_permute_quantize(xv, rp, top_k, q, tessera::Stream{stream});
  });
}

tessera_status tessera_moe_permute_backward(const void* d_permuted, int32_t d_dtype, int64_t rows,
                                            int64_t hidden, const void* slot_map,
                                            int32_t map_dtype, int64_t num_tokens,
                                            int64_t top_k, void* dx, int32_t dx_dtype,
                                            tessera_device device, void* stream) {
  return guard([&] {
    using namespace tessera::c_api;
    check_sizes(num_tokens, top_k, rows, hidden);
    const tessera::Device dev = device_arg(device);
    tessera::moe_permute_backward(
        matrix(d_permuted, dtype_arg(d_dtype, "d_dtype"), rows, hidden, dev, "d_permuted"),
        matrix(slot_map, dtype_arg(map_dtype, "map_dtype"), num_tokens, top_k, dev, "slot_map"),
        matrix(dx, dtype_arg(dx_dtype, "dx_dtype"), num_tokens, hidden, dev, "dx"),
        tessera::Stream{stream});
  });
}

tessera_status tessera_moe_unpermute(const void* y, int32_t y_dtype, int64_t rows, int64_t hidden,
                                     const void* slot_map, int32_t map_dtype, int64_t num_tokens,
                                     int64_t top_k, const float* probs, void* out,
                                     int32_t out_dtype, tessera_device device, void* stream) {
  return guard([&] {
    using namespace tessera::c_api;
    check_sizes(num_tokens, top_k, rows, hidden);
    const tessera::Device dev = device_arg(device);
    const tessera::TensorView pv =
        probs == nullptr ? tessera::TensorView{}
                         : matrix(probs, tessera::DType::kFloat32, num_tokens, top_k, dev, "probs");
    tessera::moe_unpermute(
        matrix(y, dtype_arg(y_dtype, "y_dtype"), rows, hidden, dev, "y"),
        matrix(slot_map, dtype_arg(map_dtype, "map_dtype"), num_tokens, top_k, dev, "slot_map"),
        pv, matrix(out, dtype_arg(out_dtype, "out_dtype"), num_tokens, hidden, dev, "out"),
        tessera::Stream{stream});
  });
}

tessera_status tessera_moe_unpermute_backward(const void* dout, int32_t dout_dtype, const void* y,
                                              int32_t y_dtype, int64_t rows, int64_t hidden,
                                              const void* slot_map, const void* row_pair,
                                              int32_t map_dtype, int64_t num_tokens,
                                              int64_t top_k, const float* probs, void* dy,
                                              int32_t dy_dtype, float* dprobs,
                                              tessera_device device, void* stream) {
  return guard([&] {
    using namespace tessera::c_api;
    check_sizes(num_tokens, top_k, rows, hidden);
    using tessera::DType;
    const tessera::Device dev = device_arg(device);
    const DType map = dtype_arg(map_dtype, "map_dtype");
    const tessera::TensorView pv =
        probs == nullptr ? tessera::TensorView{}
                         : matrix(probs, DType::kFloat32, num_tokens, top_k, dev, "probs");
    const tessera::TensorView dpv =
        dprobs == nullptr ? tessera::TensorView{}
                          : matrix(dprobs, DType::kFloat32, num_tokens, top_k, dev, "dprobs");
    tessera::moe_unpermute_backward(
        matrix(dout, dtype_arg(dout_dtype, "dout_dtype"), num_tokens, hidden, dev, "dout"),
        matrix(y, dtype_arg(y_dtype, "y_dtype"), rows, hidden, dev, "y"),
        matrix(slot_map, map, num_tokens, top_k, dev, "slot_map"),
        vector(row_pair, map, rows, dev, "row_pair"), pv,
        matrix(dy, dtype_arg(dy_dtype, "dy_dtype"), rows, hidden, dev, "dy"), dpv,
        tessera::Stream{stream});
  });
}

}  // extern "C"
