// CUDA backend of the grouped GEMM front end (gemm_backend.h): maps a validated
// GroupedGemmProblem onto the sm90 kernel (grouped_gemm_sm90.h), sizes and lays out its
// workspace, and enqueues everything on the stream without a device→host copy.
//
// Supported here (anything else answers kUnsupported with the reason):
//   - sm_90 devices; dense A and B both BF16 or both FP16; D BF16/FP16/FP32 (beta = 1 into FP32), alpha,
//     group_alpha, bias;
//   - M-grouped TN (B (G, N, K)) read in place; NN (B (G, K, N), dgrad): BF16 read in place
//     (MN-major B), FP16 through a batched transpose of B into the workspace;
//   - K-grouped (wgrad): BF16 A (T, M) and B (T, N) read in place (MN-major, each group's
//     contraction clipped at its end by its own tensor maps: any group sizes); FP16, or BF16
//     with M % 8 != 0 or unaligned bases, transposed into the workspace with every group's
//     token columns starting at a multiple of 8 (k_grouped_transpose.h: padded starts derived
//     on the device, zero gaps), so any group sizes work, host or device offsets.
//   - batched (3D x 3D, dense): the M-grouped kernel over (G·M, K) with the uniform starts g·M
//     written into the workspace; A (G, K, M) and B (G, K, N) transposed there when stored so.
//   - offsets / a_row_starts / group_alpha in host memory are copied into the workspace
//     (host→device only).
//   - M-grouped A in its own row layout (a_row_starts, read on the device by the tile walker):
//     A's tensor map (or its expanded / quantized copy) covers all of A's rows, every other
//     operand and D as without it.
//   - FP8 quantized operands, E4M3 × E4M3 or E5M2 × E4M3 (per-tensor or rowwise scales) read in
//     place, no transposes:
//     the copies and scale indexing of quantized_operands.h (forward, dgrad, wgrad);
//     FP8 block operands (1x128 / 128x128) through the block-scaled kinds (cooperative 128 x 128);
//     MXFP8 operands through the MXFP8 kinds, columnwise copies transposed into the workspace;
//     K-grouped FP8 group starts must be multiples of 16 rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "gemm/cuda/grouped_gemm_sm90.h"
#include "gemm/cuda/heuristics/grouped_gemm_config.h"
#include "gemm/cuda/k_grouped_transpose.h"
#include "gemm/cuda/quantized_operands.h"
#include "gemm/cuda/transpose_16bit.h"
#include "gemm/gemm_backend.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/cuda_check.h"

