// FP32 images of GEMM operands for the CPU backend: the workspace carve-up, conversion of
// BF16/FP16 operands and dequantization of quantized ones (OpenMP loops over stored rows), and the
// store of an FP32 result into a BF16/FP16 output.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/gemm/grouped_gemm.h"

namespace tessera::detail {

// Bytes of an FP32 region of `elems` elements, padded to keep the next region 256-byte aligned.
int64_t fp32_region_bytes(int64_t elems);

// Hands out consecutive FP32 regions of the workspace. Invariant: used ≤ bytes.
struct WorkspaceCursor {
  char* base = nullptr;
  int64_t bytes = 0;
  int64_t used = 0;
  float* take_floats(int64_t elems);  // kInternal when the workspace was sized too small
};

// An FP32 image of an operand's logical (rows, cols) matrix: logical element (r, c) lives at
// data[r * ld + c], or at data[c * ld + r] when `transposed` (a transposed columnwise copy is
// dequantized in its stored orientation; BLAS applies the transpose).
struct Fp32Image {
  const float* data = nullptr;
  int64_t ld = 0;
  bool transposed = false;
  // The sub-matrix whose logical top-left element is (r0, 0) (null for an image not made).
  const float* rows_from(int64_t r0) const {
    if (data == nullptr) return nullptr;
    return transposed ? data + r0 : data + r0 * ld;
  }
};

// Workspace bytes operand_fp32 needs for `rows` × `cols` of `o` (0 for an FP32 dense operand).
int64_t operand_fp32_bytes(const GemmOperand& o, int64_t rows, int64_t cols);

// The first `rows` logical rows of `o` as FP32: the operand's own memory when it is FP32 dense,
// else converted/dequantized into a region of `ws`. `group_starts` (G+1 logical row starts)
// maps rows to groups for per-group kTensor scales and NVFP4 global amax.
Fp32Image operand_fp32(const GemmOperand& o, const char* name, int64_t rows,
                       const std::vector<int64_t>& group_starts, WorkspaceCursor& ws);

// Rounds `elems` FP32 values into the first `elems` elements of `out` (BF16/FP16, RNE).
void store_fp32(const float* src, const TensorView& out, int64_t elems);

namespace cpu {
// The dequantization of the first `rows` logical rows of quantized operand `o`, planned once
// (decode table, per-row factors, scale offsets) and run on any range of its stored rows, on the
// calling thread: the image dequantize_operand writes, a slice at a time. Cheap to copy (the
// plan is shared). Defined in dequantize_operand.cpp.
class DequantPlan {
 public:
  DequantPlan(const GemmOperand& o, int64_t rows, const std::vector<int64_t>& group_starts);
  int64_t stored_rows() const;  // rows of the image (its stored orientation)
  int64_t stored_cols() const;  // its ld
  bool transposed() const;      // stored (cols, rows) of the logical matrix
  // Stored rows [r0, r1) into out (stored row r0 at out[0], ld stored_cols()).
  void rows(int64_t r0, int64_t r1, float* out) const;
  // Stored rows [r0, r1), stored columns [c0, c1) into out (ld c1 - c0). Not for a
  // Hadamard-transformed copy (the emulated NVFP4 wgrad operands: the transform spans whole
  // stored rows, which rows() undoes).
  void block(int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* out) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// Dequantizes the first `rows` logical rows of quantized operand `o` into `out` (see Fp32Image;
// the image's ld is cols, or `rows` when transposed), stored rows split over threads.
Fp32Image dequantize_operand(const GemmOperand& o, int64_t rows,
                             const std::vector<int64_t>& group_starts, float* out);
}  // namespace cpu

}  // namespace tessera::detail
