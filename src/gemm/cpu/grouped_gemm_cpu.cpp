// CPU grouped GEMM. Dense BF16 × BF16 takes the native BF16 path (bf16_gemm.h: oneDNN) where
// the build and CPU have one. Everything else: every operand becomes an FP32 row-major matrix
// (FP32 operands are used in place; BF16/FP16 are converted, quantized ones dequantized, into the
// workspace), then the groups' FP32 GEMMs: on oneDNN's FP32 matmul, tasks on an OpenMP team as
// the BF16 path runs them (a build with oneDNN; bf16_gemm.h says why), else one CBLAS sgemm per
// group. FP32 accumulation either way; BF16/FP16 outputs go through an FP32 staging area.
//
// Threading of the sgemm form: the groups run one after another and each sgemm uses OpenBLAS's
// own (pthread) thread pool; the element conversions around the GEMMs run on blocking
// std::threads (blocking_parallel.h), not OpenMP, whose spinning workers would steal the cores
// from OpenBLAS (2.3x slower BF16 runs measured). Nothing is wrapped around the BLAS calls, so the
// two never run at once, and no global OpenBLAS thread setting is changed (it would race with
// other OpenBLAS users).
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "gemm/cpu/bf16_gemm.h"
#include "gemm/cpu/blocking_parallel.h"
#include "gemm/cpu/operand_fp32.h"
#include "gemm/gemm_backend.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/dispatch.h"

namespace tessera::detail {
namespace {

// The FP32 images of A and B and the FP32 D for one run.
struct Fp32Operands {
  Fp32Image a;  // logical kMGrouped (rows, K); kKGrouped (rows, M); kBatched (G·X, Y)
  Fp32Image b;  // logical kMGrouped (G·X, Y); kKGrouped (rows, N); kBatched (G·X, Y)
  float* d = nullptr;  // D's shape, FP32, row-major
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
      r = {total, total, checked_mul(dims.groups, dims.m, "D: G x M")};
      break;
    case GroupedGemmKind::kBatched:
      r = {operand_rows(p.a), operand_rows(p.b), checked_mul(dims.groups, dims.m, "D: G x M")};
      break;
  }
  return r;
}

// Upper bound of LiveRows from host-known sizes only (the capacity, not the offsets; A's rows
// with a_row_starts).
LiveRows capacity_rows(const GroupedGemmProblem& p, const GroupedGemmDims& dims) {
  LiveRows r = live_rows(p, dims, dims.capacity);
  if (p.kind == GroupedGemmKind::kMGrouped) r.a = dims.a_rows;
  return r;
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
  cpu::parallel_ranges(rows, std::max<int64_t>(1, (int64_t{1} << 16) / n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* out = d + i * n;
      for (int64_t j = 0; j < n; ++j) out[j] = add ? out[j] + row[j] : row[j];
    }
  });
}

// Group g's operands: op(A_g) (m, k), op(B_g) (k, n) as sub-matrices of the FP32 images (logical
// top-left element first) and the element index of D_g(0, 0). read_trans_*: whether the GEMM
// reads the stored image transposed (the user's op, flipped once more when the image is stored
// transposed); the stored image's row stride is the image's ld.
struct GroupView {
  int64_t m = 0, k = 0;
  const float* a = nullptr;
  bool read_trans_a = false;
  const float* b = nullptr;
  bool read_trans_b = false;
  int64_t d_offset = 0;
};

// Logical rows of an M-grouped problem's B_g.
int64_t b_group_rows(const GroupedGemmProblem& p, const GroupedGemmDims& dims) {
  return p.transpose_b ? dims.n : dims.k;
}

