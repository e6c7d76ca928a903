// torch.ops.tessera.grouped_mm / scaled_grouped_mm: torch._grouped_mm's and
// torch._scaled_grouped_mm's arguments and results on tessera's grouped GEMM (rows or columns
// past offs[-1] are zeros where torch leaves them unwritten), one call into
// compiled code each (the binding of the training step's ops: PyTorch's stable ABI, torch's
// current stream and allocator). Here live the functional ops' rules: the four operand forms,
// their checks, the operand layouts (a transposed view of contiguous memory is read as stored,
// any other layout is copied once), the output and its dtype. tessera.torch.ops adds the
// autograd formula and the fake (meta) shapes.
#include <sstream>
#include <string>
#include <utility>

#include "nn/step_memory.h"
#include "step_common.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/quantize/types.h"

namespace tessera::torch_ext {
namespace {

namespace sh = torch::headeronly;
using OptScalar = std::optional<sh::ScalarType>;

// torch's name of a dtype for messages ("bfloat16"), without throwing for the ones tessera does
// not read.
std::string dtype_text(sh::ScalarType s) {
  switch (s) {
    case sh::ScalarType::Float: return "float32";
    case sh::ScalarType::BFloat16: return "bfloat16";
    case sh::ScalarType::Half: return "float16";
    case sh::ScalarType::Double: return "float64";
    case sh::ScalarType::Float8_e4m3fn: return "float8_e4m3fn";
    case sh::ScalarType::Float8_e5m2: return "float8_e5m2";
    case sh::ScalarType::Byte: return "uint8";
    case sh::ScalarType::Char: return "int8";
    case sh::ScalarType::Short: return "int16";
    case sh::ScalarType::Int: return "int32";
    case sh::ScalarType::Long: return "int64";
    case sh::ScalarType::Bool: return "bool";
    default: return "dtype code " + std::to_string(static_cast<int>(s));
  }
}

std::string shape_text(const Tensor& t) {
  std::ostringstream os;
  os << "(";
  for (int64_t i = 0; i < t.dim(); ++i) os << (i ? ", " : "") << t.size(i);
  os << (t.dim() == 1 ? ",)" : ")");
  return os.str();
}

bool is_float(sh::ScalarType s) {
  return s == sh::ScalarType::Float || s == sh::ScalarType::BFloat16 || s == sh::ScalarType::Half;
}

bool is_fp8(sh::ScalarType s) {
  return s == sh::ScalarType::Float8_e4m3fn || s == sh::ScalarType::Float8_e5m2;
}

bool same_device(const Tensor& a, const Tensor& b) {
  return a.is_cuda() == b.is_cuda() && (!a.is_cuda() || a.get_device_index() == b.get_device_index());
}

// The forms torch's grouped ops take (2D x 3D, 2D x 2D, 3D x 3D, 3D x 2D) and their offsets:
// shapes, the grouped dim's offsets (int32 cumulative ends, one per group of the 3D operand),
// one device.
void check_forms(const Tensor& a, const Tensor& b, const OptTensor& offs, const char* name) {
  TESSERA_CHECK_STATUS((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3),
                       Status::kShapeMismatch, name, ": mat_a and mat_b must be 2D or 3D, got ",
                       a.dim(), "D and ", b.dim(), "D");
  const bool three = a.dim() == 3 || b.dim() == 3;
  TESSERA_CHECK_STATUS(three ? a.size(-1) == b.size(-2) : a.size(1) == b.size(0),
                       Status::kShapeMismatch, name, ": contraction dims differ: mat_a ",
                       shape_text(a), ", mat_b ", shape_text(b));
  TESSERA_CHECK_STATUS(!(a.dim() == 3 && b.dim() == 3) || a.size(0) == b.size(0),
                       Status::kShapeMismatch, name, ": batch dims differ: mat_a ", shape_text(a),
                       ", mat_b ", shape_text(b));
  if (a.dim() == 3 && b.dim() == 3) {
    TESSERA_CHECK_STATUS(!offs.has_value(), Status::kInvalidArgument, name,
                         ": offs must be None when both operands are 3D");
  } else {
    TESSERA_CHECK_STATUS(offs.has_value(), Status::kInvalidArgument, name,
                         ": offs is required when an operand is 2D");
    TESSERA_CHECK_STATUS(offs->dim() == 1, Status::kShapeMismatch, name,
                         ": offs must be a 1D tensor of cumulative end offsets, got ",
                         offs->dim(), "D");
    TESSERA_CHECK_STATUS(offs->scalar_type() == sh::ScalarType::Int, Status::kDTypeMismatch,
                         name, ": offs must be int32 (cumulative end offsets), got ",
                         dtype_text(offs->scalar_type()));
    if (three) {  // 2D x 2D: offs sets the group count
      const int64_t groups = b.dim() == 3 ? b.size(0) : a.size(0);
      TESSERA_CHECK_STATUS(offs->size(0) == groups, Status::kShapeMismatch, name, ": offs has ",
                           offs->size(0), " groups but the 3D operand ", groups);
    }
  }
  TESSERA_CHECK_STATUS(same_device(a, b), Status::kInvalidArgument, name,
                       ": mat_a and mat_b on different devices");
  TESSERA_CHECK_STATUS(!offs.has_value() || same_device(a, *offs), Status::kInvalidArgument, name,
                       ": offs is on another device than mat_a and mat_b");
}

void check_no_bias(const OptTensor& bias, const char* name) {
  TESSERA_CHECK_STATUS(!bias.has_value(), Status::kUnsupported, name,
                       ": bias is not supported (as in torch._", name,
                       "); add it to the output, or use tessera.torch.GroupedLinear(bias=True)");
}

Tensor contiguous_or_copy(const Tensor& t) {
  return t.is_contiguous() ? t : torch::stable::contiguous(t);
}

// t with its last two dims swapped, as contiguous memory (a transposed view of contiguous memory
// is that memory; any other layout is copied once).
Tensor transposed_contiguous(const Tensor& t) {
  return contiguous_or_copy(torch::stable::transpose(t, -2, -1));
}

// A stack of matrices (G, X, Y) as stored: {t, false} when contiguous, {tᵀ (G, Y, X), true}
// when t is the transposed view of contiguous memory, else {a contiguous copy, false}.
std::pair<Tensor, bool> matrix_stack(const Tensor& t) {
  if (t.is_contiguous()) return {t, false};
  Tensor tt = torch::stable::transpose(t, -2, -1);
  if (tt.is_contiguous()) return {tt, true};
  return {torch::stable::contiguous(t), false};
}

// The output of a form: 2D x 3D (T, N); 2D x 2D (G, M, N); 3D x 3D (G, M, N); 3D x 2D (M, T),
// made as (T, M) whose transpose is returned (`*stored` receives the tensor the GEMM writes).
Tensor new_output(const Tensor& a, const Tensor& b, const OptTensor& offs, DType dt,
                  Device dev, Tensor* stored) {
  if (a.dim() == 2 && b.dim() == 3) return *stored = new_tensor({a.size(0), b.size(2)}, dt, dev);
  if (a.dim() == 2) return *stored = new_tensor({offs->size(0), a.size(0), b.size(1)}, dt, dev);
  if (b.dim() == 3) return *stored = new_tensor({a.size(0), a.size(1), b.size(2)}, dt, dev);
  *stored = new_tensor({b.size(1), a.size(1)}, dt, dev);
  return torch::stable::transpose(*stored, 0, 1);
}

// The GEMM of the operands into `d`: M-grouped (offsets), K-grouped (offsets) or batched (none).
// An M-grouped `d` gets zeros in its rows past offs[-1] (torch leaves them unwritten): the
// backward's input gradients are such outputs, and a row that took no part in the product must
// get a zero gradient, not the memory's old bits (NaN among them).
void run(GroupedGemmKind kind, const GemmOperand& a, const GemmOperand& b, bool transpose_a,
         bool transpose_b, const Tensor& d, const OptTensor& offs, const CallScope& scope) {
  GroupedGemmProblem p;
  p.kind = kind;
  p.a = a;
  p.b = b;
  p.transpose_a = transpose_a;
  p.transpose_b = transpose_b;
  p.d = view_of(d, "out");
  if (offs.has_value()) {
    p.group_offsets = view_of(*offs, "offs");
    p.offsets_format = GroupOffsetsFormat::kEndOffsets;
    p.num_groups = p.group_offsets.numel();
    p.zero_unused_rows = kind == GroupedGemmKind::kMGrouped;
  } else {
    p.num_groups = p.d.shape[0];
  }
  TorchAllocator alloc;
  nn::detail::run_gemm(p, alloc, scope.stream());
}

GemmOperand dense(const Tensor& t) { return GemmOperand::from_dense(view_of(t, "operand")); }

// A rowwise FP8 operand over contiguous codes `data` read as a (rows, cols) matrix (the logical
// one, or — columnwise — the stored transpose of a (cols, rows) one) with `scale` its contiguous
// scale_inv values: one per row, or one per row of each group (a K-grouped operand's columnwise
// copy). The operand views both tensors: the caller keeps them alive until the GEMM is enqueued.
GemmOperand rowwise_fp8(const Tensor& data, int64_t rows, int64_t cols, const Tensor& scale,
                        bool columnwise) {
  TESSERA_CHECK_STATUS(data.is_contiguous() && scale.is_contiguous(), Status::kInternal,
                       "rowwise_fp8: the codes and scales must be contiguous");
  QuantizedTensorView q;
  q.config.mode = ScalingMode::kRowwise;
  q.config.element = dtype_of(data, "operand");
  q.config.rowwise = !columnwise;
  q.config.columnwise = columnwise;
  q.device = device_of(data);
  const TensorView codes =
      TensorView::contiguous(data.data_ptr(), q.config.element, {rows, cols}, q.device);
  const TensorView scales =
      TensorView::contiguous(scale.data_ptr(), DType::kFloat32, {scale.numel(), 1}, q.device);
  if (columnwise) {  // the copy of the logical (cols, rows) matrix, stored transposed
    q.rows = cols;
    q.cols = rows;
    q.columnwise_data = codes;
    q.columnwise_scale_inv = scales;
  } else {
    q.rows = rows;
    q.cols = cols;
    q.data = codes;
    q.scale_inv = scales;
  }
  return GemmOperand::from_quantized(q, columnwise);
}

// A contiguous 2-D matrix of FP8 codes as a rowwise operand.
GemmOperand rowwise_fp8(const Tensor& data, const Tensor& scale, bool columnwise) {
  return rowwise_fp8(data, data.size(0), data.size(1), scale, columnwise);
}

Tensor grouped_mm(Tensor mat_a, Tensor mat_b, OptTensor offs, OptTensor bias,
                  OptScalar out_dtype) {
  return guarded([&]() -> Tensor {
    const char* name = "grouped_mm";
    check_no_bias(bias, name);
    check_forms(mat_a, mat_b, offs, name);
    TESSERA_CHECK_STATUS(is_float(mat_a.scalar_type()) &&
                             mat_b.scalar_type() == mat_a.scalar_type(),
                         Status::kDTypeMismatch, name,
                         ": mat_a/mat_b must share a float32/bfloat16/float16 dtype, got ",
                         dtype_text(mat_a.scalar_type()), " and ",
                         dtype_text(mat_b.scalar_type()));
    const sh::ScalarType dt = out_dtype.value_or(mat_a.scalar_type());
    TESSERA_CHECK_STATUS(dt == mat_a.scalar_type() || dt == sh::ScalarType::Float,
                         Status::kDTypeMismatch, name, ": out_dtype ", dtype_text(dt),
                         " must be mat_a's dtype ", dtype_text(mat_a.scalar_type()),
                         " or float32");
    const CallScope scope(mat_a);
    Tensor stored;
    Tensor out = new_output(mat_a, mat_b, offs, dtype_arg(dt, "out_dtype"), scope.device(), &stored);
    if (mat_a.dim() == 2 && mat_b.dim() == 3) {  // (T, K) x (G, K, N) -> (T, N)
      const auto [b, b_t] = matrix_stack(mat_b);   // (G, N, K) when b_t, else (G, K, N)
      run(GroupedGemmKind::kMGrouped, dense(contiguous_or_copy(mat_a)), dense(b), false, b_t,
          stored, offs, scope);
    } else if (mat_a.dim() == 2) {  // (M, T) x (T, N) -> (G, M, N)
      run(GroupedGemmKind::kKGrouped, dense(transposed_contiguous(mat_a)),
          dense(contiguous_or_copy(mat_b)), true, false, stored, offs, scope);
    } else if (mat_b.dim() == 3) {  // (G, M, K) x (G, K, N) -> (G, M, N)
      const auto [a, a_t] = matrix_stack(mat_a);
      const auto [b, b_t] = matrix_stack(mat_b);
      run(GroupedGemmKind::kBatched, dense(a), dense(b), a_t, b_t, stored, offs, scope);
    } else {  // (G, M, K) x (K, T) -> (M, T), written as (T, M)
      const auto [a, a_t] = matrix_stack(mat_a);  // (G, M, K): TN; (G, K, M): NN
      run(GroupedGemmKind::kMGrouped, dense(transposed_contiguous(mat_b)),
          dense(a), false, !a_t, stored, offs, scope);
    }
    return out;
  });
}

void check_scale(const Tensor& scale, int64_t numel, const char* arg) {
  TESSERA_CHECK_STATUS(scale.scalar_type() == sh::ScalarType::Float, Status::kDTypeMismatch,
                       "scaled_grouped_mm: ", arg, " must be float32 (rowwise FP8), got ",
                       dtype_text(scale.scalar_type()));
  TESSERA_CHECK_STATUS(scale.numel() == numel, Status::kShapeMismatch, "scaled_grouped_mm: ",
                       arg, " has ", scale.numel(), " elements, expected ", numel);
}

Tensor scaled_grouped_mm(Tensor mat_a, Tensor mat_b, Tensor scale_a, Tensor scale_b,
                         OptTensor offs, OptTensor bias, OptTensor scale_result,
                         OptScalar out_dtype, bool /*use_fast_accum: FP32 accumulation always*/) {
  return guarded([&]() -> Tensor {
    const char* name = "scaled_grouped_mm";
    check_no_bias(bias, name);
    TESSERA_CHECK_STATUS(!scale_result.has_value(), Status::kUnsupported, name,
                         ": scale_result is not supported (as torch)");
    check_forms(mat_a, mat_b, offs, name);
    TESSERA_CHECK_STATUS(is_fp8(mat_a.scalar_type()) && is_fp8(mat_b.scalar_type()),
                         Status::kDTypeMismatch, name, ": mat_a/mat_b must be float8, got ",
                         dtype_text(mat_a.scalar_type()), " and ",
                         dtype_text(mat_b.scalar_type()));
    const sh::ScalarType dt = out_dtype.value_or(sh::ScalarType::BFloat16);
    TESSERA_CHECK_STATUS(is_float(dt), Status::kDTypeMismatch, name,
                         ": out_dtype must be bf16/fp16/fp32, got ", dtype_text(dt));
    const int64_t g = offs.has_value() ? offs->size(0) : 1;
    if (mat_a.dim() == 2 && mat_b.dim() == 2) {
      check_scale(scale_a, g * mat_a.size(0), "scale_a");
      check_scale(scale_b, g * mat_b.size(1), "scale_b");
    } else {
      check_scale(scale_a, mat_a.size(0) * (mat_a.dim() == 3 ? mat_a.size(1) : 1), "scale_a");
      check_scale(scale_b, mat_b.size(-1) * (mat_b.dim() == 3 ? mat_b.size(0) : 1), "scale_b");
    }
    const CallScope scope(mat_a);
    const Tensor sa = contiguous_or_copy(scale_a), sb = contiguous_or_copy(scale_b);
    Tensor stored;
    Tensor out = new_output(mat_a, mat_b, offs, dtype_arg(dt, "out_dtype"), scope.device(), &stored);
    if (mat_a.dim() == 2 && mat_b.dim() == 3) {  // (T, K) x (G, K, N) -> (T, N)
      const int64_t groups = mat_b.size(0), k = mat_b.size(1), n = mat_b.size(2);
      run(GroupedGemmKind::kMGrouped, rowwise_fp8(contiguous_or_copy(mat_a), sa, false),
          rowwise_fp8(transposed_contiguous(mat_b), groups * n, k, sb, false), false, true, stored,
          offs, scope);
    } else if (mat_a.dim() == 3 && mat_b.dim() == 3) {  // batched
      const int64_t groups = mat_a.size(0), m = mat_a.size(1), k = mat_a.size(2);
      const int64_t n = mat_b.size(2);
      run(GroupedGemmKind::kBatched,
          rowwise_fp8(contiguous_or_copy(mat_a), groups * m, k, sa, false),
          rowwise_fp8(transposed_contiguous(mat_b), groups * n, k, sb, false), false, true, stored,
          offs, scope);
    } else if (mat_a.dim() == 3) {  // (G, M, K) x (K, T) -> (M, T), written as (T, M)
      const int64_t groups = mat_a.size(0), m = mat_a.size(1), k = mat_a.size(2);
      run(GroupedGemmKind::kMGrouped,
          rowwise_fp8(transposed_contiguous(mat_b), sb, false),
          rowwise_fp8(contiguous_or_copy(mat_a), groups * m, k, sa, false), false, true,
          stored, offs, scope);
    } else {  // (M, T) x (T, N) -> (G, M, N): columnwise copies with per-(group, row) scales
      run(GroupedGemmKind::kKGrouped, rowwise_fp8(contiguous_or_copy(mat_a), sa, true),
          rowwise_fp8(transposed_contiguous(mat_b), sb, true),
          true, false, stored, offs, scope);
    }
    return out;
  });
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(tessera, m) {
  m.def("grouped_mm(Tensor mat_a, Tensor mat_b, Tensor? offs=None, Tensor? bias=None, "
        "ScalarType? out_dtype=None) -> Tensor");
  m.def("scaled_grouped_mm(Tensor mat_a, Tensor mat_b, Tensor scale_a, Tensor scale_b, "
        "Tensor? offs=None, Tensor? bias=None, Tensor? scale_result=None, "
        "ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(tessera, CompositeExplicitAutograd, m) {
  m.impl("grouped_mm", TORCH_BOX(&grouped_mm));
  m.impl("scaled_grouped_mm", TORCH_BOX(&scaled_grouped_mm));
}

}  // namespace tessera::torch_ext
