// Backend-independent validation of a GroupedGemmProblem: devices, dtypes, shapes per kind, offsets
// (read when in host memory), alpha/beta/bias, and no output over an input. Every failure throws
// Error with the specific status and a message naming the argument and what was expected.
#include <cmath>
#include <vector>

#include "gemm/gemm_backend.h"
#include "gemm/gemm_quantized_check.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/dispatch.h"

namespace tessera::detail {
namespace {

constexpr auto kFloatInputs = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

// An operand's name in messages.
const char* op_name(const GemmOperand& o, const GroupedGemmProblem& p) {
  return &o == &p.a ? "A" : "B";
}

// ndim of the operand's position: 2 (grouped token dim) or 3 ((G, X, Y)).
void check_operand(const GroupedGemmProblem& p, const GemmOperand& o, int ndim, GemmPath path) {
  const char* name = op_name(o, p);
  if (o.is_quantized) {
    check_quantized_operand(o, name, p.num_groups, path);
    return;
  }
  check_view(o.dense, name, kFloatInputs);
  TESSERA_CHECK_STATUS(o.dense.ndim == ndim, Status::kShapeMismatch, name, ": a ",
                       grouped_gemm_kind_name(p.kind), " GEMM takes a ", ndim, "-D ", name,
                       ", got ", o.dense.to_string());
}

// Per-group (X, Y) of an operand in a 3-D position; checks its group count.
std::pair<int64_t, int64_t> group_dims(const GroupedGemmProblem& p, const GemmOperand& o) {
  const char* name = op_name(o, p);
  if (!o.is_quantized) {
    TESSERA_CHECK_STATUS(o.dense.shape[0] == p.num_groups, Status::kShapeMismatch, name,
                         ": first dim ", o.dense.shape[0], " must equal num_groups ",
                         p.num_groups, " (", o.dense.to_string(), ")");
    return {o.dense.shape[1], o.dense.shape[2]};
  }
  TESSERA_CHECK_STATUS(o.quantized.rows % p.num_groups == 0, Status::kShapeMismatch, name,
                       ": a quantized 3-D operand is (G*X, Y); rows ", o.quantized.rows,
                       " are not a multiple of num_groups ", p.num_groups);
  return {o.quantized.rows / p.num_groups, o.quantized.cols};
}

void check_devices(const GroupedGemmProblem& p) {
  const Device dev = p.a.device();
  auto same = [&](Device d, const char* name) {
    TESSERA_CHECK(d == dev, name, " is on ", to_string(d), " but A is on ", to_string(dev),
                  "; all operands must be on one device");
  };
  same(p.b.device(), "B");
  same(p.d.device, "D");
  if (p.bias.data != nullptr) same(p.bias.device, "bias");
  auto host_or_same = [&](const TensorView& v, const char* name) {
    TESSERA_CHECK(v.device.is_cpu() || v.device == dev, name, " is on ", to_string(v.device),
                  "; it must be in host memory or on the operands' device ", to_string(dev));
  };
  if (p.group_offsets.data != nullptr) host_or_same(p.group_offsets, "group_offsets");
  if (p.a_row_starts.data != nullptr) host_or_same(p.a_row_starts, "a_row_starts");
  if (p.group_alpha.data != nullptr) host_or_same(p.group_alpha, "group_alpha");
}

void check_output(const GroupedGemmProblem& p) {
  check_view(p.d, "D", kFloatInputs);
  TESSERA_CHECK_STATUS(p.beta == 0.0f || p.beta == 1.0f, Status::kUnsupported, "beta: ", p.beta,
                       " is not supported; expected 0 or 1");
  TESSERA_CHECK_STATUS(p.beta == 0.0f || p.d.dtype == DType::kFloat32, Status::kDTypeMismatch,
                       "D: beta = 1 accumulates into an FP32 D; got ", dtype_name(p.d.dtype));
  TESSERA_CHECK(std::isfinite(p.alpha), "alpha: ", p.alpha, " is not finite");
  if (p.group_alpha.data != nullptr) {
    check_view(p.group_alpha, "group_alpha", {DType::kFloat32});
    TESSERA_CHECK_STATUS(p.group_alpha.numel() == p.num_groups, Status::kShapeMismatch,
                         "group_alpha: ", p.group_alpha.numel(), " values for ", p.num_groups,
                         " groups");
  }
}

void check_bias(const GroupedGemmProblem& p, int64_t n) {
  if (p.bias.data == nullptr) return;
  TESSERA_CHECK_STATUS(p.kind != GroupedGemmKind::kKGrouped, Status::kUnsupported,
                       "bias: a K-grouped (wgrad) GEMM takes no bias");
  check_view(p.bias, "bias", kFloatInputs);
  TESSERA_CHECK_STATUS(p.bias.ndim == 2 && p.bias.shape[0] == p.num_groups && p.bias.shape[1] == n,
                       Status::kShapeMismatch, "bias: expected (", p.num_groups, ", ", n,
                       "), got ", p.bias.to_string());
}

template <class I>
void check_host_offsets(const GroupedGemmProblem& p, const I* offs, int64_t capacity) {
  const bool start = p.offsets_format == GroupOffsetsFormat::kStartOffsets;
  if (start) {
    TESSERA_CHECK(offs[0] == 0, "group_offsets: start offsets need a leading 0, got ",
                  static_cast<int64_t>(offs[0]));
  }
  int64_t prev = 0;
  const int64_t n = start ? checked_add(p.num_groups, 1, "num_groups + 1") : p.num_groups;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(offs[i]);
    TESSERA_CHECK_STATUS(v >= 0, Status::kOutOfRange, "group_offsets[", i, "] = ", v,
                         " is negative");
    TESSERA_CHECK(v >= prev, "group_offsets: must be non-decreasing; [", i, "] = ", v,
                  " < [", i - 1, "] = ", prev);
    TESSERA_CHECK_STATUS(v <= capacity, Status::kOutOfRange, "group_offsets[", i, "] = ", v,
                         " is past the ", capacity, " rows of the grouped operands");
    prev = v;
  }
}

void check_offsets(const GroupedGemmProblem& p, int64_t capacity) {
  const TensorView& o = p.group_offsets;
  TESSERA_CHECK(o.data != nullptr, "group_offsets: required for a ",
                grouped_gemm_kind_name(p.kind), " GEMM");
  check_view(o, "group_offsets", {DType::kInt32, DType::kInt64});
  const bool start = p.offsets_format == GroupOffsetsFormat::kStartOffsets;
  TESSERA_CHECK(start || p.offsets_format == GroupOffsetsFormat::kEndOffsets,
                "offsets_format: value ", static_cast<int>(p.offsets_format), " is unknown");
  const int64_t want = start ? checked_add(p.num_groups, 1, "num_groups + 1") : p.num_groups;
  TESSERA_CHECK_STATUS(o.ndim == 1 && o.numel() == want, Status::kShapeMismatch,
                       "group_offsets: expected ", want, " entries (",
                       start ? "G+1 start offsets" : "G end offsets", "), got ", o.to_string());
  if (!o.device.is_cpu()) return;  // device offsets are never read on the host (no sync)
  dispatch_index_dtype(o.dtype, "group_offsets", [&](auto tag) {
    using I = typename decltype(tag)::type;
    check_host_offsets(p, o.as<I>(), capacity);
  });
}

// a_row_starts (kMGrouped): int64, G or G+1 entries; where it and the offsets are in host
// memory, every group's A rows [start, start + size) inside A's a_rows rows, in group order,
// without overlap. Precondition: check_offsets passed.
void check_a_row_starts(const GroupedGemmProblem& p, const GroupedGemmDims& dims) {
  const TensorView& s = p.a_row_starts;
  if (s.data == nullptr) return;
  TESSERA_CHECK_STATUS(p.kind == GroupedGemmKind::kMGrouped, Status::kUnsupported,
                       "a_row_starts: only an M-grouped GEMM reads A by group rows (kind ",
                       grouped_gemm_kind_name(p.kind), ")");
  check_view(s, "a_row_starts", {DType::kInt64});
  const int64_t g = p.num_groups;
  TESSERA_CHECK_STATUS(s.ndim == 1 && (s.numel() == g || s.numel() == g + 1),
                       Status::kShapeMismatch, "a_row_starts: expected ", g, " or ", g + 1,
                       " entries (the row of A where each group starts), got ", s.to_string());
  if (!s.device.is_cpu() || !p.group_offsets.device.is_cpu()) return;  // no host read, no sync
  const std::vector<int64_t> start = host_start_offsets(p);
  const int64_t* a = s.as<int64_t>();
  int64_t prev_end = 0;
  for (int64_t i = 0; i < g; ++i) {
    const int64_t size = start[i + 1] - start[i];
    TESSERA_CHECK_STATUS(a[i] >= 0, Status::kOutOfRange, "a_row_starts[", i, "] = ", a[i],
                         " is negative");
    TESSERA_CHECK(a[i] >= prev_end, "a_row_starts[", i, "] = ", a[i], ": the groups' rows of A "
                  "must come in group order without overlap, and group ", i - 1, "'s end at row ",
                  prev_end);
    TESSERA_CHECK_STATUS(a[i] <= dims.a_rows - size, Status::kOutOfRange, "a_row_starts[", i,
                         "] = ", a[i], ": group ", i, "'s ", size, " rows end past A's ",
                         dims.a_rows, " rows");
    prev_end = a[i] + size;
  }
}

// Resolves max_total_rows against the grouped operands' row count.
int64_t resolve_capacity(const GroupedGemmProblem& p, int64_t rows) {
  TESSERA_CHECK(p.max_total_rows >= -1, "max_total_rows: ", p.max_total_rows,
                " must be -1 (the rows of the grouped operands) or a row count >= 0");
  if (p.max_total_rows == -1) return rows;
  TESSERA_CHECK_STATUS(p.max_total_rows <= rows, Status::kOutOfRange, "max_total_rows: ",
                       p.max_total_rows, " exceeds the ", rows, " rows of the grouped operands");
  return p.max_total_rows;
}

GroupedGemmDims check_m_grouped(const GroupedGemmProblem& p, GemmPath path) {
  TESSERA_CHECK_STATUS(!p.transpose_a, Status::kUnsupported,
                       "transpose_a: an M-grouped GEMM reads A as (rows, K); use transpose_a = "
                       "false");
  check_operand(p, p.a, 2, path);
  check_operand(p, p.b, 3, path);
  GroupedGemmDims dims;
  dims.groups = p.num_groups;
  dims.k = operand_cols(p.a);
  const auto [bx, by] = group_dims(p, p.b);
  const int64_t b_k = p.transpose_b ? by : bx;
  dims.n = p.transpose_b ? bx : by;
  TESSERA_CHECK_STATUS(b_k == dims.k, Status::kShapeMismatch, "B: contraction dim ", b_k,
                       " differs from A's K = ", dims.k, " (B is ",
                       p.transpose_b ? "(G, N, K)" : "(G, K, N)", ")");
  TESSERA_CHECK_STATUS(p.d.ndim == 2 && p.d.shape[1] == dims.n, Status::kShapeMismatch,
                       "D: expected (rows, ", dims.n, "), got ", p.d.to_string());
  // With a_row_starts the offsets index D's rows (A has its own layout), else A's and D's.
  const bool own_a_rows = p.a_row_starts.data != nullptr;
  dims.capacity = resolve_capacity(p, own_a_rows ? p.d.shape[0] : operand_rows(p.a));
  dims.a_rows = own_a_rows ? operand_rows(p.a) : dims.capacity;
  TESSERA_CHECK_STATUS(dims.a_rows >= dims.capacity, Status::kBufferTooSmall, "A: ",
                       dims.a_rows, " rows; with a_row_starts A must have at least the ",
                       dims.capacity, " rows of the capacity (max_total_rows, or D's rows)");
  TESSERA_CHECK_STATUS(p.d.shape[0] >= dims.capacity, Status::kBufferTooSmall, "D: ",
                       p.d.shape[0], " rows cannot hold the ", dims.capacity,
                       " rows of the token buffer");
  return dims;
}

GroupedGemmDims check_k_grouped(const GroupedGemmProblem& p, GemmPath path) {
  TESSERA_CHECK_STATUS(p.transpose_a && !p.transpose_b, Status::kUnsupported,
                       "transpose_a/transpose_b: a K-grouped GEMM computes A_gᵀ B_g with A (T, M), "
                       "B (T, N); set transpose_a = true, transpose_b = false");
  check_operand(p, p.a, 2, path);
  check_operand(p, p.b, 2, path);
  GroupedGemmDims dims;
  dims.groups = p.num_groups;
  dims.m = operand_cols(p.a);
  dims.n = operand_cols(p.b);
  const int64_t rows = operand_rows(p.a);
  TESSERA_CHECK_STATUS(operand_rows(p.b) == rows, Status::kShapeMismatch, "B: ",
                       operand_rows(p.b), " rows differ from A's ", rows,
                       " (both are the grouped token dim)");
  dims.capacity = resolve_capacity(p, rows);
  dims.a_rows = dims.capacity;
  TESSERA_CHECK_STATUS(p.d.ndim == 3 && p.d.shape[1] == dims.m && p.d.shape[2] == dims.n,
                       Status::kShapeMismatch, "D: expected (", p.num_groups, ", ", dims.m, ", ",
                       dims.n, "), got ", p.d.to_string());
  TESSERA_CHECK_STATUS(p.d.shape[0] >= p.num_groups, Status::kBufferTooSmall, "D: ",
                       p.d.shape[0], " groups cannot hold ", p.num_groups);
  TESSERA_CHECK_STATUS(p.d.shape[0] == p.num_groups, Status::kShapeMismatch, "D: first dim ",
                       p.d.shape[0], " must equal num_groups ", p.num_groups);
  return dims;
}

GroupedGemmDims check_batched(const GroupedGemmProblem& p, GemmPath path) {
  check_operand(p, p.a, 3, path);
  check_operand(p, p.b, 3, path);
  const auto [ax, ay] = group_dims(p, p.a);
  const auto [bx, by] = group_dims(p, p.b);
  GroupedGemmDims dims;
  dims.groups = p.num_groups;
  dims.m = p.transpose_a ? ay : ax;
  dims.k = p.transpose_a ? ax : ay;
  dims.n = p.transpose_b ? bx : by;
  const int64_t b_k = p.transpose_b ? by : bx;
  TESSERA_CHECK_STATUS(b_k == dims.k, Status::kShapeMismatch, "B: contraction dim ", b_k,
                       " differs from A's K = ", dims.k);
  TESSERA_CHECK_STATUS(p.d.ndim == 3 && p.d.shape[1] == dims.m && p.d.shape[2] == dims.n,
                       Status::kShapeMismatch, "D: expected (", p.num_groups, ", ", dims.m, ", ",
                       dims.n, "), got ", p.d.to_string());
  TESSERA_CHECK_STATUS(p.d.shape[0] >= p.num_groups, Status::kBufferTooSmall, "D: ",
                       p.d.shape[0], " batches cannot hold ", p.num_groups);
  TESSERA_CHECK_STATUS(p.d.shape[0] == p.num_groups, Status::kShapeMismatch, "D: first dim ",
                       p.d.shape[0], " must equal num_groups ", p.num_groups);
  return dims;
}

}  // namespace