// start: the G+1 group row starts (D's rows, and A's too unless M-grouped with a_row_starts);
// a_start: the row starts of A's groups (host_a_row_starts).
GroupView group_view(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                     const std::vector<int64_t>& start, const std::vector<int64_t>& a_start,
                     const Fp32Operands& f, int64_t g) {
  const int64_t n = dims.n, r0 = start[g], rows = start[g + 1] - start[g];
  GroupView v;  // read_trans_* hold the user's op until the end
  switch (p.kind) {
    case GroupedGemmKind::kMGrouped: {
      v = {rows, dims.k, f.a.rows_from(a_start[g]), false, f.b.rows_from(g * b_group_rows(p, dims)),
           p.transpose_b, r0 * n};
      break;
    }
    case GroupedGemmKind::kKGrouped:  // A_g (rows, m) read transposed, B_g (rows, n)
      v = {dims.m, rows, f.a.rows_from(r0), true, f.b.rows_from(r0), false, g * dims.m * n};
      break;
    case GroupedGemmKind::kBatched: {
      const int64_t a_rows = p.transpose_a ? dims.k : dims.m;
      const int64_t b_rows = p.transpose_b ? n : dims.k;
      v = {dims.m, dims.k, f.a.rows_from(g * a_rows), p.transpose_a, f.b.rows_from(g * b_rows),
           p.transpose_b, g * dims.m * n};
      break;
    }
  }
  v.read_trans_a = v.read_trans_a != f.a.transposed;
  v.read_trans_b = v.read_trans_b != f.b.transposed;
  return v;
}

// The view as oneDNN's strided block (the strides sgemm's transpose flags and ld describe).
cpu::GroupBlock onednn_block(const GroupView& v, const Fp32Operands& f) {
  cpu::GroupBlock blk;
  const bool ta = v.read_trans_a, tb = v.read_trans_b;
  blk.a = v.a, blk.a_row = ta ? 1 : f.a.ld, blk.a_col = ta ? f.a.ld : 1;
  blk.b = v.b, blk.b_row = tb ? 1 : f.b.ld, blk.b_col = tb ? f.b.ld : 1;
  blk.d_offset = v.d_offset, blk.m = v.m, blk.k = v.k;
  return blk;
}

// One group on sgemm: D_g (m, n) = alpha_g · op(A_g) · op(B_g) + bias_g + beta · D_g, FP32
// row-major D.
void gemm_group(const GroupedGemmProblem& p, int64_t g, const GroupView& v, int64_t n,
                const Fp32Operands& f) {
  const int64_t m = v.m, k = v.k;
  if (m == 0 || n == 0) return;
  float* d = f.d + v.d_offset;
  const bool has_bias = p.bias.data != nullptr;
  if (has_bias) apply_bias(p, g, d, m, n);
  const float beta = (has_bias || p.beta != 0.0f) ? 1.0f : 0.0f;
  if (k == 0) {  // an empty contraction: D_g = bias_g + beta · D_g
    if (beta == 0.0f) std::fill(d, d + m * n, 0.0f);
    return;
  }
  const bool ta = v.read_trans_a, tb = v.read_trans_b;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              to_blas(m, "M"), to_blas(n, "N"), to_blas(k, "K"), group_alpha(p, g), v.a,
              to_blas(f.a.ld, "lda"), v.b, to_blas(f.b.ld, "ldb"), beta, d, to_blas(n, "ldd"));
}

// The groups' GEMMs into f.d (the FP32 D or its staging area), one sgemm after another.
void run_groups(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                const std::vector<int64_t>& start, const std::vector<int64_t>& a_start,
                const Fp32Operands& f) {
  for (int64_t g = 0; g < dims.groups; ++g)
    gemm_group(p, g, group_view(p, dims, start, a_start, f, g), dims.n, f);
}

// Logical row starts of the groups of an operand: the offsets for the grouped token dim, g·X for
// a (G·X, Y) operand.
std::vector<int64_t> uniform_starts(int64_t groups, int64_t rows_per_group) {
  std::vector<int64_t> s(static_cast<size_t>(groups) + 1);
  for (int64_t g = 0; g <= groups; ++g) s[g] = g * rows_per_group;
  return s;
}

// Bytes of one group's B image at most for B to be made per group inside the tasks (a
// thread's buffer: cache-sized, kept between calls).
constexpr int64_t kGroupImageBytes = int64_t{4} << 20;

// Whether B's FP32 image is made per group inside the tasks (GroupImagesB): the oneDNN FP32 path,
// M-grouped, B a quantized copy (a weight: its rowwise copy, Wᵀ as one, or its columnwise copy)
// whose group image fits kGroupImageBytes, not Hadamard-transformed (that transform runs along
// whole stored rows). Then B takes no workspace.
bool b_per_group(const GroupedGemmProblem& p, const GroupedGemmDims& dims) {
  if (p.kind != GroupedGemmKind::kMGrouped || !p.b.is_quantized ||
      (p.b.columnwise && p.b.quantized.config.random_hadamard) || !cpu::fp32_onednn_applies(p))
    return false;
  return b_group_rows(p, dims) * operand_cols(p.b) * 4 <= kGroupImageBytes;
}

}  // namespace

