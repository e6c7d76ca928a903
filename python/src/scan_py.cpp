// tessera._tessera.splits_to_offsets_multi on NumPy (or any DLPack CPU) arrays.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "tessera/core/status.h"
#include "tessera/scan/splits_to_offsets.h"

namespace tessera::python {
namespace {

nb::dlpack::dtype raw_int(int bits) {
  nb::dlpack::dtype t{};
  t.code = static_cast<uint8_t>(nb::dlpack::dtype_code::Int);
  t.bits = static_cast<uint8_t>(bits);
  t.lanes = 1;
  return t;
}

// One NumPy array per output: stride × inclusive scan (of roundup(s, align)), length N or N+1.
nb::list splits_to_offsets_multi_py(const ReadArray& splits, const std::vector<int64_t>& strides,
                                    const std::vector<bool>& leading_zero,
                                    const std::vector<std::string>& dtypes,
                                    const std::vector<int64_t>& aligns) {
  const size_t count = strides.size();
  TESSERA_CHECK_STATUS(leading_zero.size() == count && dtypes.size() == count &&
                           (aligns.empty() || aligns.size() == count),
                       Status::kShapeMismatch, "splits_to_offsets_multi: strides (", count,
                       "), leading_zero (", leading_zero.size(), "), dtypes (", dtypes.size(),
                       ") and aligns (", aligns.size(), ", or empty) must have one entry per "
                       "output");
  const TensorView sv = view_of(splits, array_dtype(splits, "splits"), "splits");
  TESSERA_CHECK(sv.device.is_cpu(), "splits: tessera.splits_to_offsets_multi takes host arrays; "
                "got ", to_string(sv.device));
  TESSERA_CHECK_STATUS(sv.ndim == 1, Status::kShapeMismatch, "splits: must be 1-D, got ",
                       sv.to_string());
  for (size_t k = 0; k < aligns.size(); ++k) {
    const int64_t a = aligns[k];
    TESSERA_CHECK(a >= 1 && (a & (a - 1)) == 0, "aligns[", k, "]: ", a, " is not accepted; "
                  "group alignments are powers of two (1 = none, 16, 32, 128, ...)");
  }
  std::vector<OffsetsSpec> specs(count);
  for (size_t k = 0; k < count; ++k) {
    specs[k] = {strides[k], leading_zero[k], parse_dtype(dtypes[k]),
                aligns.empty() ? 1 : aligns[k]};
  }
  const int64_t n = sv.shape[0];
  nb::list arrays;
  std::vector<TensorView> outputs;
  for (size_t k = 0; k < count; ++k) {
    const bool is_int = specs[k].dtype == DType::kInt32 || specs[k].dtype == DType::kInt64;
    TESSERA_CHECK_STATUS(is_int, Status::kDTypeMismatch, "dtypes[", k, "]: '", echo(dtypes[k]),
                         "' is not accepted; expected int32 or int64");
    void* data = nullptr;
    const int64_t len = offsets_length(n, specs[k]);
    arrays.append(new_numpy({len}, raw_int(dtype_bits(specs[k].dtype)), &data));
    static int64_t empty_storage = 0;  // a zero-length array may have no storage
    outputs.push_back(TensorView::contiguous(data != nullptr ? data : &empty_storage,
                                             specs[k].dtype, {len}));
  }
  static int64_t empty_splits = 0;
  const TensorView splits_view =
      sv.data != nullptr ? sv : TensorView::contiguous(&empty_splits, sv.dtype, {0});
  {
    nb::gil_scoped_release release;
    splits_to_offsets_multi(splits_view, specs, outputs);
  }
  return arrays;
}

}  // namespace

void register_scan(nb::module_& m) {
  m.def("splits_to_offsets_multi", &splits_to_offsets_multi_py, nb::arg("splits"),
        nb::arg("strides"), nb::arg("leading_zero"), nb::arg("dtypes"),
        nb::arg("aligns") = std::vector<int64_t>{},
        "One inclusive scan of `splits` (1-D int32/int64, every value >= 0), many outputs: "
        "output k = strides[k] * cumsum(splits) (of roundup(splits, aligns[k]) when aligns is "
        "given) as dtypes[k] ('int32' or 'int64'), with a leading 0 (length N+1) when "
        "leading_zero[k]. Raises tessera.Error on a negative split or an offset that does not "
        "fit its dtype.");
}

}  // namespace tessera::python
