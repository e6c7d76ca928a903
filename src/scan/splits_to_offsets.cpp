// splits_to_offsets(_multi): argument checks, output placement, the CPU scan, and the batching
// of CUDA launches (the kernel is in cuda/splits_to_offsets.cu).
#include "tessera/scan/splits_to_offsets.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <numeric>

#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"

namespace tessera {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

int64_t round_up_16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// The largest scan value v with stride·v representable in `dtype`.
int64_t max_scan_for(const OffsetsSpec& spec) {
  const int64_t limit = spec.dtype == DType::kInt32 ? kInt32Max : kInt64Max;
  return spec.stride == 0 ? kInt64Max : limit / spec.stride;
}

// roundup(a, align) for a >= 0, or -1 when it does not fit int64.
int64_t round_up_checked(int64_t a, int64_t align) {
  if (align == 1) return a;
  const int64_t rem = a % align;
  if (rem == 0) return a;
  int64_t r = 0;
  if (__builtin_add_overflow(a, align - rem, &r)) return -1;
  return r;
}

void check_specs(int64_t num_splits, std::span<const OffsetsSpec> specs) {
  TESSERA_CHECK(num_splits >= 0, "splits_to_offsets: num_splits ", num_splits, " is negative");
  for (size_t k = 0; k < specs.size(); ++k) {
    const OffsetsSpec& s = specs[k];
    TESSERA_CHECK(s.stride >= 0, "splits_to_offsets: output ", k, ": stride ", s.stride,
                  " is negative");
    TESSERA_CHECK(s.align >= 1, "splits_to_offsets: output ", k, ": align ", s.align,
                  " must be >= 1");
    TESSERA_CHECK_STATUS(s.dtype == DType::kInt32 || s.dtype == DType::kInt64,
                         Status::kDTypeMismatch, "splits_to_offsets: output ", k, ": dtype ",
                         dtype_name(s.dtype), " is not accepted; expected int32 or int64");
  }
}

// Index views arrive on every call of a (possibly graph-captured) layer: these checks build no
// strings unless they fail.
void check_splits(const TensorView& splits) {
  TESSERA_CHECK_STATUS(splits.dtype == DType::kInt32 || splits.dtype == DType::kInt64,
                       Status::kDTypeMismatch, "splits_to_offsets: splits dtype ",
                       dtype_name(splits.dtype), " is not accepted; expected int32 or int64");
  check_view(splits, "splits_to_offsets: splits");
  TESSERA_CHECK_STATUS(splits.ndim == 1, Status::kShapeMismatch,
                       "splits_to_offsets: splits must be 1-D, got ", splits.to_string());
}

void check_call(const TensorView& splits, std::span<const OffsetsSpec> specs,
                std::span<const TensorView> outputs) {
  check_splits(splits);
  const int64_t n = splits.shape[0];
  check_specs(n, specs);
  TESSERA_CHECK_STATUS(specs.size() == outputs.size(), Status::kShapeMismatch,
                       "splits_to_offsets: ", specs.size(), " specs but ", outputs.size(),
                       " outputs");
  for (size_t k = 0; k < outputs.size(); ++k) {
    const TensorView& o = outputs[k];
    TESSERA_CHECK_STATUS(o.dtype == specs[k].dtype, Status::kDTypeMismatch,
                         "splits_to_offsets: output ", k, " is ", dtype_name(o.dtype),
                         " but its spec says ", dtype_name(specs[k].dtype));
    const int64_t want = offsets_length(n, specs[k]);
    TESSERA_CHECK_STATUS(o.ndim == 1 && o.shape[0] == want, Status::kShapeMismatch,
                         "splits_to_offsets: output ", k, " must be 1-D of length ", want,
                         " (N = ", n, specs[k].leading_zero ? ", leading zero" : "", "), got ",
                         o.to_string());
    TESSERA_CHECK(o.is_contiguous() && (o.data != nullptr || want == 0),
                  "splits_to_offsets: output ", k, " must be contiguous and non-null, got ",
                  o.to_string());
    TESSERA_CHECK(o.device == splits.device, "splits_to_offsets: output ", k, " is on ",
                  to_string(o.device), " but splits are on ", to_string(splits.device));
  }
}

// ---- CPU ----------------------------------------------------------------------------------

// Inclusive scan of roundup(s[i], align) with every error of the contract thrown.
std::vector<int64_t> scan_cpu(const TensorView& splits, int64_t align) {
  const int64_t n = splits.shape[0];
  std::vector<int64_t> scan(static_cast<size_t>(n));
  dispatch_index_dtype(splits.dtype, "splits_to_offsets: splits", [&](auto tag) {
    using In = typename decltype(tag)::type;
    const In* s = splits.as<const In>();
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = s[i];
      TESSERA_CHECK(v >= 0, "splits_to_offsets: splits[", i, "] = ", v, " is negative");
      const int64_t padded = round_up_checked(v, align);
      TESSERA_CHECK_STATUS(padded >= 0 && !__builtin_add_overflow(total, padded, &total),
                           Status::kOutOfRange, "splits_to_offsets: the sum of splits",
                           align > 1 ? " rounded up" : "", " overflows int64 at group ", i);
      scan[static_cast<size_t>(i)] = total;
    }
  });
  return scan;
}