namespace tessera::detail {
namespace {

using gemm_cuda::Sm90GroupedGemm;
using gemm_sm90::OutType;

constexpr int64_t kAlign = 256;

// Byte layout of the workspace: every region 256-byte aligned; absent regions have 0 bytes.
struct WorkspaceLayout {
  int64_t maps = 0, offsets = 0, a_starts = 0, alpha = 0, starts = 0, a_t = 0, b_t = 0,
          factors = 0, total = 0;
  int64_t maps_bytes = 0, offsets_bytes = 0, a_starts_bytes = 0, alpha_bytes = 0,
          starts_bytes = 0, a_t_bytes = 0, b_t_bytes = 0, factors_bytes = 0;
  // NVFP4 operands: their 1/S_enc factors (FP32) at factors: A's values, then B's.
  int64_t factors_a = 0;
  // K-grouped dense: row stride of the transposed operands (elements) = the padded token columns
  // (k_grouped_padded_cols); `starts` holds the G+1 padded group starts.
  int64_t ld_t = 0;
};

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Which dense operands the kernel reads MN-major in place (no transpose into the workspace):
// BF16 only (the 16-bit wgmma reads either major-ness; the FP16 path keeps its transposes), with
// 16-byte aligned bases and row strides, and no explicit cluster launch (clusters multicast
// K-major operands: with config.cluster_m = 2 the operands are transposed first, as before).
struct MnPlan {
  bool a = false, b = false;
};
MnPlan mn_plan(const GroupedGemmProblem& p, const GroupedGemmDims& d) {
  MnPlan m;
  if (p.a.is_quantized || p.b.is_quantized || p.a.dense.dtype != DType::kBFloat16 ||
      p.config.cluster_m > 1)
    return m;
  if (p.kind == GroupedGemmKind::kMGrouped && !p.transpose_b && aligned16(p.b.dense.data)) {
    m.b = true;  // (G, K, N): N % 8 == 0 is required of every CUDA problem
  } else if (p.kind == GroupedGemmKind::kKGrouped && d.m % 8 == 0 && aligned16(p.a.dense.data) &&
             aligned16(p.b.dense.data)) {
    m.a = m.b = true;  // A (T, M), B (T, N) token rows
  }
  return m;
}

// The operand regions come from the caller's shapes, so their products, round-ups and the total
// are overflow-checked: a problem whose workspace would pass INT64_MAX bytes is refused with
// Error(kOutOfRange) naming the region, never sized by a wrapped-around int64. The per-group
// regions need no check: groups <= 65535 (unsupported_reason).
WorkspaceLayout layout_of(const GroupedGemmProblem& p, const GroupedGemmDims& d) {
  WorkspaceLayout w;
  const bool kg = p.kind == GroupedGemmKind::kKGrouped;
  const bool batched = p.kind == GroupedGemmKind::kBatched;
  const MnPlan mn = mn_plan(p, d);
  // Bytes of a 16-bit matrix with these extents, checked.
  auto bytes16 = [](std::initializer_list<int64_t> extents, const char* what) {
    int64_t n = 2;
    for (int64_t e : extents) n = checked_mul(n, e, what);
    return n;
  };
  if (kg) w.maps_bytes = d.groups * (2 * 128 + 4);
  if (!batched && p.group_offsets.device.is_cpu())
    w.offsets_bytes = p.group_offsets.numel() * (p.group_offsets.dtype == DType::kInt64 ? 8 : 4);
  if (p.a_row_starts.data != nullptr && p.a_row_starts.device.is_cpu())
    w.a_starts_bytes = d.groups * 8;  // the first G entries (all the kernel reads)
  if (p.group_alpha.data != nullptr && p.group_alpha.device.is_cpu()) w.alpha_bytes = d.groups * 4;
  const int64_t starts_bytes = (d.groups + 1) * 8;
  if (p.a.is_quantized) {
    // FP8 copies (quantized_operands.h) are read in place, except MXFP8 columnwise copies,
    // transposed into the workspace, and the pairs with an NVFP4 copy, both expanded to BF16
    // there (an unmappable problem gets no regions: can_implement refuses it)
    gemm_cuda::Fp8ProblemMap m;
    if (gemm_cuda::has_workspace_operand(p) &&
        gemm_cuda::map_fp8_problem(p, d, &m, nullptr) == Status::kOk) {
      auto copy_bytes = [&](const gemm_cuda::Fp8OperandMap& o, const char* what) -> int64_t {
        if (o.expand) return bytes16({o.matrix.rows, o.matrix.ld}, what);
        return o.transpose ? checked_mul(o.matrix.rows, o.matrix.ld, what) : 0;
      };
      w.a_t_bytes = copy_bytes(m.a, "workspace: the K-major copy of quantized A");
      w.b_t_bytes = copy_bytes(m.b, "workspace: the K-major copy of quantized B");
      w.factors_a = m.a.amax_count;
      w.factors_bytes = (m.a.amax_count + m.b.amax_count) * 4;
    }
  } else if (mn.a) {
    // MN-major BF16 token matrices are read in place
  } else if (kg) {
    w.ld_t = gemm_cuda::k_grouped_padded_cols(d.capacity > 0 ? d.capacity : 1, d.groups);
    w.starts_bytes = starts_bytes;
    w.a_t_bytes = bytes16({d.m, w.ld_t}, "workspace: K-major copy of A (M x padded tokens)");
    w.b_t_bytes = bytes16({d.n, w.ld_t}, "workspace: K-major copy of B (N x padded tokens)");
  } else {
    if (batched) w.starts_bytes = starts_bytes;  // the uniform starts g·M
    if (batched && p.transpose_a)
      w.a_t_bytes = bytes16({d.groups, d.m, d.k}, "workspace: K-major copy of A (G x M x K)");
    if (!p.transpose_b && !mn.b)
      w.b_t_bytes = bytes16({d.groups, d.n, d.k}, "workspace: K-major copy of B (G x N x K)");
  }
  int64_t at = 0;
  auto place = [&](int64_t bytes) {
    const int64_t off = at;
    at = checked_add(at, checked_round_up(bytes, kAlign, "workspace: total bytes"),
                     "workspace: total bytes");
    return off;
  };
  w.maps = place(w.maps_bytes);
  w.offsets = place(w.offsets_bytes);
  w.a_starts = place(w.a_starts_bytes);
  w.alpha = place(w.alpha_bytes);
  w.starts = place(w.starts_bytes);
  w.a_t = place(w.a_t_bytes);
  w.b_t = place(w.b_t_bytes);
  w.factors = place(w.factors_bytes);
  w.total = at;
  return w;
}

// The compute capability major of each device, read once per process (cudaGetDeviceProperties
// costs milliseconds; can_implement runs on every GEMM call).
bool device_is_sm90(int ordinal) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> major[kMaxDevices] = {};  // 0 = not read yet
  if (ordinal < 0 || ordinal >= kMaxDevices) return false;
  int m = major[ordinal].load(std::memory_order_relaxed);
  if (m == 0) {
    if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, ordinal) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later calls see their own
      return false;
    }
    major[ordinal].store(m, std::memory_order_relaxed);
  }
  return m == 9;
}

