// OperandStorage / OperandProducer: dense casts and quantized operands with per-usage buffers.
#include "nn/operand.h"

#include "tessera/core/status.h"
#include "tessera/formats/convert.h"

namespace tessera::nn::detail {
namespace {

TensorView matrix_view(const Buffer& b, const MatrixShape& s, Device device) {
  return TensorView::contiguous(b.data(), s.dtype, {s.rows, s.cols}, device);
}

}  // namespace

OperandStorage::OperandStorage(const OperandFormat& format, int64_t rows, int64_t cols,
                               bool rowwise, bool columnwise, Device device)
    : format_(format), rows_(rows), cols_(cols), device_(device) {
  TESSERA_CHECK(rows >= 0 && cols >= 0, "operand shape (", rows, ", ", cols, ") must be >= 0");
  if (!format_.quantized) {
    TESSERA_CHECK(is_floating_input(format_.dense_dtype), "dense operand dtype ",
                  dtype_name(format_.dense_dtype), " must be float32, bfloat16 or float16");
    dense_ = Buffer(static_cast<size_t>(dtype_bytes(format_.dense_dtype, rows * cols)), device);
    return;
  }
  view_.config = format_.config;
  view_.config.rowwise = false;
  view_.config.columnwise = false;
  view_.rows = rows;
  view_.cols = cols;
  view_.device = device;
  ensure_usage(rowwise, columnwise);
}

void OperandStorage::allocate_usage(bool columnwise) {
  const MatrixShape ds = data_shape(format_.config, rows_, cols_, columnwise);
  const MatrixShape ss = scale_shape(format_.config, rows_, cols_, columnwise);
  Buffer& data = columnwise ? col_data_ : data_;
  Buffer& scale = columnwise ? col_scale_inv_ : scale_inv_;
  Buffer& amax = columnwise ? col_amax_ : amax_;
  data = Buffer(static_cast<size_t>(ds.bytes()), device_);
  scale = Buffer(static_cast<size_t>(ss.bytes()), device_);
  scale.fill_bytes(0);  // padding entries of GEMM-ready scale layouts read as 0
  TensorView amax_view;
  if (has_amax(format_.config.mode)) {
    amax = Buffer(sizeof(float), device_);
    amax.fill_bytes(0);
    amax_view = TensorView::contiguous(amax.data(), DType::kFloat32, {1}, device_);
  }
  if (columnwise) {
    view_.columnwise_data = matrix_view(data, ds, device_);
    view_.columnwise_scale_inv = matrix_view(scale, ss, device_);
    view_.columnwise_amax = amax_view;
    view_.config.columnwise = true;
  } else {
    view_.data = matrix_view(data, ds, device_);
    view_.scale_inv = matrix_view(scale, ss, device_);
    view_.amax = amax_view;
    view_.config.rowwise = true;
  }
}

void OperandStorage::ensure_usage(bool rowwise, bool columnwise) {
  if (!format_.quantized) return;
  if (rowwise && !view_.has_rowwise()) allocate_usage(false);
  if (columnwise && !view_.has_columnwise()) allocate_usage(true);
}

void OperandStorage::release_rowwise() {
  if (!format_.quantized || !view_.has_rowwise()) return;
  data_ = Buffer();
  scale_inv_ = Buffer();
  amax_ = Buffer();
  view_.data = TensorView{};
  view_.scale_inv = TensorView{};
  view_.amax = TensorView{};
  view_.config.rowwise = false;
}

GemmOperand OperandStorage::gemm_operand(bool columnwise, int64_t group_rows) const {
  TESSERA_CHECK(!empty(), "operand storage is empty (no forward saved it)");
  if (format_.quantized) {
    TESSERA_CHECK_STATUS(columnwise ? view_.has_columnwise() : view_.has_rowwise(),
                         Status::kInternal, "the ", columnwise ? "columnwise" : "rowwise",
                         " copy of a quantized operand was not produced");
    return GemmOperand::from_quantized(view_, columnwise);
  }
  if (group_rows > 0) {
    const int64_t groups = rows_ / group_rows;
    return GemmOperand::from_dense(TensorView::contiguous(
        dense_.data(), format_.dense_dtype, {groups, group_rows, cols_}, device_));
  }
  return GemmOperand::from_dense(dense());
}

TensorView OperandStorage::dense() const {
  TESSERA_CHECK_STATUS(!format_.quantized, Status::kInternal, "dense() of a quantized operand");
  return TensorView::contiguous(dense_.data(), format_.dense_dtype, {rows_, cols_}, device_);
}

int64_t OperandStorage::bytes() const {
  return static_cast<int64_t>(dense_.bytes() + data_.bytes() + scale_inv_.bytes() +
                              amax_.bytes() + col_data_.bytes() + col_scale_inv_.bytes() +
                              col_amax_.bytes());
}

void OperandStorage::to_float(const TensorView& out, bool columnwise, Stream stream) const {
  check_view(out, "operand to_float: out", {DType::kFloat32});
  TESSERA_CHECK_STATUS(out.numel() == rows_ * cols_, Status::kShapeMismatch,
                       "operand to_float: out ", out.to_string(), " must hold (", rows_, ", ",
                       cols_, ")");
  if (rows_ * cols_ == 0) return;
  if (format_.quantized) {
    TESSERA_CHECK(columnwise ? view_.has_columnwise() : view_.has_rowwise(),
                  "operand to_float: the requested usage is not held");
    dequantize(view_, out, columnwise, stream);
  } else if (format_.dense_dtype == DType::kFloat32) {
    copy_bytes(out.data, out.device, dense_.data(), device_, dense_.bytes());
  } else {
    decode(dense(), TensorView::contiguous(out.data, DType::kFloat32, {rows_, cols_}, out.device),
           stream);
  }
}

OperandProducer::OperandProducer(const OperandFormat& format, Quantizer* quantizer,
                                 std::shared_ptr<const void> owner)
    : format_(format), quantizer_(quantizer), owner_(std::move(owner)) {
  TESSERA_CHECK(!format_.quantized || quantizer_ != nullptr,
                "a quantized operand format needs a quantizer");
}

void OperandProducer::produce(const TensorView& x, OperandStorage& out, Stream stream) {
  TESSERA_CHECK_STATUS(x.ndim == 2 && x.shape[0] == out.rows() && x.shape[1] == out.cols(),
                       Status::kShapeMismatch, "operand: input ", x.to_string(),
                       " does not match its storage (", out.rows(), ", ", out.cols(), ")");
  if (x.numel() == 0) return;
  if (!format_.quantized) {
    const TensorView dst = out.dense();
    if (x.dtype == dst.dtype) {
      copy_bytes(dst.data, dst.device, x.data, x.device, static_cast<size_t>(x.nbytes()));
    } else if (x.dtype == DType::kFloat32) {
      encode(x, dst, stream);
    } else {
      TESSERA_FAIL(Status::kUnsupported, "operand: casting ", dtype_name(x.dtype), " to ",
                   dtype_name(dst.dtype), " is not supported (give float32 inputs)");
    }
    return;
  }
  QuantizedTensorView& q = out.quantized_view();
  quantizer_->set_usage(q.has_rowwise(), q.has_columnwise());
  quantizer_->quantize(x, q, stream);
  if (quantizer_->config().delayed) quantizer_->update(stream);
}

}  // namespace tessera::nn::detail
