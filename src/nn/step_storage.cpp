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
  const int64_t need = workspace_size(problem);
  const Device device = problem.a.device();
  void* data = workspace.reserve(need, device);
  const TensorView ws =
      need == 0 ? TensorView{} : TensorView::contiguous(data, DType::kUInt8, {need}, device);
  run(problem, ws, stream);  // gemm picks its path (mixed formats: emulated on the CPU)
}

}  // namespace tessera::nn::detail