// The reason the sm90 path cannot run `p`, or empty (quantized operands: map_fp8_problem
// decides about them afterwards).
std::string unsupported_reason(const GroupedGemmProblem& p, const GroupedGemmDims& d) {
  if (!device_is_sm90(p.a.device().index)) return "the CUDA grouped GEMM needs an sm_90 GPU";
  if (p.d.dtype != DType::kBFloat16 && p.d.dtype != DType::kFloat16 && p.d.dtype != DType::kFloat32)
    return "D must be BF16, FP16 or FP32";
  if (d.n % 8 != 0) return "N must be a multiple of 8 on CUDA";
  if (d.groups > 65535) return "more than 65535 groups";
  if (p.kind == GroupedGemmKind::kBatched && (p.a.is_quantized || p.b.is_quantized))
    return "batched (3D x 3D) GEMM with quantized operands is not implemented on CUDA (dense "
           "BF16/FP16 is)";
  if (p.a.is_quantized || p.b.is_quantized) return {};
  const DType da = p.a.dense.dtype, db = p.b.dense.dtype;
  if (da != db || (da != DType::kBFloat16 && da != DType::kFloat16))
    return "dense operands must be both BF16 or both FP16 on CUDA, got " +
           std::string(dtype_name(da)) + " x " + dtype_name(db) +
           " (FP32 and mixed 16-bit operands: CPU backend)";
  if (p.kind != GroupedGemmKind::kKGrouped && d.k % 8 != 0)
    return "K must be a multiple of 8 (16-byte TMA rows) on CUDA";
  return {};
}

OutType out_type(DType t) {
  return t == DType::kFloat32 ? OutType::kFP32 : (t == DType::kBFloat16 ? OutType::kBF16 : OutType::kFP16);
}

