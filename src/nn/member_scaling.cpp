// Per-member scaling of the step's quantized copies (member_scaling.h): which usages, their
// scale counts, the CPU loops, and the step's role quantization that routes each usage.
#include "nn/member_scaling.h"

#include <algorithm>
#include <vector>

#include "core/cpu_parallel.h"
#include "nn/step_memory.h"
#include "quantize/quantize_backend.h"
#include "nn/weight_layout.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"
#include "tessera/formats/half.h"
#include "tessera/formats/scaling_modes.h"

namespace tessera::nn::detail {

using ::tessera::detail::kParallelWork;

bool member_scaled(const QuantizerConfig& c, bool columnwise) {
  if (is_family(c.mode, ScaleFamily::kTensor)) return true;
  return columnwise && is_family(c.mode, ScaleFamily::kRowwise);
}

bool member_global_amax(const QuantizerConfig& c) { return is_family(c.mode, ScaleFamily::kNVFP4); }

namespace {

// The kRowwise rule of a per-tensor or rowwise config (current_scale with its FP8 maximum,
// epsilon and power-of-two option), over units of `block` elements.
moe::RowQuant line_rule(const QuantizerConfig& c, int64_t block) {
  QuantizerConfig r = c;
  r.mode = ScalingMode::kRowwise;
  return moe::row_quant_of(r, block);
}

// Member rows as host values (CPU: the starts live in host memory).
void check_members(const Members& m, int64_t rows) {
  TESSERA_CHECK(m.groups >= 1, "members: ", m.groups, " groups; expected >= 1");
  TESSERA_CHECK(m.end(m.groups - 1) <= rows, "members: the last member ends at row ",
                m.end(m.groups - 1), " past the matrix's ", rows, " rows");
}

void member_columns_cpu(const MemberColumnsArgs& a) {
  dispatch_float_input(a.x_dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    const auto* x = static_cast<const In*>(a.x);
#pragma omp parallel for schedule(static) if (a.rows * a.cols >= kParallelWork)
    for (int64_t gk = 0; gk < a.members.groups * a.cols; ++gk) {
      const int64_t g = gk / a.cols, k = gk % a.cols;
      const int64_t r0 = a.members.begin(g), r1 = a.members.end(g);
      uint32_t m = 0;  // abs bits: NaN wins
      for (int64_t r = r0; r < r1; ++r) {
        const uint32_t v = scale_rules::abs_bits(to_float(x[r * a.cols + k]));
        m = v > m ? v : m;
      }
      const float mult = moe::block_multiplier(a.quant, m, a.scale_inv, gk);
      uint8_t* out = a.data + g * a.g_stride + k * a.k_stride + r0 * a.keep_rows;
      for (int64_t r = r0; r < r1; ++r)
        out[r - r0] = moe::encode_element(a.quant, to_float(x[r * a.cols + k]) * mult);
    }
  });
}

// Member g's abs-bits maximum over its rows.
std::vector<uint32_t> member_amax_cpu(const MemberTensorArgs& a) {
  std::vector<uint32_t> m(static_cast<size_t>(a.members.groups), 0u);
  dispatch_float_input(a.x_dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    const auto* x = static_cast<const In*>(a.x);
#pragma omp parallel for schedule(dynamic) if (a.rows * a.cols >= kParallelWork)
    for (int64_t g = 0; g < a.members.groups; ++g) {
      uint32_t v = 0;
      for (int64_t i = a.members.begin(g) * a.cols; i < a.members.end(g) * a.cols; ++i) {
        const uint32_t b = scale_rules::abs_bits(to_float(x[i]));
        v = b > v ? b : v;
      }
      m[static_cast<size_t>(g)] = v;
    }
  });
  return m;
}

void member_tensor_cpu(const MemberTensorArgs& a) {
  const std::vector<uint32_t> amax = member_amax_cpu(a);
  const int64_t groups = a.members.groups;
  std::vector<float> mult(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    mult[g] = member_multiplier(a, amax[g], g, a.scale_inv + g);
    if (a.scale_inv2) a.scale_inv2[g] = a.scale_inv[g];
    const float am = scale_rules::amax_from_abs_bits(amax[g]);
    if (a.amax) a.amax[g] = am;
    if (a.amax2) a.amax2[g] = am;
    if (a.history) a.history[g] = am;
  }
  dispatch_float_input(a.x_dtype, "x", [&](auto tag) {
    using In = typename decltype(tag)::type;
    const auto* x = static_cast<const In*>(a.x);
#pragma omp parallel for schedule(static) if (a.rows * a.cols >= kParallelWork)
    for (int64_t r = 0; r < a.rows; ++r) {
      const int64_t g = a.members.member_of(r);
      for (int64_t c = 0; c < a.cols; ++c) {
        const uint8_t code =
            g < 0 ? uint8_t{0} : moe::encode_element(a.quant, to_float(x[r * a.cols + c]) * mult[g]);
        if (a.row_codes) a.row_codes[r * a.cols + c] = code;
        if (a.col_codes) a.col_codes[c * a.rows + r] = code;
      }
    }
  });
}

}  // namespace

