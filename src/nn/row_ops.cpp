// Row ops of the training step: argument checks, CPU loops (OpenMP over rows), CUDA dispatch.
#include "nn/row_ops.h"

#include <cmath>
#include <vector>

#include "core/cpu_parallel.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"
#include "tessera/formats/convert.h"
#include "tessera/formats/half.h"

namespace tessera::nn::detail {

using ::tessera::detail::kParallelWork;
namespace {

void check_rows(const TensorView& v, const char* arg, int64_t rows, int64_t cols) {
  check_view(v, arg, {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  TESSERA_CHECK_STATUS(v.ndim == 2 && v.shape[0] == rows && v.shape[1] == cols,
                       Status::kShapeMismatch, arg, " must be (", rows, ", ", cols, "), got ",
                       v.to_string());
}

void check_vector(const TensorView& p, const char* arg, int64_t rows) {
  if (p.data == nullptr) return;
  check_view(p, arg, {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  TESSERA_CHECK_STATUS(p.numel() == rows, Status::kShapeMismatch, arg, " must hold ", rows,
                       " values, got ", p.to_string());
}

// Group of every row (-1: in no group).
std::vector<int64_t> row_groups(const GroupOffsets& groups) {
  std::vector<int64_t> of(static_cast<size_t>(groups.rows), -1);
  for (int64_t g = 0; g < groups.groups; ++g) {
    for (int64_t r = groups.begin(g); r < groups.end(g); ++r) of[static_cast<size_t>(r)] = g;
  }
  return of;
}

float silu(float g) { return g / (1.0f + std::exp(-g)); }

// v[i] of a float32 / bfloat16 / float16 view as float (0 when the view is empty).
float load(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kFloat32: return v.as<const float>()[i];
    case DType::kBFloat16: return v.as<const bf16>()[i].to_float();
    case DType::kFloat16: return v.as<const fp16>()[i].to_float();
    default: return 0.0f;
  }
}

void store(const TensorView& v, int64_t i, float x) {
  switch (v.dtype) {
    case DType::kFloat32: v.as<float>()[i] = x; break;
    case DType::kBFloat16: v.as<bf16>()[i] = bf16::from_float(x); break;
    case DType::kFloat16: v.as<fp16>()[i] = fp16::from_float(x); break;
    default: break;
  }
}

}  // namespace

GroupOffsets group_offsets_of(const TensorView& offsets, GroupOffsetsFormat format,
                              int64_t groups, int64_t rows) {
  check_view(offsets, "offsets", {DType::kInt32, DType::kInt64});
  const bool ends = format == GroupOffsetsFormat::kEndOffsets;
  const int64_t want = ends ? groups : groups + 1;
  TESSERA_CHECK_STATUS(offsets.ndim == 1 && offsets.shape[0] == want, Status::kShapeMismatch,
                       "offsets: expected (", want, ") ", ends ? "end" : "start",
                       " offsets of ", groups, " groups, got ", offsets.to_string());
  GroupOffsets o;
  o.values = offsets.data;
  o.int64 = offsets.dtype == DType::kInt64;
  o.ends = ends;
  o.groups = groups;
  o.rows = rows;
  return o;
}

void grouped_row_sum(const TensorView& dy, const GroupOffsets& groups, const TensorView& db,
                     bool accumulate, Stream stream) {
  TESSERA_CHECK_STATUS(dy.ndim == 2, Status::kShapeMismatch, "grouped_row_sum: dy must be 2-D");
  const int64_t n = dy.shape[1];
  check_rows(dy, "grouped_row_sum: dy", groups.rows, n);
  check_rows(db, "grouped_row_sum: db", groups.groups, n);
  TESSERA_CHECK_STATUS(!accumulate || db.dtype == DType::kFloat32, Status::kDTypeMismatch,
                       "grouped_row_sum: accumulating needs a float32 db, got ",
                       dtype_name(db.dtype));
  if (dy.device.is_cuda()) return cuda::grouped_row_sum(dy, groups, db, accumulate, stream);
#pragma omp parallel for schedule(static) if (groups.rows * n >= kParallelWork)
  for (int64_t g = 0; g < groups.groups; ++g) {
    std::vector<double> acc(static_cast<size_t>(n), 0.0);
    for (int64_t r = groups.begin(g); r < groups.end(g); ++r) {
      for (int64_t c = 0; c < n; ++c) acc[static_cast<size_t>(c)] += load(dy, r * n + c);
    }
    for (int64_t c = 0; c < n; ++c) {
      const float v = static_cast<float>(acc[static_cast<size_t>(c)]);
      store(db, g * n + c, accumulate ? load(db, g * n + c) + v : v);
    }
  }
}

void swiglu_forward(const TensorView& h, const TensorView& probs, const GroupOffsets& groups,
                    const TensorView& a, Stream stream) {
  TESSERA_CHECK_STATUS(a.ndim == 2, Status::kShapeMismatch, "swiglu_forward: a must be 2-D");
  const int64_t rows = groups.rows, f = a.shape[1];
  check_rows(h, "swiglu_forward: h", rows, 2 * f);
  check_rows(a, "swiglu_forward: a", rows, f);
  check_vector(probs, "swiglu_forward: probs", rows);
  if (h.device.is_cuda()) return cuda::swiglu_forward(h, probs, groups, a, stream);
  const std::vector<int64_t> of = row_groups(groups);
#pragma omp parallel for schedule(static) if (rows * f >= kParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const bool live = of[static_cast<size_t>(r)] >= 0;
    const float p = live ? (probs.data ? load(probs, r) : 1.0f) : 0.0f;
    for (int64_t c = 0; c < f; ++c) {
      const float gate = load(h, r * 2 * f + c), up = load(h, r * 2 * f + f + c);
      store(a, r * f + c, live ? silu(gate) * up * p : 0.0f);
    }
  }
}

void swiglu_backward(const TensorView& h, const TensorView& probs, const TensorView& da,
                     const GroupOffsets& groups, const TensorView& dh, const TensorView& dprobs,
                     Stream stream) {
  TESSERA_CHECK_STATUS(da.ndim == 2, Status::kShapeMismatch, "swiglu_backward: da must be 2-D");
  const int64_t rows = groups.rows, f = da.shape[1];
  check_rows(h, "swiglu_backward: h", rows, 2 * f);
  check_rows(da, "swiglu_backward: da", rows, f);
  check_rows(dh, "swiglu_backward: dh", rows, 2 * f);
  check_vector(probs, "swiglu_backward: probs", rows);
  check_vector(dprobs, "swiglu_backward: dprobs", rows);
  TESSERA_CHECK(dprobs.data == nullptr || probs.data != nullptr,
                "swiglu_backward: dprobs needs probs");
  if (h.device.is_cuda()) return cuda::swiglu_backward(h, probs, da, groups, dh, dprobs, stream);
  const std::vector<int64_t> of = row_groups(groups);
#pragma omp parallel for schedule(static) if (rows * f >= kParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const bool live = of[static_cast<size_t>(r)] >= 0;
    const float p = live ? (probs.data ? load(probs, r) : 1.0f) : 0.0f;
    double dp = 0.0;
    for (int64_t c = 0; c < f; ++c) {
      const float g = load(h, r * 2 * f + c), up = load(h, r * 2 * f + f + c);
      const float sig = 1.0f / (1.0f + std::exp(-g));
      const float s = g * sig;
      const float d = live ? load(da, r * f + c) : 0.0f;
      dp += static_cast<double>(d) * s * up;
      store(dh, r * 2 * f + c, d * p * up * sig * (1.0f + g * (1.0f - sig)));
      store(dh, r * 2 * f + f + c, d * p * s);
    }
    if (dprobs.data) store(dprobs, r, live ? static_cast<float>(dp) : 0.0f);
  }
}

void cast(const TensorView& src, const TensorView& dst, Stream stream) {
  TESSERA_CHECK_STATUS(src.numel() == dst.numel(), Status::kShapeMismatch, "cast: src ",
                       src.to_string(), " and dst ", dst.to_string(), " differ in size");
  if (src.numel() == 0) return;
  if (src.dtype == dst.dtype) {
    copy_bytes_async(dst.data, dst.device, src.data, src.device,
                     static_cast<size_t>(src.nbytes()), stream);
  } else if (dst.dtype == DType::kFloat32) {
    decode(src, dst, stream);
  } else {
    encode(src, dst, stream);
  }
}

}  // namespace tessera::nn::detail
