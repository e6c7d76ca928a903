// GroupedLinearContext: saved-bytes accounting and the dequantized values of saved operands.
#include "nn/linear_state.h"
#include "tessera/core/status.h"
#include "tessera/nn/grouped_linear.h"

namespace tessera::nn {

int64_t GroupedLinearContext::saved_bytes() const {
  if (!saved_) return 0;
  const detail::LinearSaved& s = *saved_;
  int64_t bytes = s.input.bytes();
  // The weight usage dgrad reads: the columnwise copy (a dense weight serves both).
  const detail::OperandStorage& w = *s.weight;
  if (w.quantized()) {
    const QuantizedTensorView& q = w.quantized_view();
    bytes += q.columnwise_data.nbytes() + q.columnwise_scale_inv.nbytes() +
             q.columnwise_amax.nbytes();
  } else {
    bytes += w.bytes();
  }
  return bytes;
}

const GroupLayout& GroupedLinearContext::layout() const {
  TESSERA_CHECK(saved_ != nullptr, "GroupedLinearContext: empty context");
  return saved_->layout;
}

std::vector<float> GroupedLinearContext::operand_value(SavedOperand which, bool columnwise) const {
  TESSERA_CHECK(saved_ != nullptr, "GroupedLinearContext: empty context");
  const detail::LinearSaved& s = *saved_;
  const detail::OperandStorage* op = nullptr;
  switch (which) {
    case SavedOperand::kInput: op = &s.input; break;
    case SavedOperand::kWeight: op = s.weight.get(); break;
    case SavedOperand::kGradOutput: op = &s.grad_output; break;
    default: TESSERA_FAIL(Status::kInvalidArgument, "operand_value: unknown operand");
  }
  TESSERA_CHECK(!op->empty(), "operand_value: that operand was not produced (grad_output exists "
                "after a backward)");
  std::vector<float> host(static_cast<size_t>(op->rows() * op->cols()));
  Buffer dev(host.size() * sizeof(float), op->device());
  op->to_float(TensorView::contiguous(dev.data(), DType::kFloat32, {op->rows(), op->cols()},
                                      op->device()),
               columnwise);
  copy_bytes(host.data(), Device::cpu(), dev.data(), op->device(), dev.bytes());
  return host;
}

}  // namespace tessera::nn
