// GrowingBuffer and the grouped GEMM with its workspace from one (step_storage.h).
#include "nn/step_storage.h"

#include "tessera/core/status.h"

namespace tessera::nn::detail {

void* GrowingBuffer::reserve(int64_t bytes, Device device) {
  TESSERA_CHECK(bytes >= 0, "GrowingBuffer: ", bytes, " bytes requested");
  if (bytes == 0) return nullptr;
  if (static_cast<int64_t>(buffer_.bytes()) < bytes || buffer_.device() != device) {
    buffer_ = Buffer();  // free first: the peak is the new size, not old + new
    buffer_ = Buffer(static_cast<size_t>(bytes), device);
  }
  return buffer_.data();
}

TensorView GrowingBuffer::zeroed_matrix(int64_t rows, int64_t cols, Device device,
                                        Stream stream) {
  const int64_t bytes = rows * cols * 4;
  void* data = reserve(bytes, device);
  fill_bytes_async(data, device, 0, static_cast<size_t>(bytes), stream);
  return TensorView::contiguous(data, DType::kFloat32, {rows, cols}, device);
}

void run_grouped_gemm(const GroupedGemmProblem& problem, GrowingBuffer& workspace,
                      Stream stream) {
  // One validation per GEMM once the workspace has grown to the shape's need (run_if_fits);
  // gemm picks its path (mixed formats: emulated on the CPU).
  const Device device = problem.a.device();
  const auto view = [&](int64_t bytes) {
    return bytes == 0 ? TensorView{}
                      : TensorView::contiguous(workspace.data(), DType::kUInt8, {bytes}, device);
  };
  const int64_t need = run_if_fits(problem, view(workspace.bytes_on(device)), stream);
  if (need == 0) return;
  workspace.reserve(need, device);
  TESSERA_CHECK(run_if_fits(problem, view(need), stream) == 0,
                "grouped GEMM: the workspace it sized was refused");
}

}  // namespace tessera::nn::detail