int64_t operand_rows(const GemmOperand& o) {
  if (o.is_quantized) return o.quantized.rows;
  return o.dense.ndim == 3 ? checked_mul(o.dense.shape[0], o.dense.shape[1], "operand: G x rows")
                           : o.dense.shape[0];
}

int64_t operand_cols(const GemmOperand& o) {
  if (o.is_quantized) return o.quantized.cols;
  return o.dense.ndim >= 1 ? o.dense.shape[o.dense.ndim - 1] : 0;
}

GroupedGemmDims check_grouped_gemm(const GroupedGemmProblem& p, GemmPath path) {
  TESSERA_CHECK(p.num_groups >= 1, "num_groups: ", p.num_groups, " must be at least 1");
  check_devices(p);
  check_output(p);
  if (path == GemmPath::kFast) check_quantized_pair(p.a, p.b);
  GroupedGemmDims dims;
  switch (p.kind) {
    case GroupedGemmKind::kMGrouped: dims = check_m_grouped(p, path); break;
    case GroupedGemmKind::kKGrouped: dims = check_k_grouped(p, path); break;
    case GroupedGemmKind::kBatched: dims = check_batched(p, path); break;
    default:
      TESSERA_FAIL(Status::kInvalidArgument, "kind: value ", static_cast<int>(p.kind),
                   " is unknown; expected kMGrouped, kKGrouped or kBatched");
  }
  check_bias(p, dims.n);
  TESSERA_CHECK(!p.zero_unused_rows || p.kind == GroupedGemmKind::kMGrouped,
                "zero_unused_rows: only an M-grouped D has rows outside the groups (kind ",
                grouped_gemm_kind_name(p.kind), ")");
  if (p.kind != GroupedGemmKind::kBatched) check_offsets(p, dims.capacity);
  check_a_row_starts(p, dims);
  check_output_overlap(p, dims);
  return dims;
}