void quantize_member_columns(const MemberColumnsArgs& a, Allocator& alloc, Device device,
                             Stream stream) {
  if (a.members.groups * a.cols == 0) return;
  if (device.is_cuda()) {
    const int64_t bytes = cuda::member_columns_scratch_bytes(a);
    Scratch tmp = scratch(alloc, bytes, device, stream);
    return cuda::quantize_member_columns(a, tmp.carver.take(bytes), stream);
  }
  check_members(a.members, a.rows);
  member_columns_cpu(a);
}

int64_t member_tensor_scratch_bytes(const MemberTensorArgs& a) {
  if (cuda::member_tensor_wide(a)) return cuda::member_tensor_wide_scratch_bytes(a);
  const int64_t codes = a.row_codes == nullptr ? a.rows * a.cols : 0;
  return codes + 256 + 4 * a.members.groups;
}

void quantize_member_tensor(const MemberTensorArgs& a, Device device, Stream stream) {
  if (a.members.groups == 0) return;
  if (!device.is_cuda()) {
    check_members(a.members, a.rows);
    return member_tensor_cpu(a);
  }
  if (cuda::member_tensor_wide(a)) return cuda::quantize_member_tensor_wide(a, a.scratch, stream);
  // Scratch: [row codes when not asked for] [amax bits of the members], 256-byte aligned.
  auto* base = static_cast<uint8_t*>(a.scratch);
  const int64_t codes_bytes = a.row_codes == nullptr ? (a.rows * a.cols + 255) / 256 * 256 : 0;
  uint8_t* codes = a.row_codes != nullptr ? a.row_codes : base;
  auto* amax_bits = reinterpret_cast<uint32_t*>(base + codes_bytes);
  cuda::member_tensor_amax(a, amax_bits, stream);
  cuda::member_tensor_encode(a, amax_bits, codes, stream);
  if (a.col_codes != nullptr && a.rows * a.cols > 0)
    transpose_bytes(codes, a.col_codes, 1, a.rows, a.cols, device, stream);
}

bool reads_through_layout(const QuantizerConfig& c, bool rowwise, bool columnwise,
                          const TensorView& x, int64_t rows) {
  if (!x.device.is_cuda() || x.ndim != 2) return false;
  if (is_family(c.mode, ScaleFamily::kTensor)) return true;
  // FP8 block and MXFP8: their kernels read the rows through the layout themselves; so do
  // NVFP4's tiled member kernels (quantize_nvfp4_members with sources).
  if (::tessera::detail::takes_layout_rows(c, x)) return true;
  if (member_global_amax(c) && ::tessera::detail::nvfp4_members_take_layout(c, x)) return true;
  if (!is_family(c.mode, ScaleFamily::kRowwise) || !columnwise) return false;
  // The copies' bases as carve_quantized places them: any 256-byte aligned address.
  auto* carved = reinterpret_cast<uint8_t*>(uintptr_t{256});
  Members layout;  // the step's padded layout: starts on multiples of 16 rows
  layout.aligned16 = true;
  MemberColumnsArgs a{x.data, x.dtype, rows, x.shape[1], layout, moe::RowQuant{},
                      carved, 0, rows, 1, nullptr};
  if (rowwise) a.row_data = carved;
  return cuda::lines_fused(a);
}

