// FP32 images of GEMM operands for the CPU backend (see operand_fp32.h).
#include "gemm/cpu/operand_fp32.h"

#include "tessera/core/buffer.h"
#include "tessera/core/dispatch.h"

namespace tessera::detail {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements below which a loop stays serial

bool used_in_place(const GemmOperand& o) {
  return !o.is_quantized && o.dense.dtype == DType::kFloat32;
}

}  // namespace

int64_t fp32_region_bytes(int64_t elems) {
  const int64_t a = static_cast<int64_t>(kBufferAlignment);
  return (elems * 4 + a - 1) / a * a;
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
  return used_in_place(o) ? 0 : fp32_region_bytes(rows * cols);
}

const float* operand_fp32(const GemmOperand& o, const char* name, int64_t rows, int64_t cols,
                          WorkspaceCursor& ws) {
  if (used_in_place(o)) return o.dense.as<float>();
  float* out = ws.take_floats(rows * cols);
  const int64_t n = rows * cols;
  TESSERA_CHECK_STATUS(!o.is_quantized, Status::kUnsupported, name,
                       ": quantized operands are not supported on the CPU yet");
  dispatch_float_input(o.dense.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = o.dense.as<T>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) out[i] = to_float(src[i]);
  });
  return out;
}

void store_fp32(const float* src, const TensorView& out, int64_t elems) {
  dispatch_float_input(out.dtype, "D", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.as<T>();
#pragma omp parallel for schedule(static) if (elems > kParallelMin)
    for (int64_t i = 0; i < elems; ++i) dst[i] = from_float<T>(src[i]);
  });
}

}  // namespace tessera::detail
