// Memory plumbing of the training step: carving, quantized copies in caller memory, role
// quantizers, GEMM workspaces (the caller's Allocator; a kept block per thread on the CPU).
#include "nn/step_memory.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <utility>

#include "nn/member_scaling.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"

namespace tessera::nn {

namespace {
std::atomic<uint64_t> g_rng_offset{0};
}  // namespace

uint64_t next_rng_offset() { return g_rng_offset.fetch_add(1, std::memory_order_relaxed); }
uint64_t current_rng_offset() { return g_rng_offset.load(std::memory_order_relaxed); }
void reset_rng_offset(uint64_t value) { g_rng_offset.store(value, std::memory_order_relaxed); }

namespace detail {

uint64_t take_rng_offsets(uint64_t n) { return g_rng_offset.fetch_add(n, std::memory_order_relaxed); }

void* Carver::take(int64_t bytes) {
  TESSERA_CHECK(bytes >= 0, "Carver: bytes ", bytes, " must be >= 0");
  const int64_t at = checked_round_up(used_, 256, "step memory offset");
  used_ = checked_add(at, bytes, "step memory bytes");
  if (base_ == nullptr) return nullptr;
  TESSERA_CHECK_STATUS(capacity_ < 0 || used_ <= capacity_, Status::kBufferTooSmall,
                       "step memory: ", used_, " bytes needed, the allocation holds ", capacity_);
  return bytes == 0 ? nullptr : static_cast<char*>(base_) + at;
}

bool Carver::fits(int64_t bytes) const {
  if (base_ == nullptr || capacity_ < 0) return true;
  return (used_ + 255) / 256 * 256 + bytes <= capacity_;
}

TensorView matrix(void* data, DType dtype, int64_t rows, int64_t cols, Device device) {
  return TensorView::contiguous(data, dtype, {rows, cols}, device);
}

QuantizedTensorView carve_quantized(const QuantizerConfig& config, int64_t rows, int64_t cols,
                                    bool rowwise, bool columnwise, Carver& carver,
                                    Device device, int64_t groups) {
  QuantizedTensorView q;
  q.config = config;
  q.config.rowwise = rowwise;
  q.config.columnwise = columnwise;
  q.rows = rows;
  q.cols = cols;
  q.device = device;
  const bool amax = has_amax(config.mode);
  for (const bool cw : {false, true}) {
    if (!(cw ? columnwise : rowwise)) continue;
    const MatrixShape ds = data_shape(config, rows, cols, cw);
    const MatrixShape ss = scale_shape(config, rows, cols, cw);
    const int64_t members = member_scaled(config, cw) ? groups : 1;
    const int64_t amaxes = member_scaled(config, cw) || member_global_amax(config) ? groups : 1;
    // An E2M1 view is (rows, roundup(cols, 2)) codes over ceil(cols/2) bytes per row.
    const int64_t view_cols = ds.dtype == DType::kFloat4E2M1 ? (ds.cols + 1) / 2 * 2 : ds.cols;
    TensorView data = matrix(carver.take(ds.bytes()), ds.dtype, ds.rows, view_cols, device);
    TensorView scale = matrix(carver.take(members * ss.bytes()), ss.dtype, members * ss.rows,
                              ss.cols, device);
    TensorView amax_view;
    if (amax) {
      amax_view = TensorView::contiguous(carver.take(4 * amaxes), DType::kFloat32, {amaxes},
                                         device);
    }
    (cw ? q.columnwise_data : q.data) = data;
    (cw ? q.columnwise_scale_inv : q.scale_inv) = scale;
    (cw ? q.columnwise_amax : q.amax) = amax_view;
  }
  return q;
}

// `bytes` from `alloc`, the start rounded up to 256 bytes (allocators may align less: torch's CPU
// allocator aligns 64).
std::pair<Allocation, void*> aligned(Allocator& alloc, int64_t bytes, Device device,
                                     Stream stream) {
  if (bytes == 0) return {Allocation{}, nullptr};
  Allocation a = alloc.allocate(bytes + 256, device, stream);
  TESSERA_CHECK_STATUS(a.bytes >= bytes + 256, Status::kBufferTooSmall, "allocator: asked for ",
                       bytes + 256, " bytes, got ", a.bytes);
  const auto at = reinterpret_cast<uintptr_t>(a.data);
  return {a, reinterpret_cast<void*>((at + 255) / 256 * 256)};
}

Scratch scratch(Allocator& alloc, int64_t bytes, Device device, Stream stream) {
  Scratch s;
  auto [memory, base] = aligned(alloc, bytes, device, stream);
  s.memory = std::move(memory);
  s.carver = Carver(base, bytes);
  return s;
}

void StepArena::materialize() {
  if (made_) return;
  made_ = true;
  Scratch s = scratch(parent_, reserve_, device_, stream_);
  block_ = std::move(s.memory);
  carver_ = s.carver;
}

void* StepArena::take(int64_t bytes) {
  if (bytes == 0) return nullptr;
  return carver().take(bytes);
}

Carver& StepArena::carver() {
  materialize();
  return carver_;
}

Allocation StepArena::allocate(int64_t bytes, Device device, Stream stream) {
  TESSERA_CHECK(bytes >= 0, "allocate: bytes ", bytes, " must be >= 0");
  Allocation a;
  a.device = device;
  if (bytes == 0) return a;
  if (device != device_ || stream.handle != stream_.handle)
    return parent_.allocate(bytes, device, stream);
  materialize();
  if (block_.data == nullptr || !carver_.fits(bytes))
    return parent_.allocate(bytes, device, stream);
  a.data = carver_.take(bytes);
  a.bytes = bytes;
  a.owner = block_.owner;  // the piece keeps the block alive
  return a;
}

int64_t call_allowance(int64_t groups, int64_t rows, int64_t cols) {
  const int64_t gemms = 3 * (groups * (2 * 128 + 4) + (groups + 1) * 8 + 8 * 256);
  const int64_t members = 4 * groups * cols + 4 * rows + 2 * 256;
  return checked_add(gemms, members, "step scratch bytes");
}

Quantizer role_quantizer(const RoleFormat& format, bool rowwise, bool columnwise, Device device) {
  QuantizerConfig c = format.config;
  c.rowwise = rowwise;
  c.columnwise = columnwise;
  if (c.stochastic_rounding) c.rng_offset = next_rng_offset();
  return Quantizer(c, device);
}

namespace {

// The CPU GEMM's workspace (the FP32 images of quantized and 16-bit operands: tens of MB for a
// step's weight) kept per thread between calls. The CPU GEMM has finished when run_gemm returns,
// so one block per thread serves every call on it. Fresh blocks of that size come from mmap: a
// page fault on the first touch of every 4 KiB page and an munmap per call, which made up much
// of an eager FP8 step on CPU tensors (bench/results/2026-11-29-cpu-step-workspace.md). A block
// larger than kKeepBytes is not kept (made and freed per call, as before).
constexpr int64_t kKeepBytes = int64_t{256} << 20;

struct CpuWorkspace {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> block;
  int64_t bytes = 0;
};

void* cpu_workspace(int64_t need, std::unique_ptr<void, CpuWorkspace::Free>& one_off) {
  thread_local CpuWorkspace kept;
  const auto make = [](int64_t bytes) {
    const size_t size = static_cast<size_t>(checked_round_up(bytes, 256, "CPU GEMM workspace"));
    void* p = std::aligned_alloc(256, size);  // the workspace alignment GEMMs ask for
    TESSERA_CHECK_STATUS(p != nullptr, Status::kOutOfMemory, "CPU GEMM workspace: ", bytes,
                         " bytes could not be allocated");
    return p;
  };
  if (need > kKeepBytes) {
    one_off.reset(make(need));
    return one_off.get();
  }
  if (kept.bytes < need) {
    kept.block.reset();  // the old block first: never both at once
    kept.bytes = 0;
    kept.block.reset(make(need));
    kept.bytes = need;
  }
  return kept.block.get();
}

}  // namespace

void run_gemm(const GroupedGemmProblem& problem, Allocator& alloc, Stream stream) {
  const Device dev = problem.d.device;
  if (!dev.is_cuda()) {  // CPU: the GEMM runs to completion inside run_with_workspace
    std::unique_ptr<void, CpuWorkspace::Free> one_off;
    run_with_workspace(problem, [&](int64_t need) {
      return TensorView::contiguous(need > 0 ? cpu_workspace(need, one_off) : nullptr,
                                    DType::kUInt8, {need}, dev);
    }, stream);
    return;
  }
  Allocation ws;  // lives until the GEMM is enqueued (stream-ordered reuse after that)
  run_with_workspace(problem, [&](int64_t need) {
    auto [memory, base] = aligned(alloc, need, dev, stream);
    ws = std::move(memory);
    return TensorView::contiguous(base, DType::kUInt8, {need}, dev);
  }, stream);
}

}  // namespace detail
}  // namespace tessera::nn
