// Dispatcher of the grouped CUDA quantize kernels (see grouped_quantize_cuda.h): checks the
// grouped view, builds the device member table and routes to the format folder's grouped
// launcher. Nothing reads device memory from the host.
#include <cuda_runtime_api.h>

#include "quantize/cuda/grouped_quantize_cuda.h"
#include "quantize/cuda/kernels.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/status.h"

namespace tessera::detail {
namespace {

const int64_t* device_int64(const TensorView& v, int64_t n, const char* name) {
  TESSERA_CHECK(v.data != nullptr && v.device.is_cuda() && v.dtype == DType::kInt64 &&
                    v.numel() >= n,
                "grouped quantize: ", name, " must be an int64 CUDA array of ", n,
                " entries, got ", v.data == nullptr ? std::string("none") : v.to_string());
  return v.as<const int64_t>();
}

}  // namespace

void grouped_quantize_contiguous_cuda(const QuantizerConfig& config, const TensorView& x,
                                      const GroupedTensorView& out, const TensorView& noop,
                                      Stream stream) {
  TESSERA_CHECK(out.mode == GroupedShapeMode::kVaryingFirst ||
                    out.mode == GroupedShapeMode::kAllSame,
                "grouped quantize: a contiguous input needs a varying-first or all-same tensor");
  TESSERA_CHECK(x.device.is_cuda() && x.is_contiguous(), "grouped quantize: x must be a "
                "contiguous CUDA tensor, got ", x.to_string());
  const int64_t K = out.logical_cols;
  TESSERA_CHECK_STATUS(x.numel() == out.logical_rows * K, Status::kShapeMismatch,
                       "grouped quantize: x has ", x.numel(), " elements, the grouped tensor is (",
                       out.logical_rows, ", ", K, ")");
  TESSERA_CHECK(config.rowwise || config.columnwise, "grouped quantize: no usage requested");
  const int64_t n = out.num_tensors;
  cuda_quant::GroupedMeta g;
  g.n = n;
  g.cols = K;
  g.rows_bound = out.logical_rows;
  g.tensor_offsets = device_int64(out.tensor_offsets, n + 1, "tensor_offsets");
  if (config.rowwise) g.scale_offsets = device_int64(out.scale_offsets, n + 1, "scale_offsets");
  if (config.columnwise) {
    g.col_scale_offsets =
        device_int64(out.columnwise_scale_offsets, n + 1, "columnwise_scale_offsets");
  }
  if (noop.data != nullptr) {
    TESSERA_CHECK(noop.device.is_cuda() && (noop.dtype == DType::kFloat32 ||
                                            noop.dtype == DType::kInt32),
                  "grouped quantize: noop must be a float32 or int32 CUDA scalar, got ",
                  noop.to_string());
    if (noop.dtype == DType::kFloat32) {
      g.noop_f32 = noop.as<const float>();
    } else {
      g.noop_i32 = noop.as<const int32_t>();
    }
  }
  TESSERA_CUDA_CHECK(cudaSetDevice(x.device.index));
  auto s = stream.as<cudaStream_t>();
  switch (config.mode) {
    case ScalingMode::kRowwise:
      TESSERA_CHECK_STATUS(!config.columnwise, Status::kUnsupported,
                           "grouped quantize: rowwise FP8 with the columnwise usage has no grouped "
                           "CUDA kernel yet");
      cuda_quant::launch_fp8_rowwise_grouped(x.data, g, x.dtype, config.element,
                                             config.amax_epsilon, config.power_of_two_scales,
                                             out.data.as<uint8_t>(), out.scale_inv.as<float>(), s);
      break;
    case ScalingMode::kMXFP8:
    case ScalingMode::kMXFP8_32x32: {
      cuda_quant::MxArgs a;
      a.x = x.data;
      a.in = x.dtype;
      a.element = config.element;
      a.tile32x32 = config.mode == ScalingMode::kMXFP8_32x32;
      a.floor_rule = config.e8m0_rounding == E8M0Rounding::kFloor;
      a.swizzled = config.scale_layout == ScaleLayout::kSwizzled;
      if (config.rowwise) {
        a.q_row = out.data.as<uint8_t>();
        a.s_row = out.scale_inv.as<uint8_t>();
      }
      if (config.columnwise) {
        a.q_col = out.columnwise_data.as<uint8_t>();
        a.s_col = out.columnwise_scale_inv.as<uint8_t>();
      }
      cuda_quant::launch_mxfp8_grouped(a, g, s);
      break;
    }
    default:
      TESSERA_FAIL(Status::kUnsupported, "grouped quantize: scaling mode ",
                   static_cast<int>(config.mode), " has no grouped CUDA kernel yet");
  }
}

}  // namespace tessera::detail