template <class Out>
void write_output(const std::vector<int64_t>& scan, const OffsetsSpec& spec, Out* out) {
  const int64_t lead = spec.leading_zero ? 1 : 0;
  if (lead) out[0] = 0;
  const int64_t n = static_cast<int64_t>(scan.size());
  for (int64_t i = 0; i < n; ++i) out[i + lead] = static_cast<Out>(spec.stride * scan[i]);
}

void splits_to_offsets_cpu(const TensorView& splits, std::span<const OffsetsSpec> specs,
                           std::span<const TensorView> outputs, const ScanOptions& options) {
  // One scan per distinct align (almost always just align 1).
  std::vector<std::pair<int64_t, std::vector<int64_t>>> scans;
  auto scan_for = [&](int64_t align) -> const std::vector<int64_t>& {
    for (const auto& [a, s] : scans) {
      if (a == align) return s;
    }
    scans.emplace_back(align, scan_cpu(splits, align));
    return scans.back().second;
  };
  const std::vector<int64_t>& plain = scan_for(1);
  const int64_t total = plain.empty() ? 0 : plain.back();
  TESSERA_CHECK_STATUS(options.total_bound < 0 || total <= options.total_bound,
                       Status::kOutOfRange, "splits_to_offsets: the sum of splits ", total,
                       " exceeds total_bound ", options.total_bound);
  // Check every output before writing any (the scans are monotonic: the last value is largest).
  for (size_t k = 0; k < specs.size(); ++k) {
    const std::vector<int64_t>& scan = scan_for(specs[k].align);
    const int64_t last = scan.empty() ? 0 : scan.back();
    TESSERA_CHECK_STATUS(last <= max_scan_for(specs[k]), Status::kOutOfRange,
                         "splits_to_offsets: output ", k, " (", dtype_name(specs[k].dtype),
                         ", stride ", specs[k].stride, "): offset ", specs[k].stride, " x ", last,
                         " does not fit ", dtype_name(specs[k].dtype),
                         specs[k].dtype == DType::kInt32 ? "; use an int64 output" : "");
  }
  for (size_t k = 0; k < specs.size(); ++k) {
    const std::vector<int64_t>& scan = scan_for(specs[k].align);
    if (specs[k].dtype == DType::kInt32) {
      write_output(scan, specs[k], outputs[k].as<int32_t>());
    } else {
      write_output(scan, specs[k], outputs[k].as<int64_t>());
    }
  }
}

// ---- CUDA batching -------------------------------------------------------------------------

// Host-side proof that output k fits, from total_bound; false when it cannot be proven.
bool proven_to_fit(const OffsetsSpec& spec, int64_t num_splits, int64_t total_bound) {
  if (total_bound < 0) return false;
  int64_t bound = total_bound;  // sum roundup(s, a) <= sum s + N (a - 1)
  if (spec.align > 1) {
    int64_t extra = 0;
    if (__builtin_mul_overflow(num_splits, spec.align - 1, &extra) ||
        __builtin_add_overflow(bound, extra, &bound)) {
      return false;
    }
  }
  return bound < kInt64Max && bound <= max_scan_for(spec);
}

