// Internal entry points of the quantize backends (reference/, cpu/, cuda/) behind the dispatcher
// in quantizer.cpp. Arguments are validated by the dispatcher: x is a contiguous (M, K) float32 /
// bfloat16 / float16 view on the backend's device; `out` has every buffer of the usages to
// produce (`rowwise` / `columnwise`), with the shapes of types.h, on that device.
#pragma once

#include <cstdint>

#include "tessera/core/macros.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/quantize/types.h"

namespace tessera {
struct GroupedTensorView;  // tessera/grouped/grouped_tensor.h
}  // namespace tessera

namespace tessera::detail {

// Which usages to produce and, for delayed scaling, the quantizer's state (device pointers):
// the scale to apply (read) and the amax history whose slot 0 receives the tensor amax.
struct QuantizeRequest {
  bool rowwise = false;
  bool columnwise = false;
  const float* delayed_scale = nullptr;  // config.delayed only: one FP32 on x's device
  float* amax_history = nullptr;         // config.delayed only: amax_history_len FP32
};

// Spec-faithful loops (src/quantize/reference): the oracle. Host memory only.
void quantize_reference(const QuantizerConfig& config, const TensorView& x,
                        const QuantizedTensorView& out, const QuantizeRequest& req);
void dequantize_reference(const QuantizedTensorView& q, const TensorView& out, bool columnwise);

// The CPU backend (src/quantize/cpu): OpenMP, vectorizable, the same bits as the reference.
void quantize_cpu(const QuantizerConfig& config, const TensorView& x,
                  const QuantizedTensorView& out, const QuantizeRequest& req);
void dequantize_cpu(const QuantizedTensorView& q, const TensorView& out, bool columnwise);

// An input without elements (M == 0 or K == 0), instead of a backend (quantize_empty.cpp): the
// same bits as the reference and the CPU backend give, with work proportional to the output,
// never to the empty extent (a (2^40, 0) input writes one scale, or none). Data and scales are
// zero, amax 0 (delayed: history slot 0 = 0), and the per-tensor / per-row FP32 scales hold
// 1 / the scale of an all-zero block (delayed: 1 / the quantizer's scale). The writes go through
// an EmptyWriter: host memory (quantize_empty_host) or device memory on a stream
// (quantize_empty_cuda, src/quantize/cuda/empty.cu; kNoDevice without CUDA).
class EmptyWriter {
 public:
  virtual ~EmptyWriter() = default;
  virtual void zero(void* p, int64_t bytes) const = 0;
  // dst[0, n) = reciprocal(scale), scale = *delayed_scale (in the writer's memory) when not null,
  // else `scale`.
  virtual void fill_scale_inv(float* dst, int64_t n, float scale,
                              const float* delayed_scale) const = 0;
};
void quantize_empty(const QuantizerConfig& config, const QuantizedTensorView& out,
                    const QuantizeRequest& req, const EmptyWriter& writer);
void quantize_empty_host(const QuantizerConfig& config, const QuantizedTensorView& out,
                         const QuantizeRequest& req);
void quantize_empty_cuda(const QuantizerConfig& config, const QuantizedTensorView& out,
                         const QuantizeRequest& req, Device device, Stream stream);

// The CUDA backend (src/quantize/cuda, owned by the CUDA engineer); quantize_no_cuda.cpp throws
// kNoDevice in builds without CUDA. Asynchronous on `stream`; no host synchronization.
// quantize_cuda takes inputs with elements (an empty one goes to quantize_empty_cuda).
void quantize_cuda(const QuantizerConfig& config, const TensorView& x,
                   const QuantizedTensorView& out, const QuantizeRequest& req, Stream stream);
void dequantize_cuda(const QuantizedTensorView& q, const TensorView& out, bool columnwise,
                     Stream stream);
// Delayed scaling update on the device: amax = reduce(history) (max or slot 0), scale =
// scale_rules::delayed_scale(amax, scale, fp8_max, margin), then the roll (see quantizer.cpp).
void delayed_update_cuda(const QuantizerConfig& config, float* scale, float* amax_history,
                         Stream stream);

// ---- grouped CUDA quantize (src/quantize/cuda/grouped_*.cu) --------------------------------
// Grouped CUDA quantization of one contiguous varying-first / all-same input (the MoE
// activation case) into grouped storage whose metadata lives on the device (the grouped layer's
// grouped_quantize_cuda routes here). Asynchronous, no host sync, capturable in a CUDA graph.

// True when the grouped kernels take `config` for K = `cols` (false without CUDA).
bool has_grouped_quantize_kernel(const QuantizerConfig& config, int64_t cols);

// Delayed scaling (config.delayed): the quantizer's device state. `scale` (1 FP32) is applied
// to every member; slot 0 of `amax_history` receives the LAST member's amax, as quantizing the
// members one after the other with the same Quantizer leaves it (each quantize sets slot 0).
struct GroupedDelayedState {
  const float* scale = nullptr;
  float* amax_history = nullptr;
};

// x: (out.logical_rows, K) contiguous float32/bfloat16/float16 on the device; member g is rows
// [tensor_offsets[g] / K, tensor_offsets[g+1] / K) and comes out byte-identical to quantizing it
// alone with `config` (usages config.rowwise / config.columnwise): data, scales (padding
// included), per-member amax. Rows past the last offset, scale entries past a member's scale
// matrix and past the last member are neither read nor written. `noop`: empty, or a float32 /
// int32 (1) device scalar; nonzero turns every launch into a no-op.
// Modes: every FP8 recipe (per-tensor current and delayed, rowwise, block 1x128 / 128x128, both
// usages), MXFP8 / MXFP8 32x32 with compact scales, NVFP4 / NVFP4 16x16 (compact or swizzled,
// RHT, stochastic rounding). Refused (kUnsupported): MXFP8 swizzled, K = 0 (except MXFP8).
// Outside the storage contract (not detected on the device): NVFP4 columnwise members with an
// odd row count are skipped; with the Hadamard transform member rows must be multiples of 16.
// In a build without CUDA (quantize_no_cuda.cpp) it throws kNoDevice.
void grouped_quantize_contiguous_cuda(const QuantizerConfig& config, const TensorView& x,
                                      const GroupedTensorView& out, const TensorView& noop,
                                      Stream stream, const GroupedDelayedState& delayed = {});

// NVFP4 per member, in place (the training step's per-expert global amax, nn/member_scaling.h):
// x (rows, K) contiguous; member g = x rows [offsets[g], offsets[g+1]) / K (`offsets`: groups + 1
// ascending int64 element offsets on x's device; each member's rows a multiple of 16 and its
// first row too — a member breaking that gets NaN scales and no codes in its columnwise copy).
// Member g's rows of the rowwise copy and its columns of the columnwise copy (xᵀ, after the
// Hadamard transform when configured) are bit for bit the standalone quantizer applied to member
// g alone with rng_offset + g (its own global amax in amax[g] / columnwise_amax[g]: `groups` FP32
// each; stochastic rounding on its own elements with its own offset, so the caller reserves
// `groups` offsets). Codes and scales in no member: 0. out: the whole copies of x (rows, K). CUDA: no host sync
// (quantize_nvfp4_members_cuda); CPU: cpu::quantize_nvfp4_members (host offsets).
// `sources` (CUDA only; groups + 1 int64 row starts in x on its device): x is read through a
// layout instead (LayoutRows below, dst = offsets / K, src = sources): member g's rows are x
// rows [sources[g], min(sources[g+1], x rows)) followed by zero rows, out has the members' rows
// (out.rows, not x's), and the result is that of the padded copy. Needs the tiled kernels
// (nvfp4_members_take_layout).
void quantize_nvfp4_members_cuda(const QuantizerConfig& config, const TensorView& x,
                                 const int64_t* offsets, int64_t groups,
                                 const QuantizedTensorView& out, Stream stream,
                                 const int64_t* sources = nullptr);
// Either backend, x's device: `offsets` int64 (groups + 1) on x's device; out's amax and
// columnwise_amax hold `groups` values each. `sources`: as above (CUDA only; empty: none).
void quantize_nvfp4_members(const QuantizerConfig& config, const TensorView& x,
                            const TensorView& offsets, const QuantizedTensorView& out,
                            Stream stream, const TensorView& sources = {});
// Whether quantize_nvfp4_members reads x through a layout (`sources`) for `config`: CUDA, the
// switch on (layout_reads()), NVFP4 with 1x16 blocks, K % 16 == 0 and x 16-byte aligned (the
// tiled kernels).
bool nvfp4_members_take_layout(const QuantizerConfig& config, const TensorView& x);

// ---- reading x through a group layout (the training step's padded token layout) -------------
// The matrix quantized, (rows, K), is not materialized: row r is row src[g] + (r − dst[g]) of x
// (x_rows, K), where dst[g] <= r < dst[g+1], while that row is below src[g+1] and x_rows; every
// other row (a group's padding, rows past dst[groups]) is zero. dst and src: groups + 1 int64 on
// x's device, ascending from 0; every dst[g] a multiple of `align` (the caller's promise, which
// the kernels rely on: their row tiles lie in one group). So the result is bit for bit the
// quantization of pad_tokens(x, src, dst) (nn/token_padding.h) without that copy's pass over
// memory.
// The group owning row r of a layout whose groups start at starts[0 .. groups] (ascending):
// the last g with starts[g] <= r, or -1 when r is past starts[groups]. Binary search.
TESSERA_HD int64_t group_of_row(const int64_t* starts, int64_t groups, int64_t r) {
  if (groups <= 0 || r < 0 || r >= starts[groups]) return -1;
  int64_t lo = 0, hi = groups - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (starts[mid] <= r) lo = mid; else hi = mid - 1;
  }
  return lo;
}

