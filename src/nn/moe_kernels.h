// Internals of the expert-parallel routing ops (include/tessera/nn/moe_routing.h): the argument
// blocks the checked entry points (moe_routing.cpp) hand to the CPU loops (moe_routing_cpu.cpp)
// and the CUDA kernels (moe_routing.cu: routing, regroup; moe_permute_kernels.cu and
// moe_row_kernels.cu: the row ops), and the per-block quantization, dequantization and reduction
// rules both backends share so that they give the same bits.
#pragma once

#include <cstdint>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/stream.h"
#include "tessera/formats/bits.h"
#include "tessera/formats/half.h"
#include "tessera/quantize/scale_rules.h"
#include "tessera/quantize/types.h"

namespace tessera::detail::moe {

struct RoutingArgs {
  const void* indices;  // (T, k) int32/int64
  DType index_dtype;
  int64_t tokens, top_k, experts, align, capacity, rows;
  int64_t* counts;          // (E)
  int64_t* padded_offsets;  // (E+1)
  int64_t* dropped;         // (1)
  void* slot_map;           // (T, k)
  void* row_pair;           // (rows)
  DType map_dtype;          // of slot_map and row_pair
  int32_t* error_flag;      // CUDA only
  void* workspace;          // CUDA only
};

// Quantization of permuted rows: FP32 scale per block (rowwise: one block = the whole row;
// block1x128) or E8M0 per 32-block (MXFP8). Mirrors the CPU/CUDA quantizers exactly.
enum class RowQuantMode : int { kNone = 0, kRowwise = 1, kBlock1x128 = 2, kMXFP8 = 3 };

struct RowQuant {
  RowQuantMode mode = RowQuantMode::kNone;
  bool e5m2 = false;
  float fp8_max = 448.0f;
  float epsilon = 0.0f;
  bool power_of_two = false;
  bool floor_rule = false;  // MXFP8 E8M0 rule: OCP floor instead of TE round-up
  int64_t block = 0;        // elements per scale block (H for rowwise)
  int64_t scale_cols = 0;   // scale entries per row
};

// The scale of one block from the abs-bits max of its elements: the element multiplier (the FP32
// scale, or 2^(e - 127) of the E8M0 byte for MXFP8) and that byte. store_block_scale writes the
// stored form (FP32 scale_inv = 1 / scale, or the byte); kept apart so that threads that only
// need the multiplier neither divide for scale_inv nor hold an address (no local memory).
struct BlockScale {
  float multiplier;
  uint8_t e8m0;  // MXFP8
};

TESSERA_HD BlockScale block_scale(const RowQuant& q, uint32_t amax_bits) {
  const float amax = scale_rules::amax_from_abs_bits(amax_bits);
  if (q.mode == RowQuantMode::kMXFP8) {
    const uint8_t e = q.floor_rule ? scale_rules::e8m0_floor(amax, q.e5m2 ? 15 : 8)
                                   : scale_rules::e8m0_round_up(
                                         amax, q.e5m2 ? 1.0f / 57344.0f : 1.0f / 448.0f);
    return {scale_rules::e8m0_multiplier(e), e};
  }
  return {scale_rules::current_scale(amax, q.fp8_max, q.epsilon, q.power_of_two), 0};
}

// The stored form of block scale s as 32 bits: the FP32 scale_inv = 1 / scale (its bits), or the
// E8M0 byte. Kernels that store one scale in several rows make it once (a division).
TESSERA_HD uint32_t stored_scale(const RowQuant& q, const BlockScale& s) {
  return q.mode == RowQuantMode::kMXFP8
             ? s.e8m0
             : formats::float_to_bits(scale_rules::reciprocal(s.multiplier));
}

// Writes a stored scale (stored_scale) at scale_base[index] (FP32, or the E8M0 byte).
TESSERA_HD void store_scale(const RowQuant& q, uint32_t stored, void* scale_base, int64_t index) {
  if (q.mode == RowQuantMode::kMXFP8) {
    static_cast<uint8_t*>(scale_base)[index] = static_cast<uint8_t>(stored);
  } else {
    static_cast<uint32_t*>(scale_base)[index] = stored;
  }
}

// Writes block scale s at scale_base[index] (FP32, or the E8M0 byte).
TESSERA_HD void store_block_scale(const RowQuant& q, const BlockScale& s, void* scale_base,
                                  int64_t index) {
  store_scale(q, stored_scale(q, s), scale_base, index);
}

// Both: writes the block's stored scale at scale_base[index], returns its element multiplier.
TESSERA_HD float block_multiplier(const RowQuant& q, uint32_t amax_bits, void* scale_base,
                                  int64_t index) {
  const BlockScale s = block_scale(q, amax_bits);
  store_block_scale(q, s, scale_base, index);
  return s.multiplier;
}

TESSERA_HD uint8_t encode_element(const RowQuant& q, float product) {
  return scale_rules::fp8_element(product, q.e5m2);
}

// The per-row quantization of rows of `hidden` elements under config c's rules (modes rowwise,
// block1x128, mxfp8; any other raises kUnsupported naming the mode).
RowQuant row_quant_of(const QuantizerConfig& c, int64_t hidden);

struct PermuteArgs {
  const void* x;  // (T, H)
  DType x_dtype;
  int64_t tokens, hidden, top_k, rows;
  const void* row_pair;  // (rows)
  DType map_dtype;
  void* out;        // (rows, H): x_dtype, or FP8 codes when quant.mode != kNone
  void* scale_inv;  // quantized: (scale_rows, scale_cols) FP32 or E8M0
  int64_t scale_rows;  // >= rows (block1x128 pads to a multiple of 4; padding written as 0)
  RowQuant quant;
  // Quantized only: (T, k) FP32 or null. Row r (pair p) is then quantized from
  // weighted_element(weights[p], x[t]) — unpermute backward's dy row, rounded to x's dtype.
  const float* weights = nullptr;
  // (T, k) of row_pair's dtype or null: the routing's slot map (CUDA: one CTA per token writes the
  // rows its pairs hold, then one per row the others; the same bits, weighted or not).
  const void* slot_map = nullptr;
};

// An element of a weighted permuted row: w · v in FP32, rounded once to the input's dtype In (the
// value moe_unpermute_backward writes to dy for a dy of dout's dtype).
template <class In>
TESSERA_HD float weighted_element(float w, float v) {
  return to_float(from_float<In>(w * v));
}

struct GatherAddArgs {  // permute backward / unpermute
  const void* y;  // (rows, H)
  DType y_dtype;
  int64_t rows, hidden, tokens, top_k;
  const void* slot_map;  // (T, k)
  DType map_dtype;
  const void* probs;  // (T, k) float32 or null (weights 1)
  void* out;          // (T, H)
  DType out_dtype;
};

struct ScatterArgs {  // unpermute backward
  const void* dout;  // (T, H)
  DType dout_dtype;
  const void* y;  // (rows, H), for dprobs
  DType y_dtype;
  int64_t rows, hidden, tokens, top_k;
  const void* slot_map;  // (T, k)
  const void* row_pair;  // (rows)
  DType map_dtype;
  const void* probs;  // (T, k) float32 or null
  void* dy;           // (rows, H)
  DType dy_dtype;
  float* dprobs;  // (T, k) or null
};

// dprobs reduction order (moe_routing.h): a row of H products is cut into chunks of kDotChunk
// consecutive elements; partial sum l (of kDotPartials) adds, from 0.0f, the products of chunks
// l, l + kDotPartials, ... (elements ascending), and the partials combine by the halving tree
// s_l += s_{l+w}, w = kDotPartials / 2, ..., 1. The CUDA kernel runs kDotPartials threads per
// token, thread l holding partial l.
inline constexpr int kDotChunk = 8;
inline constexpr int kDotPartials = 256;

struct DequantizeArgs {  // received payload -> high precision
  const uint8_t* data;   // (data_rows, H) FP8 codes
  bool e5m2;             // element: E5M2, else E4M3
  int64_t rows, hidden;  // rows: of out
  int64_t data_rows;
  // out row r reads data row source_rows[r] (a zero row when outside [0, data_rows)); nullptr:
  // row r (rows == data_rows).
  const int64_t* source_rows;
  const void* scale_inv;  // (>= data_rows, scale_cols): FP32, or E8M0 bytes when e8m0
  bool e8m0;
  int64_t block;       // elements per scale (H for rowwise; at least 1)
  int64_t scale_cols;  // scale entries per row (the row stride of scale_inv)
  void* out;           // (rows, H)
  DType out_dtype;
};

// One dequantized element: decode(code) · scale in FP32; any NaN result is the canonical NaN
// 0x7fc00000 (CPU and GPU differ in the NaN they produce). Rounded once to the output dtype by
// the caller.
TESSERA_HD float dequantize_product(float decoded, float scale) {
  const float v = decoded * scale;
  return (formats::float_to_bits(v) & 0x7fffffffu) > 0x7f800000u
             ? formats::bits_to_float(scale_rules::kCanonicalNaN)
             : v;
}

// moe_regroup_index: counts (sources, locals) with row stride `stride` (elements); rows = Σ
// counts (source-major rows), padded_rows the expert-major rows (each expert's rows padded at its
// end to a multiple of align).
struct RegroupArgs {
  const void* counts;
  DType count_dtype;
  int64_t sources, locals, stride, rows, padded_rows, align;
  int64_t* source_of;  // (padded_rows) or nullptr
  int64_t* expert_of;  // (rows) or nullptr
};

// One row of moe_regroup_index from the exclusive chunk starts of both orders (C + 1 each, C =
// sources · locals, entry C the total): `from` holds the starts of the order row i is counted in
// (expert-major for source_of, source-major for expert_of), `to` those of the other order; the
// row's chunk is the last whose start is <= i (an empty chunk's start equals the next one's).
// The expert-major starts include each expert's padding in its last chunk, so a row whose offset
// in its chunk reaches the chunk's size in `to` (the source-major starts: exact sizes) is
// padding: `pad`. `bound`: the number of rows of the order mapped to; a row past the total, or
// mapped past `bound`, maps to itself, or to `pad` where itself is past `bound` too
// (moe_routing.h).
template <class Start>
TESSERA_HD int64_t regroup_row(const Start* from, const Start* to, int64_t chunks, int64_t major,
                               int64_t minor, int64_t i, int64_t bound, int64_t pad) {
  const int64_t fallback = i < bound ? i : pad;
  if (i >= static_cast<int64_t>(from[chunks])) return fallback;
  int64_t lo = 0, hi = chunks - 1;  // last c with from[c] <= i
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (static_cast<int64_t>(from[mid]) <= i) lo = mid; else hi = mid - 1;
  }
  // chunk lo = a · minor + b in `from`'s order is chunk b · major + a in `to`'s.
  const int64_t a = lo / minor, b = lo % minor, t = b * major + a;
  const int64_t off = i - static_cast<int64_t>(from[lo]);
  if (off >= static_cast<int64_t>(to[t + 1]) - static_cast<int64_t>(to[t])) return pad;
  const int64_t j = static_cast<int64_t>(to[t]) + off;
  return j < bound ? j : fallback;
}

