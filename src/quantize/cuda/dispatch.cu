// The CUDA quantization dispatcher: validates the views, then routes each scaling family
// (dispatch_scaling_mode) to its format folder: fp8_cast_transpose/ (per-tensor, the columnwise
// per-line copies and the 1x128 / 128x128 blocks, one cast-transpose kernel), fp8_rowwise/,
// mxfp8/, nvfp4/. Scratch memory comes from a stream-ordered pool (scratch_pool), so a whole
// quantize is capturable in a CUDA graph.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "quantize/cuda/launchers.h"
#include "quantize/quantize_backend.h"
#include "quantize/cuda/launch_config.h"
#include "tessera/core/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"

namespace tessera::detail {
namespace {

using cuda_quant::Fp8CastArgs;
using cuda_quant::Fp8ScaleSource;
using cuda_quant::ceil_div;

// The pool scratch comes from, one per device, created on first use and kept for the process.
// Its release threshold is unlimited: memory freed into it stays mapped across synchronizations,
// so scratch of a size seen before is a pool lookup. (The device's default pool, which
// cudaMallocAsync uses, gives everything back to the driver at each synchronization: every
// quantize after a synchronized step then re-mapped its scratch, ~0.1 ms of host time.) Under
// stream capture an allocation from it becomes a graph memory node, as with cudaMallocAsync.
cudaMemPool_t scratch_pool() {
  static std::mutex mu;
  static std::vector<cudaMemPool_t> pools;  // by device ordinal; never destroyed
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  if (pools.size() <= static_cast<size_t>(device)) pools.resize(static_cast<size_t>(device) + 1);
  cudaMemPool_t& pool = pools[static_cast<size_t>(device)];
  if (pool == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t created = nullptr;
    TESSERA_CUDA_CHECK(cudaMemPoolCreate(&created, &props));
    uint64_t keep_all = UINT64_MAX;
    TESSERA_CUDA_CHECK(cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &keep_all));
    pool = created;
  }
  return pool;
}

// Stream-ordered scratch from scratch_pool(), zeroed, freed on the same stream
// (graph-capturable).
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t s) : stream_(s) {
    TESSERA_CUDA_CHECK(cudaMallocFromPoolAsync(&ptr_, bytes, scratch_pool(), s));
    TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, bytes, s));
  }
  ~Scratch() { cudaFreeAsync(ptr_, stream_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

void quantize_tensor(const QuantizerConfig& cfg, const TensorView& x,
                     const QuantizedTensorView& out, const QuantizeRequest& req, cudaStream_t s) {
  Fp8CastArgs a;
  a.x = x.data;
  a.rows = out.rows;
  a.cols = out.cols;
  a.in = x.dtype;
  a.element = cfg.element;
  a.q_row = req.rowwise ? out.data.as<uint8_t>() : nullptr;
  a.q_col = req.columnwise ? out.columnwise_data.as<uint8_t>() : nullptr;
  Fp8ScaleSource src;
  src.fp8_max = fp8_max_finite(cfg.element);
  src.eps = cfg.amax_epsilon;
  src.pow2 = cfg.power_of_two_scales;
  float* amax_row = req.rowwise ? out.amax.as<float>() : nullptr;
  float* amax_col = req.columnwise ? out.columnwise_amax.as<float>() : nullptr;
  // The output's own amax field is the atomic target (no scratch allocation on this path).
  float* amax_main = amax_row != nullptr ? amax_row : amax_col;
  float* amax_other = amax_row != nullptr ? amax_col : nullptr;
  TESSERA_CHECK(amax_main != nullptr, "quantize: per-tensor FP8 output has no amax buffer");
  auto* target = reinterpret_cast<uint32_t*>(amax_main);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(target, 0, sizeof(uint32_t), s));
  if (cfg.delayed) {
    TESSERA_CHECK(req.delayed_scale != nullptr && req.amax_history != nullptr,
                  "quantize: delayed scaling needs the quantizer's scale and amax history");
    src.scale = req.delayed_scale;
    // Slot 0 of the history is SET to this tensor's amax: clear it, then max into it.
    TESSERA_CUDA_CHECK(cudaMemsetAsync(req.amax_history, 0, sizeof(float), s));
    a.amax_accum = reinterpret_cast<uint32_t*>(req.amax_history);
    a.amax_accum2 = target;
  } else {
    cuda_quant::launch_tensor_amax(x.data, out.rows * out.cols, x.dtype, target, s);
    src.amax = target;
  }
  Fp8ScaleSource col = src;
  if (a.q_row != nullptr) {
    src.scale_inv_out = out.scale_inv.as<float>();
    src.scale_inv_out2 = a.q_col != nullptr ? out.columnwise_scale_inv.as<float>() : nullptr;
    src.amax_out2 = cfg.delayed ? nullptr : amax_other;  // current: copied by block (0, 0)
  } else {
    col.scale_inv_out = out.columnwise_scale_inv.as<float>();
  }
  a.row_scale = src;
  a.col_scale = col;
  a.same_scale = true;
  cuda_quant::launch_fp8_cast_transpose(a, s);
  if (cfg.delayed && amax_other != nullptr) {
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(amax_other, target, sizeof(float), cudaMemcpyDeviceToDevice, s));
  }
}