void splits_to_offsets_cuda_batched(const TensorView& splits, std::span<const OffsetsSpec> specs,
                                    std::span<const TensorView> outputs,
                                    const ScanOptions& options, Stream stream) {
  const int64_t n = splits.shape[0];
  for (size_t k = 0; k < specs.size(); ++k) {
    if (options.error_flag != nullptr || proven_to_fit(specs[k], n, options.total_bound)) continue;
    TESSERA_CHECK_STATUS(specs[k].dtype != DType::kInt32, Status::kOutOfRange,
                         "splits_to_offsets: int32 output ", k, " (stride ", specs[k].stride,
                         ") on ", to_string(splits.device), " cannot be proven to fit: total_bound ",
                         options.total_bound, " does not bound stride x total below 2^31 and no "
                         "error_flag was given; pass a smaller total_bound, an error_flag, or use "
                         "an int64 output");
  }
  // The common case: one launch, no reordering, nothing allocated.
  int64_t distinct_align = 1;
  bool one_launch = specs.size() <= static_cast<size_t>(kScanOutputsPerLaunch);
  for (const OffsetsSpec& s : specs) {
    if (s.align == 1) continue;
    one_launch = one_launch && (distinct_align == 1 || distinct_align == s.align);
    distinct_align = s.align;
  }
  if (one_launch) {
    // With no outputs a launch still validates the splits into the error flag (and checks
    // total_bound), as the CPU path does by throwing.
    if (specs.empty() && options.error_flag == nullptr) return;
    std::array<int64_t, kScanOutputsPerLaunch> max_scan{};
    for (size_t k = 0; k < specs.size(); ++k) max_scan[k] = max_scan_for(specs[k]);
    detail::splits_to_offsets_cuda(splits, specs, outputs,
                                   std::span<const int64_t>(max_scan.data(), specs.size()),
                                   options, stream);
    return;
  }
  // Order outputs by align (stable), then pack launches: at most kScanOutputsPerLaunch outputs
  // and one distinct align > 1 per launch.
  std::vector<size_t> order(specs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return specs[a].align < specs[b].align; });
  std::vector<OffsetsSpec> batch_specs;
  std::vector<TensorView> batch_outputs;
  std::vector<int64_t> batch_max;
  int64_t batch_align = 1;
  auto flush = [&] {
    detail::splits_to_offsets_cuda(splits, batch_specs, batch_outputs, batch_max, options, stream);
    batch_specs.clear();
    batch_outputs.clear();
    batch_max.clear();
    batch_align = 1;
  };
  for (size_t k : order) {
    const int64_t align = specs[k].align;
    const bool fits_align = align == 1 || batch_align == 1 || batch_align == align;
    if (!batch_specs.empty() &&
        (batch_specs.size() == kScanOutputsPerLaunch || !fits_align)) {
      flush();
    }
    if (align > 1) batch_align = align;
    batch_specs.push_back(specs[k]);
    batch_outputs.push_back(outputs[k]);
    batch_max.push_back(max_scan_for(specs[k]));
  }
  flush();
}

}  // namespace

int64_t offsets_length(int64_t num_splits, const OffsetsSpec& spec) {
  return num_splits + (spec.leading_zero ? 1 : 0);
}

int64_t offsets_storage_bytes(int64_t num_splits, std::span<const OffsetsSpec> specs) {
  check_specs(num_splits, specs);
  int64_t bytes = 0;
  for (const OffsetsSpec& s : specs) {
    bytes += round_up_16(dtype_bytes(s.dtype, offsets_length(num_splits, s)));
  }
  return bytes;
}

std::vector<TensorView> place_offsets(void* storage, Device device, int64_t num_splits,
                                      std::span<const OffsetsSpec> specs) {
  check_specs(num_splits, specs);
  TESSERA_CHECK_STATUS(reinterpret_cast<uintptr_t>(storage) % 16 == 0, Status::kMisaligned,
                       "place_offsets: storage must be 16-byte aligned");
  TESSERA_CHECK(storage != nullptr || offsets_storage_bytes(num_splits, specs) == 0,
                "place_offsets: null storage for ", specs.size(), " outputs");
  std::vector<TensorView> views;
  views.reserve(specs.size());
  auto* base = static_cast<char*>(storage);
  int64_t offset = 0;
  for (const OffsetsSpec& s : specs) {
    const int64_t len = offsets_length(num_splits, s);
    views.push_back(TensorView::contiguous(base + offset, s.dtype, {len}, device));
    offset += round_up_16(dtype_bytes(s.dtype, len));
  }
  return views;
}

