// FP32 images of GEMM operands for the CPU backend (see operand_fp32.h).
#include "gemm/cpu/operand_fp32.h"

#include "gemm/cpu/blocking_parallel.h"
#include "tessera/core/buffer.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/dispatch.h"

namespace tessera::detail {
namespace {

constexpr int64_t kParallelMin = 1 << 16;  // elements per thread, at least

bool used_in_place(const GemmOperand& o) {
  return !o.is_quantized && o.dense.dtype == DType::kFloat32;
}

// Rows to produce: the live ones, or every stored one for a Hadamard-transformed copy, whose
// 16-row blocks were transformed over the whole stored copy (the emulated path undoes it).
int64_t image_rows(const GemmOperand& o, int64_t rows) {
  return o.is_quantized && o.columnwise && o.quantized.config.random_hadamard ? o.quantized.rows
                                                                               : rows;
}

}  // namespace

int64_t fp32_region_bytes(int64_t elems) {
  const int64_t a = static_cast<int64_t>(kBufferAlignment);
  const char* what = "CPU grouped GEMM workspace (float32 operand copy)";
  return checked_round_up(checked_mul(elems, 4, what), a, what);
}

float* WorkspaceCursor::take_floats(int64_t elems) {
  const int64_t need = fp32_region_bytes(elems);
  TESSERA_CHECK_STATUS(used + need <= bytes, Status::kInternal, "CPU grouped GEMM workspace: ",
                       need, " more bytes needed past ", used, " of ", bytes);
  float* p = reinterpret_cast<float*>(base + used);
  used += need;
  return p;
}

int64_t operand_fp32_bytes(const GemmOperand& o, int64_t rows, int64_t cols) {
  return used_in_place(o) ? 0
                          : fp32_region_bytes(checked_mul(image_rows(o, rows), cols,
                                                          "operand rows x cols"));
}

Fp32Image operand_fp32(const GemmOperand& o, const char* name, int64_t rows,
                       const std::vector<int64_t>& group_starts, WorkspaceCursor& ws) {
  const int64_t cols = o.is_quantized ? o.quantized.cols : o.dense.shape[o.dense.ndim - 1];
  if (used_in_place(o)) return {o.dense.as<float>(), cols, false};
  float* out = ws.take_floats(image_rows(o, rows) * cols);
  if (o.is_quantized) return cpu::dequantize_operand(o, image_rows(o, rows), group_starts, out);
  const int64_t n = rows * cols;
  dispatch_float_input(o.dense.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = o.dense.as<T>();
    cpu::parallel_ranges(n, kParallelMin, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = to_float(src[i]);
    });
  });
  return {out, cols, false};
}

void store_fp32(const float* src, const TensorView& out, int64_t elems) {
  dispatch_float_input(out.dtype, "D", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.as<T>();
    cpu::parallel_ranges(elems, kParallelMin, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = from_float<T>(src[i]);
    });
  });
}

}  // namespace tessera::detail