void quantize_rowwise(const QuantizerConfig& cfg, const TensorView& x,
                      const QuantizedTensorView& out, const QuantizeRequest& req, cudaStream_t s) {
  const float fp8_max = fp8_max_finite(cfg.element);
  const int64_t M = out.rows, K = out.cols;
  if (!req.columnwise) {
    cuda_quant::launch_fp8_rowwise(x.data, M, K, x.dtype, cfg.element, cfg.amax_epsilon,
                                   cfg.power_of_two_scales, out.data.as<uint8_t>(),
                                   out.scale_inv.as<float>(), s);
    return;
  }
  Scratch amax(sizeof(uint32_t) * static_cast<size_t>(M + K), s);  // row (M) then column (K)
  uint32_t* row_amax = req.rowwise ? amax.as<uint32_t>() : nullptr;
  uint32_t* col_amax = amax.as<uint32_t>() + M;
  cuda_quant::launch_line_amax(x.data, M, K, x.dtype, row_amax, col_amax, s);
  Fp8CastArgs a;
  a.x = x.data;
  a.rows = M;
  a.cols = K;
  a.in = x.dtype;
  a.element = cfg.element;
  a.q_row = req.rowwise ? out.data.as<uint8_t>() : nullptr;
  a.q_col = out.columnwise_data.as<uint8_t>();
  Fp8ScaleSource src;
  src.fp8_max = fp8_max;
  src.eps = cfg.amax_epsilon;
  src.pow2 = cfg.power_of_two_scales;
  src.stride = 1;
  Fp8ScaleSource col = src;
  src.amax = row_amax;
  src.scale_inv_out = out.scale_inv.as<float>();
  col.amax = col_amax;
  col.scale_inv_out = out.columnwise_scale_inv.as<float>();
  a.row_scale = src;
  a.col_scale = col;
  cuda_quant::launch_fp8_cast_transpose(a, s);
}

