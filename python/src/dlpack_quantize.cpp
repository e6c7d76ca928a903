// Array-level quantization for tessera.torch (and any DLPack producer): tessera's Quantizer reads a
// caller's high-precision CPU or CUDA array and writes codes and scale_inv into caller-owned
// output arrays, by DLPack with zero copies, on the caller's stream (an integer cudaStream_t).
// Nothing here allocates memory for the data, and nothing synchronizes.
//
// Python surface (private; tessera.torch.quantize_fp8_rowwise / _tensor / _delayed wrap it):
//   _quantize_into(x, mode, element, rowwise, columnwise, data, scale_inv, columnwise_data,
//                  columnwise_scale_inv, stream, amax, columnwise_amax, delayed_scale,
//                  amax_history, random_hadamard, stochastic_rounding, rng_seed,
//                  rng_offset) -> None
//   _delayed_update(scale, amax_history, element, amax_compute_algo, margin, stream) -> None
//     (the role's element, algorithm and margin: _recipe_config in quantize_py.cpp)
// FP8, MXFP8 and NVFP4 modes with their make_config defaults (per-tensor "tensor" = current
// scaling, which also writes the tensor amax of each copy into the caller's 1-element `amax`
// arrays; with `delayed_scale` and `amax_history` it is delayed scaling on that caller-owned
// state: the scale is read from `delayed_scale` and the amax written to history slot 0,
// docs/numerics.md), compact
// scales. `_delayed_update` is Quantizer::update() on the same caller-owned state (the next scale
// from the history, then the roll), on the caller's stream. Output shapes follow
// tessera/quantize/types.h (a
// columnwise rowwise/block copy is stored transposed); a scale array may be given with any shape
// of the contracted number of elements (torch keeps rowwise scales 1-D), and the arrays of a usage
// not asked for are ignored (they may be empty). NVFP4 ("nvfp4", "nvfp4_16x16", element e2m1):
// codes are packed bytes (rows, ceil(cols/2)) (the columnwise copy transposed: (cols,
// ceil(rows/2))), E4M3 scales given as uint8, and each usage's FP32 global amax is written into
// `amax` / `columnwise_amax`; random_hadamard (the 16-point transform of the columnwise copy,
// rows % 16 == 0), stochastic_rounding and the Philox rng_seed / rng_offset are the config's
// (validate_config refuses them outside NVFP4; tessera never advances the offset itself).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bindings.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"
#include "tessera/quantize/quantizer.h"
#include "tessera/quantize/recipe.h"
#include "tessera/quantize/types.h"

