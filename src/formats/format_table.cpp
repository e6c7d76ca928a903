// Look-ups into the constexpr format table.
#include "tessera/formats/format_table.h"

#include "tessera/core/status.h"

namespace tessera {

const FormatInfo& format_info(DType dt) {
  for (const FormatInfo& f : kFormatTable) {
    if (f.dtype == dt) return f;
  }
  TESSERA_FAIL(Status::kDTypeMismatch, "dtype ", dtype_name(dt),
               " is not a floating-point format; expected float32, bfloat16, float16, e4m3, "
               "e5m2, e8m0 or e2m1");
}

std::span<const FormatInfo> format_table() { return kFormatTable; }

}  // namespace tessera