// FP8 block scaling (1x128 / 128x128): the cast-transpose kernel with in-tile block amaxes.
// `layout`: x read through it (quantize_through_layout), else x itself.
void quantize_block(const QuantizerConfig& cfg, const ScalingModeInfo& info, const TensorView& x,
                    const QuantizedTensorView& out, const QuantizeRequest& req, cudaStream_t s,
                    const LayoutRows& layout = {}) {
  const int64_t M = out.rows, K = out.cols;
  // The cast-transpose tile is 128x128: it holds 128 1x128 blocks or one 128x128 block.
  TESSERA_CHECK_STATUS(cuda_quant::fp8_block_kernel_fits(info), Status::kUnsupported, "quantize: ", info.name, " (", info.block_rows, "x",
                       info.block_cols, " blocks) has no CUDA kernel; the block kernel takes "
                       "1x128 and 128x128");
  const bool tile = cuda_quant::fp8_block_of(info) == cuda_quant::Fp8Block::k128x128;
  Fp8CastArgs a;
  a.x = x.data;
  a.rows = M;
  a.cols = K;
  a.in = x.dtype;
  a.element = cfg.element;
  a.block = cuda_quant::fp8_block_of(info);
  a.row_scale.fp8_max = fp8_max_finite(cfg.element);
  a.row_scale.eps = cfg.amax_epsilon;
  a.row_scale.pow2 = cfg.power_of_two_scales;
  a.same_scale = tile;
  a.layout = layout;
  const int64_t kb = ceil_div(K, 128), mb = ceil_div(M, 128);
  if (req.rowwise) {
    a.q_row = out.data.as<uint8_t>();
    a.row_block_sinv = out.scale_inv.as<float>();
    a.row_block_ld = tile ? (kb + 3) / 4 * 4 : kb;  // (ceil(M/128), roundup(kb,4)) | (roundup(M,4), kb)
    TESSERA_CUDA_CHECK(cudaMemsetAsync(out.scale_inv.data, 0, out.scale_inv.nbytes(), s));
  }
  if (req.columnwise) {
    a.q_col = out.columnwise_data.as<uint8_t>();
    a.col_block_sinv = out.columnwise_scale_inv.as<float>();
    a.col_block_ld = tile ? (mb + 3) / 4 * 4 : mb;  // the same on xᵀ (K, M)
    TESSERA_CUDA_CHECK(
        cudaMemsetAsync(out.columnwise_scale_inv.data, 0, out.columnwise_scale_inv.nbytes(), s));
  }
  cuda_quant::launch_fp8_cast_transpose(a, s);
}

// `layout`: x read through it (quantize_through_layout), else x itself.
void quantize_mxfp8(const QuantizerConfig& cfg, const TensorView& x,
                    const QuantizedTensorView& out, const QuantizeRequest& req, cudaStream_t s,
                    const LayoutRows& layout = {}) {
  fp8_max_finite(cfg.element);  // validates the element (e4m3 / e5m2)
  cuda_quant::MxArgs a = cuda_quant::mx_args_of(cfg, x.data, x.dtype);
  a.rows = out.rows;
  a.cols = out.cols;
  a.layout = layout;
  const int64_t row_blocks = ceil_div(out.cols, 32), col_blocks = ceil_div(out.rows, 32);
  if (req.rowwise) {
    a.q_row = out.data.as<uint8_t>();
    a.s_row = out.scale_inv.as<uint8_t>();
    a.s_row_padded_cols = (row_blocks + 3) / 4 * 4;  // the kernel writes the swizzle padding
  }
  if (req.columnwise) {
    a.q_col = out.columnwise_data.as<uint8_t>();
    a.s_col = out.columnwise_scale_inv.as<uint8_t>();
    a.s_col_padded_cols = (col_blocks + 3) / 4 * 4;  // swizzled: the transpose (K, ceil(M/32))
  }
  cuda_quant::launch_mxfp8(a, s);
}