// Host offsets of a K-grouped FP8 problem (read in place): every start must be 16-byte aligned
// (16 rows). Dense operands go through the padded transposes and take any starts.
std::string host_offsets_reason(const GroupedGemmProblem& p) {
  if (p.kind != GroupedGemmKind::kKGrouped || !p.group_offsets.device.is_cpu() ||
      !p.a.is_quantized)
    return {};
  const int64_t rows = 16;
  for (int64_t s : host_start_offsets(p))
    if (s % rows != 0)
      return "K-grouped group starts must be multiples of " + std::to_string(rows) +
             " rows on CUDA (16-byte TMA loads); got " + std::to_string(s);
  return {};
}

}  // namespace

Status grouped_gemm_cuda_can_implement(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                                       std::string* reason) {
  try {
    std::string why = unsupported_reason(p, dims);
    Status s = Status::kUnsupported;
    if (why.empty() && p.a.is_quantized) {
      gemm_cuda::Fp8ProblemMap m;
      s = gemm_cuda::map_fp8_problem(p, dims, &m, &why);
      if (s == Status::kOk) s = Status::kUnsupported;
    }
    if (why.empty()) {
      why = host_offsets_reason(p);
      s = Status::kMisaligned;
    }
    if (why.empty()) return Status::kOk;
    if (reason != nullptr) *reason = "tessera " + std::string(status_string(s)) + ": " + why;
    return s;
  } catch (const Error& e) {
    if (reason != nullptr) *reason = e.what();
    return e.status();
  }
}

int64_t grouped_gemm_cuda_workspace_size(const GroupedGemmProblem& p, const GroupedGemmDims& dims) {
  return layout_of(p, dims).total;
}