namespace tessera::python {
namespace {

// A view of caller array `a` as the (rows, cols) matrix `want` of the storage contract: the
// element size must match and the array must be C-contiguous with exactly want.numel() elements
// (any shape with that many, e.g. a 1-D (M,) rowwise scale vector).
TensorView contract_view(const DeviceArray& a, const MatrixShape& want, Device device,
                         const char* arg) {
  const bool packed = want.dtype == DType::kFloat4E2M1;  // two codes per byte, rows on a byte
  const TensorView v = device_view(a, packed ? DType::kUInt8 : want.dtype, arg);
  TESSERA_CHECK(v.device == device, arg, ": must be on the device of x (", to_string(device),
                "), got ", to_string(v.device));
  TESSERA_CHECK_STATUS(v.numel() == (packed ? want.bytes() : want.numel()),
                       Status::kShapeMismatch, arg, ": expected ", want.rows, "x", want.cols, " ",
                       dtype_name(want.dtype), packed ? " codes packed in " : " = ",
                       packed ? want.bytes() : want.numel(), packed ? " bytes" : " elements",
                       ", got ", v.to_string());
  const int64_t cols = packed ? checked_round_up(want.cols, 2, arg) : want.cols;
  return TensorView::contiguous(v.data, want.dtype, {want.rows, cols}, device);
}

// Caller-owned delayed-scaling state: scale (1) and amax_history (its length is the history
// length), float32 on `device`; Quantizer's constructor checks them further.
DelayedScalingState delayed_state(const DeviceArray& scale, const DeviceArray& amax_history,
                                  Device device, QuantizerConfig& config) {
  const TensorView h = device_view(amax_history, DType::kFloat32, "amax_history");
  TESSERA_CHECK(h.numel() >= 1, "amax_history: must hold at least one float32, got ",
                h.to_string());
  config.delayed = true;
  config.amax_history_len = static_cast<int>(h.numel());
  return {contract_view(scale, MatrixShape{1, 1, DType::kFloat32}, device, "delayed_scale"),
          contract_view(amax_history, MatrixShape{1, h.numel(), DType::kFloat32}, device,
                        "amax_history")};
}

void quantize_into(const DeviceArray& x, const std::string& mode, const std::string& element,
                   bool rowwise, bool columnwise, const DeviceArray& data,
                   const DeviceArray& scale_inv, const DeviceArray& columnwise_data,
                   const DeviceArray& columnwise_scale_inv, uintptr_t stream,
                   const std::optional<DeviceArray>& amax,
                   const std::optional<DeviceArray>& columnwise_amax,
                   const std::optional<DeviceArray>& delayed_scale,
                   const std::optional<DeviceArray>& amax_history, bool random_hadamard,
                   bool stochastic_rounding, uint64_t rng_seed, uint64_t rng_offset) {
  const ScalingMode m = scaling_mode_from_name(mode.c_str());
  TESSERA_CHECK(m != ScalingMode::kNone, "mode: 'none' does not quantize; expected tensor, "
                "rowwise, block1x128, block128x128, mxfp8, mxfp8_32x32, nvfp4 or nvfp4_16x16");
  TESSERA_CHECK(!has_amax(m) || (rowwise ? amax.has_value() : true),
                "amax: mode '", echo(mode), "' writes the tensor amax of the rowwise copy; pass a "
                "1-element float32 array");
  TESSERA_CHECK(!has_amax(m) || (columnwise ? columnwise_amax.has_value() : true),
                "columnwise_amax: mode '", echo(mode), "' writes the tensor amax of the columnwise "
                "copy; pass a 1-element float32 array");
  QuantizerConfig config = make_config(m, parse_dtype(element));
  TESSERA_CHECK(rowwise || columnwise, "rowwise/columnwise: at least one usage must be asked for");
  config.rowwise = rowwise;
  config.columnwise = columnwise;
  config.random_hadamard = random_hadamard;
  config.stochastic_rounding = stochastic_rounding;
  config.rng_seed = rng_seed;
  config.rng_offset = rng_offset;
  const TensorView xv = device_view(x, "x");  // (M, K) float32/bfloat16/float16
  TESSERA_CHECK_STATUS(xv.ndim == 2, Status::kShapeMismatch, "x: must be 2-D (M, K), got ",
                       xv.to_string());
  const int64_t rows = xv.shape[0], cols = xv.shape[1];
  QuantizedTensorView out;
  out.config = config;
  out.rows = rows;
  out.cols = cols;
  out.device = xv.device;
  if (rowwise) {
    out.data = contract_view(data, data_shape(config, rows, cols, false), xv.device, "data");
    out.scale_inv = contract_view(scale_inv, scale_shape(config, rows, cols, false), xv.device,
                                  "scale_inv");
  }
  if (columnwise) {
    out.columnwise_data = contract_view(columnwise_data, data_shape(config, rows, cols, true),
                                        xv.device, "columnwise_data");
    out.columnwise_scale_inv =
        contract_view(columnwise_scale_inv, scale_shape(config, rows, cols, true), xv.device,
                      "columnwise_scale_inv");
  }
  const MatrixShape one{1, 1, DType::kFloat32};
  if (has_amax(m) && rowwise) out.amax = contract_view(*amax, one, xv.device, "amax");
  if (has_amax(m) && columnwise)
    out.columnwise_amax = contract_view(*columnwise_amax, one, xv.device, "columnwise_amax");
  TESSERA_CHECK(delayed_scale.has_value() == amax_history.has_value(),
                "delayed_scale/amax_history: delayed scaling needs both (or neither)");
  if (delayed_scale) {
    TESSERA_CHECK(m == ScalingMode::kTensor, "delayed_scale: delayed scaling is per-tensor ",
                  "(mode 'tensor'), got mode '", echo(mode), "'");
    const DelayedScalingState state =
        delayed_state(*delayed_scale, *amax_history, xv.device, config);
    out.config = config;
    Quantizer q(config, xv.device, state);
    nb::gil_scoped_release release;
    q.quantize(xv, out, stream_of(stream));
    return;
  }
  Quantizer q(config, xv.device);
  nb::gil_scoped_release release;
  q.quantize(xv, out, stream_of(stream));
}

void delayed_update(const DeviceArray& scale, const DeviceArray& amax_history,
                    const std::string& element, const std::string& amax_compute_algo, int margin,
                    uintptr_t stream) {
  QuantizerConfig config = make_config(ScalingMode::kTensor, parse_dtype(element));
  config.amax_algo = amax_algo_from_name(amax_compute_algo);
  config.margin = margin;
  const Device device = array_device(scale, "scale");
  const DelayedScalingState state = delayed_state(scale, amax_history, device, config);
  Quantizer q(config, device, state);
  nb::gil_scoped_release release;
  q.update(stream_of(stream));
}

}  // namespace

void register_dlpack_quantize(nb::module_& m) {
  m.def("_quantize_into", &quantize_into, nb::arg("x").noconvert(), nb::arg("mode"),
        nb::arg("element"), nb::arg("rowwise"), nb::arg("columnwise"),
        nb::arg("data").noconvert(), nb::arg("scale_inv").noconvert(),
        nb::arg("columnwise_data").noconvert(), nb::arg("columnwise_scale_inv").noconvert(),
        nb::arg("stream") = 0, nb::arg("amax") = nb::none(),
        nb::arg("columnwise_amax") = nb::none(), nb::arg("delayed_scale").noconvert() = nb::none(),
        nb::arg("amax_history").noconvert() = nb::none(), nb::arg("random_hadamard") = false,
        nb::arg("stochastic_rounding") = false, nb::arg("rng_seed") = 0,
        nb::arg("rng_offset") = 0,
        "Quantizes a 2-D CPU/CUDA array with tessera's Quantizer into caller-owned arrays "
        "(codes as uint8 — E2M1 packed two per byte —, FP32/E8M0/E4M3 scale_inv), zero-copy, on "
        "the caller's stream; with delayed_scale and amax_history, delayed scaling on that "
        "caller-owned state; NVFP4's Hadamard transform, stochastic rounding, seed and offset.");
  m.def("_delayed_update", &delayed_update, nb::arg("scale").noconvert(),
        nb::arg("amax_history").noconvert(), nb::arg("element"), nb::arg("amax_compute_algo"),
        nb::arg("margin"), nb::arg("stream") = 0,
        "Delayed scaling's update on caller-owned state: the next scale from the amax history "
        "(max or most_recent, margin), then the history rolls (slot 0 cleared). No host sync.");
}

}  // namespace tessera::python
