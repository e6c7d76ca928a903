// Grouped quantize / dequantize: argument checks shared by every backend, the CPU loops over
// member views (each member quantized exactly as alone), and the routing of CUDA tensors to the
// grouped quantize kernels.
#include "tessera/grouped/grouped_quantize.h"

#include <string>
#include <vector>

#include "grouped/grouped_backend.h"
#include "grouped/grouped_plan.h"
#include "tessera/core/status.h"
#include "tessera/formats/convert.h"

namespace tessera {
namespace {

// True when the CPU noop flag is set. A device flag is read by the kernel (returns false).
bool noop_set(const TensorView& noop, Device device, const char* what) {
  if (noop.data == nullptr) return false;
  check_view(noop, "noop", {DType::kFloat32});
  TESSERA_CHECK_STATUS(noop.numel() == 1, Status::kShapeMismatch, what,
                       ": noop must be a float32 scalar (1 element), got ", noop.to_string());
  TESSERA_CHECK(noop.device == device, what, ": noop is on ", to_string(noop.device),
                " but out is on ", to_string(device));
  return device.is_cpu() && noop.as<const float>()[0] != 0.0f;
}

void check_quantizer_fits(const Quantizer& q, const GroupedTensorView& out, const char* what) {
  TESSERA_CHECK(out.quantized(), what, ": out is an unquantized ", dtype_name(out.dtype),
                " grouped tensor; create it with the quantizer's config");
  const QuantizerConfig& c = q.config();
  TESSERA_CHECK(c.mode == out.config.mode && c.element == out.config.element &&
                    c.scale_layout == out.config.scale_layout,
                what, ": the quantizer (", scaling_mode_name(c.mode), ", ", dtype_name(c.element),
                ") does not match out (", scaling_mode_name(out.config.mode), ", ",
                dtype_name(out.config.element), ") or its scale layout");
  TESSERA_CHECK((!c.rowwise || out.has_rowwise()) && (!c.columnwise || out.has_columnwise()),
                what, ": the quantizer produces ", c.rowwise ? "rowwise " : "",
                c.columnwise ? "columnwise " : "", "data but out lacks those buffers; pass the "
                "GroupedTensor (which adds them) or call GroupedTensor::ensure_usage");
  TESSERA_CHECK(q.device() == out.device, what, ": the quantizer runs on ", to_string(q.device()),
                " but out is on ", to_string(out.device));
}

void check_input(const TensorView& x, int64_t rows, int64_t cols, Device device,
                 const std::string& name) {
  check_view(x, name.c_str(), {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  TESSERA_CHECK_STATUS(x.ndim == 2 && x.shape[0] == rows && x.shape[1] == cols,
                       Status::kShapeMismatch, name, ": expected (", rows, ", ", cols, "), got ",
                       x.to_string());
  TESSERA_CHECK(x.device == device, name, " is on ", to_string(x.device), " but out is on ",
                to_string(device));
}

// Rows of member g of the contiguous input x, sharing x's storage.
TensorView contiguous_member_input(const TensorView& x, const GroupedTensorView& out, int64_t g) {
  const auto [rows, cols] = detail::grouped_member_shape(out, g, "grouped_quantize_contiguous");
  const int64_t off = out.host.tensor_offsets.as<const int64_t>()[g];
  return TensorView::contiguous(static_cast<char*>(x.data) + dtype_bytes(x.dtype, off), x.dtype,
                                {rows, cols}, x.device);
}

}  // namespace

void grouped_quantize_list(Quantizer& quantizer, std::span<const TensorView> inputs,
                           const GroupedTensorView& out, const TensorView& noop, Stream stream) {
  const char* what = "grouped_quantize_list";
  check_quantizer_fits(quantizer, out, what);
  TESSERA_CHECK_STATUS(static_cast<int64_t>(inputs.size()) == out.num_tensors,
                       Status::kShapeMismatch, what, ": ", inputs.size(), " inputs for ",
                       out.num_tensors, " members");
  for (int64_t g = 0; g < out.num_tensors; ++g) {  // check every input before writing any
    const auto [rows, cols] = detail::grouped_member_shape(out, g, what);
    check_input(inputs[static_cast<size_t>(g)], rows, cols, out.device,
                std::string(what) + ": inputs[" + std::to_string(g) + "]");
  }
  if (noop_set(noop, out.device, what)) return;
  if (out.device.is_cuda()) {
    return detail::grouped_quantize_cuda(quantizer, inputs, out, noop, stream);
  }
  for (int64_t g = 0; g < out.num_tensors; ++g) {
    QuantizedTensorView member = grouped_quantized_member(out, g);
    quantizer.quantize(inputs[static_cast<size_t>(g)], member, stream);
  }
}

void grouped_quantize_list(Quantizer& quantizer, std::span<const TensorView> inputs,
                           GroupedTensor& out, const TensorView& noop, Stream stream) {
  out.ensure_usage(quantizer.config().rowwise, quantizer.config().columnwise);
  grouped_quantize_list(quantizer, inputs, out.view(), noop, stream);
}

void grouped_quantize_contiguous(Quantizer& quantizer, const TensorView& x,
                                 const GroupedTensorView& out, const TensorView& noop,
                                 Stream stream) {
  const char* what = "grouped_quantize_contiguous";
  check_quantizer_fits(quantizer, out, what);
  TESSERA_CHECK(out.mode == GroupedShapeMode::kAllSame ||
                    out.mode == GroupedShapeMode::kVaryingFirst,
                what, ": one contiguous input needs members stacked along the first dim "
                "(all same or varying first), not ", grouped_shape_mode_name(out.mode));
  check_input(x, out.logical_rows, out.logical_cols, out.device, std::string(what) + ": x");
  if (noop_set(noop, out.device, what)) return;
  if (out.device.is_cuda()) {
    return detail::grouped_quantize_cuda(quantizer, std::span<const TensorView>(&x, 1), out, noop,
                                         stream);
  }
  for (int64_t g = 0; g < out.num_tensors; ++g) {
    QuantizedTensorView member = grouped_quantized_member(out, g);
    quantizer.quantize(contiguous_member_input(x, out, g), member, stream);
  }
}

void grouped_quantize_contiguous(Quantizer& quantizer, const TensorView& x, GroupedTensor& out,
                                 const TensorView& noop, Stream stream) {
  out.ensure_usage(quantizer.config().rowwise, quantizer.config().columnwise);
  grouped_quantize_contiguous(quantizer, x, out.view(), noop, stream);
}

// ---- dequantize -------------------------------------------------------------------------------

namespace {

void dequantize_member(const GroupedTensorView& t, int64_t g, const TensorView& out,
                       bool columnwise, Stream stream) {
  if (t.quantized()) {
    const QuantizedTensorView q = grouped_quantized_member(t, g);
    TESSERA_CHECK(columnwise ? q.has_columnwise() : q.has_rowwise(), "grouped_dequantize: the ",
                  columnwise ? "columnwise" : "rowwise", " usage is absent");
    dequantize(q, out, columnwise, stream);
    return;
  }
  TESSERA_CHECK(!columnwise, "grouped_dequantize: an unquantized tensor has no columnwise copy");
  const TensorView src = grouped_member(t, g);
  if (src.dtype == DType::kFloat32) {
    copy_bytes(out.data, out.device, src.data, src.device, static_cast<size_t>(src.nbytes()));
  } else {
    decode(src, out, stream);
  }
}

}  // namespace

void grouped_dequantize_list(const GroupedTensorView& t, std::span<const TensorView> outputs,
                             bool columnwise, Stream stream) {
  TESSERA_CHECK_STATUS(static_cast<int64_t>(outputs.size()) == t.num_tensors,
                       Status::kShapeMismatch, "grouped_dequantize_list: ", outputs.size(),
                       " outputs for ", t.num_tensors, " members");
  for (int64_t g = 0; g < t.num_tensors; ++g) {
    const auto [rows, cols] = detail::grouped_member_shape(t, g, "grouped_dequantize_list");
    const TensorView& o = outputs[static_cast<size_t>(g)];
    check_view(o, "grouped_dequantize_list: output", {DType::kFloat32});
    TESSERA_CHECK_STATUS(o.ndim == 2 && o.shape[0] == rows && o.shape[1] == cols,
                         Status::kShapeMismatch, "grouped_dequantize_list: outputs[", g,
                         "] must be (", rows, ", ", cols, "), got ", o.to_string());
    TESSERA_CHECK(o.device == t.device, "grouped_dequantize_list: outputs[", g, "] is on ",
                  to_string(o.device), " but the tensor is on ", to_string(t.device));
  }
  for (int64_t g = 0; g < t.num_tensors; ++g) {
    dequantize_member(t, g, outputs[static_cast<size_t>(g)], columnwise, stream);
  }
}

void grouped_dequantize(const GroupedTensorView& t, const TensorView& out, bool columnwise,
                        Stream stream) {
  check_view(out, "grouped_dequantize: out", {DType::kFloat32});
  TESSERA_CHECK_STATUS(out.numel() == t.logical_rows * t.logical_cols, Status::kShapeMismatch,
                       "grouped_dequantize: out must hold the logical (", t.logical_rows, ", ",
                       t.logical_cols, ") elements, got ", out.to_string());
  TESSERA_CHECK(out.device == t.device, "grouped_dequantize: out is on ", to_string(out.device),
                " but the tensor is on ", to_string(t.device));
  std::vector<TensorView> outputs;
  for (int64_t g = 0; g < t.num_tensors; ++g) {
    const auto [rows, cols] = detail::grouped_member_shape(t, g, "grouped_dequantize");
    const int64_t off = t.host.tensor_offsets.as<const int64_t>()[g];
    outputs.push_back(TensorView::contiguous(out.as<float>() + off, DType::kFloat32, {rows, cols},
                                             out.device));
  }
  grouped_dequantize_list(t, outputs, columnwise, stream);
}

}  // namespace tessera
