// Token padding: argument checks, offsets through splits_to_offsets_multi, the CPU row copies,
// and dispatch to the CUDA kernel (token_padding.cu).
#include "tessera/nn/token_padding.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/cpu_parallel.h"
#include "core/host_bytes.h"
#include "tessera/core/status.h"

namespace tessera {
namespace {

using detail::kParallelWork;

// Checks a pair of activations and both offset arrays; returns N. Builds no strings unless a
// check fails (it runs on every call of a layer).
int64_t check_padding_views(const TensorView& x, const TensorView& x_padded,
                            const TensorView& offsets, const TensorView& padded_offsets,
                            const char* op) {
  TESSERA_CHECK_STATUS(is_floating_input(x.dtype) && x_padded.dtype == x.dtype,
                       Status::kDTypeMismatch, op, ": x (", dtype_name(x.dtype), ") and x_padded (",
                       dtype_name(x_padded.dtype), ") must share one of float32, bfloat16, "
                       "float16");
  TESSERA_CHECK_STATUS(offsets.dtype == DType::kInt64 && padded_offsets.dtype == DType::kInt64,
                       Status::kDTypeMismatch, op, ": offsets and padded_offsets must be int64, "
                       "got ", dtype_name(offsets.dtype), " and ", dtype_name(padded_offsets.dtype));
  check_view(x, "token padding: x");
  check_view(x_padded, "token padding: x_padded");
  check_view(offsets, "token padding: offsets");
  check_view(padded_offsets, "token padding: padded_offsets");
  TESSERA_CHECK_STATUS(x.ndim == 2 && x_padded.ndim == 2 && x.shape[1] == x_padded.shape[1],
                       Status::kShapeMismatch, op, ": x and x_padded must be 2-D with the same K, "
                       "got ", x.to_string(), " and ", x_padded.to_string());
  TESSERA_CHECK(x.device == x_padded.device, op, ": x is on ", to_string(x.device),
                " but x_padded is on ", to_string(x_padded.device));
  TESSERA_CHECK_STATUS(offsets.ndim == 1 && offsets.shape[0] >= 1 &&
                           padded_offsets.ndim == 1 && padded_offsets.shape == offsets.shape,
                       Status::kShapeMismatch, op, ": offsets and padded_offsets must both be "
                       "(N+1), got ", offsets.to_string(), " and ", padded_offsets.to_string());
  TESSERA_CHECK(offsets.device == x.device && padded_offsets.device == x.device, op,
                ": offsets must be on the device of x (", to_string(x.device), ")");
  return offsets.shape[0] - 1;
}

// CPU: offsets start at 0 and never decrease.
void check_offsets_cpu(const TensorView& offsets, const char* what) {
  const int64_t* o = offsets.as<const int64_t>();
  TESSERA_CHECK_STATUS(o[0] == 0, Status::kOutOfRange, what, "[0] = ", o[0], "; expected 0");
  for (int64_t g = 1; g < offsets.shape[0]; ++g) {
    // The values, not the index: callers reach this with start offsets made from end offsets
    // (the training step), whose indices are one apart.
    TESSERA_CHECK_STATUS(o[g] >= o[g - 1], Status::kOutOfRange, what, " decreases: ", o[g - 1],
                         " then ", o[g]);
  }
}

void regroup_rows_cpu(const detail::RegroupRows& r) {
  const int64_t live = r.zero_tail ? r.dst_rows : std::min(r.dst_offsets[r.num_groups], r.dst_rows);
  const auto* src = static_cast<const char*>(r.src);
  auto* dst = static_cast<char*>(r.dst);
  const int64_t* d_begin = r.dst_offsets;
  const int64_t* d_end = r.dst_offsets + r.num_groups + 1;
#pragma omp parallel for schedule(static) if (live * r.row_bytes >= kParallelWork)
  for (int64_t row = 0; row < live; ++row) {
    const int64_t g = (std::upper_bound(d_begin, d_end, row) - d_begin) - 1;
    const int64_t local = row - r.dst_offsets[g];
    const int64_t src_row = r.src_offsets[g] + local;
    const bool inside = g < r.num_groups && local < r.src_offsets[g + 1] - r.src_offsets[g] &&
                        src_row < r.src_rows;
    char* out = dst + row * r.row_bytes;
    if (inside) {
      host_copy_bytes(out, src + src_row * r.row_bytes, static_cast<size_t>(r.row_bytes));
    } else {
      host_zero_bytes(out, static_cast<size_t>(r.row_bytes));
    }
  }
}

void regroup(const detail::RegroupRows& r, Device device, Stream stream) {
  if (device.is_cuda()) return detail::regroup_rows_cuda(r, device, stream);
  regroup_rows_cpu(r);
}

int64_t row_bytes_of(const TensorView& x) { return dtype_bytes(x.dtype, x.shape[1]); }

// Host splits → [offsets (N+1) | padded_offsets (N+1)] on the host; errors throw.
std::vector<int64_t> host_padding_offsets(const TensorView& splits, int64_t align,
                                          const ScanOptions& options) {
  check_view(splits, "token_padding_offsets: splits", {DType::kInt32, DType::kInt64});
  TESSERA_CHECK_STATUS(splits.ndim == 1, Status::kShapeMismatch,
                       "token_padding_offsets: splits must be 1-D, got ", splits.to_string());
  const int64_t n1 = splits.shape[0] + 1;
  std::vector<int64_t> host(static_cast<size_t>(2 * n1));
  const OffsetsSpec specs[2] = {{1, true, DType::kInt64, 1}, {1, true, DType::kInt64, align}};
  const TensorView outs[2] = {TensorView::contiguous(host.data(), DType::kInt64, {n1}),
                              TensorView::contiguous(host.data() + n1, DType::kInt64, {n1})};
  splits_to_offsets_multi(splits, specs, outs, options);
  return host;
}

// Copies host offsets into offsets / padded_offsets (N+1 each) on their device.
void store_host_offsets(const std::vector<int64_t>& host, const TensorView& offsets,
                        const TensorView& padded_offsets, Stream stream) {
  const int64_t n1 = static_cast<int64_t>(host.size()) / 2;
  for (const TensorView* dst : {&offsets, &padded_offsets}) {
    check_view(*dst, "token_padding_offsets: offsets", {DType::kInt64});
    TESSERA_CHECK_STATUS(dst->ndim == 1 && dst->shape[0] == n1, Status::kShapeMismatch,
                         "token_padding_offsets: offsets must be (", n1, "), got ",
                         dst->to_string());
    TESSERA_CHECK(dst->device == offsets.device,
                  "token_padding_offsets: offsets and padded_offsets must be on one device");
  }
  if (offsets.device.is_cpu()) {
    std::memcpy(offsets.data, host.data(), static_cast<size_t>(n1 * 8));
    std::memcpy(padded_offsets.data, host.data() + n1, static_cast<size_t>(n1 * 8));
    return;
  }
  detail::upload_async(offsets.data, host.data(), n1 * 8, offsets.device, stream);
  detail::upload_async(padded_offsets.data, host.data() + n1, n1 * 8, offsets.device, stream);
}

}  // namespace

int64_t padded_rows_bound(int64_t total_rows, int64_t num_groups, int64_t align) {
  TESSERA_CHECK(total_rows >= 0 && num_groups >= 0 && align >= 1, "padded_rows_bound: total_rows ",
                total_rows, ", num_groups ", num_groups, " and align ", align,
                " must be >= 0, >= 0 and >= 1");
  int64_t extra = 0;
  int64_t bound = 0;
  TESSERA_CHECK_STATUS(!__builtin_mul_overflow(num_groups, align - 1, &extra) &&
                           !__builtin_add_overflow(total_rows, extra, &bound),
                       Status::kOutOfRange, "padded_rows_bound: ", total_rows, " + ", num_groups,
                       " x (", align, " - 1) overflows int64");
  return bound;
}

void token_padding_offsets(const TensorView& splits, int64_t align, const TensorView& offsets,
                           const TensorView& padded_offsets, const ScanOptions& options,
                           Stream stream) {
  TESSERA_CHECK(align >= 1, "token_padding_offsets: align ", align, " must be >= 1");
  const OffsetsSpec specs[2] = {{1, true, DType::kInt64, 1}, {1, true, DType::kInt64, align}};
  if (splits.device == offsets.device) {
    const TensorView outs[2] = {offsets, padded_offsets};
    splits_to_offsets_multi(splits, specs, outs, options, stream);
    return;
  }
  // Host splits, device offsets: scan on the host (errors throw here), then upload.
  TESSERA_CHECK(splits.device.is_cpu() && offsets.device.is_cuda(),
                "token_padding_offsets: splits on ", to_string(splits.device),
                " cannot feed offsets on ", to_string(offsets.device));
  store_host_offsets(host_padding_offsets(splits, align, options), offsets, padded_offsets,
                     stream);
}

void pad_tokens(const TensorView& x, const TensorView& offsets, const TensorView& padded_offsets,
                const TensorView& x_padded, Stream stream, bool zero_tail) {
  const int64_t n = check_padding_views(x, x_padded, offsets, padded_offsets, "pad_tokens");
  if (x.device.is_cpu()) {
    check_offsets_cpu(offsets, "pad_tokens: offsets");
    check_offsets_cpu(padded_offsets, "pad_tokens: padded_offsets");
  }
  const detail::RegroupRows r{x.data,          x_padded.data,   row_bytes_of(x),
                              x.shape[0],      x_padded.shape[0], offsets.as<const int64_t>(),
                              padded_offsets.as<const int64_t>(), n, zero_tail};
  regroup(r, x.device, stream);
}

void unpad_tokens(const TensorView& x_padded, const TensorView& offsets,
                  const TensorView& padded_offsets, const TensorView& x, Stream stream,
                  bool zero_tail) {
  const int64_t n = check_padding_views(x, x_padded, offsets, padded_offsets, "unpad_tokens");
  if (x.device.is_cpu()) {
    check_offsets_cpu(offsets, "unpad_tokens: offsets");
    check_offsets_cpu(padded_offsets, "unpad_tokens: padded_offsets");
  }
  const detail::RegroupRows r{x_padded.data,     x.data,     row_bytes_of(x),
                              x_padded.shape[0], x.shape[0], padded_offsets.as<const int64_t>(),
                              offsets.as<const int64_t>(), n, zero_tail};
  regroup(r, x.device, stream);
}

void pad_tokens_from_splits(const TensorView& x, const TensorView& splits, int64_t align,
                            const TensorView& x_padded, const TensorView& offsets,
                            const TensorView& padded_offsets, int32_t* error_flag,
                            Stream stream) {
  const int64_t n =
      check_padding_views(x, x_padded, offsets, padded_offsets, "pad_tokens_from_splits");
  TESSERA_CHECK_STATUS(splits.ndim == 1 && splits.shape[0] == n, Status::kShapeMismatch,
                       "pad_tokens_from_splits: splits must be (", n, ") to match offsets, got ",
                       splits.to_string());
  ScanOptions options;
  options.total_bound = x.shape[0];  // every split must fit x
  options.error_flag = error_flag;
  if (splits.device.is_cpu()) {
    // Exact totals are known on the host: check them before writing anything.
    const std::vector<int64_t> host = host_padding_offsets(splits, align, options);
    const int64_t padded_total = host.back();
    TESSERA_CHECK_STATUS(padded_total <= x_padded.shape[0], Status::kBufferTooSmall,
                         "pad_tokens_from_splits: the padded groups need ", padded_total,
                         " rows but x_padded has ", x_padded.shape[0]);
    store_host_offsets(host, offsets, padded_offsets, stream);
  } else {
    const int64_t bound = padded_rows_bound(x.shape[0], n, align);
    TESSERA_CHECK_STATUS(x_padded.shape[0] >= bound, Status::kBufferTooSmall,
                         "pad_tokens_from_splits: with device splits x_padded needs "
                         "padded_rows_bound(", x.shape[0], ", ", n, ", ", align, ") = ", bound,
                         " rows, got ", x_padded.shape[0]);
    token_padding_offsets(splits, align, offsets, padded_offsets, options, stream);
  }
  pad_tokens(x, offsets, padded_offsets, x_padded, stream);
}

}  // namespace tessera