namespace {

// `out` with only the usages asked for (the others' views emptied: nothing writes them).
QuantizedTensorView usages_of(const QuantizedTensorView& out, bool rowwise, bool columnwise) {
  QuantizedTensorView part = out;
  if (!rowwise) part.data = part.scale_inv = part.amax = TensorView{};
  if (!columnwise) {
    part.columnwise_data = part.columnwise_scale_inv = part.columnwise_amax = TensorView{};
  }
  return part;
}

// NVFP4 with one global amax per member (member_global_amax; the copies carved with G amaxes):
// both usages in place through quantize_nvfp4_members; with stochastic rounding, member g draws
// the role's g-th of G fresh offsets (as G quantizers, one per expert, would).
void quantize_nvfp4_role_members(const RoleFormat& format, bool rowwise, bool columnwise,
                                 const TensorView& x, const Members& members,
                                 QuantizedTensorView& out, Allocator& alloc, Stream stream) {
  const Device dev = x.device;
  const int64_t n = members.groups + 1, cols = x.shape[1];
  QuantizedTensorView part = usages_of(out, rowwise, columnwise);
  part.config = format.config;
  part.config.rowwise = rowwise;
  part.config.columnwise = columnwise;
  if (part.config.stochastic_rounding) {
    part.config.rng_offset = take_rng_offsets(static_cast<uint64_t>(members.groups));
  }
  Scratch tmp;
  std::vector<int64_t> host;
  TensorView offsets;
  if (dev.is_cuda()) {
    tmp = scratch(alloc, 8 * n, dev, stream);
    offsets = TensorView::contiguous(tmp.carver.take(8 * n), DType::kInt64, {n}, dev);
    cuda::member_element_offsets(members, cols, offsets.as<int64_t>(), stream);
  } else {
    check_members(members, x.shape[0]);
    host.resize(static_cast<size_t>(n));
    for (int64_t g = 0; g < members.groups; ++g) host[g] = members.begin(g) * cols;
    host[members.groups] = members.end(members.groups - 1) * cols;
    offsets = TensorView::contiguous(host.data(), DType::kInt64, {n}, dev);
  }
  // Through the layout (members.sources): x is the caller's T rows, read by the tiled kernels.
  const TensorView sources =
      members.sources == nullptr
          ? TensorView{}
          : TensorView::contiguous(const_cast<int64_t*>(members.sources), DType::kInt64, {n}, dev);
  ::tessera::detail::quantize_nvfp4_members(part.config, x, offsets, part, stream, sources);
}

}  // namespace

void quantize_role_members(const RoleFormat& format, bool rowwise, bool columnwise,
                           const DelayedScalingState& state, const TensorView& x,
                           const Members& members, QuantizedTensorView& out, Allocator& alloc,
                           Stream stream, const char* role) {
  const QuantizerConfig& c = format.config;
  // NVFP4 per member wherever the copies were carved with one amax per member and the members
  // lie on the 16-row grid (the activation layouts always; W_g always with several experts,
  // make_linear_spec; one expert when out % 16 == 0) — one expert too, so that a layer's copies
  // never depend on its expert count.
  const TensorView& amax = rowwise ? out.amax : out.columnwise_amax;
  if (member_global_amax(c) && amax.numel() == members.groups &&
      (members.sources == nullptr || ::tessera::detail::nvfp4_members_take_layout(c, x)) &&
      (members.starts != nullptr || members.uniform % 16 == 0)) {
    return quantize_nvfp4_role_members(format, rowwise, columnwise, x, members, out, alloc,
                                       stream);
  }
  const bool m_row = rowwise && member_scaled(c, false);
  const bool m_col = columnwise && member_scaled(c, true);
  const Device dev = x.device;
  const int64_t rows = out.rows, cols = out.cols;  // of the copy (x's own rows unless mapped)
  TESSERA_CHECK(members.sources == nullptr ||
                    reads_through_layout(c, rowwise, columnwise, x, out.rows),
                role, ": reading x through the layout needs the member kernels for every usage");
  // The rowwise family's columnwise copy, per (member, column); on CUDA its passes also write
  // the rowwise copy where the kernels can (lines_fused).
  const bool lines_family = m_col && is_family(c.mode, ScaleFamily::kRowwise);
  MemberColumnsArgs lines{x.data, x.dtype, rows, cols, members,
                          lines_family ? line_rule(c, rows) : moe::RowQuant{},
                          out.columnwise_data.as<uint8_t>(), 0, rows, 1,
                          out.columnwise_scale_inv.as<float>()};
  bool fused_rows = false;
  if (lines_family && rowwise && dev.is_cuda()) {
    lines.row_data = out.data.as<uint8_t>();
    lines.row_scale_inv = out.scale_inv.as<float>();
    lines.row_quant = line_rule(c, cols);
    fused_rows = cuda::lines_fused(lines);
    if (!fused_rows) lines.row_data = nullptr, lines.row_scale_inv = nullptr;
  }
  // Neither usage scaled per member and the quantizer reads x through the layout: one pass.
  if (members.sources != nullptr && !m_row && !m_col &&
      ::tessera::detail::takes_layout_rows(c, x)) {
    const QuantizedTensorView part = usages_of(out, rowwise, columnwise);
    TESSERA_CHECK(members.starts != nullptr && members.align > 0, role,
                  ": reading x through the layout needs the layout's group alignment");
    const ::tessera::detail::LayoutRows layout{members.starts, members.sources, members.groups,
                                               x.shape[0], members.align};
    ::tessera::detail::quantize_through_layout(c, x, layout, part, stream);
    return;
  }
  const bool own_rows = rowwise && !m_row && !fused_rows;
  if (own_rows || (columnwise && !m_col)) {  // the standalone usages
    QuantizedTensorView part = usages_of(out, own_rows, columnwise && !m_col);
    part.config.rowwise = own_rows;
    part.config.columnwise = columnwise && !m_col;
    Quantizer q = role_quantizer(format, part.config.rowwise, part.config.columnwise, dev);
    q.quantize(x, part, stream);
  }
  if (!m_row && !m_col) return;
  if (is_family(c.mode, ScaleFamily::kRowwise)) {
    quantize_member_columns(lines, alloc, dev, stream);
    return;
  }
  MemberTensorArgs a;  // per-tensor scaling: both usages share the members' scales
  a.x = x.data;
  a.x_dtype = x.dtype;
  a.rows = rows;
  a.cols = cols;
  a.members = members;
  a.quant = line_rule(c, cols);
  a.row_codes = m_row ? out.data.as<uint8_t>() : nullptr;
  a.col_codes = m_col ? out.columnwise_data.as<uint8_t>() : nullptr;
  a.scale_inv = m_row ? out.scale_inv.as<float>() : out.columnwise_scale_inv.as<float>();
  a.scale_inv2 = m_row && m_col ? out.columnwise_scale_inv.as<float>() : nullptr;
  a.amax = m_row ? out.amax.as<float>() : out.columnwise_amax.as<float>();
  a.amax2 = m_row && m_col ? out.columnwise_amax.as<float>() : nullptr;
  if (c.delayed) {
    check_member_state(c, state, members.groups, dev, role);
    a.scale = state.scale.as<const float>();
    a.history = state.amax_history.as<float>();
  }
  Scratch tmp;
  if (dev.is_cuda()) {
    tmp = scratch(alloc, member_tensor_scratch_bytes(a), dev, stream);
    a.scratch = tmp.carver.take(member_tensor_scratch_bytes(a));
  }
  quantize_member_tensor(a, dev, stream);
  if (c.delayed) update_member_state(c, state, members.groups, dev, stream);
}

