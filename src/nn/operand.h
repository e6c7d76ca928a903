// How the nn layers turn a high-precision activation or weight into a grouped-GEMM operand for one
// quantizer role, and the storage they keep of it: a dense cast (FP32 / BF16 recipes) or a
// quantized tensor whose usages (rowwise / columnwise) live in separate buffers, so that a context
// can release the copy backward does not read (docs/numerics.md usages, docs/nn.md saved operands).
#pragma once

#include <cstdint>
#include <memory>

#include "tessera/core/buffer.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/quantize/quantizer.h"
#include "tessera/quantize/types.h"

namespace tessera::nn::detail {

// The form a role's tensor takes as a GEMM operand. quantized == false: a dense copy in
// dense_dtype (float32 / bfloat16 / float16); quantized == true: the bits `config` produces.
struct OperandFormat {
  bool quantized = false;
  DType dense_dtype = DType::kFloat32;
  QuantizerConfig config{};
};

// Owned storage of one (rows, cols) operand.
// Invariants: dense form: dense_ holds rows*cols elements of format.dense_dtype and serves both
// usages (the GEMM reads the same matrix for either). Quantized form: view_ fields of a usage are
// non-null iff that usage's buffers are held; their shapes are data_shape / scale_shape of
// (config, rows, cols).
class OperandStorage {
 public:
  OperandStorage() = default;
  OperandStorage(const OperandFormat& format, int64_t rows, int64_t cols, bool rowwise,
                 bool columnwise, Device device);

  // Adds the buffers of a usage not held yet (never drops one).
  void ensure_usage(bool rowwise, bool columnwise);
  // Frees the rowwise copy of a quantized operand (a dense one keeps its single copy).
  void release_rowwise();

  bool empty() const { return rows_ < 0; }
  bool quantized() const { return format_.quantized; }
  bool has_rowwise() const { return quantized() ? view_.has_rowwise() : !dense_.empty(); }
  bool has_columnwise() const { return quantized() ? view_.has_columnwise() : !dense_.empty(); }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  const OperandFormat& format() const { return format_; }
  Device device() const { return device_; }

  // The GEMM operand reading one usage; 3-D positions (weights) pass group_rows > 0 to describe a
  // dense (G, group_rows, cols) view (quantized weights are (G*group_rows, cols) by contract).
  GemmOperand gemm_operand(bool columnwise, int64_t group_rows = 0) const;
  TensorView dense() const;                    // dense form: (rows, cols)
  QuantizedTensorView& quantized_view() { return view_; }
  const QuantizedTensorView& quantized_view() const { return view_; }
  // Bytes of the buffers held now (data, scales, amax).
  int64_t bytes() const;
  // The operand's value as float32 (rows, cols) in `out` (host or device): a dense copy decoded,
  // a quantized usage dequantized. Used by tests and by save_original_input.
  void to_float(const TensorView& out, bool columnwise, Stream stream = {}) const;

 private:
  void allocate_usage(bool columnwise);

  OperandFormat format_{};
  int64_t rows_ = -1, cols_ = 0;
  Device device_{};
  Buffer dense_;
  QuantizedTensorView view_{};
  Buffer data_, scale_inv_, amax_;          // rowwise
  Buffer col_data_, col_scale_inv_, col_amax_;  // columnwise
};

// Produces operands of one role: owns the role's Quantizer (delayed-scaling state included).
class OperandProducer {
 public:
  OperandProducer() = default;
  // quantizer: owned by `owner` (a RecipeState), which the producer keeps alive; both null for
  // a dense format.
  OperandProducer(const OperandFormat& format, Quantizer* quantizer,
                  std::shared_ptr<const void> owner);

  const OperandFormat& format() const { return format_; }
  // x: (rows, cols) float32/bfloat16/float16 contiguous. Writes every usage `out` holds (it must
  // have been made with this format for x's shape). Delayed scaling: after the quantize, the
  // amax history is rolled (update()), so the next call uses this call's amax.
  void produce(const TensorView& x, OperandStorage& out, Stream stream = {});
  OperandStorage make(int64_t rows, int64_t cols, bool rowwise, bool columnwise,
                      Device device) const {
    return OperandStorage(format_, rows, cols, rowwise, columnwise, device);
  }
  Quantizer* quantizer() const { return quantizer_; }

 private:
  OperandFormat format_{};
  Quantizer* quantizer_ = nullptr;      // null for dense formats
  std::shared_ptr<const void> owner_;   // keeps the quantizer's RecipeState alive
};

}  // namespace tessera::nn::detail
