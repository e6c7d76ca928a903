// detail::grouped_quantize_cuda (grouped_backend.h): how the grouped layer quantizes into CUDA
// storage, calling down into the quantize layer (quantize/quantize_backend.h):
// - one contiguous varying-first / all-same input that the grouped kernels take
//   (has_grouped_quantize_kernel): grouped_quantize_contiguous_cuda, which reads the DEVICE
//   metadata, so device split sizes never sync; the noop flag is honoured on the device;
// - other cases (a list of per-member inputs, a mode without a grouped kernel): one
//   Quantizer::quantize per member view (host metadata needed; a set noop flag cannot be
//   honoured on that path and is refused).
#include <span>

#include "grouped/grouped_backend.h"
#include "quantize/quantize_backend.h"
#include "tessera/core/device.h"
#include "tessera/core/status.h"

namespace tessera::detail {
namespace {

// Member g's input: inputs[g] (list) or its rows of the contiguous x.
TensorView member_input(std::span<const TensorView> inputs, bool contiguous,
                        const GroupedTensorView& out, int64_t g, int64_t rows) {
  if (!contiguous) return inputs[static_cast<size_t>(g)];
  const TensorView& x = inputs[0];
  const int64_t off = out.host.tensor_offsets.as<const int64_t>()[g];
  return TensorView::contiguous(static_cast<char*>(x.data) + dtype_bytes(x.dtype, off), x.dtype,
                                {rows, out.logical_cols}, x.device);
}

}  // namespace

void grouped_quantize_cuda(Quantizer& quantizer, std::span<const TensorView> inputs,
                           const GroupedTensorView& out, const TensorView& noop, Stream stream) {
  TESSERA_CHECK_STATUS(cuda_compiled(), Status::kNoDevice, "grouped_quantize: out is on ",
                       to_string(out.device), " but tessera was built without CUDA");
  QuantizerConfig config = quantizer.config();
  config.rowwise = out.config.rowwise;
  config.columnwise = out.config.columnwise;
  const bool contiguous = inputs.size() == 1 && inputs[0].ndim == 2 &&
                          inputs[0].shape[0] == out.logical_rows &&
                          (out.mode == GroupedShapeMode::kVaryingFirst ||
                           out.mode == GroupedShapeMode::kAllSame);
  if (contiguous && has_grouped_quantize_kernel(config, out.logical_cols)) {
    GroupedDelayedState delayed;
    if (config.delayed) {
      delayed.scale = quantizer.scale().as<const float>();
      delayed.amax_history = quantizer.amax_history().as<float>();
    }
    grouped_quantize_contiguous_cuda(config, inputs[0], out, noop, stream, delayed);
    return;
  }
  TESSERA_CHECK_STATUS(out.host.known(), Status::kUnsupported, "grouped quantize: ",
                       scaling_mode_name(config.mode), contiguous ? "" : " of a list of inputs",
                       " has no grouped CUDA kernel here and the member shapes live only on the "
                       "device; the grouped kernels take one contiguous input of every mode, "
                       "with K > 0 (MXFP8: any K)");
  TESSERA_CHECK_STATUS(noop.data == nullptr, Status::kUnsupported, "grouped quantize: a noop "
                       "flag needs a grouped CUDA kernel; ", scaling_mode_name(config.mode),
                       " is quantized member by member here");
  const int64_t* rows = out.host.first_dims.data != nullptr
                            ? out.host.first_dims.as<const int64_t>() : nullptr;
  for (int64_t g = 0; g < out.num_tensors; ++g) {
    const int64_t r = rows != nullptr ? rows[g] : out.uniform_rows;
    QuantizedTensorView member = grouped_quantized_member(out, g);
    quantizer.quantize(member_input(inputs, contiguous, out, g, r), member, stream);
  }
}

}  // namespace tessera::detail