OffsetsBundle allocate_offsets(int64_t num_splits, std::span<const OffsetsSpec> specs,
                               Device device) {
  OffsetsBundle b;
  const int64_t bytes = offsets_storage_bytes(num_splits, specs);
  b.storage = Buffer(static_cast<std::size_t>(bytes), device);
  // A zero-byte Buffer has no pointer; any 16-byte aligned address serves empty views.
  alignas(16) static char empty_storage[16];
  void* base = bytes == 0 ? static_cast<void*>(empty_storage) : b.storage.data();
  b.specs.assign(specs.begin(), specs.end());
  b.outputs = place_offsets(base, device, num_splits, specs);
  for (const TensorView& v : b.outputs) {
    b.byte_offsets.push_back(static_cast<const char*>(v.data) - static_cast<const char*>(base));
  }
  return b;
}

void splits_to_offsets_multi(const TensorView& splits, std::span<const OffsetsSpec> specs,
                             std::span<const TensorView> outputs, const ScanOptions& options,
                             Stream stream) {
  check_call(splits, specs, outputs);
  if (splits.device.is_cuda()) {
    return splits_to_offsets_cuda_batched(splits, specs, outputs, options, stream);
  }
  splits_to_offsets_cpu(splits, specs, outputs, options);
}

OffsetsBundle splits_to_offsets_multi(const TensorView& splits,
                                      std::span<const OffsetsSpec> specs,
                                      const ScanOptions& options, Stream stream) {
  check_splits(splits);
  OffsetsBundle b = allocate_offsets(splits.shape[0], specs, splits.device);
  splits_to_offsets_multi(splits, specs, b.outputs, options, stream);
  return b;
}

void splits_to_offsets(const TensorView& splits, const TensorView& offsets, int64_t stride,
                       const ScanOptions& options, Stream stream) {
  check_splits(splits);
  TESSERA_CHECK_STATUS(splits.ndim == 1 && offsets.ndim == 1, Status::kShapeMismatch,
                       "splits_to_offsets: splits and offsets must be 1-D, got ",
                       splits.to_string(), " and ", offsets.to_string());
  const int64_t n = splits.shape[0];
  TESSERA_CHECK_STATUS(offsets.shape[0] == n || offsets.shape[0] == n + 1,
                       Status::kShapeMismatch, "splits_to_offsets: offsets must have N = ", n,
                       " (cumulative ends) or N+1 = ", n + 1, " (leading zero) entries, got ",
                       offsets.to_string());
  const OffsetsSpec spec{stride, offsets.shape[0] == n + 1, offsets.dtype, 1};
  splits_to_offsets_multi(splits, std::span<const OffsetsSpec>(&spec, 1),
                          std::span<const TensorView>(&offsets, 1), options, stream);
}

std::string scan_error_string(int32_t flags) {
  if (flags == 0) return "none";
  std::string s;
  auto add = [&](ScanError bit, const char* text) {
    if ((flags & static_cast<int32_t>(bit)) == 0) return;
    if (!s.empty()) s += " | ";
    s += text;
  };
  add(ScanError::kNegativeSplit, "negative split");
  add(ScanError::kOverflow, "offset overflows its output dtype");
  add(ScanError::kTotalPastBound, "sum of splits exceeds total_bound");
  const int32_t known = static_cast<int32_t>(ScanError::kNegativeSplit) |
                        static_cast<int32_t>(ScanError::kOverflow) |
                        static_cast<int32_t>(ScanError::kTotalPastBound);
  if ((flags & ~known) != 0) {
    if (!s.empty()) s += " | ";
    s += "unknown bits " + std::to_string(flags & ~known);
  }
  return s;
}

void check_scan_error_flag(int32_t flags, const char* what) {
  if (flags == 0) return;
  const bool only_negative = flags == static_cast<int32_t>(ScanError::kNegativeSplit);
  TESSERA_FAIL(only_negative ? Status::kInvalidArgument : Status::kOutOfRange, what,
               ": device error flag ", flags, " (", scan_error_string(flags), ")");
}

}  // namespace tessera
