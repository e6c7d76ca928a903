// detail::grouped_quantize_cuda (declared in grouped/grouped_backend.h) on the CUDA kernels:
// - one contiguous varying-first / all-same input: the persistent grouped kernels
//   (grouped_dispatch.cu) read the DEVICE metadata, so device split sizes never sync; the noop
//   flag is honoured on the device. Modes: every FP8 recipe (per-tensor current and delayed,
//   rowwise, block), MXFP8 / MXFP8 32x32 (compact or swizzled scales), NVFP4 / NVFP4 16x16.
// - other cases (a list of per-member inputs, K = 0): one Quantizer::quantize per member view
//   (host metadata needed; a set noop flag cannot be honoured on that path and is refused).
#include <span>

#include "grouped/grouped_backend.h"
#include "quantize/cuda/grouped_quantize_cuda.h"
#include "tessera/core/status.h"

namespace tessera::detail {
namespace {

bool has_grouped_kernel(const QuantizerConfig& c, int64_t cols) {
  switch (c.mode) {
    case ScalingMode::kTensor:
    case ScalingMode::kRowwise:
    case ScalingMode::kBlock1x128:
    case ScalingMode::kBlock128x128:
    case ScalingMode::kNVFP4:
    case ScalingMode::kNVFP4_16x16:
      return cols > 0;
    case ScalingMode::kMXFP8:
    case ScalingMode::kMXFP8_32x32:
      return true;  // compact or swizzled scales
    default:
      return false;
  }
}

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
  QuantizerConfig config = quantizer.config();
  config.rowwise = out.config.rowwise;
  config.columnwise = out.config.columnwise;
  const bool contiguous = inputs.size() == 1 && inputs[0].ndim == 2 &&
                          inputs[0].shape[0] == out.logical_rows &&
                          (out.mode == GroupedShapeMode::kVaryingFirst ||
                           out.mode == GroupedShapeMode::kAllSame);
  if (contiguous && has_grouped_kernel(config, out.logical_cols)) {
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
