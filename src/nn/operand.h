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

// Owned storage of one (rows, cols) operand, reused across steps: reshape() re-describes it for a
// new shape and grows a buffer only when that shape needs more bytes than it holds.
// Invariants: dense form: dense_ holds at least rows*cols elements of format.dense_dtype and
// serves both usages (the GEMM reads the same matrix for either). Quantized form: view_ fields of
// a usage are non-null iff that usage is held; their shapes are data_shape / scale_shape of
// (config, rows, cols) and they point into that usage's buffers, which may be larger (capacity
// of an earlier, larger shape). Scale entries past the live scales read as 0.
class OperandStorage {
 public:
  OperandStorage() = default;
  // No shape and no buffers yet: reshape() gives both.
  OperandStorage(const OperandFormat& format, Device device);
  // reshape(rows, cols, rowwise, columnwise) on the legacy default stream.
  OperandStorage(const OperandFormat& format, int64_t rows, int64_t cols, bool rowwise,
                 bool columnwise, Device device);

  // Describes the storage as (rows, cols) holding exactly the usages asked for (a dense form
  // holds its one copy). A usage not asked for keeps its buffers as capacity but is not held.
  // Scale buffers are zeroed on `stream` when they are (re)allocated or the shape changed.
  void reshape(int64_t rows, int64_t cols, bool rowwise, bool columnwise, Stream stream);
  // Adds a usage not held yet at the current shape (never drops one).
  void ensure_usage(bool rowwise, bool columnwise, Stream stream = {});

  bool empty() const { return rows_ < 0; }
  bool quantized() const { return format_.quantized; }
  bool has_rowwise() const { return quantized() ? view_.has_rowwise() : !empty(); }
  bool has_columnwise() const { return quantized() ? view_.has_columnwise() : !empty(); }
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
  // Bytes of the usages held at the current shape (data, scales, amax); the buffers may hold
  // more (capacity kept from a larger shape).
  int64_t bytes() const;
  // The operand's value as float32 (rows, cols) in `out` (host or device): a dense copy decoded,
  // a quantized usage dequantized. Used by tests and by save_original_input.
  void to_float(const TensorView& out, bool columnwise, Stream stream = {}) const;

 private:
  // Data, scales and amax of one usage, and the shape its scales were last zeroed for.
  struct UsageBuffers {
    Buffer data, scale_inv, amax;
    int64_t zeroed_rows = -1, zeroed_cols = -1;
  };
  void place_usage(bool columnwise, Stream stream);
  void drop_usage_view(bool columnwise);

  OperandFormat format_{};
  int64_t rows_ = -1, cols_ = 0;
  Device device_{};
  Buffer dense_;
  QuantizedTensorView view_{};
  UsageBuffers rowwise_, columnwise_;
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
  // have been shaped with this format for x's shape). Delayed scaling: after the quantize, the
  // amax history is rolled (update()), so the next call uses this call's amax.
  void produce(const TensorView& x, OperandStorage& out, Stream stream = {});
  // One quantization of x writing the rowwise usage into `rowwise_out` and the columnwise usage
  // into `columnwise_out` (quantized formats; both shaped for x, each holding the usage it
  // receives), so that the two copies can live apart (a layer's scratch and a context).
  void produce_split(const TensorView& x, OperandStorage& rowwise_out,
                     OperandStorage& columnwise_out, Stream stream = {});
  OperandStorage make(int64_t rows, int64_t cols, bool rowwise, bool columnwise,
                      Device device) const {
    return OperandStorage(format_, rows, cols, rowwise, columnwise, device);
  }
  OperandStorage make_empty(Device device) const { return OperandStorage(format_, device); }
  Quantizer* quantizer() const { return quantizer_; }

 private:
  void quantize_into(const TensorView& x, QuantizedTensorView& q, Stream stream);

  OperandFormat format_{};
  Quantizer* quantizer_ = nullptr;      // null for dense formats
  std::shared_ptr<const void> owner_;   // keeps the quantizer's RecipeState alive
};

}  // namespace tessera::nn::detail
