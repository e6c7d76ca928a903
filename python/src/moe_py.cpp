// Array-level expert-parallel routing ops for tessera.torch.moe (and any DLPack producer): the
// C++ ops of tessera/nn/moe_routing.h read caller arrays and write caller-owned outputs, zero
// copy, on the caller's stream (an integer cudaStream_t). Nothing here allocates or syncs.
//
// Python surface (private; tessera.torch.moe wraps it):
//   _moe_permuted_rows(tokens, top_k, num_experts, align, capacity) -> int
//   _moe_routing_workspace_bytes(tokens, top_k, num_experts, align, capacity, cuda) -> int
//   _moe_routing_into(indices, num_experts, align, capacity, counts, padded_offsets, slot_map,
//                     row_pair, dropped, workspace=None, error_flag=None, stream=0)
//   _moe_permute_into(x, row_pair, top_k, out, stream=0)
//   moe_permute_modes: tuple of the scaling-mode names permute fuses (moe_permute_modes())
//   _moe_permute_quantize_into(x, row_pair, top_k, mode, element, e8m0_floor, data, scale_inv,
//                              stream=0)          mode: one of moe_permute_modes
//   _moe_permute_backward_into(d_permuted, slot_map, dx, stream=0)
//   _moe_unpermute_into(y, slot_map, probs, out, stream=0)                  probs may be None
//   _moe_unpermute_backward_into(dout, y, slot_map, row_pair, probs, dy, dprobs, stream=0)
//   _moe_dequantize_rows_into(data, scale_inv, mode, out, stream=0, source_rows=None)
//                                     data: E4M3 codes (any 8-bit array); mode as permute's;
//                                     source_rows: int64 (m), out row r = data row source_rows[r]
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bindings.h"
#include "tessera/core/status.h"
#include "tessera/nn/moe_routing.h"
#include "tessera/quantize/types.h"

