// Array-level grouped GEMM for tessera.torch (and any DLPack producer: CuPy, JAX, NumPy): operands,
// offsets, the output and the workspace are caller-owned arrays on the CPU or a CUDA device,
// passed by DLPack with zero copies; the result is written into the caller's `out`; CUDA work is
// enqueued on the caller's stream (an integer cudaStream_t handle). Nothing here allocates device
// or host memory for the data, and nothing synchronizes.
//
// Python surface (private; tessera.torch wraps it with torch's conventions):
//   _gemm_dense_operand(array) -> _GemmOperand
//   _gemm_quantized_operand(data_u8, scale_inv, mode, element, rows, cols, columnwise, amax,
//                           random_hadamard)
//   _grouped_gemm_into(kind, a, b, out, offsets, end_offsets, transpose_a, transpose_b, alpha,
//                      beta, workspace, stream, zero_unused_rows) -> int
//   _array_view(array) -> {data_ptr, shape, dtype, device}   (zero-copy introspection)
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "tessera/config.h"
#include "tessera/core/status.h"

#include "tessera/gemm/grouped_gemm.h"
#include "tessera/quantize/types.h"
#if defined(TESSERA_WITH_CUDA)
#include "gemm/cuda/transpose_16bit.h"
#endif

namespace tessera::python {
void register_dlpack(nb::module_& m);

namespace {

// A GemmOperand plus the arrays that back it (holding them keeps the memory alive for as long as
// the operand object lives). Invariant: every view inside `op` points into an array of `keep`.
struct ArrayOperand {
  GemmOperand op;
  std::vector<DeviceArray> keep;
};

ArrayOperand dense_operand(const DeviceArray& x) {
  ArrayOperand o;
  o.op = GemmOperand::from_dense(device_view(x, "array"));
  o.keep.push_back(x);
  return o;
}

// A 2-D array of codes (any 8-bit element, read as `dtype`) or FP32/E8M0/E4M3 scales, as given.
// The GEMM's can_implement checks its shape against the quantize layer's storage contract.
TensorView matrix_view(const DeviceArray& a, DType dtype, const char* arg) {
  TESSERA_CHECK_STATUS(a.ndim() == 2, Status::kShapeMismatch, arg,
                       ": must be a 2-D array (rows, cols) of the quantized storage; got ",
                       a.ndim(), "-D");
  return device_view(a, dtype, arg);
}

// How scale_inv is read: as its own element type (FP32 scales), except that uint8 bytes are read
// as the mode's 8-bit scale dtype (E8M0 for MXFP8, E4M3 for NVFP4), which DLPack producers such
// as torch carry as uint8. Any other mismatch (e.g. FP32 scales for an MXFP8 mode) reaches the
// GEMM's operand check, which names the field and the dtype it expects.
DType scale_dtype_of(const DeviceArray& scale_inv, ScalingMode mode) {
  const DType given = array_dtype(scale_inv, "scale_inv");
  const ScalingModeInfo* info = find_scaling_mode(mode);
  if (given == DType::kUInt8 && info != nullptr && dtype_bits(info->scale_dtype) == 8)
    return info->scale_dtype;
  return given;
}

// A quantized operand over caller arrays: `data` (2-D uint8 codes) and `scale_inv` (2-D) hold the
// copy that `columnwise` names of a logical (rows, cols) matrix quantized with (mode, element),
// in the storage contract of tessera/quantize/types.h (a columnwise FP8 copy is stored
// transposed; rowwise FP8 scales are (rows, 1); MXFP8 copies both stay (rows, cols), their E8M0
// scales given as uint8 bytes). NVFP4 (element e2m1): `data` holds the packed code bytes
// (stored rows, ceil(stored cols / 2)), E4M3 scales as uint8, `amax` the copy's FP32 global
// amax (1 value, or G: one per group), and random_hadamard says that the (columnwise) copy was
// quantized after the 16-point Hadamard transform (the GEMM undoes it, or pairs two such copies).
ArrayOperand quantized_operand(const DeviceArray& data, const DeviceArray& scale_inv,
                               const std::string& mode, const std::string& element, int64_t rows,
                               int64_t cols, bool columnwise,
                               const std::optional<DeviceArray>& amax, bool random_hadamard) {
  TESSERA_CHECK(rows >= 0 && cols >= 0, "rows/cols: must be >= 0, got (", rows, ", ", cols, ")");
  QuantizerConfig config;
  config.mode = scaling_mode_from_name(mode.c_str());
  config.element = parse_dtype(element);
  const bool nvfp4 = is_family(config.mode, ScaleFamily::kNVFP4);
  TESSERA_CHECK(dtype_bits(config.element) == 8 || config.element == DType::kFloat4E2M1,
                "element: '", echo(element), "' is not accepted here; expected e4m3, e5m2 or e2m1");
  TESSERA_CHECK(!nvfp4 || amax.has_value(), "amax: an NVFP4 operand needs its copy's FP32 "
                "global amax (1 value, or one per group)");
  TESSERA_CHECK(nvfp4 || !amax.has_value(), "amax: only NVFP4 operands carry a global amax; "
                "got one for mode '", echo(mode), "'");
  TESSERA_CHECK(!random_hadamard || (nvfp4 && columnwise), "random_hadamard: only the "
                "columnwise copy of an NVFP4 operand has the Hadamard transform; got mode '",
                mode, "', ", columnwise ? "columnwise" : "rowwise", " copy");
  config.rowwise = !columnwise;
  config.columnwise = columnwise;
  config.random_hadamard = random_hadamard;
  ArrayOperand o;
  QuantizedTensorView q;
  q.config = config;
  q.rows = rows;
  q.cols = cols;
  q.device = array_device(data, "data");
  TESSERA_CHECK(array_device(scale_inv, "scale_inv") == q.device,
                "scale_inv: must be on the device of data (", to_string(q.device), ")");
  TESSERA_CHECK_STATUS(data.ndim() == 2, Status::kShapeMismatch,
                       "data: must be a 2-D array (rows, cols) of the quantized storage; got ",
                       data.ndim(), "-D");
  const TensorView d = codes_view(data, config.element, "data");
  const TensorView s = matrix_view(scale_inv, scale_dtype_of(scale_inv, config.mode), "scale_inv");
  TensorView a;
  if (amax) a = device_view(*amax, "amax");  // dtype, count and device: the GEMM's check
  if (columnwise) {
    q.columnwise_data = d;
    q.columnwise_scale_inv = s;
    q.columnwise_amax = a;
  } else {
    q.data = d;
    q.scale_inv = s;
    q.amax = a;
  }
  o.op = GemmOperand::from_quantized(q, columnwise);
  o.keep = {data, scale_inv};
  if (amax) o.keep.push_back(*amax);
  return o;
}

// Builds the problem and runs it. Returns 0 when it ran, or — when `workspace` is absent or too
// small — the workspace bytes it needs (nothing ran; call again with a 256-byte aligned array of
// at least that many bytes on the operands' device).
int64_t grouped_gemm_into(int kind, const ArrayOperand& a, const ArrayOperand& b,
                          const DeviceArray& out, const std::optional<DeviceArray>& offsets,
                          bool end_offsets, bool transpose_a, bool transpose_b, float alpha,
                          float beta, const std::optional<DeviceArray>& workspace,
                          uintptr_t stream, bool zero_unused_rows) {
  TESSERA_CHECK(kind >= 0 && kind <= 2, "kind: ", kind,
                " is not a grouped GEMM kind; expected 0 (M-grouped), 1 (K-grouped), 2 (batched)");
  GroupedGemmProblem p;
  p.kind = static_cast<GroupedGemmKind>(kind);
  p.a = a.op;
  p.b = b.op;
  p.transpose_a = transpose_a;
  p.transpose_b = transpose_b;
  p.d = device_view(out, "out");
  p.alpha = alpha;
  p.beta = beta;
  p.zero_unused_rows = zero_unused_rows;
  if (offsets) {
    p.group_offsets = device_view(*offsets, "offsets");
    p.offsets_format =
        end_offsets ? GroupOffsetsFormat::kEndOffsets : GroupOffsetsFormat::kStartOffsets;
    p.num_groups = end_offsets ? p.group_offsets.numel() : p.group_offsets.numel() - 1;
  } else {
    TESSERA_CHECK(p.kind == GroupedGemmKind::kBatched, "offsets: required for the ",
                  grouped_gemm_kind_name(p.kind), " kind");
    p.num_groups = p.d.ndim == 3 ? p.d.shape[0] : 0;
  }
  TensorView ws;
  if (workspace) ws = device_view(*workspace, DType::kUInt8, "workspace");
  nb::gil_scoped_release release;
  return run_if_fits(p, ws, stream_of(stream));  // validated once
}

}  // namespace

// out (batch, cols, rows) = each of the `batch` byte matrices src[b] (rows, cols) transposed, by
// the CUDA byte transpose of the grouped GEMM (gemm/cuda/transpose_16bit.h) on `stream`: for
// tessera.torch's MXFP8 weight cache. CUDA uint8 arrays; rows and cols multiples of 4.
void transpose_bytes_into(const DeviceArray& src, const DeviceArray& out, int64_t batch,
                          int64_t rows, int64_t cols, uintptr_t stream) {
  const TensorView s = device_view(src, DType::kUInt8, "src");
  const TensorView o = device_view(out, DType::kUInt8, "out");
  TESSERA_CHECK_STATUS(s.device.is_cuda() && o.device == s.device, Status::kInvalidArgument,
                       "src and out: expected uint8 arrays on one CUDA device");
  TESSERA_CHECK(batch >= 0 && rows >= 0 && cols >= 0 && rows % 4 == 0 && cols % 4 == 0,
                "batch ", batch, ", rows ", rows, ", cols ", cols,
                ": expected non-negative sizes, rows and cols multiples of 4");
  TESSERA_CHECK_STATUS(s.numel() == batch * rows * cols && o.numel() == s.numel(),
                       Status::kShapeMismatch, "src and out: ", s.numel(), " and ", o.numel(),
                       " bytes, expected batch·rows·cols = ", batch * rows * cols);
#if defined(TESSERA_WITH_CUDA)
  const auto* from = static_cast<const uint8_t*>(s.data);
  auto* to = static_cast<uint8_t*>(o.data);
  gemm_cuda::transpose_8bit(from, to, batch, rows, cols, rows, rows,
                            reinterpret_cast<void*>(stream), rows * cols);
#else
  (void)stream;
  TESSERA_FAIL(Status::kNoDevice, "this tessera build has no CUDA backend");
#endif
}

void register_dlpack_gemm(nb::module_& m) {
  register_dlpack(m);
  nb::class_<ArrayOperand>(m, "_GemmOperand",
                           "A grouped GEMM operand over caller-owned DLPack arrays (private).");
  m.def("_gemm_dense_operand", &dense_operand, nb::arg("array").noconvert(),
        "A dense FP32/BF16/FP16 operand (C-contiguous, CPU or CUDA; never copied).");
  m.def("_gemm_quantized_operand", &quantized_operand, nb::arg("data").noconvert(),
        nb::arg("scale_inv").noconvert(), nb::arg("mode"), nb::arg("element"), nb::arg("rows"),
        nb::arg("cols"), nb::arg("columnwise") = false,
        nb::arg("amax").noconvert() = nb::none(), nb::arg("random_hadamard") = false,
        "A quantized operand: uint8 codes (E2M1 packed two per byte) + scale_inv (FP32, or "
        "E8M0 / E4M3 bytes as uint8) of one usage of a logical (rows, cols) matrix; NVFP4 adds "
        "the copy's FP32 global amax and whether it carries the Hadamard transform.");
  m.def("_transpose_bytes_into", &transpose_bytes_into, nb::arg("src").noconvert(),
        nb::arg("out").noconvert(), nb::arg("batch"), nb::arg("rows"), nb::arg("cols"),
        nb::arg("stream") = 0,
        "Batched byte transpose on CUDA (private): out (batch, cols, rows) = src (batch, rows, "
        "cols) with each matrix transposed; rows and cols multiples of 4.");
  m.def("_grouped_gemm_into", &grouped_gemm_into, nb::arg("kind"), nb::arg("a"), nb::arg("b"),
        nb::arg("out").noconvert(), nb::arg("offsets").noconvert() = nb::none(),
        nb::arg("end_offsets") = true, nb::arg("transpose_a") = false,
        nb::arg("transpose_b") = true, nb::arg("alpha") = 1.0f, nb::arg("beta") = 0.0f,
        nb::arg("workspace").noconvert() = nb::none(), nb::arg("stream") = 0,
        nb::arg("zero_unused_rows") = false,
        "Grouped GEMM into a caller-owned `out` on the caller's stream. Returns 0 when it ran, "
        "else the workspace bytes needed (nothing ran). zero_unused_rows (M-grouped): rows of "
        "`out` past the last group's end are zeroed too, on the device.");
}

namespace {
// What tessera sees of an array (no copy): its data pointer, shape, dtype and device. Lets tests
// and users prove zero-copy (the pointer equals the producer's own data pointer).
nb::dict array_view_info(const DeviceArray& x) {
  const TensorView v = device_view(x, "x");
  nb::dict d;
  d["data_ptr"] = reinterpret_cast<uintptr_t>(v.data);
  nb::list shape;
  for (int i = 0; i < v.ndim; ++i) shape.append(v.shape[i]);
  d["shape"] = nb::tuple(shape);
  d["dtype"] = dtype_name(v.dtype);
  d["device"] = to_string(v.device);
  return d;
}
}  // namespace

void register_dlpack(nb::module_& m) {
  m.def("_array_view", &array_view_info, nb::arg("x").noconvert(),
        "What tessera reads of a DLPack array, without copying: data_ptr, shape, dtype, device.");
}

}  // namespace tessera::python