std::vector<int64_t> host_start_offsets(const GroupedGemmProblem& p) {
  std::vector<int64_t> start(static_cast<size_t>(p.num_groups) + 1, 0);
  if (p.kind == GroupedGemmKind::kBatched) return start;
  TESSERA_CHECK(p.group_offsets.device.is_cpu(), "group_offsets: the host needs them in host "
                "memory, got ", to_string(p.group_offsets.device));
  const bool has_leading_zero = p.offsets_format == GroupOffsetsFormat::kStartOffsets;
  dispatch_index_dtype(p.group_offsets.dtype, "group_offsets", [&](auto tag) {
    using I = typename decltype(tag)::type;
    const I* o = p.group_offsets.as<I>();
    for (int64_t g = 0; g < p.num_groups; ++g) {
      start[static_cast<size_t>(g) + 1] = static_cast<int64_t>(o[has_leading_zero ? g + 1 : g]);
    }
  });
  return start;
}

std::vector<int64_t> host_a_row_starts(const GroupedGemmProblem& p) {
  std::vector<int64_t> start = host_start_offsets(p);
  if (p.a_row_starts.data == nullptr) return start;
  TESSERA_CHECK(p.a_row_starts.device.is_cpu(), "a_row_starts: the host needs them in host "
                "memory, got ", to_string(p.a_row_starts.device));
  const int64_t* a = p.a_row_starts.as<int64_t>();
  const int64_t g = p.num_groups;
  const int64_t last_end = a[g - 1] + (start[g] - start[g - 1]);
  for (int64_t i = 0; i < g; ++i) start[i] = a[i];
  start[g] = last_end;
  return start;
}

}  // namespace tessera::detail
