// Row ops of the nn layers: argument checks, CPU loops (OpenMP over rows), CUDA dispatch.
#include "nn/row_ops.h"

#include <cmath>
#include <cstring>

#include "tessera/core/status.h"

namespace tessera::nn::detail {
namespace {

void check_rows(const TensorView& v, const char* arg, int64_t rows, int64_t cols) {
  check_view(v, arg, {DType::kFloat32});
  TESSERA_CHECK_STATUS(v.ndim == 2 && v.shape[0] == rows && v.shape[1] == cols,
                       Status::kShapeMismatch, arg, " must be (", rows, ", ", cols, "), got ",
                       v.to_string());
}

void check_probs(const TensorView& p, const char* arg, int64_t rows) {
  if (p.data == nullptr) return;
  check_view(p, arg, {DType::kFloat32});
  TESSERA_CHECK_STATUS(p.numel() == rows, Status::kShapeMismatch, arg, " must hold ", rows,
                       " values, got ", p.to_string());
}

// live[r] for every padded row r: true when r is one of its group's real rows.
std::vector<char> live_rows(const GroupLayout& layout) {
  std::vector<char> live(static_cast<size_t>(layout.padded_rows), 0);
  const int64_t* o = layout.offsets.as<const int64_t>();
  const int64_t* po = layout.padded_offsets.as<const int64_t>();
  for (int64_t g = 0; g < layout.num_groups; ++g) {
    const int64_t end = std::min(po[g] + (o[g + 1] - o[g]), layout.padded_rows);
    for (int64_t r = po[g]; r < end; ++r) live[static_cast<size_t>(r)] = 1;
  }
  return live;
}

float silu(float g) { return g / (1.0f + std::exp(-g)); }

}  // namespace

void grouped_row_sum(const TensorView& dy, const GroupLayout& layout, const TensorView& db,
                     bool accumulate, Stream stream) {
  TESSERA_CHECK_STATUS(dy.ndim == 2, Status::kShapeMismatch, "grouped_row_sum: dy must be 2-D");
  check_rows(dy, "grouped_row_sum: dy", layout.padded_rows, dy.shape[1]);
  check_rows(db, "grouped_row_sum: db", layout.num_groups, dy.shape[1]);
  if (dy.device.is_cuda()) return cuda::grouped_row_sum(dy, layout, db, accumulate, stream);
  const int64_t n = dy.shape[1];
  const int64_t* po = layout.padded_offsets.as<const int64_t>();
  const float* y = dy.as<const float>();
  float* out = db.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < layout.num_groups; ++g) {
    std::vector<double> acc(static_cast<size_t>(n), 0.0);
    const int64_t end = std::min(po[g + 1], layout.padded_rows);
    for (int64_t r = po[g]; r < end; ++r) {
      for (int64_t c = 0; c < n; ++c) acc[static_cast<size_t>(c)] += y[r * n + c];
    }
    for (int64_t c = 0; c < n; ++c) {
      const float v = static_cast<float>(acc[static_cast<size_t>(c)]);
      out[g * n + c] = accumulate ? out[g * n + c] + v : v;
    }
  }
}

void swiglu_forward(const TensorView& h, const TensorView& probs, const GroupLayout& layout,
                    const TensorView& a, Stream stream) {
  TESSERA_CHECK_STATUS(a.ndim == 2, Status::kShapeMismatch, "swiglu_forward: a must be 2-D");
  const int64_t rows = layout.padded_rows, f = a.shape[1];
  check_rows(h, "swiglu_forward: h", rows, 2 * f);
  check_rows(a, "swiglu_forward: a", rows, f);
  check_probs(probs, "swiglu_forward: probs", rows);
  if (h.device.is_cuda()) return cuda::swiglu_forward(h, probs, layout, a, stream);
  const std::vector<char> live = live_rows(layout);
  const float* hp = h.as<const float>();
  const float* pp = probs.as<const float>();
  float* ap = a.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float p = live[static_cast<size_t>(r)] ? (pp ? pp[r] : 1.0f) : 0.0f;
    const float* gate = hp + r * 2 * f;
    const float* up = gate + f;
    for (int64_t c = 0; c < f; ++c) ap[r * f + c] = silu(gate[c]) * up[c] * p;
  }
}

void swiglu_backward(const TensorView& h, const TensorView& probs, const TensorView& da,
                     const GroupLayout& layout, const TensorView& dh, const TensorView& dprobs,
                     Stream stream) {
  TESSERA_CHECK_STATUS(da.ndim == 2, Status::kShapeMismatch, "swiglu_backward: da must be 2-D");
  const int64_t rows = layout.padded_rows, f = da.shape[1];
  check_rows(h, "swiglu_backward: h", rows, 2 * f);
  check_rows(da, "swiglu_backward: da", rows, f);
  check_rows(dh, "swiglu_backward: dh", rows, 2 * f);
  check_probs(probs, "swiglu_backward: probs", rows);
  check_probs(dprobs, "swiglu_backward: dprobs", rows);
  TESSERA_CHECK(dprobs.data == nullptr || probs.data != nullptr,
                "swiglu_backward: dprobs needs probs");
  if (h.device.is_cuda()) return cuda::swiglu_backward(h, probs, da, layout, dh, dprobs, stream);
  const std::vector<char> live = live_rows(layout);
  const float* hp = h.as<const float>();
  const float* pp = probs.as<const float>();
  const float* dap = da.as<const float>();
  float* dhp = dh.as<float>();
  float* dpp = dprobs.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const bool is_live = live[static_cast<size_t>(r)] != 0;
    const float p = is_live ? (pp ? pp[r] : 1.0f) : 0.0f;
    const float* gate = hp + r * 2 * f;
    const float* up = gate + f;
    float* dgate = dhp + r * 2 * f;
    float* dup = dgate + f;
    double dp = 0.0;
    for (int64_t c = 0; c < f; ++c) {
      const float g = gate[c];
      const float sig = 1.0f / (1.0f + std::exp(-g));
      const float s = g * sig;
      const float d = dap[r * f + c];
      dp += static_cast<double>(d) * s * up[c];
      dgate[c] = d * p * up[c] * sig * (1.0f + g * (1.0f - sig));
      dup[c] = d * p * s;
    }
    if (dpp) dpp[r] = is_live ? static_cast<float>(dp) : 0.0f;
  }
}

}  // namespace tessera::nn::detail
