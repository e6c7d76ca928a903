// CPU grouped GEMM: every operand becomes an FP32 row-major matrix (FP32 operands are used in
// place; BF16/FP16 are converted, quantized ones dequantized, into the workspace), then one CBLAS
// sgemm per group with FP32 accumulation; BF16/FP16 outputs go through an FP32 staging area.
//
// Threading: the groups run one after another and each sgemm uses OpenBLAS's own (pthread) thread
// pool; the element conversions around them are OpenMP loops. OpenMP is never wrapped around the
// BLAS calls, so the two pools never run at once (no oversubscription), and no global OpenBLAS
// thread setting is changed (it would race with other users of OpenBLAS in the process).
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "gemm/cpu/operand_fp32.h"
#include "gemm/gemm_backend.h"
#include "tessera/core/dispatch.h"

namespace tessera::detail {
namespace {

// Where the FP32 images of A, B and D live for one run.
struct Fp32Operands {
  const float* a = nullptr;  // kMGrouped (rows, K); kKGrouped (rows, M); kBatched (G, ·, ·)
  const float* b = nullptr;  // kMGrouped (G, ·, ·); kKGrouped (rows, N); kBatched (G, ·, ·)
  float* d = nullptr;        // D's shape, FP32
};

// Live rows of each operand: the last offset for the grouped token dim, everything otherwise.
struct LiveRows {
  int64_t a = 0, b = 0, d = 0;
};

LiveRows live_rows(const GroupedGemmProblem& p, const GroupedGemmDims& dims, int64_t total) {
  LiveRows r;
  switch (p.kind) {
    case GroupedGemmKind::kMGrouped:
      r = {total, operand_rows(p.b), total};
      break;
    case GroupedGemmKind::kKGrouped:
      r = {total, total, dims.groups * dims.m};
      break;
    case GroupedGemmKind::kBatched:
      r = {operand_rows(p.a), operand_rows(p.b), dims.groups * dims.m};
      break;
  }
  return r;
}

// Upper bound of LiveRows from host-known sizes only (the capacity, not the offsets).
LiveRows capacity_rows(const GroupedGemmProblem& p, const GroupedGemmDims& dims) {
  return live_rows(p, dims, dims.capacity);
}

blasint to_blas(int64_t v, const char* what) {
  TESSERA_CHECK_STATUS(v <= std::numeric_limits<blasint>::max(), Status::kOutOfRange, what, " = ",
                       v, " exceeds the BLAS integer range");
  return static_cast<blasint>(v);
}

float group_alpha(const GroupedGemmProblem& p, int64_t g) {
  return p.group_alpha.data == nullptr ? p.alpha : p.alpha * p.group_alpha.as<float>()[g];
}

// rows × n of D_g at `d` (row stride n) get bias row g: written (beta = 0) or added (beta = 1).
void apply_bias(const GroupedGemmProblem& p, int64_t g, float* d, int64_t rows, int64_t n) {
  std::vector<float> row(static_cast<size_t>(n));
  dispatch_float_input(p.bias.dtype, "bias", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = p.bias.as<T>() + g * n;
    for (int64_t j = 0; j < n; ++j) row[j] = to_float(src[j]);
  });
  const bool add = p.beta != 0.0f;
#pragma omp parallel for schedule(static) if (rows * n > (1 << 16))
  for (int64_t i = 0; i < rows; ++i) {
    float* out = d + i * n;
    for (int64_t j = 0; j < n; ++j) out[j] = add ? out[j] + row[j] : row[j];
  }
}

// One group: D_g (m, n) = alpha_g · op(A_g) · op(B_g) + bias_g + beta · D_g, all FP32 row-major.
// lda/ldb are the row strides of the stored A_g / B_g.
void gemm_group(const GroupedGemmProblem& p, int64_t g, int64_t m, int64_t n, int64_t k,
                const float* a, bool trans_a, const float* b, bool trans_b, float* d) {
  if (m == 0 || n == 0) return;
  const bool has_bias = p.bias.data != nullptr;
  if (has_bias) apply_bias(p, g, d, m, n);
  const float beta = (has_bias || p.beta != 0.0f) ? 1.0f : 0.0f;
  if (k == 0) {  // an empty contraction: D_g = bias_g + beta · D_g
    if (beta == 0.0f) std::fill(d, d + m * n, 0.0f);
    return;
  }
  const int64_t lda = trans_a ? m : k;
  const int64_t ldb = trans_b ? k : n;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, to_blas(m, "M"), to_blas(n, "N"),
              to_blas(k, "K"), group_alpha(p, g), a, to_blas(lda, "lda"), b, to_blas(ldb, "ldb"),
              beta, d, to_blas(n, "ldd"));
}

void run_groups(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                const std::vector<int64_t>& start, const Fp32Operands& f) {
  const int64_t n = dims.n;
  for (int64_t g = 0; g < dims.groups; ++g) {
    const int64_t r0 = start[g], rows = start[g + 1] - start[g];
    switch (p.kind) {
      case GroupedGemmKind::kMGrouped: {
        const int64_t k = dims.k;
        gemm_group(p, g, rows, n, k, f.a + r0 * k, false, f.b + g * n * k, p.transpose_b,
                   f.d + r0 * n);
        break;
      }
      case GroupedGemmKind::kKGrouped: {
        const int64_t m = dims.m;
        // A_g (rows, m) read transposed, B_g (rows, n); an empty group gives k = 0.
        gemm_group(p, g, m, n, rows, f.a + r0 * m, true, f.b + r0 * n, false, f.d + g * m * n);
        break;
      }
      case GroupedGemmKind::kBatched: {
        const int64_t m = dims.m, k = dims.k;
        gemm_group(p, g, m, n, k, f.a + g * m * k, p.transpose_a, f.b + g * n * k, p.transpose_b,
                   f.d + g * m * n);
        break;
      }
    }
  }
}

}  // namespace

int64_t grouped_gemm_cpu_workspace_size(const GroupedGemmProblem& p, const GroupedGemmDims& dims) {
  const LiveRows cap = capacity_rows(p, dims);
  int64_t bytes = operand_fp32_bytes(p.a, cap.a, operand_cols(p.a));
  bytes += operand_fp32_bytes(p.b, cap.b, operand_cols(p.b));
  if (p.d.dtype != DType::kFloat32) bytes += fp32_region_bytes(cap.d * dims.n);
  return bytes;
}

void grouped_gemm_cpu(const GroupedGemmProblem& p, const GroupedGemmDims& dims, void* workspace,
                      int64_t workspace_bytes) {
  const std::vector<int64_t> start = host_start_offsets(p);
  const LiveRows live = live_rows(p, dims, start.back());
  WorkspaceCursor ws{static_cast<char*>(workspace), workspace_bytes};
  Fp32Operands f;
  f.a = operand_fp32(p.a, "A", live.a, operand_cols(p.a), ws);
  f.b = operand_fp32(p.b, "B", live.b, operand_cols(p.b), ws);
  const int64_t d_elems = live.d * dims.n;  // D's live elements
  const bool staged = p.d.dtype != DType::kFloat32;
  f.d = staged ? ws.take_floats(d_elems) : p.d.as<float>();
  run_groups(p, dims, start, f);
  if (staged) store_fp32(f.d, p.d, d_elems);
}

}  // namespace tessera::detail