namespace tessera::python {
namespace {

MoeRoutingOptions options_of(int64_t num_experts, int64_t align, int64_t capacity) {
  MoeRoutingOptions o;
  o.num_experts = num_experts;
  o.align = align;
  o.capacity = capacity;
  return o;
}

TensorView optional_view(const std::optional<DeviceArray>& a, const char* arg) {
  return a.has_value() ? device_view(*a, arg) : TensorView{};
}

void routing_into(const DeviceArray& indices, int64_t num_experts, int64_t align,
                  int64_t capacity, const DeviceArray& counts, const DeviceArray& padded_offsets,
                  const DeviceArray& slot_map, const DeviceArray& row_pair,
                  const DeviceArray& dropped, const std::optional<DeviceArray>& workspace,
                  const std::optional<DeviceArray>& error_flag, uintptr_t stream) {
  MoeRoutingOptions o = options_of(num_experts, align, capacity);
  if (error_flag.has_value()) {
    const TensorView f = device_view(*error_flag, DType::kInt32, "error_flag");
    TESSERA_CHECK_STATUS(f.numel() == 1, Status::kShapeMismatch,
                         "error_flag: expected one int32, got ", f.to_string());
    o.error_flag = f.as<int32_t>();
  }
  const MoeRouting out{device_view(counts, "counts"), device_view(padded_offsets, "padded_offsets"),
                       device_view(slot_map, "slot_map"), device_view(row_pair, "row_pair"),
                       device_view(dropped, "dropped")};
  const TensorView iv = device_view(indices, "indices");
  TensorView ws = optional_view(workspace, "workspace");
  nb::gil_scoped_release release;
  moe_routing(iv, o, out, ws, stream_of(stream));
}

void permute_into(const DeviceArray& x, const DeviceArray& row_pair, int64_t top_k,
                  const DeviceArray& out, uintptr_t stream) {
  const TensorView xv = device_view(x, "x"), rv = device_view(row_pair, "row_pair");
  const TensorView ov = device_view(out, "out");
  nb::gil_scoped_release release;
  moe_permute(xv, rv, top_k, ov, stream_of(stream));
}

void permute_quantize_into(const DeviceArray& x, const DeviceArray& row_pair, int64_t top_k,
                           const std::string& mode, const std::string& element, bool e8m0_floor,
                           const DeviceArray& data, const DeviceArray& scale_inv,
                           uintptr_t stream) {
  QuantizerConfig c = make_config(scaling_mode_from_name(mode.c_str()), parse_dtype(element));
  if (e8m0_floor) c.e8m0_rounding = E8M0Rounding::kFloor;
  const TensorView xv = device_view(x, "x"), rv = device_view(row_pair, "row_pair");
  TESSERA_CHECK_STATUS(xv.ndim == 2 && rv.ndim == 1, Status::kShapeMismatch,
                       "x must be (T, H) and row_pair (rows), got ", xv.to_string(), " and ",
                       rv.to_string());
  const int64_t rows = rv.shape[0], cols = xv.shape[1];
  QuantizedTensorView q;
  q.config = c;
  q.rows = rows;
  q.cols = cols;
  q.device = xv.device;
  const TensorView dv = device_view(data, c.element, "data");
  q.data = TensorView::contiguous(dv.data, c.element, {rows, cols}, dv.device);
  TESSERA_CHECK_STATUS(dv.numel() == rows * cols, Status::kShapeMismatch, "data: expected ",
                       rows, "x", cols, " codes, got ", dv.to_string());
  const MatrixShape ss = scale_shape(c, rows, cols, false);
  const TensorView sv = device_view(scale_inv, ss.dtype, "scale_inv");
  TESSERA_CHECK_STATUS(sv.numel() == ss.numel(), Status::kShapeMismatch, "scale_inv: expected ",
                       ss.rows, "x", ss.cols, " ", dtype_name(ss.dtype), ", got ",
                       sv.to_string());
  q.scale_inv = TensorView::contiguous(sv.data, ss.dtype, {ss.rows, ss.cols}, sv.device);
  nb::gil_scoped_release release;
  moe_permute_quantize(xv, rv, top_k, q, stream_of(stream));
}

void permute_backward_into(const DeviceArray& d_permuted, const DeviceArray& slot_map,
                           const DeviceArray& dx, uintptr_t stream) {
  const TensorView d = device_view(d_permuted, "d_permuted"), s = device_view(slot_map, "slot_map");
  const TensorView o = device_view(dx, "dx");
  nb::gil_scoped_release release;
  moe_permute_backward(d, s, o, stream_of(stream));
}

void unpermute_into(const DeviceArray& y, const DeviceArray& slot_map,
                    const std::optional<DeviceArray>& probs, const DeviceArray& out,
                    uintptr_t stream) {
  const TensorView yv = device_view(y, "y"), s = device_view(slot_map, "slot_map");
  const TensorView p = optional_view(probs, "probs"), o = device_view(out, "out");
  nb::gil_scoped_release release;
  moe_unpermute(yv, s, p, o, stream_of(stream));
}

void unpermute_backward_into(const DeviceArray& dout, const DeviceArray& y,
                             const DeviceArray& slot_map, const DeviceArray& row_pair,
                             const std::optional<DeviceArray>& probs, const DeviceArray& dy,
                             const std::optional<DeviceArray>& dprobs, uintptr_t stream) {
  const TensorView g = device_view(dout, "dout"), yv = device_view(y, "y");
  const TensorView s = device_view(slot_map, "slot_map"), r = device_view(row_pair, "row_pair");
  const TensorView p = optional_view(probs, "probs"), d = device_view(dy, "dy");
  const TensorView dp = optional_view(dprobs, "dprobs");
  nb::gil_scoped_release release;
  moe_unpermute_backward(g, yv, s, r, p, d, dp, stream_of(stream));
}

void dequantize_rows_into(const DeviceArray& data, const DeviceArray& scale_inv,
                          const std::string& mode, const DeviceArray& out, uintptr_t stream,
                          const std::optional<DeviceArray>& source_rows) {
  const ScalingMode m = scaling_mode_from_name(mode.c_str());
  const TensorView dv = device_view(data, DType::kFloat8E4M3, "data");
  const TensorView sv = device_view(scale_inv, "scale_inv");
  const TensorView ov = device_view(out, "out");
  const TensorView rv = optional_view(source_rows, "source_rows");
  nb::gil_scoped_release release;
  moe_dequantize_rows(dv, sv, m, rv, ov, stream_of(stream));
}

}  // namespace

void register_moe(nb::module_& m) {
  m.def("_moe_permuted_rows",
        [](int64_t tokens, int64_t top_k, int64_t num_experts, int64_t align, int64_t capacity) {
          return moe_permuted_rows(tokens, top_k, options_of(num_experts, align, capacity));
        },
        nb::arg("tokens"), nb::arg("top_k"), nb::arg("num_experts"), nb::arg("align"),
        nb::arg("capacity"), "Rows of the permuted buffer (host-known bound).");
  m.def("_moe_routing_workspace_bytes",
        [](int64_t tokens, int64_t top_k, int64_t num_experts, int64_t align, int64_t capacity,
           bool cuda) {
          return moe_routing_workspace_bytes(tokens, top_k,
                                             options_of(num_experts, align, capacity),
                                             cuda ? Device::cuda(0) : Device::cpu());
        },
        nb::arg("tokens"), nb::arg("top_k"), nb::arg("num_experts"), nb::arg("align"),
        nb::arg("capacity"), nb::arg("cuda"));
  m.def("_moe_routing_into", &routing_into, nb::arg("indices").noconvert(),
        nb::arg("num_experts"), nb::arg("align"), nb::arg("capacity"),
        nb::arg("counts").noconvert(), nb::arg("padded_offsets").noconvert(),
        nb::arg("slot_map").noconvert(), nb::arg("row_pair").noconvert(),
        nb::arg("dropped").noconvert(), nb::arg("workspace").noconvert() = nb::none(),
        nb::arg("error_flag").noconvert() = nb::none(), nb::arg("stream") = 0,
        "Routing metadata from top-k expert indices (moe_routing.h), into caller arrays.");
  {
    nb::list modes;  // moe_permute_modes: the payload modes permute fuses, as scaling-mode names
    for (ScalingMode mode : moe_permute_modes()) modes.append(scaling_mode_name(mode));
    m.attr("moe_permute_modes") = nb::tuple(modes);
  }
  m.def("_moe_permute_into", &permute_into, nb::arg("x").noconvert(),
        nb::arg("row_pair").noconvert(), nb::arg("top_k"), nb::arg("out").noconvert(),
        nb::arg("stream") = 0);
  m.def("_moe_permute_quantize_into", &permute_quantize_into, nb::arg("x").noconvert(),
        nb::arg("row_pair").noconvert(), nb::arg("top_k"), nb::arg("mode"), nb::arg("element"),
        nb::arg("e8m0_floor"), nb::arg("data").noconvert(), nb::arg("scale_inv").noconvert(),
        nb::arg("stream") = 0);
  m.def("_moe_permute_backward_into", &permute_backward_into, nb::arg("d_permuted").noconvert(),
        nb::arg("slot_map").noconvert(), nb::arg("dx").noconvert(), nb::arg("stream") = 0);
  m.def("_moe_unpermute_into", &unpermute_into, nb::arg("y").noconvert(),
        nb::arg("slot_map").noconvert(), nb::arg("probs").noconvert().none(),
        nb::arg("out").noconvert(), nb::arg("stream") = 0);
  m.def("_moe_unpermute_backward_into", &unpermute_backward_into, nb::arg("dout").noconvert(),
        nb::arg("y").noconvert(), nb::arg("slot_map").noconvert(),
        nb::arg("row_pair").noconvert(), nb::arg("probs").noconvert().none(),
        nb::arg("dy").noconvert(), nb::arg("dprobs").noconvert().none(), nb::arg("stream") = 0);
  m.def("_moe_dequantize_rows_into", &dequantize_rows_into, nb::arg("data").noconvert(),
        nb::arg("scale_inv").noconvert(), nb::arg("mode"), nb::arg("out").noconvert(),
        nb::arg("stream") = 0, nb::arg("source_rows").noconvert() = nb::none(),
        "E4M3 payload rows (uint8 codes) and their scales -> out, decode(q) * scale_inv in FP32 "
        "(moe_routing.h); out row r = data row source_rows[r] when given (outside: zeros).");
}

}  // namespace tessera::python
