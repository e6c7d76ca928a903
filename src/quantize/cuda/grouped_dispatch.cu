// Dispatcher of the grouped CUDA quantize kernels (see grouped_quantize_cuda.h): checks the
// grouped view, builds the device member table and routes each scaling mode to its format
// folder's grouped launchers, in the same passes as the per-tensor dispatcher (dispatch.cu) but
// over all members at once. Nothing reads device memory from the host; set-up that writes
// outputs (zeroing amax targets and padded scale matrices) runs in a kernel that honours the
// noop flag (launch_grouped_prepare).
#include <cuda_runtime_api.h>

#include <utility>

#include "quantize/cuda/grouped_quantize_cuda.h"
#include "quantize/cuda/launchers.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"

namespace tessera::detail {
namespace {

using cuda_quant::ceil_div;
using cuda_quant::GroupedMeta;

const int64_t* device_int64(const TensorView& v, int64_t n, const char* name) {
  TESSERA_CHECK(v.data != nullptr && v.device.is_cuda() && v.dtype == DType::kInt64 &&
                    v.numel() >= n,
                "grouped quantize: ", name, " must be an int64 CUDA array of ", n,
                " entries, got ", v.data == nullptr ? std::string("none") : v.to_string());
  return v.as<const int64_t>();
}

// A per-member FP32 field (amax, columnwise_amax) of n entries, as float bits.
uint32_t* amax_field(const TensorView& v, int64_t n, const char* name) {
  TESSERA_CHECK(v.data != nullptr && v.device.is_cuda() && v.dtype == DType::kFloat32 &&
                    v.numel() >= n,
                "grouped quantize: ", name, " must be a float32 CUDA array of ", n,
                " entries (one per member), got ",
                v.data == nullptr ? std::string("none") : v.to_string());
  return reinterpret_cast<uint32_t*>(v.data);
}

// Usage u of `p` zeroes every member's scale matrix of `buffer` (one scale matrix =
// scale_shape(config, rows, K, columnwise), which is one-row's matrix × ceil(rows / align)).
void zero_scales(cuda_quant::GroupedPrepare& p, int u, const QuantizerConfig& config, int64_t K,
                 bool columnwise, const TensorView& buffer, const int64_t* offsets) {
  const MatrixShape one = scale_shape(config, 1, K, columnwise);
  const ScaleSlotRule rule = grouped_scale_slot_rule(config, K, columnwise);
  p.scales[u] = static_cast<uint8_t*>(buffer.data);
  p.offsets[u] = offsets;
  p.elem_bytes[u] = dtype_bytes(one.dtype, 1);
  p.per_block[u] = one.numel();
  p.rows_per_block[u] = rule.stride == 0 ? 0 : rule.align;
}

cuda_quant::Fp8ScaleSource fp8_rule(const QuantizerConfig& c) {
  cuda_quant::Fp8ScaleSource src;
  src.fp8_max = fp8_max_finite(c.element);
  src.eps = c.amax_epsilon;
  src.pow2 = c.power_of_two_scales;
  return src;
}

cuda_quant::Fp8GroupedCastArgs fp8_cast_args(const QuantizerConfig& c, const TensorView& x,
                                             const GroupedTensorView& out) {
  cuda_quant::Fp8GroupedCastArgs G;
  G.cast.x = x.data;
  G.cast.in = x.dtype;
  G.cast.element = c.element;
  G.cast.q_row = c.rowwise ? out.data.as<uint8_t>() : nullptr;
  G.cast.q_col = c.columnwise ? out.columnwise_data.as<uint8_t>() : nullptr;
  return G;
}

// Per-tensor FP8: current scaling = per-member amax pass + cast; delayed scaling = one cast pass
// that also reduces each member's amax, then history slot 0 = the last member's amax.
void grouped_fp8_tensor(const QuantizerConfig& c, const TensorView& x,
                        const GroupedTensorView& out, const GroupedMeta& g,
                        const GroupedDelayedState& delayed, cudaStream_t s) {
  cuda_quant::Fp8GroupedCastArgs G = fp8_cast_args(c, x, out);
  G.scales = cuda_quant::Fp8GroupedScales::kTensor;
  uint32_t* amax_row = c.rowwise ? amax_field(out.amax, g.n, "amax") : nullptr;
  uint32_t* amax_col = c.columnwise ? amax_field(out.columnwise_amax, g.n, "columnwise_amax")
                                    : nullptr;
  uint32_t* target = amax_row != nullptr ? amax_row : amax_col;
  uint32_t* other = amax_row != nullptr ? amax_col : nullptr;
  cuda_quant::GroupedPrepare p;
  p.zero_amax[0] = target;
  cuda_quant::Fp8ScaleSource src = fp8_rule(c);
  if (c.delayed) {
    TESSERA_CHECK(delayed.scale != nullptr && delayed.amax_history != nullptr,
                  "grouped quantize: delayed scaling needs the quantizer's scale and history");
    p.zero_amax[1] = other;
    cuda_quant::launch_grouped_prepare(p, g, s);
    src.scale = delayed.scale;
    G.cast.amax_accum = target;
    G.cast.amax_accum2 = other;
  } else {
    cuda_quant::launch_grouped_prepare(p, g, s);
    cuda_quant::launch_tensor_amax_grouped(x.data, x.dtype, g, target, nullptr, s);
    src.amax = target;
  }
  cuda_quant::Fp8ScaleSource col = src;
  if (G.cast.q_row != nullptr) {
    src.scale_inv_out = out.scale_inv.as<float>();
    src.scale_inv_out2 = G.cast.q_col != nullptr ? out.columnwise_scale_inv.as<float>() : nullptr;
    src.amax_out2 = c.delayed ? nullptr : reinterpret_cast<float*>(other);
  } else {
    col.scale_inv_out = out.columnwise_scale_inv.as<float>();
  }
  G.cast.row_scale = src;
  G.cast.col_scale = col;
  G.cast.same_scale = true;
  cuda_quant::launch_fp8_cast_transpose_grouped(G, g, s);
  if (c.delayed) cuda_quant::launch_grouped_last_amax(target, delayed.amax_history, g, s);
}

// Rowwise FP8 with the columnwise usage: zero the members' scale_inv slots, per-row and
// per-column amax into them (atomic max of float bits), the cast with the transposed copy (scales
// from those amaxes), then each slot becomes 1 / scale. No scratch memory.
void grouped_fp8_lines(const QuantizerConfig& c, const TensorView& x,
                       const GroupedTensorView& out, const GroupedMeta& g, cudaStream_t s) {
  cuda_quant::GroupedPrepare p;
  if (c.rowwise) zero_scales(p, 0, c, g.cols, false, out.scale_inv, g.scale_offsets);
  zero_scales(p, 1, c, g.cols, true, out.columnwise_scale_inv, g.col_scale_offsets);
  cuda_quant::launch_grouped_prepare(p, g, s);
  auto* row_amax = c.rowwise ? reinterpret_cast<uint32_t*>(out.scale_inv.data) : nullptr;
  auto* col_amax = reinterpret_cast<uint32_t*>(out.columnwise_scale_inv.data);
  cuda_quant::launch_line_amax_grouped(x.data, x.dtype, g, row_amax, col_amax, s);
  cuda_quant::Fp8GroupedCastArgs G = fp8_cast_args(c, x, out);
  G.scales = cuda_quant::Fp8GroupedScales::kLine;
  cuda_quant::Fp8ScaleSource src = fp8_rule(c);
  src.stride = 1;
  cuda_quant::Fp8ScaleSource col = src;
  src.amax = row_amax;
  col.amax = col_amax;
  G.cast.row_scale = src;
  G.cast.col_scale = col;
  cuda_quant::launch_fp8_cast_transpose_grouped(G, g, s);
  cuda_quant::launch_grouped_line_scales(p, fp8_rule(c), g, s);
}

// FP8 block 1x128 / 128x128: zero the members' scale matrices (padding), then one cast pass.
void grouped_fp8_block(const QuantizerConfig& c, const TensorView& x,
                       const GroupedTensorView& out, const GroupedMeta& g, cudaStream_t s) {
  const ScalingModeInfo& info = scaling_mode_info(c.mode);
  TESSERA_CHECK_STATUS(cuda_quant::fp8_block_kernel_fits(info), Status::kUnsupported,
                       "grouped quantize: ", info.name, " has no CUDA kernel; the block kernel "
                       "takes 1x128 and 128x128");
  const bool tile = cuda_quant::fp8_block_of(info) == cuda_quant::Fp8Block::k128x128;
  cuda_quant::Fp8GroupedCastArgs G = fp8_cast_args(c, x, out);
  G.scales = cuda_quant::Fp8GroupedScales::kBlock;
  G.cast.block = cuda_quant::fp8_block_of(info);
  G.cast.row_scale = fp8_rule(c);
  G.cast.same_scale = tile;
  const int64_t kb = ceil_div(g.cols, 128);
  cuda_quant::GroupedPrepare p;
  if (c.rowwise) {
    G.cast.row_block_sinv = out.scale_inv.as<float>();
    G.cast.row_block_ld = tile ? (kb + 3) / 4 * 4 : kb;
    zero_scales(p, 0, c, g.cols, false, out.scale_inv, g.scale_offsets);
  }
  if (c.columnwise) {
    G.cast.col_block_sinv = out.columnwise_scale_inv.as<float>();  // ld per member (device)
    zero_scales(p, 1, c, g.cols, true, out.columnwise_scale_inv, g.col_scale_offsets);
  }
  cuda_quant::launch_grouped_prepare(p, g, s);
  cuda_quant::launch_fp8_cast_transpose_grouped(G, g, s);
}

// NVFP4: zero the amax targets (and swizzled scale matrices), per-member amax passes (of x; of
// the transformed transpose with RHT), then one launch for both copies (tiled kernels, 16x16
// strips) or one per copy. Without RHT the columnwise amax is the same pass's second target, so
// both copies of a member encode with the same global amax.
// in_place (quantize_nvfp4_members_cuda): members write their rows / columns of the whole
// copies in `out` (zeroed by the caller, swizzle padding included).
void grouped_nvfp4(const QuantizerConfig& c, const TensorView& x, const GroupedTensorView& out,
                   const GroupedMeta& g, cudaStream_t s, bool in_place = false) {
  TESSERA_CHECK_STATUS(!c.rowwise || g.cols % 2 == 0, Status::kShapeMismatch,
                       "grouped quantize: NVFP4 rowwise members need an even K (each member "
                       "row starts on a byte), got K = ", g.cols);
  uint32_t* amax_row = c.rowwise ? amax_field(out.amax, g.n, "amax") : nullptr;
  uint32_t* amax_col = c.columnwise ? amax_field(out.columnwise_amax, g.n, "columnwise_amax")
                                    : nullptr;
  const bool sw = c.scale_layout == ScaleLayout::kSwizzled;
  cuda_quant::GroupedPrepare p;
  p.zero_amax[0] = amax_row;
  p.zero_amax[1] = amax_col;
  if (sw && c.rowwise && !in_place) {
    zero_scales(p, 0, c, g.cols, false, out.scale_inv, g.scale_offsets);
  }
  if (sw && c.columnwise && !in_place) {
    zero_scales(p, 1, c, g.cols, true, out.columnwise_scale_inv, g.col_scale_offsets);
  }
  cuda_quant::launch_grouped_prepare(p, g, s);
  cuda_quant::Nvfp4Args a = cuda_quant::nvfp4_args_of(c, x.data, x.dtype);
  a.padded_cols = sw ? 1 : 0;  // nonzero: swizzled (width per member on the device)
  a.in_place = in_place;
  cuda_quant::Nvfp4Args row = a, col = a;
  row.amax = amax_row;
  row.data = c.rowwise ? out.data.as<uint8_t>() : nullptr;
  row.scale = c.rowwise ? out.scale_inv.as<uint8_t>() : nullptr;
  col.columnwise = true;
  col.rht = c.random_hadamard;
  col.amax = amax_col;
  col.data = c.columnwise ? out.columnwise_data.as<uint8_t>() : nullptr;
  col.scale = c.columnwise ? out.columnwise_scale_inv.as<uint8_t>() : nullptr;
  // The amax passes: with the transform, the tiled Hadamard pass also takes x's amax for the
  // rowwise copy (one read); otherwise one pass over x for every copy that needs x's amax.
  const bool rows_done = c.columnwise && col.rht &&
                         cuda_quant::launch_rht_amax_grouped(col, g, amax_col, amax_row, s);
  uint32_t* t1 = rows_done ? nullptr : amax_row;
  uint32_t* t2 = c.columnwise && !c.random_hadamard ? amax_col : nullptr;
  if (t1 == nullptr) std::swap(t1, t2);
  if (t1 != nullptr) cuda_quant::launch_tensor_amax_grouped(x.data, x.dtype, g, t1, t2, s);
  // Both copies from one read of each member tile where the tiled kernels take the input (1x16
  // blocks) or of each member strip (16x16 tiles without stochastic rounding or the transform:
  // the weights); otherwise one launch per copy.
  if (g.sources != nullptr) {  // through a layout: the tiled kernel alone reads it, any usages
    TESSERA_CHECK(cuda_quant::launch_nvfp4_tiles_grouped(row, col, g, s),
                  "quantize_nvfp4_members: reading x through a layout needs the tiled kernels (1x16 "
                  "blocks, K % 16 == 0, 16-byte aligned x), got K = ", g.cols);
    return;
  }
  if (c.rowwise && c.columnwise && cuda_quant::launch_nvfp4_tiles_grouped(row, col, g, s)) return;
  if (c.rowwise && c.columnwise && cuda_quant::launch_nvfp4_tile16_grouped(row, col, g, s)) return;
  if (c.rowwise) cuda_quant::launch_nvfp4_grouped(row, g, s);
  if (c.columnwise) cuda_quant::launch_nvfp4_grouped(col, g, s);
}

void grouped_mxfp8(const QuantizerConfig& config, const TensorView& x,
                   const GroupedTensorView& out, const GroupedMeta& g, cudaStream_t s) {
  cuda_quant::MxArgs a = cuda_quant::mx_args_of(config, x.data, x.dtype);
  if (config.rowwise) {
    a.q_row = out.data.as<uint8_t>();
    a.s_row = out.scale_inv.as<uint8_t>();
  }
  if (config.columnwise) {
    a.q_col = out.columnwise_data.as<uint8_t>();
    a.s_col = out.columnwise_scale_inv.as<uint8_t>();
  }
  cuda_quant::launch_mxfp8_grouped(a, g, s);
}

GroupedMeta grouped_meta(const QuantizerConfig& config, const GroupedTensorView& out,
                         const TensorView& noop) {
  GroupedMeta g;
  g.n = out.num_tensors;
  g.cols = out.logical_cols;
  g.rows_bound = out.logical_rows;
  g.tensor_offsets = device_int64(out.tensor_offsets, g.n + 1, "tensor_offsets");
  if (config.rowwise) g.scale_offsets = device_int64(out.scale_offsets, g.n + 1, "scale_offsets");
  if (config.columnwise) {
    g.col_scale_offsets =
        device_int64(out.columnwise_scale_offsets, g.n + 1, "columnwise_scale_offsets");
  }
  if (noop.data != nullptr) {
    TESSERA_CHECK(noop.device.is_cuda() && (noop.dtype == DType::kFloat32 ||
                                            noop.dtype == DType::kInt32),
                  "grouped quantize: noop must be a float32 or int32 CUDA scalar, got ",
                  noop.to_string());
    if (noop.dtype == DType::kFloat32) {
      g.noop_f32 = noop.as<const float>();
    } else {
      g.noop_i32 = noop.as<const int32_t>();
    }
  }
  return g;
}

}  // namespace

bool has_grouped_quantize_kernel(const QuantizerConfig& config, int64_t cols) {
  const ScalingModeInfo* info = find_scaling_mode(config.mode);
  if (info == nullptr || info->family == ScaleFamily::kNone) return false;
  if (info->family == ScaleFamily::kBlock && !cuda_quant::fp8_block_kernel_fits(*info)) return false;
  // Member rows are offset differences / K, so K = 0 needs MXFP8's row-free member table.
  return cols > 0 || info->family == ScaleFamily::kMXFP8;
}

void grouped_quantize_contiguous_cuda(const QuantizerConfig& config, const TensorView& x,
                                      const GroupedTensorView& out, const TensorView& noop,
                                      Stream stream, const GroupedDelayedState& delayed) {
  TESSERA_CHECK(out.mode == GroupedShapeMode::kVaryingFirst ||
                    out.mode == GroupedShapeMode::kAllSame,
                "grouped quantize: a contiguous input needs a varying-first or all-same tensor");
  TESSERA_CHECK(x.device.is_cuda() && x.is_contiguous(), "grouped quantize: x must be a "
                "contiguous CUDA tensor, got ", x.to_string());
  const int64_t K = out.logical_cols;
  TESSERA_CHECK_STATUS(x.numel() == out.logical_rows * K, Status::kShapeMismatch,
                       "grouped quantize: x has ", x.numel(), " elements, the grouped tensor is (",
                       out.logical_rows, ", ", K, ")");
  TESSERA_CHECK(config.rowwise || config.columnwise, "grouped quantize: no usage requested");
  const GroupedMeta g = grouped_meta(config, out, noop);
  TESSERA_CUDA_CHECK(cudaSetDevice(x.device.index));
  auto s = stream.as<cudaStream_t>();
  const bool mxfp8 = is_family(config.mode, ScaleFamily::kMXFP8);
  // Member rows are (offset difference) / K: with K = 0 they are not recoverable.
  TESSERA_CHECK_STATUS(K > 0 || mxfp8, Status::kUnsupported, "grouped quantize: ", scaling_mode_name(config.mode),
                       " with K = 0 has no grouped CUDA kernel (member rows cannot be derived "
                       "from the element offsets)");
  dispatch_scaling_mode(config.mode, "config.mode", [&](auto family, const ScalingModeInfo&) {
    constexpr ScaleFamily kFamily = decltype(family)::value;
    if constexpr (kFamily == ScaleFamily::kTensor) {
      grouped_fp8_tensor(config, x, out, g, delayed, s);
    } else if constexpr (kFamily == ScaleFamily::kRowwise) {
      if (config.columnwise) {
        grouped_fp8_lines(config, x, out, g, s);
      } else {
        cuda_quant::launch_fp8_rowwise_grouped(x.data, g, x.dtype, config.element,
                                               config.amax_epsilon, config.power_of_two_scales,
                                               out.data.as<uint8_t>(), out.scale_inv.as<float>(),
                                               s);
      }
    } else if constexpr (kFamily == ScaleFamily::kBlock) {
      grouped_fp8_block(config, x, out, g, s);
    } else if constexpr (kFamily == ScaleFamily::kMXFP8) {
      grouped_mxfp8(config, x, out, g, s);
    } else {
      grouped_nvfp4(config, x, out, g, s);
    }
  });
}

void quantize_nvfp4_members_cuda(const QuantizerConfig& config, const TensorView& x,
                                 const int64_t* offsets, int64_t groups,
                                 const QuantizedTensorView& out, Stream stream,
                                 const int64_t* sources) {
  TESSERA_CHECK(is_family(config.mode, ScaleFamily::kNVFP4), "quantize_nvfp4_members: mode ",
                scaling_mode_name(config.mode), " is not NVFP4");
  TESSERA_CHECK(x.device.is_cuda() && x.is_contiguous() && x.ndim == 2,
                "quantize_nvfp4_members: x must be a contiguous 2-D CUDA tensor, got ",
                x.to_string());
  TESSERA_CHECK(groups >= 1 && offsets != nullptr, "quantize_nvfp4_members: ", groups,
                " members; expected >= 1 with their offsets");
  TESSERA_CHECK(config.rowwise || config.columnwise, "quantize_nvfp4_members: no usage requested");
  const int64_t K = x.shape[1];
  TESSERA_CHECK_STATUS(K > 0 && K % 2 == 0, Status::kShapeMismatch, "quantize_nvfp4_members: K = ",
                       K, "; expected even and > 0");
  TESSERA_CUDA_CHECK(cudaSetDevice(x.device.index));
  auto s = stream.as<cudaStream_t>();
  GroupedTensorView gv;  // the whole copies; member i's amax at amax[i]
  gv.data = out.data;
  gv.scale_inv = out.scale_inv;
  gv.columnwise_data = out.columnwise_data;
  gv.columnwise_scale_inv = out.columnwise_scale_inv;
  gv.amax = out.amax;
  gv.columnwise_amax = out.columnwise_amax;
  // Rows and columns in no member (and swizzle padding) read 0, as the CPU writes them.
  for (const TensorView* v : {&out.data, &out.scale_inv, &out.columnwise_data,
                              &out.columnwise_scale_inv}) {
    const bool wanted = (v == &out.data || v == &out.scale_inv) ? config.rowwise : config.columnwise;
    if (!wanted) continue;
    TESSERA_CHECK(v->data != nullptr && v->device.is_cuda(), "quantize_nvfp4_members: a usage "
                  "asked for has no CUDA buffer");
    TESSERA_CUDA_CHECK(cudaMemsetAsync(v->data, 0, static_cast<size_t>(v->nbytes()), s));
  }
  GroupedMeta g;
  g.n = groups;
  g.cols = K;
  g.rows_bound = sources != nullptr ? out.rows : x.shape[0];
  g.tensor_offsets = offsets;
  g.sources = sources;
  g.source_rows = x.shape[0];
  grouped_nvfp4(config, x, gv, g, s, /*in_place=*/true);
}

}  // namespace tessera::detail
