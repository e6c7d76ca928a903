// tessera._tessera.encode / decode and the format table, on NumPy (or any DLPack CPU) arrays.
// Inputs are only read: read-only arrays are taken.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "tessera/core/status.h"
#include "tessera/formats/convert.h"
#include "tessera/formats/format_table.h"

namespace tessera::python {
namespace {

std::vector<int64_t> shape_of(const ReadArray& a) {
  std::vector<int64_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
  return s;
}

// src_dtype: "" = from the array; "bfloat16" lets a uint16 array carry bfloat16 bits.
nb::object encode_py(const ReadArray& x, const std::string& fmt_name, const std::string& src_dtype) {
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

// The element type name of an array as NumPy names it, from its DLPack type ("uint8", "int16",
// "float16", "bfloat16", ...; "?" for a type outside those).
std::string dlpack_type_name(nb::dlpack::dtype t) {
  const char* kind = "?";
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: return "?";
  }
  return std::string(kind) + std::to_string(t.bits);
}

// One E2M1 value per byte (ml_dtypes.float4_e2m1fn: the code in the low nibble) packed two per
// byte, element 2j in the low nibble, as tessera's e2m1 codes are.
std::vector<uint8_t> pack_e2m1(const uint8_t* values, int64_t n) {
  std::vector<uint8_t> packed(static_cast<size_t>((n + 1) / 2), 0);
  for (int64_t i = 0; i < n; ++i)
    packed[static_cast<size_t>(i / 2)] |= static_cast<uint8_t>((values[i] & 0xF) << (4 * (i % 2)));
  return packed;
}

// codes_dtype: the NumPy dtype name of the caller's array ("" = its DLPack type), which the
// Python wrapper passes when it views an array of the format itself (float16, bfloat16,
// float8_*, float4_e2m1fn) as raw unsigned bits. Codes are either raw bits (uint16 for
// bfloat16/float16, uint8 for the 8- and 4-bit formats, as encode returns them) or an array of
// the format's own dtype (format table: ml_dtypes_name); anything else is refused, not read as
// bits of another format.
nb::object decode_py(const ReadArray& codes, const std::string& fmt_name, int64_t last_dim,
                     const std::string& codes_dtype) {
  const DType fmt = parse_dtype(fmt_name);
  const bool decodable = fmt == DType::kBFloat16 || fmt == DType::kFloat16 ||
                         fmt == DType::kFloat8E4M3 || fmt == DType::kFloat8E5M2 ||
                         fmt == DType::kFloat8E8M0 || fmt == DType::kFloat4E2M1;
  TESSERA_CHECK(decodable, "format: '", echo(fmt_name), "' is not a decodable format; expected "
                "e4m3, e5m2, e8m0, e2m1, bfloat16 or float16");
  const FormatInfo& info = format_info(fmt);
  const int want_bits = dtype_bits(fmt) == 16 ? 16 : 8;
  const std::string raw_name = want_bits == 16 ? "uint16" : "uint8";
  const std::string got = codes_dtype.empty() ? dlpack_type_name(codes.dtype()) : codes_dtype;
  const bool own = got == info.ml_dtypes_name;
  // Raw codes are unsigned integers; an array of the format itself may arrive as such (the
  // wrapper's view) or as its own DLPack type: either way of the format's width.
  const bool array_bits_fit =
      codes.dtype().bits == want_bits && codes.dtype().lanes == 1 &&
      (own || codes.dtype().code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt));
  TESSERA_CHECK_STATUS((got == raw_name || own) && array_bits_fit, Status::kDTypeMismatch,
                       "codes: format ", info.name, " expects ", raw_name,
                       " codes (as tessera.encode returns) or an array of ", info.ml_dtypes_name,
                       "; got ", echo(got), " (the bits of another type are not read as ",
                       info.name, ")");
  const TensorView raw =
      view_of(codes, want_bits == 16 ? DType::kBFloat16 : DType::kUInt8, "codes");
  TESSERA_CHECK(raw.device.is_cpu(), "codes: tessera.decode takes host arrays");
  std::vector<int64_t> shape = shape_of(codes);  // 0-d codes give a 0-d array
  std::vector<uint8_t> packed;
  const void* source = raw.data;
  if (fmt == DType::kFloat4E2M1 && own) {
    // One value per byte: the result has the array's shape; the values are packed as one flat
    // run, which decode reads flat (so rows of any length are fine).
    TESSERA_CHECK(!shape.empty(), "codes: a 0-d float4_e2m1fn array has no last dimension");
    TESSERA_CHECK(last_dim < 0 || last_dim == shape.back(), "last_dim: ", last_dim,
                  " differs from the ", shape.back(), " values of a float4_e2m1fn array");
    packed = pack_e2m1(static_cast<const uint8_t*>(raw.data), raw.numel());
    source = packed.data();
  } else if (fmt == DType::kFloat4E2M1) {
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
  TESSERA_CHECK(fmt != DType::kFloat4E2M1 || own || shape.size() == 1 || shape.back() % 2 == 0,
                "codes: a multi-row e2m1 array needs an even last dimension");
  void* data = nullptr;
  nb::object out = new_numpy(shape, raw_float32(), &data);
  {
    nb::gil_scoped_release release;
    decode(TensorView::contiguous(const_cast<void*>(source), fmt, {numel}),
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
  m.def("decode", &decode_py, nb::arg("codes").noconvert(), nb::arg("format"),
        nb::arg("last_dim") = -1, nb::arg("codes_dtype") = "",
        "Decode codes of `format` (raw uint8/uint16 bits, or an array of the format itself whose "
        "NumPy dtype name is `codes_dtype`) into a float32 array.");
  m.def("format_table", &format_table_py, "The element format table as a list of dicts.");
}

}  // namespace tessera::python
