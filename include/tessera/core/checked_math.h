// Overflow-checked int64 size arithmetic: every element count, byte size and padded extent that
// comes from a caller's sizes goes through these, so that a size past INT64_MAX is reported as
// Error(Status::kOutOfRange) naming the argument instead of wrapping around.
//
// `what` names the quantity at the call site ("A: shape", "rows", ...); it leads the message.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera {

// a * b, a + b; throw Error(kOutOfRange) "<what>: a * b overflows int64" when the exact result
// does not fit.
int64_t checked_mul(int64_t a, int64_t b, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* what);
// ceil(a / b) for a >= 0, b > 0 (never overflows); round_up(a, b) = ceil(a / b) * b, checked.
int64_t ceil_div_nonneg(int64_t a, int64_t b) noexcept;
int64_t checked_round_up(int64_t a, int64_t b, const char* what);
// Product of ndim extents (each >= 0). Throws kOutOfRange when the product of the non-zero
// extents overflows, even if another extent is 0: every product of a subset of the dims (rows
// of a 3-D operand, strides) of an accepted shape then fits int64.
int64_t checked_numel(const int64_t* shape, int ndim, const char* what);
// Bytes of `numel` elements of `dt` (sub-byte types rounded up), checked.
int64_t checked_dtype_bytes(DType dt, int64_t numel, const char* what);

}  // namespace tessera