namespace {

// FP8 operands, scales and B's per-group coordinates (quantized_operands.h); can_implement
// accepted the problem. MXFP8 columnwise copies are read from their workspace transposes, and
// expanded copies from their BF16 expansions, at a_t / b_t, NVFP4 factors at factors (all null
// while only sizing).
gemm_cuda::Fp8ProblemMap describe_fp8(const GroupedGemmProblem& p, const GroupedGemmDims& d,
                                      const WorkspaceLayout& w, char* ws, Sm90GroupedGemm* g) {
  gemm_cuda::Fp8ProblemMap m;
  std::string why;
  const Status s = gemm_cuda::map_fp8_problem(p, d, &m, &why);
  TESSERA_CHECK_STATUS(s == Status::kOk, s, why);
  auto at = [ws](int64_t off) -> char* { return ws != nullptr ? ws + off : nullptr; };
  if (m.a.transpose || m.a.expand) m.a.matrix.ptr = at(w.a_t);
  if (m.b.transpose || m.b.expand) m.b.matrix.ptr = at(w.b_t);
  auto* factors = reinterpret_cast<float*>(at(w.factors));
  if (m.a.amax != nullptr) m.a.scale = factors;
  if (m.b.amax != nullptr) m.b.scale = factors != nullptr ? factors + w.factors_a : nullptr;
  if (m.rht) {  // each group's tokens on whole 16-token transform blocks
    g->k_bound_block = 16;
    g->k_bound_exempt = m.rht_rows;
  }
  auto& k = g->params;
  g->elem = m.elem;
  g->a = m.a.matrix;
  g->b = m.b.matrix;
  if (m.k_grouped_mn) g->a_mn_major = g->b_mn_major = true;
  k.scale_a = m.a.scale;
  k.sa_gs = m.a.scale_gs;
  k.sa_rs = m.a.scale_rs;
  k.scale_b = m.b.scale;
  k.sb_gs = m.b.scale_gs;
  k.sb_rs = m.b.scale_rs;
  k.bsa = m.a.block;
  k.bsb = m.b.block;
  k.b_group_rows = m.b_group_rows;
  k.b_group_cols = m.b_group_cols;
  if (m.b_mn_groups > 0) {  // B's BF16 image read MN-major (an NN GEMM on the weights)
    g->b_mn_major = true;
    g->b_mn_groups = m.b_mn_groups;
  }
  if (m.fp4) {
    k.fa = m.a.fp4;
    k.fb = m.b.fp4;
  }
  return m;
}

// Writes the workspace copies of describe_fp8: transposes of MXFP8 columnwise copies, BF16
// expansions (pairs with an NVFP4 copy) and NVFP4's 1/S_enc factors.
void prepare_fp8_operands(const gemm_cuda::Fp8ProblemMap& m, const WorkspaceLayout& w, char* ws,
                          cudaStream_t s) {
  for (const auto& [o, at] : {std::pair{&m.a, w.a_t}, std::pair{&m.b, w.b_t}}) {
    if (o->transpose)
      gemm_cuda::transpose_8bit(o->src, ws + at, o->src_batch, o->src_rows, o->src_cols,
                                o->matrix.ld, o->rows_pad, s);
    if (o->expand && o->expand_transposed)
      gemm_cuda::expand_to_bf16_transposed(o->ex, ws + at, o->matrix.ld, s);
    else if (o->expand)
      gemm_cuda::expand_to_bf16(o->ex, ws + at, o->matrix.ld, s);
    if (o->amax != nullptr)
      gemm_cuda::nvfp4_decode_factors(o->amax, o->amax_count, const_cast<float*>(o->scale), s);
  }
}

// The kernel launch description of a problem whose workspace regions are at `ws`; `fp8`, when
// given, receives the quantized operands' map (describe_fp8).
Sm90GroupedGemm describe(const GroupedGemmProblem& p, const GroupedGemmDims& d,
                         const WorkspaceLayout& w, char* ws,
                         gemm_cuda::Fp8ProblemMap* fp8 = nullptr) {
  auto at = [ws](int64_t off) -> void* { return ws != nullptr ? ws + off : nullptr; };
  Sm90GroupedGemm g;
  g.elem = gemm_cuda::ElemKind::kBF16;
  auto& k = g.params;
  k.k_grouped = p.kind == GroupedGemmKind::kKGrouped;
  k.num_groups = static_cast<int>(d.groups);
  k.offsets = w.offsets_bytes ? at(w.offsets) : p.group_offsets.data;
  k.offsets_int64 = p.group_offsets.dtype == DType::kInt64;
  k.offsets_start = p.offsets_format == GroupOffsetsFormat::kStartOffsets;
  k.capacity = d.capacity;
  if (p.a_row_starts.data != nullptr) {  // M-grouped only (check_grouped_gemm)
    k.a_row_starts = static_cast<const int64_t*>(w.a_starts_bytes ? at(w.a_starts)
                                                                  : p.a_row_starts.data);
    k.a_rows = d.a_rows;
  }
  k.m = d.m;
  k.n = d.n;
  k.k = d.k;
  k.d = p.d.data;
  k.out_type = out_type(p.d.dtype);
  k.ldd = d.n;
  k.d_group_stride = k.k_grouped ? d.m * d.n : 0;
  k.alpha = p.alpha;
  k.beta = p.beta;
  if (p.group_alpha.data != nullptr)
    k.group_alpha = static_cast<const float*>(w.alpha_bytes ? at(w.alpha) : p.group_alpha.data);
  if (p.bias.data != nullptr) {
    k.bias = p.bias.data;
    k.bias_type = out_type(p.bias.dtype);
    k.bias_gs = d.n;
  }
  if (!p.a.is_quantized && p.a.dense.dtype == DType::kFloat16) g.elem = gemm_cuda::ElemKind::kFP16;
  const MnPlan mn = mn_plan(p, d);
  if (p.a.is_quantized) {
    const gemm_cuda::Fp8ProblemMap m = describe_fp8(p, d, w, ws, &g);
    if (fp8 != nullptr) *fp8 = m;
  } else if (k.k_grouped && mn.a) {  // A (T, m), B (T, n) as stored: contraction = token rows
    g.a_mn_major = g.b_mn_major = true;
    g.a = {p.a.dense.data, d.capacity, d.m, d.m};
    g.b = {p.b.dense.data, d.capacity, d.n, d.n};
  } else if (k.k_grouped) {  // the padded layout: offsets = the padded starts, capacity = ld_t
    k.offsets = at(w.starts);
    k.offsets_int64 = 1;
    k.offsets_start = 1;
    k.capacity = w.ld_t;
    g.a = {at(w.a_t), d.m, w.ld_t, w.ld_t};
    g.b = {at(w.b_t), d.n, w.ld_t, w.ld_t};
  } else {  // M-grouped; batched = M-grouped with the uniform starts g·M over (G·M, K)
    const bool batched = p.kind == GroupedGemmKind::kBatched;
    if (batched) {
      k.offsets = at(w.starts);
      k.offsets_int64 = 1;
      k.offsets_start = 1;
      k.capacity = d.groups * d.m;
    }
    const void* a = batched && p.transpose_a ? at(w.a_t) : p.a.dense.data;
    g.a = {a, batched ? k.capacity : d.a_rows, d.k, d.k};  // a_rows: capacity or all of A
    if (mn.b) {  // (G, k, n) weights as stored: a 3-D map (n, k, group)
      g.b_mn_major = true;
      g.b = {p.b.dense.data, d.k, d.n, d.n};
      g.b_mn_groups = d.groups;
    } else {
      g.b = {p.transpose_b ? p.b.dense.data : at(w.b_t), d.groups * d.n, d.k, d.k};
      k.b_group_rows = d.n;
    }
  }
  return g;
}

__global__ void uniform_starts_kernel(int64_t* starts, int64_t count, int64_t step) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) starts[i] = i * step;
}