struct LayoutRows {
  const int64_t* dst = nullptr;
  const int64_t* src = nullptr;
  int64_t groups = 0;
  int64_t x_rows = 0;
  int64_t align = 0;

  // x's row for row r of the matrix, or -1 (a zero row); *end (if given): where the rows of x
  // of r's group end (x's row for r + j is the result + j while that is below *end).
  TESSERA_HD int64_t source_row(int64_t r, int64_t* end = nullptr) const {
    const int64_t g = group_of_row(dst, groups, r);
    if (g < 0) return -1;
    const int64_t stop = src[g + 1] < x_rows ? src[g + 1] : x_rows;
    if (end != nullptr) *end = stop;
    const int64_t i = src[g] + (r - dst[g]);
    return i < stop ? i : -1;
  }
};

// Whether quantize_through_layout takes `config` for x on x's device: CUDA, the switch on
// (layout_reads()), and FP8 block 1x128 / 128x128 (the cast-transpose kernel) or MXFP8 (the
// tile kernel). Nothing else of x is looked at (its data is never read).
bool takes_layout_rows(const QuantizerConfig& config, const TensorView& x);
// The alignment quantize_through_layout needs of a layout's dst starts for `config`: 4 rows for
// FP8 block (the cast's patch), 32 for MXFP8 (its tile).
int64_t layout_rows_align(const QuantizerConfig& config);
// out (its rows, K): `config`'s usages out has (rowwise / columnwise) of the matrix `layout`
// reads from x, as Quantizer(config).quantize would give for the padded copy. layout.align must
// be a multiple of layout_rows_align(config). Only where takes_layout_rows says so; asynchronous
// on `stream`, no host sync.
void quantize_through_layout(const QuantizerConfig& config, const TensorView& x,
                             const LayoutRows& layout, const QuantizedTensorView& out,
                             Stream stream);
// The switch of the layout reads: on unless TESSERA_LAYOUT_READS=0 at the first read or
// set_layout_reads(false) (tests, A/B timings: the step then quantizes a padded copy). Switch
// between steps only.
bool layout_reads();
void set_layout_reads(bool on);
// The CUDA part of quantize_through_layout (arguments checked); kNoDevice without CUDA.
void quantize_through_layout_cuda(const QuantizerConfig& config, const TensorView& x,
                                  const LayoutRows& layout, const QuantizedTensorView& out,
                                  const QuantizeRequest& req, Stream stream);

}  // namespace tessera::detail
