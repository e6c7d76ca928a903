// The grouped GEMM reference: reads the live rows of each operand into FP64 (dequantized
// element by element where quantized), then plain triple loops with FP64 accumulation, one group
// at a time. Host memory only. Readable, never optimized, shares no code with the CPU backend.
#include <vector>

#include "gemm/gemm_backend.h"
#include "gemm/reference/reference_operand.h"
#include "tessera/core/dispatch.h"

namespace tessera::detail {
namespace {

// The G+1 row starts, read directly from the user's offsets (either format).
std::vector<int64_t> reference_starts(const GroupedGemmProblem& p) {
  std::vector<int64_t> starts(static_cast<size_t>(p.num_groups) + 1, 0);
  if (p.kind == GroupedGemmKind::kBatched) return starts;
  const bool leading_zero = p.offsets_format == GroupOffsetsFormat::kStartOffsets;
  for (int64_t g = 0; g < p.num_groups; ++g) {
    const int64_t idx = leading_zero ? g + 1 : g;
    starts[g + 1] = p.group_offsets.dtype == DType::kInt64
                        ? p.group_offsets.as<int64_t>()[idx]
                        : static_cast<int64_t>(p.group_offsets.as<int32_t>()[idx]);
  }
  return starts;
}

// The G+1 row starts of A's groups of an M-grouped problem: a_row_starts (then the end of the
// last group's A rows), read directly, or the group starts `s` without them.
std::vector<int64_t> reference_a_starts(const GroupedGemmProblem& p,
                                        const std::vector<int64_t>& s) {
  if (p.a_row_starts.data == nullptr) return s;
  std::vector<int64_t> a(s.size());
  const int64_t g_count = p.num_groups;
  for (int64_t g = 0; g < g_count; ++g) a[g] = p.a_row_starts.as<int64_t>()[g];
  a[g_count] = a[g_count - 1] + (s[g_count] - s[g_count - 1]);
  return a;
}

// Row starts g·(rows/G) of an operand holding G equal groups.
std::vector<int64_t> per_group_rows(int64_t groups, int64_t rows) {
  std::vector<int64_t> starts;
  for (int64_t g = 0; g <= groups; ++g) starts.push_back(g * (rows / groups));
  return starts;
}

// D as FP64 values (read for beta = 1) and the writer that rounds them into D's dtype.
double read_d(const TensorView& d, int64_t i) { return d.as<float>()[i]; }

void write_d(const TensorView& d, int64_t i, double v) {
  dispatch_float_input(d.dtype, "D", [&](auto tag) {
    using T = typename decltype(tag)::type;
    d.as<T>()[i] = from_float<T>(static_cast<float>(v));
  });
}

double bias_at(const GroupedGemmProblem& p, int64_t g, int64_t j, int64_t n) {
  if (p.bias.data == nullptr) return 0.0;
  double v = 0.0;
  dispatch_float_input(p.bias.dtype, "bias", [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = to_float(p.bias.as<T>()[g * n + j]);
  });
  return v;
}

double alpha_of(const GroupedGemmProblem& p, int64_t g) {
  const double a = p.alpha;
  return p.group_alpha.data == nullptr ? a : a * static_cast<double>(p.group_alpha.as<float>()[g]);
}

// Writes D element `index` = alpha_g · acc + bias + beta · D.
void finish(const GroupedGemmProblem& p, int64_t g, int64_t index, int64_t j, int64_t n,
            double acc) {
  double v = alpha_of(p, g) * acc + bias_at(p, g, j, n);
  if (p.beta != 0.0f) v += read_d(p.d, index);
  write_d(p.d, index, v);
}

// D_g rows [s_g, s_{g+1}) = A rows [sa_g, sa_g + s_{g+1} − s_g) · op(B_g) (sa = s without
// a_row_starts).
void reference_m_grouped(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                         const std::vector<int64_t>& s) {
  const int64_t k = dims.k, n = dims.n;
  const std::vector<int64_t> sa = reference_a_starts(p, s);
  const ReferenceMatrix a = reference_read(p.a, sa.back(), sa);  // (A's rows read, K)
  const ReferenceMatrix b = reference_read(p.b, operand_rows(p.b),
                                           per_group_rows(p.num_groups, operand_rows(p.b)));
  // b: (G·N, K) or (G·K, N)
  for (int64_t g = 0; g < p.num_groups; ++g) {
    for (int64_t i = s[g]; i < s[g + 1]; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double bv = p.transpose_b ? b.at(g * n + j, kk) : b.at(g * k + kk, j);
          acc += a.at(sa[g] + (i - s[g]), kk) * bv;
        }
        finish(p, g, i * n + j, j, n, acc);
      }
    }
  }
}

// D_g (M, N) = Σ over the group's rows t of A(t, :)ᵀ B(t, :); an empty group sums nothing.
void reference_k_grouped(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                         const std::vector<int64_t>& s) {
  const int64_t m = dims.m, n = dims.n;
  const ReferenceMatrix a = reference_read(p.a, s.back(), s);  // (total, M)
  const ReferenceMatrix b = reference_read(p.b, s.back(), s);  // (total, N)
  for (int64_t g = 0; g < p.num_groups; ++g) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t t = s[g]; t < s[g + 1]; ++t) acc += a.at(t, i) * b.at(t, j);
        finish(p, g, (g * m + i) * n + j, j, n, acc);
      }
    }
  }
}

void reference_batched(const GroupedGemmProblem& p, const GroupedGemmDims& dims) {
  const int64_t m = dims.m, n = dims.n, k = dims.k;
  const int64_t a_rows = operand_rows(p.a), b_rows = operand_rows(p.b);
  const ReferenceMatrix a = reference_read(p.a, a_rows, per_group_rows(p.num_groups, a_rows));
  const ReferenceMatrix b = reference_read(p.b, b_rows, per_group_rows(p.num_groups, b_rows));
  // a: (G·M, K) or (G·K, M); b: (G·N, K) or (G·K, N)
  for (int64_t g = 0; g < p.num_groups; ++g) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double av = p.transpose_a ? a.at(g * k + kk, i) : a.at(g * m + i, kk);
          const double bv = p.transpose_b ? b.at(g * n + j, kk) : b.at(g * k + kk, j);
          acc += av * bv;
        }
        finish(p, g, (g * m + i) * n + j, j, n, acc);
      }
    }
  }
}

}  // namespace

void grouped_gemm_reference(const GroupedGemmProblem& p) {
  // Any pair of operand formats (each operand is read on its own), but not Hadamard-transformed
  // copies, which the reference does not undo.
  const GroupedGemmDims dims = check_grouped_gemm(p, GemmPath::kEmulated);
  for (const GemmOperand* o : {&p.a, &p.b}) {
    TESSERA_CHECK_STATUS(!(o->is_quantized && o->columnwise && o->quantized.config.random_hadamard),
                         Status::kUnsupported, "grouped_gemm_reference: ", o == &p.a ? "A" : "B",
                         " is a Hadamard-transformed copy, which the reference does not undo");
  }
  TESSERA_CHECK_STATUS(p.a.device().is_cpu(), Status::kUnsupported,
                       "grouped_gemm_reference: host memory only");
  const std::vector<int64_t> s = reference_starts(p);
  switch (p.kind) {
    case GroupedGemmKind::kMGrouped: reference_m_grouped(p, dims, s); break;
    case GroupedGemmKind::kKGrouped: reference_k_grouped(p, dims, s); break;
    case GroupedGemmKind::kBatched: reference_batched(p, dims); break;
  }
}

}  // namespace tessera::detail