// The padded length of an expert's n rows (moe_regroup_index).
TESSERA_HD int64_t regroup_padded(int64_t n, int64_t align) {
  return (n + align - 1) / align * align;
}

void routing_cpu(const RoutingArgs& a);
void permute_cpu(const PermuteArgs& a);
void gather_add_cpu(const GatherAddArgs& a);
void scatter_cpu(const ScatterArgs& a);
void dequantize_cpu(const DequantizeArgs& a);
void regroup_cpu(const RegroupArgs& a);

// The data row out row r reads, or -1 for a zero row (DequantizeArgs::source_rows).
TESSERA_HD int64_t dequantize_source(const DequantizeArgs& a, int64_t r) {
  if (a.source_rows == nullptr) return r;
  const int64_t s = a.source_rows[r];
  return s >= 0 && s < a.data_rows ? s : -1;
}

// CUDA: workspace bytes and the kernels (moe_routing.cu, moe_permute_kernels.cu,
// moe_row_kernels.cu; moe_routing_no_cuda.cpp without nvcc).
int64_t routing_workspace_bytes_cuda(int64_t pairs, int64_t experts);
void routing_cuda(const RoutingArgs& a, Device device, Stream stream);
void permute_cuda(const PermuteArgs& a, Device device, Stream stream);
void gather_add_cuda(const GatherAddArgs& a, Device device, Stream stream);
void scatter_cuda(const ScatterArgs& a, Device device, Stream stream);
void dequantize_cuda(const DequantizeArgs& a, Device device, Stream stream);
void regroup_cuda(const RegroupArgs& a, Device device, Stream stream);

}  // namespace tessera::detail::moe