// Writes the dense operands' K-major copies (and the group starts they need) into the workspace.
void prepare_dense_operands(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                            const WorkspaceLayout& w, char* ws, cudaStream_t s) {
  const MnPlan mn = mn_plan(p, dims);
  if (mn.a) return;  // K-grouped, read in place
  if (p.kind == GroupedGemmKind::kKGrouped) {  // (T, M) → (M, ld_t), (T, N) → (N, ld_t)
    gemm_cuda::DeviceGroupOffsets o;
    o.data = w.offsets_bytes ? ws + w.offsets : p.group_offsets.data;
    o.int64 = p.group_offsets.dtype == DType::kInt64;
    o.start_format = p.offsets_format == GroupOffsetsFormat::kStartOffsets;
    o.groups = dims.groups;
    o.capacity = dims.capacity;
    auto* starts = reinterpret_cast<int64_t*>(ws + w.starts);
    gemm_cuda::k_grouped_padded_starts(o, starts, s);
    gemm_cuda::k_grouped_transpose_16bit(p.a.dense.data, dims.m, o, starts, ws + w.a_t, w.ld_t, s);
    gemm_cuda::k_grouped_transpose_16bit(p.b.dense.data, dims.n, o, starts, ws + w.b_t, w.ld_t, s);
    return;
  }
  if (p.kind == GroupedGemmKind::kBatched) {
    const int64_t count = dims.groups + 1;
    uniform_starts_kernel<<<static_cast<unsigned>((count + 255) / 256), 256, 0, s>>>(
        reinterpret_cast<int64_t*>(ws + w.starts), count, dims.m);
    TESSERA_CUDA_CHECK_LAUNCH();
    if (p.transpose_a)  // (G, K, M) → (G, M, K)
      gemm_cuda::transpose_16bit(p.a.dense.data, ws + w.a_t, dims.groups, dims.k, dims.m, dims.k, s);
  }
  if (!p.transpose_b && !mn.b)  // (G, K, N) → (G, N, K)
    gemm_cuda::transpose_16bit(p.b.dense.data, ws + w.b_t, dims.groups, dims.k, dims.n, dims.k, s);
}

}  // namespace