// NVFP4 on the tiled kernels (1x16, K % 16 == 0, aligned): the global amax (tensor amax; with
// the Hadamard transform one tile pass gives amax(x) and the transformed amax), then both
// copies in one pass over x.
void quantize_nvfp4_tiles(const QuantizerConfig& cfg, const TensorView& x,
                          const QuantizedTensorView& out, const QuantizeRequest& req,
                          cudaStream_t s) {
  const int64_t M = out.rows, K = out.cols;
  cuda_quant::Nvfp4TileArgs a;
  a.x = x.data;
  a.rows = M;
  a.cols = K;
  a.in = x.dtype;
  a.rht = req.columnwise && cfg.random_hadamard;
  a.stochastic = cfg.stochastic_rounding;
  a.seed = cfg.rng_seed;
  a.offset = cfg.rng_offset;
  const bool sw = cfg.scale_layout == ScaleLayout::kSwizzled;
  auto* amax_row = req.rowwise ? reinterpret_cast<uint32_t*>(out.amax.as<float>()) : nullptr;
  auto* amax_col =
      req.columnwise ? reinterpret_cast<uint32_t*>(out.columnwise_amax.as<float>()) : nullptr;
  if (amax_row != nullptr) TESSERA_CUDA_CHECK(cudaMemsetAsync(amax_row, 0, sizeof(uint32_t), s));
  if (amax_col != nullptr) TESSERA_CUDA_CHECK(cudaMemsetAsync(amax_col, 0, sizeof(uint32_t), s));
  if (a.rht) {
    cuda_quant::launch_nvfp4_tile_amax(a, amax_row, amax_col, s);
  } else {
    uint32_t* target = amax_row != nullptr ? amax_row : amax_col;
    cuda_quant::launch_tensor_amax(x.data, M * K, x.dtype, target, s);
    if (amax_row != nullptr && amax_col != nullptr) {
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(amax_col, amax_row, sizeof(uint32_t),
                                         cudaMemcpyDeviceToDevice, s));
    }
  }
  if (req.rowwise) {
    a.row_data = out.data.as<uint8_t>();
    a.row_scale = out.scale_inv.as<uint8_t>();
    a.row_padded_cols = sw ? (ceil_div(K, 16) + 3) / 4 * 4 : 0;
    a.row_amax = amax_row;
    if (sw) TESSERA_CUDA_CHECK(cudaMemsetAsync(a.row_scale, 0, out.scale_inv.nbytes(), s));
  }
  if (req.columnwise) {
    a.col_data = out.columnwise_data.as<uint8_t>();
    a.col_scale = out.columnwise_scale_inv.as<uint8_t>();
    a.col_padded_cols = sw ? (ceil_div(M, 16) + 3) / 4 * 4 : 0;
    a.col_amax = amax_col;
    if (sw) {
      TESSERA_CUDA_CHECK(cudaMemsetAsync(a.col_scale, 0, out.columnwise_scale_inv.nbytes(), s));
    }
  }
  cuda_quant::launch_nvfp4_tiles(a, s);
}

// NVFP4: global amax pass(es), then one launch per copy.
void quantize_nvfp4(const QuantizerConfig& cfg, const TensorView& x,
                    const QuantizedTensorView& out, const QuantizeRequest& req, cudaStream_t s) {
  const int64_t M = out.rows, K = out.cols;
  // The amax of each copy goes straight into the output's amax field (atomic max after a
  // memset; no scratch): amax of x for the rowwise copy, and for the columnwise copy the amax of
  // x or, with the Hadamard transform, of the transformed xᵀ.
  float* amax_row = req.rowwise ? out.amax.as<float>() : nullptr;
  float* amax_col = req.columnwise ? out.columnwise_amax.as<float>() : nullptr;
  TESSERA_CHECK((!req.rowwise || amax_row != nullptr) && (!req.columnwise || amax_col != nullptr),
                "quantize: NVFP4 output lacks an amax buffer");
  cuda_quant::Nvfp4Args a = cuda_quant::nvfp4_args_of(cfg, x.data, x.dtype);
  a.rows = M;
  a.cols = K;
  const bool sw = cfg.scale_layout == ScaleLayout::kSwizzled;
  uint8_t* row_data = req.rowwise ? out.data.as<uint8_t>() : nullptr;
  uint8_t* col_data = req.columnwise ? out.columnwise_data.as<uint8_t>() : nullptr;
  if (!a.tile16 && cuda_quant::nvfp4_tiles_eligible(x.data, K, row_data, col_data)) {
    quantize_nvfp4_tiles(cfg, x, out, req, s);
    return;
  }
  // 16x16 tiles with neither transform nor stochastic rounding (the weights): both copies share
  // the amax of x and come out of one read of x.
  const bool both_at_once = req.rowwise && req.columnwise && !cfg.random_hadamard &&
                            cuda_quant::nvfp4_tile16_eligible(a);
  cuda_quant::Nvfp4Args row = a;
  if (req.rowwise) {
    auto* target = reinterpret_cast<uint32_t*>(amax_row);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(target, 0, sizeof(uint32_t), s));
    cuda_quant::launch_tensor_amax(x.data, M * K, x.dtype, target, s);
    row.amax = target;
    row.data = out.data.as<uint8_t>();
    row.scale = out.scale_inv.as<uint8_t>();
    row.padded_cols = sw ? (ceil_div(K, 16) + 3) / 4 * 4 : 0;
    TESSERA_CUDA_CHECK(cudaMemsetAsync(row.scale, 0, out.scale_inv.nbytes(), s));
    if (!both_at_once) cuda_quant::launch_nvfp4(row, s);
  }
  if (req.columnwise) {
    auto* target = reinterpret_cast<uint32_t*>(amax_col);
    a.columnwise = true;
    a.rht = cfg.random_hadamard;
    if (a.rht) {
      TESSERA_CUDA_CHECK(cudaMemsetAsync(target, 0, sizeof(uint32_t), s));
      cuda_quant::launch_rht_amax(a, target, s);
    } else if (req.rowwise) {
      TESSERA_CUDA_CHECK(
          cudaMemcpyAsync(target, amax_row, sizeof(float), cudaMemcpyDeviceToDevice, s));
    } else {
      TESSERA_CUDA_CHECK(cudaMemsetAsync(target, 0, sizeof(uint32_t), s));
      cuda_quant::launch_tensor_amax(x.data, M * K, x.dtype, target, s);
    }
    a.amax = target;
    a.stream_base = static_cast<uint64_t>(M * K);
    a.data = out.columnwise_data.as<uint8_t>();
    a.scale = out.columnwise_scale_inv.as<uint8_t>();
    a.padded_cols = sw ? (ceil_div(M, 16) + 3) / 4 * 4 : 0;
    TESSERA_CUDA_CHECK(cudaMemsetAsync(a.scale, 0, out.columnwise_scale_inv.nbytes(), s));
    if (both_at_once) cuda_quant::launch_nvfp4_tile16(&row, &a, s);
    else cuda_quant::launch_nvfp4(a, s);
  }
}

}  // namespace

