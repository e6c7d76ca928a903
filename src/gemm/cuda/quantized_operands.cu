// FP8 operands of the public grouped GEMM mapped onto the sm90 kernel's K-major matrices and
// epilogue scale indexing (see quantized_operands.h for the supported layouts).
#include "gemm/cuda/quantized_operands.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <sstream>
#include <utility>

#include "core/env_flag.h"

namespace tessera::gemm_cuda {
namespace {

// A refusal: status + reason.
struct Refusal {
  Status status = Status::kOk;
  std::string reason;
};

template <class... Parts>
Refusal refuse(Status s, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return {s, os.str()};
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The sm90 kernel's epilogue applies one FP32 scale per group or per row; the block-scaled
// kinds apply FP32 scales per 128-element contraction block, the MXFP8 kinds E8M0 scales per 32.
bool mode_supported(ScalingMode m) {
  return is_family(m, ScaleFamily::kTensor) || is_family(m, ScaleFamily::kRowwise) ||
         is_family(m, ScaleFamily::kBlock) || is_family(m, ScaleFamily::kMXFP8);
}

constexpr int64_t kMaxScaleBytes = int64_t{1} << 31;  // the kernel's 32-bit scale offsets

// MXFP8 scales of one copy as the kernel reads them (BlockScales, k_shift 5). Rowwise: rows of
// the copy, 32-element blocks along its columns. Columnwise (32x1 blocks of x (M, K), read from
// the transposed workspace copy whose rows are x's columns): row = x's column, block = x's row
// block, i.e. the geometry's (block, column) entry — compact at block·ld + row, swizzled as
// its transpose (scale_geometry's swizzle_transposed).
Refusal map_mx_scales(const QuantizedTensorView& q, const TensorView& scale, const char* name,
                      bool columnwise, gemm_sm90::BlockScales* out) {
  const QuantizerConfig& c = q.config;
  const scale_rules::ScaleGeometry geo = scale_geometry(c, q.rows, q.cols, columnwise);
  const MatrixShape ss = scale_shape(c, q.rows, q.cols, columnwise);
  if (scale.data == nullptr || scale.dtype != DType::kFloat8E8M0 || !scale.is_contiguous() ||
      !scale.device.is_cuda())
    return refuse(Status::kDTypeMismatch, name, ": MXFP8 scales must be contiguous E8M0 on the "
                  "device, got ", scale.to_string());
  if (scale.numel() < ss.rows * ss.cols)
    return refuse(Status::kShapeMismatch, name, ": MXFP8 scales: expected ", ss.rows, " x ",
                  ss.cols, " values, got ", scale.numel());
  if (ss.rows * ss.cols >= kMaxScaleBytes)
    return refuse(Status::kUnsupported, name, ": ", ss.rows * ss.cols, " MXFP8 scales; the CUDA "
                  "GEMM indexes fewer than 2^31");
  const int64_t rows = columnwise ? q.cols : q.rows, cols = columnwise ? q.rows : q.cols;
  out->ptr = scale.data;
  out->rows = rows > 0 ? rows : 1;
  out->kb_count = cols > 0 ? (cols + 31) / 32 : 1;
  out->row_shift = 0;
  out->k_shift = 5;
  out->swizzled = geo.swizzled ? 1 : 0;
  out->ld = geo.swizzled || !columnwise ? geo.ld : 1;
  out->kb_stride = geo.swizzled || !columnwise ? 1 : geo.ld;
  // 32x32 tiles: each 32 rows of the kernel's matrix (weight rows, or x's columns for the
  // transposed columnwise copy) share one scale, stored in each row.
  out->rows_per_scale_32 = c.mode == ScalingMode::kMXFP8_32x32 ? 1 : 0;
  return {};
}

bool is_nvfp4(const GemmOperand& o) {
  return o.is_quantized && is_family(o.quantized.config.mode, ScaleFamily::kNVFP4);
}
bool is_mxfp8(const GemmOperand& o) {
  return o.is_quantized && is_family(o.quantized.config.mode, ScaleFamily::kMXFP8);
}
bool rht_copy(const GemmOperand& o) {
  return is_nvfp4(o) && o.columnwise && o.quantized.config.random_hadamard;
}

// NVFP4's epilogue factors of an operand: 1/S_enc of each of the amax's 1 or G values.
void set_nvfp4_factors(const TensorView& amax, int64_t groups, Fp8OperandMap* out) {
  out->amax = static_cast<const float*>(amax.data);
  out->amax_count = amax.numel();
  out->scale_gs = amax.numel() == groups && groups > 1 ? 1 : 0;
  out->scale_rs = 0;
}

// An operand of a pair with an NVFP4 copy: the copy to expand into BF16 and the K-major matrix
// it becomes (rows = the copy's K-major rows, ld = cols padded to 8: 16-byte TMA rows). The
// buffers' dtypes, shapes and devices were validated by the front end (check_quantized_operand).
Refusal map_expanded_operand(const GemmOperand& o, const char* name, bool want_columnwise,
                             int64_t groups, Fp8OperandMap* out) {
  const QuantizedTensorView& q = o.quantized;
  const QuantizerConfig& c = q.config;
  const bool nvfp4 = is_nvfp4(o);  // else MXFP8 (map_expanded_problem)
  if (o.columnwise != want_columnwise)
    return refuse(Status::kUnsupported, name, ": the CUDA path reads the ",
                  want_columnwise ? "columnwise" : "rowwise", " copy here");
  const bool cw = want_columnwise;
  const TensorView& data = cw ? q.columnwise_data : q.data;
  const TensorView& scale = cw ? q.columnwise_scale_inv : q.scale_inv;
  if (!data.device.is_cuda() || !scale.device.is_cuda())
    return refuse(Status::kInvalidArgument, name, ": the stored copy must be on the device");
  ExpandSource& ex = out->ex;
  ex.codes = data.data;
  ex.scales = scale.data;
  ex.geometry = scale_geometry(c, q.rows, q.cols, cw);
  ex.element = c.element;
  // NVFP4 stores its columnwise copy transposed (K-major as stored); MXFP8 keeps x's layout.
  const bool stored_transposed = nvfp4 && cw;
  ex.rows = stored_transposed ? q.cols : q.rows;
  ex.cols = stored_transposed ? q.rows : q.cols;
  out->expand = true;
  out->expand_transposed = cw && !nvfp4;
  const int64_t rows = cw ? q.cols : q.rows, cols = cw ? q.rows : q.cols;
  out->matrix = {nullptr, rows, cols, (cols + 7) / 8 * 8};
  if (nvfp4) {
    const auto factors = [&](const TensorView& amax) -> Refusal {
      if (!amax.device.is_cuda())
        return refuse(Status::kInvalidArgument, name, ": the NVFP4 global amax must be on the "
                      "device");
      set_nvfp4_factors(amax, groups, out);
      return {};
    };
    if (o.expanded.data != nullptr) {  // validated by the front end (check_quantized_operand)
      if (!o.expanded.device.is_cuda())
        return refuse(Status::kInvalidArgument, name, ": the BF16 image must be on the device");
      if (!cw) {  // the image is this copy's expansion: read in place
        out->expand = false;
        out->matrix = {o.expanded.data, q.rows, q.cols, q.cols};
        return factors(q.amax);
      }
      out->image = o.expanded.data;
      out->image_amax = &q.amax;
      out->image_transposes = scaling_mode_info(c.mode).block_rows == 16 &&
                              !c.random_hadamard && !c.stochastic_rounding;
    }
    return factors(cw ? q.columnwise_amax : q.amax);
  }
  if (o.expanded.data != nullptr && !cw) {  // MXFP8: the rowwise copy's image, read in place
    if (!o.expanded.device.is_cuda())
      return refuse(Status::kInvalidArgument, name, ": the BF16 image must be on the device");
    out->expand = false;
    out->matrix = {o.expanded.data, q.rows, q.cols, q.cols};
  }
  return {};
}

// B of an M-grouped NN GEMM read from its BF16 image instead of its expanded columnwise copy:
// the image is W (G·K, N) as the rowwise copy holds it, read MN-major per group (the dense BF16
// dgrad's reading), with the rowwise copy's factors (equal to the columnwise copy's when the
// copies are transposes: the same tiles, scales and global amax).
void use_image_mn(const detail::GroupedGemmDims& d, Fp8ProblemMap* m) {
  Fp8OperandMap& b = m->b;
  b.expand = false;
  b.matrix = {b.image, d.k, d.n, d.n};
  set_nvfp4_factors(*b.image_amax, d.groups, &b);
  m->b_mn_groups = d.groups;
  m->b_group_rows = 0;
  m->b_group_cols = 0;
}

// The stored copy an operand reads: data (rows, cols) row-major, its scales, and how a scale is
// indexed (stored row for kRowwise; group for kTensor with G values).
Refusal map_operand(const GemmOperand& o, const char* name, bool want_columnwise, int64_t groups,
                    Fp8OperandMap* out) {
  const QuantizedTensorView& q = o.quantized;
  const QuantizerConfig& c = q.config;
  if (!mode_supported(c.mode))
    return refuse(Status::kUnsupported, name, ": scaling mode ", scaling_mode_name(c.mode),
                  " is not implemented on CUDA (per-tensor, rowwise and block FP8 and MXFP8 are)");
  if (c.element != DType::kFloat8E4M3 && c.element != DType::kFloat8E5M2)
    return refuse(Status::kUnsupported, name, ": element ", dtype_name(c.element),
                  " is not implemented on CUDA (FP8 E4M3 / E5M2 are)");
  if (o.columnwise != want_columnwise)
    return refuse(Status::kUnsupported, name, ": the CUDA path reads the ",
                  want_columnwise ? "columnwise" : "rowwise",
                  " copy here (FP8 tensor cores need K-major operands)");
  const TensorView& data = want_columnwise ? q.columnwise_data : q.data;
  const TensorView& scale = want_columnwise ? q.columnwise_scale_inv : q.scale_inv;
  if (is_family(c.mode, ScaleFamily::kMXFP8)) {
    // Both copies are stored (rows, cols) as x; the kernel reads (rows, cols) rowwise and the
    // transposed (cols, rows) columnwise.
    if (data.data == nullptr || data.ndim != 2 || data.shape[0] != q.rows ||
        data.shape[1] != q.cols || !data.is_contiguous() || data.dtype != c.element)
      return refuse(Status::kShapeMismatch, name, ": stored ",
                    want_columnwise ? "columnwise_data" : "data", " must be a contiguous ",
                    dtype_name(c.element), " (", q.rows, ", ", q.cols, "), got ", data.to_string());
    Refusal r = map_mx_scales(q, scale, name, want_columnwise, &out->block);
    if (r.status != Status::kOk) return r;
    if (!want_columnwise) {
      if (!aligned16(data.data))
        return refuse(Status::kMisaligned, name, ": data must be 16-byte aligned (TMA)");
      out->matrix = {data.data, q.rows, q.cols, q.cols};
      return {};
    }
    if (q.cols % 4 != 0 || reinterpret_cast<uintptr_t>(data.data) % 4 != 0)
      return refuse(Status::kMisaligned, name, ": the MXFP8 columnwise copy (", q.rows, ", ",
                    q.cols, ") is transposed on the device in 4-byte words: its columns must be "
                    "a multiple of 4 and its base 4-byte aligned");
    out->transpose = true;
    out->src = data.data;
    out->src_rows = q.rows;
    out->src_cols = q.cols;
    out->rows_pad = (q.rows + 15) / 16 * 16;
    out->matrix = {nullptr, q.cols, q.rows, out->rows_pad};
    return {};
  }
  const int64_t rows = want_columnwise ? q.cols : q.rows, cols = want_columnwise ? q.rows : q.cols;
  if (data.data == nullptr || data.ndim != 2 || data.shape[0] != rows || data.shape[1] != cols ||
      !data.is_contiguous() || data.dtype != c.element)
    return refuse(Status::kShapeMismatch, name, ": stored ",
                  want_columnwise ? "columnwise_data" : "data", " must be a contiguous ",
                  dtype_name(c.element), " (", rows, ", ", cols, "), got ", data.to_string());
  if (scale.data == nullptr || scale.dtype != DType::kFloat32 || !scale.is_contiguous() ||
      !scale.device.is_cuda())
    return refuse(Status::kDTypeMismatch, name, ": scales must be contiguous FP32 on the device");
  if (!aligned16(data.data))
    return refuse(Status::kMisaligned, name, ": data must be 16-byte aligned (TMA)");
  out->matrix = {data.data, rows, cols, cols};
  if (is_family(c.mode, ScaleFamily::kBlock)) {
    const scale_rules::ScaleGeometry geo = scale_geometry(c, q.rows, q.cols, want_columnwise);
    if (geo.swizzled || geo.block_cols != 128 || (geo.block_rows != 1 && geo.block_rows != 128))
      return refuse(Status::kUnsupported, name, ": block scales of ", geo.block_rows, "x",
                    geo.block_cols, " blocks", geo.swizzled ? " (swizzled)" : "",
                    " are not implemented on CUDA (compact 1x128 and 128x128 are)");
    const MatrixShape ss = scale_shape(c, q.rows, q.cols, want_columnwise);
    if (scale.numel() < ss.rows * ss.cols)
      return refuse(Status::kShapeMismatch, name, ": block scales: expected ", ss.rows, " x ",
                    ss.cols, " values, got ", scale.numel());
    out->block.ptr = static_cast<const float*>(scale.data);
    out->block.ld = geo.ld;
    out->block.rows = rows > 0 ? rows : 1;
    out->block.row_shift = geo.block_rows == 128 ? 7 : 0;
    return {};
  }
  out->scale = static_cast<const float*>(scale.data);
  if (is_family(c.mode, ScaleFamily::kRowwise)) {
    // One scale per stored row, or per (group, stored row) for a columnwise copy scaled per
    // group (stored row = x's column; group g's at g·rows).
    const bool per_group = want_columnwise && groups > 1 && scale.numel() == groups * rows;
    if (scale.numel() != rows && !per_group)
      return refuse(Status::kShapeMismatch, name, ": rowwise scales: expected ", rows,
                    want_columnwise ? " values (or one per group and row)" : " values",
                    ", got ", scale.numel());
    out->scale_gs = per_group ? rows : 0;
    out->scale_rs = 1;
  } else {
    if (scale.numel() != 1 && scale.numel() != groups)
      return refuse(Status::kShapeMismatch, name, ": per-tensor scales: expected 1 or ", groups,
                    " values, got ", scale.numel());
    out->scale_gs = scale.numel() == groups && groups > 1 ? 1 : 0;
    out->scale_rs = 0;
  }
  return {};
}

using MapOperand = Refusal (*)(const GemmOperand&, const char*, bool, int64_t, Fp8OperandMap*);

Refusal map_m_grouped(const GroupedGemmProblem& p, const detail::GroupedGemmDims& d,
                      MapOperand map, Fp8ProblemMap* out) {
  if (!out->expanded && d.k % 16 != 0)  // expanded BF16 copies are padded to whole 16 bytes
    return refuse(Status::kUnsupported, "K = ", d.k, " must be a multiple of 16 for FP8 on CUDA "
                  "(16-byte TMA rows)");
  Refusal r = map(p.a, "A", false, d.groups, &out->a);
  if (r.status != Status::kOk) return r;
  // A (T, K): rows past the capacity are never read (with a_row_starts, a_rows = all of A's)
  out->a.matrix.rows = d.a_rows;
  if (out->a.expand) out->a.ex.rows = std::min(out->a.ex.rows, d.a_rows);
  r = map(p.b, "B", !p.transpose_b, d.groups, &out->b);
  if (r.status != Status::kOk) return r;
  if (p.transpose_b) {  // TN: B (G·N, K) rowwise; rowwise scales per weight row g·N + n
    out->b_group_rows = d.n;
    out->b_group_cols = 0;
    if (out->b.scale_rs != 0) out->b.scale_gs = d.n;
  } else if (out->b.transpose) {  // NN, MXFP8: W (G·K, N) → (N, G·K'), K' = roundup(K, 128)
    if (d.k % 32 != 0)
      return refuse(Status::kUnsupported, "B: MXFP8 dgrad needs K (each group's contraction) a "
                    "multiple of 32 on CUDA, so that no 32-row scale block of W straddles two "
                    "groups; got K = ", d.k);
    const int64_t k_pad = (d.k + 127) / 128 * 128;
    Fp8OperandMap& b = out->b;
    b.src_batch = d.groups;
    b.src_rows = d.k;
    b.rows_pad = k_pad;
    b.matrix = {nullptr, d.n, d.groups * k_pad, d.groups * k_pad};
    b.block.group_kb = d.k / 32;
    out->b_group_rows = 0;
    out->b_group_cols = k_pad;
  } else if (out->b.image != nullptr && out->b.image_transposes && p.config.cluster_m <= 1 &&
             p.b.quantized.rows == d.groups * d.k && p.b.quantized.cols == d.n) {
    use_image_mn(d, out);  // NN on the weights' BF16 image (no clusters: MN-major)
  } else {  // NN: transposed copy (N, G·K); group g at contraction columns g·K
    out->b_group_rows = 0;
    out->b_group_cols = d.k;
    if (out->b.block.ptr != nullptr && d.k % 128 != 0)
      return refuse(Status::kUnsupported, "B: FP8 block dgrad needs K (each group's "
                    "contraction) a multiple of 128 on CUDA, so that group g's columns g·K start "
                    "on a scale block; got K = ", d.k);
  }
  return {};
}

Refusal map_k_grouped(const GroupedGemmProblem& p, const detail::GroupedGemmDims& d,
                      MapOperand map, Fp8ProblemMap* out) {
  Refusal r = map(p.a, "A", true, d.groups, &out->a);
  if (r.status != Status::kOk) return r;
  r = map(p.b, "B", true, d.groups, &out->b);
  if (r.status != Status::kOk) return r;
  // The stored token dim (row stride of both copies; MXFP8's workspace copies pad it to 16,
  // the expanded BF16 copies to 8).
  const int64_t t = out->a.transpose ? out->a.matrix.ld : out->a.matrix.cols;
  if (!out->expanded && t % 16 != 0)
    return refuse(Status::kMisaligned, "A and B: ", t, " token rows; the transposed FP8 copies "
                  "need a multiple of 16 (16-byte TMA row stride)");
  out->a.matrix.cols = d.capacity;  // the setup kernel clips each group at end_g
  out->b.matrix.cols = d.capacity;
  return {};
}

// The kernel kind of the operands' element pair (A first).
Refusal element_kind(const GroupedGemmProblem& p, ElemKind* out) {
  const DType a = p.a.quantized.config.element, b = p.b.quantized.config.element;
  if (a == DType::kFloat8E4M3 && b == DType::kFloat8E4M3) {
    *out = ElemKind::kE4M3;
  } else if (a == DType::kFloat8E5M2 && b == DType::kFloat8E4M3) {
    *out = ElemKind::kE5M2E4M3;
  } else {
    return refuse(Status::kUnsupported, "A × B = ", dtype_name(a), " × ", dtype_name(b),
                  " is not instantiated on CUDA (E4M3 × E4M3 and E5M2 × E4M3 are: the FP8 "
                  "recipes' forward, and the HYBRID backward with E5M2 gradients as A)");
  }
  return {};
}

// The kernel kind of an FP8 pair: the same mode on both, or two FP8 block modes (e.g. 1x128
// activations x 128x128 weights), or two MXFP8 modes (1x32 activations x 32x32 weights); the
// element pair (element_kind) with its block or MXFP8 scales.
Refusal fp8_pair_kind(const GroupedGemmProblem& p, ElemKind* out) {
  const ScalingMode ma = p.a.quantized.config.mode, mb = p.b.quantized.config.mode;
  const bool blocks = is_family(ma, ScaleFamily::kBlock);
  const bool mx = is_family(ma, ScaleFamily::kMXFP8);
  if (ma != mb && !(blocks && is_family(mb, ScaleFamily::kBlock)) &&
      !(mx && is_family(mb, ScaleFamily::kMXFP8)))
    return refuse(Status::kUnsupported, "A and B: the CUDA path needs the same scaling mode on "
                  "both (or two FP8 block modes, or two MXFP8 modes), got ", scaling_mode_name(ma),
                  " x ", scaling_mode_name(mb));
  Refusal r = element_kind(p, out);
  if (r.status == Status::kOk && blocks)
    *out = *out == ElemKind::kE4M3 ? ElemKind::kE4M3Block : ElemKind::kE5M2E4M3Block;
  if (r.status == Status::kOk && mx)
    *out = *out == ElemKind::kE4M3 ? ElemKind::kE4M3Mx : ElemKind::kE5M2E4M3Mx;
  return r;
}

// nvfp4_in_kernel's switch, off unless TESSERA_NVFP4_IN_KERNEL=1 at the first read.
std::atomic<bool>& in_kernel_switch() {
  static std::atomic<bool> on{::tessera::detail::env_flag("TESSERA_NVFP4_IN_KERNEL", false)};
  return on;
}

// Whether an M-grouped NVFP4 x NVFP4 pair (mapped for the workspace expansion) runs expanded
// in the kernel instead (Fp8ProblemMap::fp4).
bool fp4_in_kernel(const Fp8ProblemMap& m, const detail::GroupedGemmDims& d) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const auto blocks16 = [](const scale_rules::ScaleGeometry& g) {
    return g.block_cols == 16 && (g.block_rows == 1 || g.block_rows == 16);
  };
  // a stage row's four scales: one aligned 32-bit word (fp4_stage.cuh stage_row_scales)
  const auto scale_words = [](const ExpandSource& e) {
    const scale_rules::ScaleGeometry& g = e.geometry;
    return reinterpret_cast<uintptr_t>(e.scales) % 4 == 0 &&
           (g.swizzled ? !g.swizzle_transposed : g.ld % 4 == 0);
  };
  return nvfp4_in_kernel() && !m.rht && d.k % 32 == 0 && m.a.expand && m.b.expand &&
         !m.a.expand_transposed &&
         blocks16(m.a.ex.geometry) && blocks16(m.b.ex.geometry) &&
         !m.b.expand_transposed && aligned(m.a.ex.codes) && aligned(m.b.ex.codes) &&
         (m.a.ex.cols / 2) % 16 == 0 && (m.b.ex.cols / 2) % 16 == 0 && scale_words(m.a.ex) &&
         scale_words(m.b.ex) && m.b_group_cols % 64 == 0;
}

// A pair with an NVFP4 copy: both expanded to BF16 (map_expanded_operand), the BF16 kind. A
// Hadamard-transformed copy only with another one, K-grouped (the transforms cancel over the
// contraction).
Refusal map_expanded_problem(const GroupedGemmProblem& p, const detail::GroupedGemmDims& d,
                             Fp8ProblemMap* m) {
  m->expanded = true;
  m->elem = ElemKind::kBF16;
  for (const auto& [o, name] : {std::pair{&p.a, "A"}, std::pair{&p.b, "B"}})
    if (!is_nvfp4(*o) && !is_mxfp8(*o))
      return refuse(Status::kUnsupported, name, ": scaling mode ",
                    scaling_mode_name(o->quantized.config.mode), " meets an NVFP4 operand; on "
                    "CUDA an NVFP4 copy multiplies with an NVFP4 or an MXFP8 copy");
  const bool rht_a = rht_copy(p.a), rht_b = rht_copy(p.b);
  if ((rht_a || rht_b) && !(rht_a && rht_b && p.kind == GroupedGemmKind::kKGrouped))
    return refuse(Status::kUnsupported, "A and B: an NVFP4 copy with the random Hadamard "
                  "transform multiplies on CUDA only with another such copy over the transformed "
                  "token dim (the K-grouped wgrad, where the transforms cancel); got A ",
                  rht_a ? "with" : "without", " and B ", rht_b ? "with" : "without",
                  " the transform in a ", grouped_gemm_kind_name(p.kind), " GEMM");
  m->rht = rht_a;
  m->rht_rows = p.a.quantized.rows;
  if (p.kind == GroupedGemmKind::kMGrouped) {
    const Refusal r = map_m_grouped(p, d, map_expanded_operand, m);
    if (r.status == Status::kOk && is_nvfp4(p.a) && is_nvfp4(p.b) && fp4_in_kernel(*m, d)) {
      for (Fp8OperandMap* o : {&m->a, &m->b}) {
        const int64_t row_bytes = (o->ex.cols + 1) / 2;
        o->matrix = {o->ex.codes, o->ex.rows, row_bytes, row_bytes};
        o->fp4 = {static_cast<const uint8_t*>(o->ex.scales), o->ex.geometry, o->ex.rows, d.k,
                  o->ex.geometry.block_rows == 16 ? 4 : 0};
        o->expand = false;
      }
      m->fp4 = true;
      m->elem = ElemKind::kNvfp4;
    }
    return r;
  }
  if (p.kind == GroupedGemmKind::kKGrouped) {
    const Refusal r = map_k_grouped(p, d, map_expanded_operand, m);
    // MXFP8 columnwise copies keep x's (tokens, cols) layout: expanded as stored (a plain
    // expansion, no transpose through shared tiles) and read MN-major by the BF16 kind, as the
    // dense wgrad reads its token matrices. Not on an explicit cluster launch (clusters
    // multicast K-major operands).
    if (r.status == Status::kOk && m->a.expand_transposed && m->b.expand_transposed &&
        p.config.cluster_m <= 1) {
      for (Fp8OperandMap* o : {&m->a, &m->b}) {
        o->expand_transposed = false;
        o->matrix = {nullptr, o->ex.rows, o->ex.cols, (o->ex.cols + 7) / 8 * 8};
      }
      m->k_grouped_mn = true;
    }
    return r;
  }
  return refuse(Status::kUnsupported, "batched (3D x 3D) GEMM is not implemented on CUDA");
}

}  // namespace

bool nvfp4_in_kernel() { return in_kernel_switch().load(std::memory_order_relaxed); }
void set_nvfp4_in_kernel(bool on) { in_kernel_switch().store(on, std::memory_order_relaxed); }

namespace {

// An MXFP8 x MXFP8 pair through the BF16 kind (detail::mxfp8_path): true when it is mapped so
// (*r then holds the mapping's verdict). Under kAuto a refused expanded mapping falls back to
// the native kinds (false), so the rule never refuses what they run.
bool mxfp8_runs_expanded(const GroupedGemmProblem& p, const detail::GroupedGemmDims& d,
                         Fp8ProblemMap* m, Refusal* r) {
  if (!is_mxfp8(p.a) || !is_mxfp8(p.b)) return false;
  const auto image = [](const GemmOperand& o) {
    return o.expanded.data != nullptr && !o.columnwise;
  };
  if (!detail::mxfp8_expands(p.kind, d, image(p.a), image(p.b))) return false;
  Fp8ProblemMap expanded;
  const Refusal e = map_expanded_problem(p, d, &expanded);
  if (e.status != Status::kOk && detail::mxfp8_path() == detail::Mxfp8Path::kAuto) return false;
  *m = expanded;
  *r = e;
  return true;
}

}  // namespace

bool has_workspace_operand(const GroupedGemmProblem& p) {
  return is_mxfp8(p.a) || is_mxfp8(p.b) || is_nvfp4(p.a) || is_nvfp4(p.b);
}

bool one_byte_operands(const GroupedGemmProblem& p) {
  return p.a.is_quantized && !is_nvfp4(p.a) && !is_nvfp4(p.b);
}

Status map_fp8_problem(const GroupedGemmProblem& p, const detail::GroupedGemmDims& d,
                       Fp8ProblemMap* out, std::string* reason) {
  Fp8ProblemMap m;
  Refusal r;
  if (!p.a.is_quantized || !p.b.is_quantized) {
    r = refuse(Status::kDTypeMismatch, "A and B: both must be quantized");
  } else if (is_nvfp4(p.a) || is_nvfp4(p.b)) {
    r = map_expanded_problem(p, d, &m);
  } else if (mxfp8_runs_expanded(p, d, &m, &r)) {
    // mapped (or refused, under Mxfp8Path::kExpanded) for the BF16 kind
  } else {
    if (p.kind == GroupedGemmKind::kMGrouped) {
      r = map_m_grouped(p, d, map_operand, &m);
    } else if (p.kind == GroupedGemmKind::kKGrouped) {
      r = map_k_grouped(p, d, map_operand, &m);
    } else {
      r = refuse(Status::kUnsupported, "batched (3D x 3D) GEMM is not implemented on CUDA");
    }
    // After the operands (an unsupported mode of either is named first), the pair.
    if (r.status == Status::kOk) r = fp8_pair_kind(p, &m.elem);
  }
  if (r.status != Status::kOk) {
    if (reason != nullptr) *reason = r.reason;
    return r.status;
  }
  *out = m;
  return Status::kOk;
}

}  // namespace tessera::gemm_cuda