bool quantize_columns_from_codes(const RoleFormat& format, const QuantizedTensorView& xq,
                                 const Members& members, QuantizedTensorView& out,
                                 Allocator& alloc, Stream stream) {
  const QuantizerConfig& c = format.config;
  if (!xq.device.is_cuda() || xq.config.mode != ScalingMode::kRowwise || !xq.has_rowwise() ||
      !is_family(c.mode, ScaleFamily::kRowwise) || !member_scaled(c, true) ||
      !out.has_columnwise()) {
    return false;
  }
  MemberColumnsArgs lines{xq.data.data, xq.config.element, out.rows, out.cols, members,
                          line_rule(c, out.rows), out.columnwise_data.as<uint8_t>(), 0, out.rows,
                          1, out.columnwise_scale_inv.as<float>()};
  lines.x_row_scale_inv = xq.scale_inv.as<const float>();
  if (!cuda::columns_from_codes(lines)) return false;
  quantize_member_columns(lines, alloc, xq.device, stream);
  return true;
}

void check_member_state(const QuantizerConfig& c, const DelayedScalingState& state,
                        int64_t groups, Device device, const char* role) {
  const int64_t len = c.amax_history_len;
  const auto fits = [&](const TensorView& v, int64_t n) {
    return v.data != nullptr && v.dtype == DType::kFloat32 && v.numel() == n &&
           v.is_contiguous() && v.device == device;
  };
  TESSERA_CHECK_STATUS(fits(state.scale, groups) && fits(state.amax_history, len * groups),
                       Status::kShapeMismatch, role,
                       ": the recipe scales this role with an amax history per expert (delayed "
                       "scaling); its state must be float32 scale (", groups, ") and amax_history (",
                       len, ", ", groups, ") on ", to_string(device), ", got ",
                       state.scale.to_string(), " and ", state.amax_history.to_string());
}

void update_member_state(const QuantizerConfig& c, const DelayedScalingState& state,
                         int64_t groups, Device device, Stream stream) {
  const bool most_recent = c.amax_algo == AmaxHistoryAlgo::kMostRecent;
  const float fp8_max = fp8_max_finite(c.element);
  auto* scale = state.scale.as<float>();
  auto* history = state.amax_history.as<float>();
  if (device.is_cuda()) {
    return cuda::update_member_state(scale, history, groups, c.amax_history_len, most_recent,
                                     fp8_max, c.margin, stream);
  }
  for (int64_t g = 0; g < groups; ++g) {
    scale_rules::delayed_update(scale + g, history + g, c.amax_history_len, groups, most_recent,
                                fp8_max, c.margin);
  }
}

}  // namespace tessera::nn::detail
