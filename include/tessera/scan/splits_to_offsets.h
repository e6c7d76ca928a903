// Offsets from split sizes (docs/architecture.md): one inclusive scan of per-group sizes, many
// outputs.
//
// For splits s[0..N) (int32 or int64, every s[i] >= 0) and scan[i] = s[0] + ... + s[i]:
//   output k = stride_k × scan, of length N (leading_zero = false: cumulative end offsets,
//   torch's `offs` convention) or N+1 (leading_zero = true: out[0] = 0, out[i+1] = stride·scan[i],
//   the start offsets GroupedTensor keeps), element type int32 or int64, stride_k >= 0.
//   With align_k > 1 the scan is taken over roundup(s[i], align_k) instead (padded groups, §8).
//
// Errors. On the CPU every violation throws before the call returns: a negative split
// (kInvalidArgument, naming its index), a value that does not fit an output's dtype
// (kOutOfRange, naming the output), a total past options.total_bound (kOutOfRange).
// On CUDA nothing waits for the device (no device→host copy, graph-capturable), so:
//   * before launching, the host proves every int32 output fits from options.total_bound
//     (stride × bound, or stride × padded bound, <= INT32_MAX). When it cannot and no
//     options.error_flag is given, the call throws kOutOfRange naming the output: an int32
//     output on CUDA must be proven or checked;
//   * when options.error_flag (a device int32) is given, the kernel ORs ScanError bits into it:
//     negative split (that split is then scanned as 0), a value past an output's dtype, a total
//     past total_bound. The flag is never cleared by tessera: zero it before the first call and
//     read it whenever the host next synchronizes (check_scan_error_flag turns it into an Error).
//     Outputs written by a call that raised a bit hold unspecified values (never out of bounds);
//   * without an error flag, negative splits and int64 overflow (a total past 2^63 - 1) go
//     unreported on CUDA and the outputs are unspecified.
// The scan saturates at 2^63 - 1 on the device, so a total of exactly 2^63 - 1 is reported
// as overflow there.
//
// Placement. All views are 1-D, contiguous and on the device of `splits`. allocate_offsets puts
// every output of one call in one Buffer, each starting at a 16-byte aligned offset;
// place_offsets does the same inside memory the caller owns (e.g. a workspace in a graph).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"

namespace tessera {

// What one output holds.
struct OffsetsSpec {
  int64_t stride = 1;           // >= 0; 0 gives all zeros
  bool leading_zero = false;    // N+1 entries starting with 0, else N entries
  DType dtype = DType::kInt64;  // kInt32 or kInt64
  int64_t align = 1;            // >= 1; > 1 scans roundup(s[i], align) (padded group sizes)
};

// Bits of the device error flag (ORed together; the flag is an int32).
enum class ScanError : int32_t {
  kNone = 0,
  kNegativeSplit = 1,      // some s[i] < 0
  kOverflow = 2,           // a value past its output's dtype, or a total past 2^63 - 1
  kTotalPastBound = 4,     // sum(s) > options.total_bound
};

struct ScanOptions {
  // Host-known upper bound on sum(s) (e.g. the token capacity), or -1 when unknown. Proves
  // int32 outputs fit on CUDA; the call also checks the real total against it (CPU: throws,
  // CUDA: kTotalPastBound in error_flag).
  int64_t total_bound = -1;
  // CUDA only: a device int32 that receives ScanError bits (see the file comment). Ignored on
  // the CPU, where errors throw.
  int32_t* error_flag = nullptr;
};

// Number of entries of an output for `num_splits` groups: N or N+1.
int64_t offsets_length(int64_t num_splits, const OffsetsSpec& spec);

// Bytes needed to hold every output of `specs`, each starting 16-byte aligned.
int64_t offsets_storage_bytes(int64_t num_splits, std::span<const OffsetsSpec> specs);

// Views of every output laid out in `storage` (16-byte aligned, offsets_storage_bytes long).
std::vector<TensorView> place_offsets(void* storage, Device device, int64_t num_splits,
                                      std::span<const OffsetsSpec> specs);

// All outputs of one call in one allocation. Invariant: outputs[k] describes specs[k] and lies
// inside storage at byte offset byte_offsets[k], a multiple of 16.
struct OffsetsBundle {
  Buffer storage;
  std::vector<OffsetsSpec> specs;
  std::vector<TensorView> outputs;
  std::vector<int64_t> byte_offsets;
};

// Allocates (uninitialized) storage for the outputs of `specs` on `device`. Not inside a graph
// capture (it allocates); allocate once and pass `bundle.outputs` to the call below.
OffsetsBundle allocate_offsets(int64_t num_splits, std::span<const OffsetsSpec> specs,
                               Device device);

// outputs[k] <- stride_k × scan (see the file comment). splits: (N) int32/int64; outputs[k]:
// (offsets_length(N, specs[k])) of dtype specs[k].dtype, same device. On CUDA: one launch per up
// to kScanOutputsPerLaunch outputs (two scans in one launch: plain and one align > 1), async on
// `stream`.
void splits_to_offsets_multi(const TensorView& splits, std::span<const OffsetsSpec> specs,
                             std::span<const TensorView> outputs, const ScanOptions& options = {},
                             Stream stream = {});

// Allocating form: returns a bundle on the device of `splits` holding every output.
OffsetsBundle splits_to_offsets_multi(const TensorView& splits,
                                      std::span<const OffsetsSpec> specs,
                                      const ScanOptions& options = {}, Stream stream = {});

// The single-output form: offsets (N) → cumulative ends, (N+1) → leading 0 then the ends;
// int32 or int64; times `stride`.
void splits_to_offsets(const TensorView& splits, const TensorView& offsets, int64_t stride = 1,
                       const ScanOptions& options = {}, Stream stream = {});

// Text for the bits of an error flag ("negative split | overflow"), "none" for 0.
std::string scan_error_string(int32_t flags);
// Throws Error{kOutOfRange or kInvalidArgument} describing `flags` (a host copy of an error
// flag) when it is nonzero; `what` names the call site in the message.
void check_scan_error_flag(int32_t flags, const char* what);

inline constexpr int kScanOutputsPerLaunch = 16;

namespace detail {
// CUDA launch of one batch (<= kScanOutputsPerLaunch outputs, at most one distinct align > 1),
// arguments already checked. max_scan[k] is the largest scan value (plain or padded, as
// specs[k] says) whose product with specs[k].stride fits specs[k].dtype.
void splits_to_offsets_cuda(const TensorView& splits, std::span<const OffsetsSpec> specs,
                            std::span<const TensorView> outputs, std::span<const int64_t> max_scan,
                            const ScanOptions& options, Stream stream);
}  // namespace detail

}  // namespace tessera
