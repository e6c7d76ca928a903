// Expert-parallel routing (docs/moe.md): routing metadata from router top-k indices, `permute`
// (tokens into expert-major order, each expert's group padded, optionally quantized in the same
// pass), `unpermute` (gather back and combine the top-k rows weighted by the routing
// probabilities), and the backward of both. CPU and CUDA, chosen by the device of the tensors.
//
// Terms. T tokens, k = top_k, E experts, H hidden. A *pair* (t, j) is token t's j-th choice,
// pair id p = t·k + j, expert indices[t, j]. The *permuted buffer* has `rows` rows (a host-known
// bound, moe_permuted_rows) holding E groups back to back: group e starts at padded_offsets[e];
// its first counts[e] rows are the pairs routed to e in ascending pair order (lower token first,
// then lower j), the rest of the group and every row past padded_offsets[E] are zero rows.
//   dropless (capacity -1): group e has roundup(routed_e, align) rows; every pair is kept.
//   capacity (capacity >= 0, a multiple of align): group e is rows [e·C, (e+1)·C); the first
//     min(routed_e, C) pairs (in pair order: lower token wins) are kept, the others are DROPPED:
//     slot -1, never read or written, counted in `dropped`.
// slot_map[t, j] = permuted row of pair (t, j), or -1 when dropped; row_pair[r] = the pair id
// held by row r, or -1 for a zero row. Both are int32 or int64 (the same dtype).
//
// Numerics (normative; CPU and CUDA give the same bits):
//   permute copies rows bit for bit; with quantization every permuted row is quantized exactly
//   as tessera's Quantizer quantizes that row (rowwise FP8, FP8 block 1x128, MXFP8 1x32 with
//   either E8M0 rule; compact scales; rowwise usage), so the output is bit-identical to
//   quantize(permute(x)) — zero rows included (scale_inv 1, or E8M0 code 0).
//   permute backward:   dx[t] = 0.0f + Σ_{j ascending, slot >= 0} float(dy[slot[t,j]]), FP32.
//   unpermute:          out[t] = 0.0f + Σ_{j ascending, slot >= 0} p[t,j] · float(y[slot[t,j]])
//                       (one FP32 multiply then one FP32 add per term, never fused; p = 1 when
//                       probs is empty).
//   unpermute backward: dy[r] = p[pair] · float(dout[pair / k]) for r holding a pair, else 0;
//                       dprobs[t,j] = Σ_h float(dout[t,h]) · float(y[slot,h]) for slot >= 0,
//                       else 0, summed as 256 FP32 partial sums over chunks of 8 consecutive
//                       elements: s_l = Σ over h with floor(h / 8) ≡ l (mod 256), h ascending,
//                       each from 0.0f, combined by the halving tree s_l += s_{l+w} for
//                       w = 128, 64, ..., 1 (what a 256-thread CTA holding 8 elements per
//                       thread computes).
//   dequantize rows:    out[r,c] = decode(q[r,c]) · scale(r, c) in FP32, any NaN made the
//                       canonical 0x7fc00000.
//   Results are rounded once (RNE) to the output dtype.
//
// Kernels (CUDA): one pass over each row with 16-byte loads and stores where H and the pointers
// allow, element by element otherwise (same bits either way); see moe_row_kernels.cu.
//
// Errors. CPU: every bad argument or expert index throws before anything is written. CUDA:
// nothing waits for the device (no host sync, graph-capturable); shapes, dtypes and devices are
// checked on the host, expert indices on the device: an index outside [0, E) ORs
// MoeRoutingError::kExpertOutOfRange into options.error_flag (a device int32 the caller zeroes
// and reads when it next synchronizes) and that pair is treated as dropped (slot -1, not
// counted). Without an error flag a CUDA call refuses to run (kInvalidArgument).
#pragma once

#include <cstdint>
#include <span>

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/quantize/types.h"

