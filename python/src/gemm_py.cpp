// tessera._tessera.grouped_gemm on NumPy (or any DLPack) arrays: builds a GroupedGemmProblem from
// the arrays and runs it, writing into the caller's output array, or into a zero-filled NumPy
// array it allocates once can_implement has accepted the problem (so a refused problem never
// allocates its output: the caller gets its tessera.Error, not NumPy's MemoryError for an
// output shape that only a wrong operand implied). The Python wrapper (tessera.grouped_gemm in
// __init__.py) carries bfloat16 as uint16.
// An operand is an array, or a dict describing one copy of a quantized tensor (the arrays of
// tessera.quantize(...) plus mode, element, logical shape, usage and scale layout).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/quantize/types.h"

namespace tessera::python {
namespace {

// Inputs are only read (read-only arrays are taken); `out` is written.
using OptInput = std::optional<ReadArray>;
using OptOutput = std::optional<AnyArray>;

// A view of `a`; `hint` ("" = from the array) lets uint16 carry bfloat16/float16 bits.
template <class Array>
TensorView typed_view(const Array& a, const std::string& hint, const char* arg) {
  return view_of(a, hint.empty() ? array_dtype(a, arg) : parse_dtype(hint), arg);
}

// The scale layout of a quantized copy: the one whose scale shape `scale` has; when both layouts
// give that shape, `layout` ("compact"/"swizzled") must say which (never guessed).
ScaleLayout resolve_layout(QuantizerConfig c, int64_t rows, int64_t cols, bool columnwise,
                           const TensorView& scale, const std::string& layout) {
  auto matches = [&](ScaleLayout l) {
    c.scale_layout = l;
    const MatrixShape want = scale_shape(c, rows, cols, columnwise);
    return scale.ndim == 2 && scale.shape[0] == want.rows && scale.shape[1] == want.cols;
  };
  if (!layout.empty()) {
    TESSERA_CHECK(layout == "compact" || layout == "swizzled", "layout: '", echo(layout),
                  "' is not known; expected compact or swizzled");
    return layout == "compact" ? ScaleLayout::kCompact : ScaleLayout::kSwizzled;
  }
  const bool swizzle_possible = scaling_mode_info(c.mode).swizzle;
  const bool compact = matches(ScaleLayout::kCompact);
  const bool swizzled = swizzle_possible && matches(ScaleLayout::kSwizzled);
  TESSERA_CHECK(!(compact && swizzled), "layout: the scales of this ", scaling_mode_name(c.mode),
                " copy have the same shape in the compact and the swizzled layout; pass "
                "layout='compact' or 'swizzled'");
  return swizzled ? ScaleLayout::kSwizzled : ScaleLayout::kCompact;
}

// A 2-D uint8 array of codes as a view of `element` codes (E2M1: two per byte).
TensorView codes_view(const ReadArray& a, DType element, const char* arg) {
  TESSERA_CHECK_STATUS(a.ndim() == 2 && array_dtype(a, arg) == DType::kUInt8,
                       Status::kDTypeMismatch, arg, ": quantized data must be a 2-D uint8 array");
  const int64_t per_byte = element == DType::kFloat4E2M1 ? 2 : 1;
  return TensorView::contiguous(const_cast<void*>(a.data()), element,
                                {static_cast<int64_t>(a.shape(0)),
                                 static_cast<int64_t>(a.shape(1)) * per_byte});
}

// The dict of tessera.grouped_gemm's wrapper → a quantized GemmOperand over its arrays (which
// the dict keeps alive for the call).
GemmOperand quantized_operand(const nb::dict& d, const char* arg) {
  QuantizedTensorView q;
  q.config = make_config(scaling_mode_from_name(nb::cast<std::string>(d["mode"]).c_str()),
                         parse_dtype(nb::cast<std::string>(d["element"])));
  q.rows = nb::cast<int64_t>(d["rows"]);
  q.cols = nb::cast<int64_t>(d["cols"]);
  const bool cw = nb::cast<bool>(d["columnwise"]);
  const ReadArray data = nb::cast<ReadArray>(d["data"]);
  const ReadArray scale = nb::cast<ReadArray>(d["scale_inv"]);
  // FP32 scales arrive as float32 arrays, E8M0 / E4M3 ones as uint8: the table says which.
  const DType scale_dtype = array_dtype(scale, arg) == DType::kFloat32
                                ? DType::kFloat32
                                : scaling_mode_info(q.config.mode).scale_dtype;
  const TensorView s = view_of(scale, scale_dtype, arg);
  q.config.scale_layout =
      resolve_layout(q.config, q.rows, q.cols, cw, s, nb::cast<std::string>(d["layout"]));
  (cw ? q.columnwise_data : q.data) = codes_view(data, q.config.element, arg);
  (cw ? q.columnwise_scale_inv : q.scale_inv) = s;
  if (!d["amax"].is_none()) {
    (cw ? q.columnwise_amax : q.amax) =
        view_of(nb::cast<ReadArray>(d["amax"]), DType::kFloat32, arg);
  }
  return GemmOperand::from_quantized(q, cw);
}

// An operand: an array (dense, dtype hint) or a quantized-copy dict.
GemmOperand operand_of(const nb::object& x, const std::string& hint, const char* arg) {
  if (nb::isinstance<nb::dict>(x)) return quantized_operand(nb::borrow<nb::dict>(x), arg);
  return GemmOperand::from_dense(typed_view(nb::cast<ReadArray>(x), hint, arg));
}

GroupedGemmKind parse_kind(const std::string& kind) {
  if (kind == "m_grouped") return GroupedGemmKind::kMGrouped;
  if (kind == "k_grouped") return GroupedGemmKind::kKGrouped;
  if (kind == "batched") return GroupedGemmKind::kBatched;
  TESSERA_FAIL(Status::kInvalidArgument, "kind: '", echo(kind),
               "' is not accepted; expected 'm_grouped', 'k_grouped' or 'batched'");
}

GroupOffsetsFormat parse_offsets_format(const std::string& f) {
  if (f == "start") return GroupOffsetsFormat::kStartOffsets;
  if (f == "end") return GroupOffsetsFormat::kEndOffsets;
  TESSERA_FAIL(Status::kInvalidArgument, "offsets_format: '", echo(f),
               "' is not accepted; expected 'start' (G+1, leading 0) or 'end' (G, torch)");
}

// A zero-filled NumPy array of `shape` and `dt` (bfloat16 as uint16 bits); NumPy's own
// allocation (calloc: pages are zeroed when first touched). kOutOfMemory when it does not fit.
nb::object zeros_numpy(const std::vector<int64_t>& shape, DType dt) {
  const char* np_dtype = dt == DType::kFloat32 ? "float32" : (dt == DType::kFloat16 ? "float16"
                                                                                     : "uint16");
  nb::list extents;
  for (int64_t e : shape) extents.append(e);
  try {
    return nb::module_::import_("numpy").attr("zeros")(nb::tuple(extents), np_dtype);
  } catch (const nb::python_error& e) {
    if (!e.matches(PyExc_MemoryError) && !e.matches(PyExc_ValueError)) throw;
    TESSERA_FAIL(Status::kOutOfMemory, "out: a ", dtype_name(dt), " output of ",
                 shape.size(), "-D shape with ", checked_numel(shape.data(),
                                                               static_cast<int>(shape.size()),
                                                               "out: shape"),
                 " elements cannot be allocated (", e.what(), ")");
  }
}

// out: the caller's array (then None is returned), or None: `out_shape` / `out_dtype` describe
// the output this call allocates after can_implement accepts the problem, and returns.
nb::object grouped_gemm_py(const nb::object& a, const std::string& a_dtype, const nb::object& b,
                           const std::string& b_dtype, const OptOutput& out,
                           const std::vector<int64_t>& out_shape, const std::string& out_dtype,
                           const OptInput& offsets, const std::string& kind, int64_t num_groups,
                           bool transpose_a, bool transpose_b, const std::string& offsets_format,
                           int64_t max_total_rows, float alpha, const OptInput& group_alpha,
                           float beta, const OptInput& bias, const std::string& bias_dtype) {
  GroupedGemmProblem p;
  p.kind = parse_kind(kind);
  p.num_groups = num_groups;
  p.a = operand_of(a, a_dtype, "a");
  p.b = operand_of(b, b_dtype, "b");
  if (out) {
    p.d = typed_view(*out, out_dtype, "out");
  } else {
    // can_implement reads no element of D: until it accepts, a placeholder address stands for
    // the output that is not allocated yet. The output will be new memory, which overlaps no
    // input; the placeholder is the last aligned address of the address space, where no input
    // can be, so that can_implement's overlap check sees no overlap either (D's byte range lies
    // above every input, or wraps past the end of the address space and ends below them).
    const DType dt = parse_dtype(out_dtype);
    const int ndim = static_cast<int>(out_shape.size());
    checked_dtype_bytes(dt, checked_numel(out_shape.data(), ndim, "out: shape"), "out: bytes");
    void* const placeholder =
        reinterpret_cast<void*>(~uintptr_t{0} & ~uintptr_t{kBufferAlignment - 1});
    p.d = TensorView::contiguous(placeholder, dt, out_shape.data(), ndim);
  }
  p.transpose_a = transpose_a;
  p.transpose_b = transpose_b;
  if (offsets) p.group_offsets = view_of(*offsets, array_dtype(*offsets, "offsets"), "offsets");
  p.offsets_format = parse_offsets_format(offsets_format);
  p.max_total_rows = max_total_rows;
  p.alpha = alpha;
  if (group_alpha) {
    TESSERA_CHECK_STATUS(array_dtype(*group_alpha, "group_alpha") == DType::kFloat32,
                         Status::kDTypeMismatch, "group_alpha: must be float32");
    p.group_alpha = view_of(*group_alpha, DType::kFloat32, "group_alpha");
  }
  p.beta = beta;
  if (bias) p.bias = typed_view(*bias, bias_dtype, "bias");
  nb::object result = nb::none();
  if (!out) {
    std::string reason;
    const Status s = can_implement(p, &reason);
    if (s != Status::kOk) throw Error(s, reason);
    result = zeros_numpy(out_shape, p.d.dtype);
    p.d.data = nb::cast<AnyArray>(result).data();
  }
  nb::gil_scoped_release release;
  grouped_gemm(p);
  return result;
}

}  // namespace

void register_gemm(nb::module_& m) {
  m.def("grouped_gemm", &grouped_gemm_py, nb::arg("a"), nb::arg("a_dtype"), nb::arg("b"),
        nb::arg("b_dtype"), nb::arg("out").none(), nb::arg("out_shape"), nb::arg("out_dtype"),
        nb::arg("offsets").none(),
        nb::arg("kind"), nb::arg("num_groups"), nb::arg("transpose_a"), nb::arg("transpose_b"),
        nb::arg("offsets_format"), nb::arg("max_total_rows"), nb::arg("alpha"),
        nb::arg("group_alpha").none(), nb::arg("beta"), nb::arg("bias").none(),
        nb::arg("bias_dtype"),
        "Low-level grouped GEMM into `out`, or (out=None) into a zero-filled array of out_shape "
        "allocated once the problem is accepted, which it returns (see tessera.grouped_gemm). "
        "Raises tessera.Error with the can_implement status and reason.");
  m.def("cpu_bf16_gemm_path", &cpu_bf16_gemm_path,
        "What the CPU backend runs for dense BF16 x BF16 operands: the native kernel (e.g. "
        "'onednn 2.6.3 brg:avx512_core_bf16') or 'fp32 onednn matmul (<why>)' / "
        "'fp32 sgemm (<why>)' (the FP32 path).");
}

}  // namespace tessera::python
