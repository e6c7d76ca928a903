// tessera._tessera.encode / decode and the format table, on NumPy (or any DLPack CPU) arrays.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "tessera/core/status.h"
#include "tessera/formats/convert.h"
#include "tessera/formats/format_table.h"

namespace tessera::python {
namespace {

std::vector<int64_t> shape_of(const AnyArray& a) {
  std::vector<int64_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
  return s;
}

// src_dtype: "" = from the array; "bfloat16" lets a uint16 array carry bfloat16 bits.
nb::object encode_py(const AnyArray& x, const std::string& fmt_name, const std::string& src_dtype) {
  const DType fmt = parse_dtype(fmt_name);
  const bool encodable = fmt == DType::kBFloat16 || fmt == DType::kFloat16 ||
                        fmt == DType::kFloat8E4M3 || fmt == DType::kFloat8E5M2 ||
                        fmt == DType::kFloat8E8M0 || fmt == DType::kFloat4E2M1;
  TESSERA_CHECK(encodable,
                "format: '", echo(fmt_name), "' is not an encodable format; expected e4m3, e5m2, e8m0, "
                "e2m1, bfloat16 or float16");
  const DType in = src_dtype.empty() ? array_dtype(x, "x") : parse_dtype(src_dtype);
  const TensorView src = view_of(x, in, "x");
  TESSERA_CHECK(src.device.is_cpu(), "x: tessera.encode takes host arrays; got ",
                to_string(src.device));
  std::vector<int64_t> shape = shape_of(x);  // a 0-d array gives 0-d codes
  if (fmt == DType::kFloat4E2M1) {
    // Two codes per byte along the last dimension, as decode reads them: a row must not share a
    // byte with the next one.
    TESSERA_CHECK(!shape.empty(), "x: e2m1 packs two codes per byte along the last dimension, "
                  "and a 0-d array has none");
    TESSERA_CHECK(shape.size() == 1 || shape.back() % 2 == 0, "x: a multi-row e2m1 array needs an "
                  "even last dimension (each row packed on its own bytes), got ", shape.back());
    shape.back() = (shape.back() + 1) / 2;
  }
  void* data = nullptr;
  nb::object out = new_numpy(shape, raw_uint(dtype_bits(fmt) == 16 ? 16 : 8), &data);
  const TensorView dst = TensorView::contiguous(data, fmt, {src.numel()});
  TensorView flat_src = TensorView::contiguous(src.data, in, {src.numel()});
  {
    nb::gil_scoped_release release;
    encode(flat_src, dst);
  }
  return out;
}

nb::object decode_py(const AnyArray& codes, const std::string& fmt_name, int64_t last_dim) {
  const DType fmt = parse_dtype(fmt_name);
  const bool decodable = fmt == DType::kBFloat16 || fmt == DType::kFloat16 ||
                         fmt == DType::kFloat8E4M3 || fmt == DType::kFloat8E5M2 ||
                         fmt == DType::kFloat8E8M0 || fmt == DType::kFloat4E2M1;
  TESSERA_CHECK(decodable, "format: '", echo(fmt_name), "' is not a decodable format; expected "
                "e4m3, e5m2, e8m0, e2m1, bfloat16 or float16");
  // Codes are unsigned integers of the format's width (what encode returns): uint16 for
  // bfloat16/float16, uint8 for the 8- and 4-bit formats.
  const int want_bits = dtype_bits(fmt) == 16 ? 16 : 8;
  const auto code = static_cast<nb::dlpack::dtype_code>(codes.dtype().code);
  TESSERA_CHECK_STATUS(codes.dtype().bits == want_bits && codes.dtype().lanes == 1 &&
                           code == nb::dlpack::dtype_code::UInt,
                       Status::kDTypeMismatch, "codes: format ", fmt_name, " expects ",
                       want_bits == 16 ? "uint16" : "uint8", " codes (as tessera.encode returns)");
  const TensorView raw =
      view_of(codes, want_bits == 16 ? DType::kBFloat16 : DType::kUInt8, "codes");
  TESSERA_CHECK(raw.device.is_cpu(), "codes: tessera.decode takes host arrays");
  std::vector<int64_t> shape = shape_of(codes);  // 0-d codes give a 0-d array
  if (fmt == DType::kFloat4E2M1) {
    TESSERA_CHECK(!shape.empty(), "codes: e2m1 codes are packed along the last dimension, and a "
                  "0-d array has none");
    const int64_t full = shape.back() * 2;
    TESSERA_CHECK(last_dim < 0 || last_dim == full || last_dim == full - 1, "last_dim: ", last_dim,
                  " does not fit ", shape.back(), " packed bytes (expected ", full - 1, " or ",
                  full, ")");
    shape.back() = last_dim < 0 ? full : last_dim;
  }
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  TESSERA_CHECK(fmt != DType::kFloat4E2M1 || shape.size() == 1 || shape.back() % 2 == 0,
                "codes: a multi-row e2m1 array needs an even last dimension");
  void* data = nullptr;
  nb::object out = new_numpy(shape, raw_float32(), &data);
  {
    nb::gil_scoped_release release;
    decode(TensorView::contiguous(raw.data, fmt, {numel}),
           TensorView::contiguous(data, DType::kFloat32, {numel}));
  }
  return out;
}

nb::list format_table_py() {
  nb::list rows;
  for (const FormatInfo& f : format_table()) {
    nb::dict d;
    d["name"] = f.name;
    d["ml_dtypes"] = f.ml_dtypes_name;
    d["bits"] = f.bits;
    d["exponent_bits"] = f.exponent_bits;
    d["mantissa_bits"] = f.mantissa_bits;
    d["exponent_bias"] = f.exponent_bias;
    d["max_finite"] = f.max_finite;
    d["min_normal"] = f.min_normal;
    d["min_subnormal"] = f.min_subnormal;
    d["has_inf"] = f.has_inf;
    d["has_nan"] = f.has_nan;
    rows.append(d);
  }
  return rows;
}

}  // namespace

void register_formats(nb::module_& m) {
  m.def("encode", &encode_py, nb::arg("x").noconvert(), nb::arg("format"), nb::arg("src_dtype") = "",
        "Encode a float32/float16/bfloat16 array into codes of `format` (RNE, saturating).");
  m.def("decode", &decode_py, nb::arg("codes").noconvert(), nb::arg("format"), nb::arg("last_dim") = -1,
        "Decode codes of `format` into a float32 array.");
  m.def("format_table", &format_table_py, "The element format table as a list of dicts.");
}

}  // namespace tessera::python
