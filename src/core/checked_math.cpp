// Overflow-checked size arithmetic (GCC/Clang overflow builtins).
#include "tessera/core/checked_math.h"

#include "tessera/core/status.h"

namespace tessera {

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  TESSERA_CHECK_STATUS(!__builtin_mul_overflow(a, b, &r), Status::kOutOfRange, what, ": ", a,
                       " * ", b, " overflows int64 (sizes past 2^63 - 1 are not representable)");
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  TESSERA_CHECK_STATUS(!__builtin_add_overflow(a, b, &r), Status::kOutOfRange, what, ": ", a,
                       " + ", b, " overflows int64 (sizes past 2^63 - 1 are not representable)");
  return r;
}

int64_t ceil_div_nonneg(int64_t a, int64_t b) noexcept { return a / b + (a % b != 0 ? 1 : 0); }

int64_t checked_round_up(int64_t a, int64_t b, const char* what) {
  return checked_mul(ceil_div_nonneg(a, b), b, what);
}

int64_t checked_numel(const int64_t* shape, int ndim, const char* what) {
  int64_t n = 1, nonzero = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    n = checked_mul(n, shape[i], what);
    if (shape[i] != 0) nonzero = checked_mul(nonzero, shape[i], what);
  }
  return n;
}

int64_t checked_dtype_bytes(DType dt, int64_t numel, const char* what) {
  const int bits = dtype_bits(dt);
  if (bits >= 8) return checked_mul(numel, bits / 8, what);
  return ceil_div_nonneg(numel, 8 / bits);  // sub-byte: fewer bytes than elements
}

}  // namespace tessera
