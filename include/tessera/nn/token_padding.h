// Token padding (docs/nn.md): pad each group of rows of a grouped activation to a multiple of
// `align` rows (the recipe's token alignment) and take the padding away again.
//
// x (rows_cap, K) holds N groups of M_g rows back to back, group g at rows
// [offsets[g], offsets[g+1]); x_padded (padded_cap, K) holds the same groups, group g at rows
// [padded_offsets[g], padded_offsets[g+1]) with padded_offsets[g+1] - padded_offsets[g] =
// roundup(M_g, align): the first M_g rows are x's rows, the rest are zero. Both offset arrays
// are int64, N+1 entries, leading 0, on the device of x (token_padding_offsets makes them).
//
// Capacity: rows past the live end (offsets[N] in x, padded_offsets[N] in x_padded) are never
// read or written (GroupedTensor's capacity rule, docs/grouped.md), so the outputs keep whatever
// was there. Allocate x_padded with padded_rows_bound(rows_cap, N, align) rows to hold any split.
// Nothing waits for the device: the CUDA paths are asynchronous on `stream` and capturable in a
// CUDA graph (except with host splits and CUDA x, whose offsets are uploaded from host values at
// call time). Element types: float32, bfloat16, float16 (rows are copied bit for bit).
#pragma once

#include <cstdint>

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/scan/splits_to_offsets.h"

namespace tessera {

// Host-known upper bound on Σ roundup(M_g, align) given Σ M_g <= total_rows:
// total_rows + num_groups · (align − 1). Throws kOutOfRange if that does not fit int64.
int64_t padded_rows_bound(int64_t total_rows, int64_t num_groups, int64_t align);

// offsets (N+1) int64 and padded_offsets (N+1) int64 from splits (N) int32/int64 in one
// splits_to_offsets_multi call. splits may live on the host while the offsets live on a CUDA
// device (computed on the host, uploaded asynchronously; not graph-capturable); otherwise all on
// one device. Errors as in splits_to_offsets.h (options.error_flag on CUDA).
void token_padding_offsets(const TensorView& splits, int64_t align, const TensorView& offsets,
                           const TensorView& padded_offsets, const ScanOptions& options = {},
                           Stream stream = {});

// x (rows_cap, K) → x_padded (padded_cap, K), zero rows in each group's padding. Rows of a group
// that would fall past padded_cap are not written; source rows past rows_cap read as zero.
// zero_tail: rows of x_padded past the last group (up to padded_cap) are written as zero too
// (a buffer every row of which a later pass reads).
void pad_tokens(const TensorView& x, const TensorView& offsets, const TensorView& padded_offsets,
                const TensorView& x_padded, Stream stream = {}, bool zero_tail = false);

// The inverse (backward of pad_tokens, for gradients): x (rows_cap, K) receives the real rows of
// x_padded (padded_cap, K); padding rows are dropped. Rows past rows_cap are not written.
// zero_tail: rows of x past the last group are written as zero (else left as they were).
void unpad_tokens(const TensorView& x_padded, const TensorView& offsets,
                  const TensorView& padded_offsets, const TensorView& x, Stream stream = {},
                  bool zero_tail = false);

// token_padding_offsets then pad_tokens. With splits on the device of x, total_bound defaults to
// rows_cap (so error_flag, when given, reports splits that do not fit x) and x_padded must have
// at least padded_rows_bound(rows_cap, N, align) rows; with splits on the host the exact padded
// total is checked instead.
void pad_tokens_from_splits(const TensorView& x, const TensorView& splits, int64_t align,
                            const TensorView& x_padded, const TensorView& offsets,
                            const TensorView& padded_offsets, int32_t* error_flag = nullptr,
                            Stream stream = {});

namespace detail {
// dst row r of group g (dst_offsets[g] <= r < dst_offsets[g+1], r < dst_rows) receives src row
// src_offsets[g] + (r − dst_offsets[g]) when that is inside group g of src and < src_rows, else
// zeros. Offsets int64 (N+1) on the device; rows of `row_bytes` bytes.
struct RegroupRows {
  const void* src;
  void* dst;
  int64_t row_bytes;
  int64_t src_rows;
  int64_t dst_rows;
  const int64_t* src_offsets;
  const int64_t* dst_offsets;
  int64_t num_groups;
  bool zero_tail = false;  // dst rows past dst_offsets[num_groups] (below dst_rows) become zeros
};
void regroup_rows_cuda(const RegroupRows& r, Device device, Stream stream);
// Asynchronous host→device copy of pageable host memory (staged before returning).
void upload_async(void* dst, const void* src, int64_t bytes, Device device, Stream stream);
}  // namespace detail

}  // namespace tessera
