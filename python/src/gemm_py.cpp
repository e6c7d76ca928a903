// tessera._tessera.grouped_gemm on NumPy (or any DLPack) arrays: builds a GroupedGemmProblem from
// the arrays and runs it, writing into the caller's output array. The Python wrapper
// (tessera.grouped_gemm in __init__.py) allocates the output and carries bfloat16 as uint16.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "tessera/core/status.h"
#include "tessera/gemm/grouped_gemm.h"

namespace tessera::python {
namespace {

using OptArray = std::optional<AnyArray>;

// A view of `a`; `hint` ("" = from the array) lets uint16 carry bfloat16/float16 bits.
TensorView typed_view(const AnyArray& a, const std::string& hint, const char* arg) {
  return view_of(a, hint.empty() ? array_dtype(a, arg) : parse_dtype(hint), arg);
}

GroupedGemmKind parse_kind(const std::string& kind) {
  if (kind == "m_grouped") return GroupedGemmKind::kMGrouped;
  if (kind == "k_grouped") return GroupedGemmKind::kKGrouped;
  if (kind == "batched") return GroupedGemmKind::kBatched;
  TESSERA_FAIL(Status::kInvalidArgument, "kind: '", kind,
               "' is not accepted; expected 'm_grouped', 'k_grouped' or 'batched'");
}

GroupOffsetsFormat parse_offsets_format(const std::string& f) {
  if (f == "start") return GroupOffsetsFormat::kStartOffsets;
  if (f == "end") return GroupOffsetsFormat::kEndOffsets;
  TESSERA_FAIL(Status::kInvalidArgument, "offsets_format: '", f,
               "' is not accepted; expected 'start' (G+1, leading 0) or 'end' (G, torch)");
}

void grouped_gemm_py(const AnyArray& a, const std::string& a_dtype, const AnyArray& b,
                     const std::string& b_dtype, const AnyArray& out, const std::string& out_dtype,
                     const OptArray& offsets, const std::string& kind, int64_t num_groups,
                     bool transpose_a, bool transpose_b, const std::string& offsets_format,
                     int64_t max_total_rows, float alpha, const OptArray& group_alpha, float beta,
                     const OptArray& bias, const std::string& bias_dtype) {
  GroupedGemmProblem p;
  p.kind = parse_kind(kind);
  p.num_groups = num_groups;
  p.a = GemmOperand::from_dense(typed_view(a, a_dtype, "a"));
  p.b = GemmOperand::from_dense(typed_view(b, b_dtype, "b"));
  p.d = typed_view(out, out_dtype, "out");
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
  nb::gil_scoped_release release;
  grouped_gemm(p);
}

}  // namespace

void register_gemm(nb::module_& m) {
  m.def("grouped_gemm", &grouped_gemm_py, nb::arg("a"), nb::arg("a_dtype"), nb::arg("b"),
        nb::arg("b_dtype"), nb::arg("out"), nb::arg("out_dtype"), nb::arg("offsets").none(),
        nb::arg("kind"), nb::arg("num_groups"), nb::arg("transpose_a"), nb::arg("transpose_b"),
        nb::arg("offsets_format"), nb::arg("max_total_rows"), nb::arg("alpha"),
        nb::arg("group_alpha").none(), nb::arg("beta"), nb::arg("bias").none(),
        nb::arg("bias_dtype"),
        "Low-level grouped GEMM into `out` (see tessera.grouped_gemm). Raises tessera.Error "
        "with the can_implement status and reason.");
}

}  // namespace tessera::python
