// The reference's reading of GEMM operands into FP64 (see reference_operand.h).
#include "gemm/reference/reference_operand.h"

#include "gemm/gemm_backend.h"
#include "tessera/core/dispatch.h"

namespace tessera::detail {

ReferenceMatrix reference_read(const GemmOperand& o, int64_t rows) {
  ReferenceMatrix m;
  m.rows = rows;
  m.cols = operand_cols(o);
  m.values.resize(static_cast<size_t>(m.rows * m.cols));
  TESSERA_CHECK_STATUS(!o.is_quantized, Status::kUnsupported,
                       "reference: quantized operands are not supported yet");
  dispatch_float_input(o.dense.dtype, "operand", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = o.dense.as<T>();
    for (int64_t i = 0; i < m.rows * m.cols; ++i) m.values[i] = to_float(src[i]);
  });
  return m;
}

}  // namespace tessera::detail