int64_t grouped_gemm_cpu_workspace_size(const GroupedGemmProblem& p, const GroupedGemmDims& dims) {
  const LiveRows cap = capacity_rows(p, dims);
  if (cpu::bf16_native_applies(p)) {
    return cpu::bf16_native_workspace_size(p, checked_mul(cap.d, dims.n, "D rows x N"));
  }
  const char* what = "CPU grouped GEMM workspace";
  int64_t bytes = operand_fp32_bytes(p.a, cap.a, operand_cols(p.a));
  if (!b_per_group(p, dims))
    bytes = checked_add(bytes, operand_fp32_bytes(p.b, cap.b, operand_cols(p.b)), what);
  if (p.d.dtype != DType::kFloat32)
    bytes = checked_add(bytes, fp32_region_bytes(checked_mul(cap.d, dims.n, "D rows x N")), what);
  return bytes;
}

void grouped_gemm_cpu(const GroupedGemmProblem& p, const GroupedGemmDims& dims, void* workspace,
                      int64_t workspace_bytes) {
  const std::vector<int64_t> start = host_start_offsets(p);
  const bool m_grouped = p.kind == GroupedGemmKind::kMGrouped;
  const std::vector<int64_t> a_start = m_grouped ? host_a_row_starts(p) : start;
  LiveRows live = live_rows(p, dims, start.back());
  if (m_grouped) live.a = a_start.back();  // A's rows up to its last group's end
  WorkspaceCursor ws{static_cast<char*>(workspace), workspace_bytes};
  if (cpu::bf16_native_applies(p)) {
    cpu::grouped_gemm_bf16_native(p, dims, start, a_start, live.d * dims.n, ws);
    return;
  }
  const bool batched = p.kind == GroupedGemmKind::kBatched;
  // A's own group rows: per-group kTensor scales / NVFP4 amax of a quantized A follow them.
  const std::vector<int64_t> a_groups =
      batched ? uniform_starts(dims.groups, live.a / dims.groups) : a_start;
  const std::vector<int64_t> b_groups = p.kind == GroupedGemmKind::kKGrouped
                                            ? start
                                            : uniform_starts(dims.groups, live.b / dims.groups);
  Fp32Operands f;
  f.a = operand_fp32(p.a, "A", live.a, a_groups, ws);
  std::optional<cpu::GroupImagesB> b_images;
  if (b_per_group(p, dims)) {  // no image of B: the tasks make B_g's (null base)
    b_images = cpu::GroupImagesB{cpu::DequantPlan(p.b, live.b, b_groups), b_group_rows(p, dims)};
    // B_g's image: its stored rows (ld: the stored columns), or for a transposed copy its
    // stored columns of every stored row (ld: the group's logical rows).
    const bool t = b_images->plan.transposed();
    f.b = {nullptr, t ? b_images->rows : b_images->plan.stored_cols(), t};
  } else {
    f.b = operand_fp32(p.b, "B", live.b, b_groups, ws);
  }
  const int64_t d_elems = live.d * dims.n;  // D's live elements
  if (cpu::fp32_onednn_applies(p)) {  // D written by the tasks, a BF16/FP16 D through staging
    float* staging = p.d.dtype != DType::kFloat32 ? ws.take_floats(d_elems) : nullptr;
    std::vector<cpu::GroupBlock> blocks;
    blocks.reserve(static_cast<size_t>(dims.groups));
    for (int64_t g = 0; g < dims.groups; ++g)
      blocks.push_back(onednn_block(group_view(p, dims, start, a_start, f, g), f));
    cpu::grouped_gemm_fp32_onednn(p, dims.n, std::move(blocks), staging,
                                  b_images ? &*b_images : nullptr);
    return;
  }
  const bool staged = p.d.dtype != DType::kFloat32;
  f.d = staged ? ws.take_floats(d_elems) : p.d.as<float>();
  run_groups(p, dims, start, a_start, f);
  if (staged) store_fp32(f.d, p.d, d_elems);
}

}  // namespace tessera::detail