void quantize_cuda(const QuantizerConfig& config, const TensorView& x,
                   const QuantizedTensorView& out, const QuantizeRequest& req, Stream stream) {
  TESSERA_CHECK(x.device.is_cuda(), "quantize: x must be on a CUDA device, got ",
                x.to_string());
  TESSERA_CHECK_STATUS(x.numel() == out.rows * out.cols, Status::kShapeMismatch,
                       "quantize: x has ", x.numel(), " elements, the output is for (", out.rows,
                       ", ", out.cols, ")");
  TESSERA_CUDA_CHECK(cudaSetDevice(x.device.index));
  auto s = stream.as<cudaStream_t>();
  dispatch_scaling_mode(config.mode, "config.mode", [&](auto family, const ScalingModeInfo& info) {
    constexpr ScaleFamily kFamily = decltype(family)::value;
    if constexpr (kFamily == ScaleFamily::kTensor) {
      quantize_tensor(config, x, out, req, s);
    } else if constexpr (kFamily == ScaleFamily::kRowwise) {
      quantize_rowwise(config, x, out, req, s);
    } else if constexpr (kFamily == ScaleFamily::kBlock) {
      quantize_block(config, info, x, out, req, s);
    } else if constexpr (kFamily == ScaleFamily::kMXFP8) {
      quantize_mxfp8(config, x, out, req, s);
    } else {
      quantize_nvfp4(config, x, out, req, s);
    }
  });
}

void quantize_through_layout_cuda(const QuantizerConfig& config, const TensorView& x,
                                  const LayoutRows& layout, const QuantizedTensorView& out,
                                  const QuantizeRequest& req, Stream stream) {
  TESSERA_CUDA_CHECK(cudaSetDevice(x.device.index));
  const auto s = stream.as<cudaStream_t>();
  if (is_family(config.mode, ScaleFamily::kMXFP8)) return quantize_mxfp8(config, x, out, req, s, layout);
  quantize_block(config, scaling_mode_info(config.mode), x, out, req, s, layout);
}

void delayed_update_cuda(const QuantizerConfig& config, float* scale, float* amax_history,
                         Stream stream) {
  TESSERA_CHECK(scale != nullptr && amax_history != nullptr,
                "update: delayed scaling needs the scale and the amax history");
  cuda_quant::launch_delayed_update(scale, amax_history, config.amax_history_len,
                                    config.amax_algo == AmaxHistoryAlgo::kMostRecent,
                                    fp8_max_finite(config.element), config.margin,
                                    stream.as<cudaStream_t>());
}

}  // namespace tessera::detail