namespace tessera {

enum class MoeRoutingError : int32_t {
  kNone = 0,
  kExpertOutOfRange = 1,  // some indices[t, j] < 0 or >= E
};

struct MoeRoutingOptions {
  int64_t num_experts = 0;  // E >= 1
  int64_t align = 1;        // >= 1: rows per group are a multiple of it (recipe's alignment)
  int64_t capacity = -1;    // -1: dropless; >= 0: rows per expert (multiple of align)
  int32_t* error_flag = nullptr;  // CUDA: device int32 receiving MoeRoutingError bits
};

// Outputs of moe_routing; all on the device of the indices, contiguous.
struct MoeRouting {
  TensorView counts;          // (E) int64: pairs kept per expert
  TensorView padded_offsets;  // (E+1) int64, leading 0: group starts in the permuted buffer
  TensorView slot_map;        // (T, k) int32/int64
  TensorView row_pair;        // (rows) int32/int64 (same dtype), rows >= moe_permuted_rows
  TensorView dropped;         // (1) int64: pairs dropped (0 in dropless mode)
};

// Host-known rows of the permuted buffer: dropless padded_rows_bound(T·k, E, align) =
// T·k + E·(align − 1); capacity E·C. Throws on invalid options (a capacity below -1 included)
// or int64 overflow: T·k past int64 is kOutOfRange naming num_tokens and top_k, in every op here.
int64_t moe_permuted_rows(int64_t num_tokens, int64_t top_k, const MoeRoutingOptions& options);

// Device workspace moe_routing needs on CUDA (0 on the CPU), in bytes.
int64_t moe_routing_workspace_bytes(int64_t num_tokens, int64_t top_k,
                                    const MoeRoutingOptions& options, Device device);

// indices (T, k) int32/int64 → every field of `out`. `workspace`: a byte buffer on the device of
// the indices of at least moe_routing_workspace_bytes (may be empty on the CPU).
void moe_routing(const TensorView& indices, const MoeRoutingOptions& options,
                 const MoeRouting& out, const TensorView& workspace = {}, Stream stream = {});

// x (T, H) float32/bfloat16/float16 → out (rows, H), same dtype: row r = x[row_pair[r] / k], or
// zeros where row_pair[r] = -1.
void moe_permute(const TensorView& x, const TensorView& row_pair, int64_t top_k,
                 const TensorView& out, Stream stream = {});

// The scaling modes moe_permute_quantize fuses (and moe_dequantize_rows reads): kRowwise,
// kBlock1x128, kMXFP8 — scales per row or per 1xN block of a row, so a row's payload travels
// with its own scales.
std::span<const ScalingMode> moe_permute_modes();

// The same fused with quantization: `out` (rows, H) has the rowwise usage of config mode
// kRowwise, kBlock1x128 or kMXFP8 (compact scales) with the shapes of quantize/types.h; its
// config decides the bits (element, epsilon, power-of-two, E8M0 rule). One read of each token.
void moe_permute_quantize(const TensorView& x, const TensorView& row_pair, int64_t top_k,
                          const QuantizedTensorView& out, Stream stream = {});
// The same with per-pair weights (T, k) float32 on x's device (an empty view: weight 1): row r
// holding pair p = (t, j) is quantized from w · x[t] (FP32 product) rounded once to x's dtype,
// w = weights[t, j] — the row moe_unpermute_backward writes to dy with dout = x, probs = weights
// and dy of x's dtype. The combine's backward quantizes its gradient rows in this one pass.
void moe_permute_quantize(const TensorView& x, const TensorView& row_pair, int64_t top_k,
                          const TensorView& weights, const QuantizedTensorView& out,
                          Stream stream = {});

// Both permutes with the routing's slot_map (T, k) as well (moe_routing's; row_pair's dtype, on
// x's device; CPU: entries in [-1, rows)): on CUDA a CTA per token then reads its row once and
// writes it to every row its pairs hold — quantized once, or once per pair with weights, from
// the row kept in registers — and a CTA per row writes the other rows, instead of a CTA per row
// reading its token's row once per pair. The output is the same bits as without slot_map, for
// ANY slot_map: a row r holding pair p is written from x[p / k] whether or not
// slot_map[p] == r. (Quantized rows past 8192 elements, and weighted block1x128 / MXFP8 rows,
// take the per-row kernel either way.)
void moe_permute(const TensorView& x, const TensorView& row_pair, const TensorView& slot_map,
                 int64_t top_k, const TensorView& out, Stream stream = {});
void moe_permute_quantize(const TensorView& x, const TensorView& row_pair,
                          const TensorView& slot_map, int64_t top_k, const TensorView& weights,
                          const QuantizedTensorView& out, Stream stream = {});

// Backward of moe_permute: d_permuted (rows, H) → dx (T, H) (gather-add, see Numerics). Both
// float32/bfloat16/float16, independently.
void moe_permute_backward(const TensorView& d_permuted, const TensorView& slot_map,
                          const TensorView& dx, Stream stream = {});

// y (rows, H) → out (T, H): combine of the top-k rows weighted by probs (T, k) float32 (or
// empty: weight 1). y and out float32/bfloat16/float16, independently.
void moe_unpermute(const TensorView& y, const TensorView& slot_map, const TensorView& probs,
                   const TensorView& out, Stream stream = {});

// Backward of moe_unpermute: dout (T, H) → dy (rows, H) (every row written), and dprobs (T, k)
// float32 when probs is given. Either output may be an empty view to skip it.
void moe_unpermute_backward(const TensorView& dout, const TensorView& y,
                            const TensorView& slot_map, const TensorView& row_pair,
                            const TensorView& probs, const TensorView& dy,
                            const TensorView& dprobs, Stream stream = {});

// The receiver side of a quantized dispatch: data (rows, H) FP8 codes (e4m3 or e5m2) with the
// scales moe_permute_quantize wrote for `mode` → out (rows, H) float32/bfloat16/float16, each
// element decode(q) · scale_inv in FP32 rounded once (see Numerics). scale_inv: rowwise FP32
// (n) or (n, 1); block1x128 FP32 (n, ceil(H/128)); mxfp8 E8M0 bytes (uint8 or e8m0)
// (n, ceil(H/32)), E8M0 code 0 → 2^-127, 255 → NaN; n >= rows (rows past `rows` unread). One
// read of the payload.
void moe_dequantize_rows(const TensorView& data, const TensorView& scale_inv, ScalingMode mode,
                         const TensorView& out, Stream stream = {});
// The same with a row gather (a dispatch's regrouping to expert-major order and the dequantize
// in one pass): out (m, H) row r is data's row source_rows[r] dequantized with that row's scales;
// source_rows int64 (m) on data's device; an index outside [0, rows) gives a zero row.
void moe_dequantize_rows(const TensorView& data, const TensorView& scale_inv, ScalingMode mode,
                         const TensorView& source_rows, const TensorView& out, Stream stream = {});

// The regrouping of an expert-parallel dispatch's received rows. W sources each sent the chunks
// of their L local experts back to back: the received rows are SOURCE-major (chunk (s, e) holds
// counts[s, e] rows; chunks in the order s = 0..W-1, e = 0..L-1), the experts read them
// EXPERT-major (chunks in the order e, then s; each chunk's rows keep their order; each expert's
// rows followed by padding rows up to a multiple of `align`). With n = rows (Σ counts) and m =
// padded_rows (Σ over experts of their padded row counts):
//   source_of[r] = the source-major row of expert-major row r, or n for a padding row (a row
//                  gather to expert-major whose source has a zero row n);
//   expert_of[q] = the expert-major row of source-major row q   (back to sources).
// counts (W, L) int32/int64 on the outputs' device, rows of any stride (a column slice of a
// header); source_of (m) and expert_of (n) int64, either may be an empty view to skip it; align
// >= 1, m == n when align is 1. CPU: Σ counts must be n and the padded sum m (kShapeMismatch
// otherwise; a negative count is kInvalidArgument). CUDA (nothing waits for the device): every
// index written lies in [0, n] for source_of and [0, m) for expert_of (n only where align > 1:
// padding) — a row the counts do not place (or mapped past its order's rows) maps to itself
// where that is in range — so a gather through it never reads outside the rows (and the zero
// row). CUDA takes up to 12288 chunks (W·L).
void moe_regroup_index(const TensorView& counts, int64_t rows, int64_t padded_rows, int64_t align,
                       const TensorView& source_of, const TensorView& expert_of,
                       Stream stream = {});
// align 1: n = m = the length of whichever of source_of and expert_of is given.
void moe_regroup_index(const TensorView& counts, const TensorView& source_of,
                       const TensorView& expert_of, Stream stream = {});

}  // namespace tessera