GroupedGemmConfig grouped_gemm_cuda_select_config(const GroupedGemmProblem& p,
                                                  const GroupedGemmDims& dims) {
  const WorkspaceLayout w = layout_of(p, dims);
  const gemm_cuda::Sm90Config c = gemm_cuda::select_sm90_config(describe(p, dims, w, nullptr), 0);
  return gemm_cuda::public_config(c, gemm_cuda::one_byte_operands(p));
}

void grouped_gemm_cuda(const GroupedGemmProblem& p, const GroupedGemmDims& dims, void* workspace,
                       int64_t workspace_bytes, Stream stream) {
  const WorkspaceLayout w = layout_of(p, dims);
  // An explicit config is checked before anything is written.
  const bool explicit_config = !p.config.is_default();
  const gemm_cuda::Sm90Config requested =
      explicit_config ? gemm_cuda::sm90_config_of(p.config, gemm_cuda::one_byte_operands(p))
                      : gemm_cuda::Sm90Config{};
  TESSERA_CHECK_STATUS(workspace_bytes >= w.total, Status::kBufferTooSmall, "workspace: ",
                       workspace_bytes, " bytes, ", w.total, " needed");
  TESSERA_CUDA_CHECK(cudaSetDevice(p.a.device().index));
  char* ws = static_cast<char*>(workspace);
  auto s = stream.as<cudaStream_t>();
  if (w.offsets_bytes)
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(ws + w.offsets, p.group_offsets.data, w.offsets_bytes,
                                       cudaMemcpyHostToDevice, s));
  if (w.a_starts_bytes)
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(ws + w.a_starts, p.a_row_starts.data, w.a_starts_bytes,
                                       cudaMemcpyHostToDevice, s));
  if (w.alpha_bytes)
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(ws + w.alpha, p.group_alpha.data, w.alpha_bytes,
                                       cudaMemcpyHostToDevice, s));
  if (!p.a.is_quantized) prepare_dense_operands(p, dims, w, ws, s);
  gemm_cuda::Fp8ProblemMap fp8;
  Sm90GroupedGemm g = describe(p, dims, w, ws, &fp8);
  if (p.a.is_quantized) prepare_fp8_operands(fp8, w, ws, s);  // transposes, expansions
  g.config = explicit_config ? requested : gemm_cuda::select_sm90_config(g, 0);
  // Kinds of one kernel shape: the block-scaled ones (cooperative 128 x 128) and NVFP4 expanded
  // in the kernel (ping-pong 128 x 128); explicit configs run them on 1-CTA clusters.
  const bool nvfp4 = g.elem == gemm_cuda::ElemKind::kNvfp4;
  if (gemm_cuda::is_block_scaled(g.elem) || nvfp4) {
    const char* what = nvfp4 ? "NVFP4 operands expanded in the kernel" : "FP8 block and MXFP8 operands";
    TESSERA_CHECK_STATUS(p.config.tile_n == 0 || p.config.tile_n == 128, Status::kUnsupported,
                         "config.tile_n: ", p.config.tile_n, "; ", what,
                         " run 128-column tiles (or leave it 0)");
    TESSERA_CHECK_STATUS(p.config.cluster_m <= 1, Status::kUnsupported, "config.cluster_m: ",
                         p.config.cluster_m, "; ", what, " run 1-CTA clusters");
    g.config.block_n = 128;
    g.config.pingpong = nvfp4;
    // The heuristic's 2-CTA clusters stay for the FP8 block wgrad (B multicast to a K-grouped
    // pair); MXFP8 and NVFP4 in the kernel run 1-CTA clusters.
    if (nvfp4 || gemm_cuda::is_mx_scaled(g.elem) || explicit_config) g.config.cluster = 1;
    if (explicit_config && p.config.stages == 0) g.config.stages = 6;
  }
  // Rows in no group: zeroed by the GEMM kernel itself (no launch of its own).
  if (p.zero_unused_rows) g.params.zero_rows = p.d.shape[0];
  gemm_cuda::launch_grouped_gemm_sm90(g, ws + w.maps, w.maps_bytes, s);
}

}  // namespace tessera::detail
