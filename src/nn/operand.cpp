// OperandStorage / OperandProducer: dense casts and quantized operands with per-usage buffers that
// grow with the shape and are reused across steps.
#include "nn/operand.h"

#include "tessera/core/status.h"
#include "tessera/formats/convert.h"

namespace tessera::nn::detail {
namespace {

TensorView matrix_view(const Buffer& b, const MatrixShape& s, Device device) {
  return TensorView::contiguous(b.data(), s.dtype, {s.rows, s.cols}, device);
}

// Replaces `b` by a buffer of `bytes` when it holds fewer (the only allocation of a reused
// storage); true when it did.
bool grow(Buffer& b, int64_t bytes, Device device) {
  if (static_cast<int64_t>(b.bytes()) >= bytes) return false;
  b = Buffer();  // free first: the peak is the new size, not old + new
  b = Buffer(static_cast<size_t>(bytes), device);
  return true;
}

}  // namespace

OperandStorage::OperandStorage(const OperandFormat& format, Device device)
    : format_(format), device_(device) {
  if (!format_.quantized) {
    TESSERA_CHECK(is_floating_input(format_.dense_dtype), "dense operand dtype ",
                  dtype_name(format_.dense_dtype), " must be float32, bfloat16 or float16");
    return;
  }
  view_.config = format_.config;
  view_.config.rowwise = false;
  view_.config.columnwise = false;
  view_.device = device;
}

OperandStorage::OperandStorage(const OperandFormat& format, int64_t rows, int64_t cols,
                               bool rowwise, bool columnwise, Device device)
    : OperandStorage(format, device) {
  reshape(rows, cols, rowwise, columnwise, Stream{});
}

void OperandStorage::reshape(int64_t rows, int64_t cols, bool rowwise, bool columnwise,
                             Stream stream) {
  TESSERA_CHECK(rows >= 0 && cols >= 0, "operand shape (", rows, ", ", cols, ") must be >= 0");
  rows_ = rows;
  cols_ = cols;
  if (!format_.quantized) {
    grow(dense_, dtype_bytes(format_.dense_dtype, rows * cols), device_);
    return;
  }
  view_.rows = rows;
  view_.cols = cols;
  for (const bool cw : {false, true}) {
    if (cw ? columnwise : rowwise) {
      place_usage(cw, stream);
    } else {
      drop_usage_view(cw);
    }
  }
}

void OperandStorage::place_usage(bool columnwise, Stream stream) {
  const MatrixShape ds = data_shape(format_.config, rows_, cols_, columnwise);
  const MatrixShape ss = scale_shape(format_.config, rows_, cols_, columnwise);
  UsageBuffers& u = columnwise ? columnwise_ : rowwise_;
  grow(u.data, ds.bytes(), device_);
  const bool new_scales = grow(u.scale_inv, ss.bytes(), device_);
  if (new_scales || u.zeroed_rows != rows_ || u.zeroed_cols != cols_) {
    // Padding entries of GEMM-ready scale layouts read as 0, also after a larger shape.
    fill_bytes_async(u.scale_inv.data(), device_, 0, static_cast<size_t>(ss.bytes()), stream);
    u.zeroed_rows = rows_;
    u.zeroed_cols = cols_;
  }
  TensorView amax_view;
  if (has_amax(format_.config.mode)) {
    if (grow(u.amax, sizeof(float), device_)) {
      fill_bytes_async(u.amax.data(), device_, 0, sizeof(float), stream);
    }
    amax_view = TensorView::contiguous(u.amax.data(), DType::kFloat32, {1}, device_);
  }
  if (columnwise) {
    view_.columnwise_data = matrix_view(u.data, ds, device_);
    view_.columnwise_scale_inv = matrix_view(u.scale_inv, ss, device_);
    view_.columnwise_amax = amax_view;
    view_.config.columnwise = true;
  } else {
    view_.data = matrix_view(u.data, ds, device_);
    view_.scale_inv = matrix_view(u.scale_inv, ss, device_);
    view_.amax = amax_view;
    view_.config.rowwise = true;
  }
}

void OperandStorage::drop_usage_view(bool columnwise) {
  if (columnwise) {
    view_.columnwise_data = TensorView{};
    view_.columnwise_scale_inv = TensorView{};
    view_.columnwise_amax = TensorView{};
    view_.config.columnwise = false;
  } else {
    view_.data = TensorView{};
    view_.scale_inv = TensorView{};
    view_.amax = TensorView{};
    view_.config.rowwise = false;
  }
}

void OperandStorage::ensure_usage(bool rowwise, bool columnwise, Stream stream) {
  if (!format_.quantized) return;
  TESSERA_CHECK(!empty(), "operand storage: ensure_usage before any reshape");
  if (rowwise && !view_.has_rowwise()) place_usage(false, stream);
  if (columnwise && !view_.has_columnwise()) place_usage(true, stream);
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
  if (empty()) return 0;
  if (!format_.quantized) return dtype_bytes(format_.dense_dtype, rows_ * cols_);
  int64_t bytes = 0;
  for (const bool cw : {false, true}) {
    if (!(cw ? view_.has_columnwise() : view_.has_rowwise())) continue;
    bytes += data_shape(format_.config, rows_, cols_, cw).bytes() +
             scale_shape(format_.config, rows_, cols_, cw).bytes();
    if (has_amax(format_.config.mode)) bytes += static_cast<int64_t>(sizeof(float));
  }
  return bytes;
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
    copy_bytes_async(out.data, out.device, dense_.data(), device_,
                     static_cast<size_t>(rows_ * cols_ * 4), stream);
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
      copy_bytes_async(dst.data, dst.device, x.data, x.device, static_cast<size_t>(x.nbytes()),
                       stream);
    } else if (x.dtype == DType::kFloat32) {
      encode(x, dst, stream);
    } else {
      TESSERA_FAIL(Status::kUnsupported, "operand: casting ", dtype_name(x.dtype), " to ",
                   dtype_name(dst.dtype), " is not supported (give float32 inputs)");
    }
    return;
  }
  quantize_into(x, out.quantized_view(), stream);
}

void OperandProducer::produce_split(const TensorView& x, OperandStorage& rowwise_out,
                                    OperandStorage& columnwise_out, Stream stream) {
  TESSERA_CHECK_STATUS(format_.quantized, Status::kInternal,
                       "produce_split of a dense operand (its one copy serves both usages)");
  for (const OperandStorage* out : {&rowwise_out, &columnwise_out}) {
    TESSERA_CHECK_STATUS(x.ndim == 2 && x.shape[0] == out->rows() && x.shape[1] == out->cols(),
                         Status::kShapeMismatch, "operand: input ", x.to_string(),
                         " does not match its storage (", out->rows(), ", ", out->cols(), ")");
  }
  if (x.numel() == 0) return;
  QuantizedTensorView q = rowwise_out.quantized_view();  // its rowwise copy (if held)
  const QuantizedTensorView& c = columnwise_out.quantized_view();
  q.columnwise_data = c.columnwise_data;
  q.columnwise_scale_inv = c.columnwise_scale_inv;
  q.columnwise_amax = c.columnwise_amax;
  q.config.columnwise = c.has_columnwise();
  quantize_into(x, q, stream);
}

void OperandProducer::quantize_into(const TensorView& x, QuantizedTensorView& q, Stream stream) {
  quantizer_->set_usage(q.has_rowwise(), q.has_columnwise());
  quantizer_->quantize(x, q, stream);
  if (quantizer_->config().delayed) quantizer_->update(stream);
}

}  // namespace tessera::nn::detail
