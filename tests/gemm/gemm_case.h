// Test cases for grouped GEMM: a readable case description, owned host storage for every operand,
// the problem descriptor built from it, an independent oracle (a loop of single GEMMs in FP64 on
// the operands' values) and the one tolerance function (read from the format table).
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "tessera/formats/format_table.h"
#include "tessera/formats/half.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/quantize/types.h"

namespace tessera::test {

struct GemmCase {
  std::string name;
  GroupedGemmKind kind = GroupedGemmKind::kMGrouped;
  std::vector<int64_t> group_rows;  // grouped kinds: rows of each group; kBatched: unused
  int64_t m = 0, n = 0, k = 0;      // fixed dims (kMGrouped: n, k; kKGrouped: m, n; kBatched: all)
  int64_t extra_rows = 0;           // capacity rows past the last offset (poisoned)
  bool transpose_a = false, transpose_b = true;
  DType in_dtype = DType::kFloat32, out_dtype = DType::kFloat32;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false, group_alpha = false;
  GroupOffsetsFormat offsets_format = GroupOffsetsFormat::kStartOffsets;
  DType offsets_dtype = DType::kInt64;
  int64_t batch_count = 1;  // kBatched: G
  int64_t groups() const {
    return kind == GroupedGemmKind::kBatched ? batch_count
                                              : static_cast<int64_t>(group_rows.size());
  }
};

// GoogleTest prints a case by its name.
inline void PrintTo(const GemmCase& c, std::ostream* os) { *os << c.name; }

// Byte storage of one tensor plus its view.
struct Owned {
  std::vector<uint8_t> bytes;
  TensorView view;
};

// Per-element FP64 result of the oracle and the bound it is compared with.
struct Expected {
  std::vector<double> value;    // D's elements (untouched elements: the original D value)
  std::vector<double> abs_sum;  // |alpha_g| Σ|a b| + |bias| + |beta · D_old|
  std::vector<bool> written;    // elements the GEMM may write
};

// Everything a test needs for one case. D is pre-filled with a poison bit pattern (beta = 0) or
// with random values (beta = 1); capacity rows of A/B are filled with NaN.
struct GemmFixture {
  GemmCase c;
  Owned a, b, d, bias, offsets, group_alpha;
  std::vector<uint8_t> d_initial;
  GroupedGemmProblem problem;
};

GemmFixture make_fixture(const GemmCase& c, uint32_t seed = 1234);
// The small problem the error tests mutate: M-grouped, 3 groups of 3, 0 and 5 rows plus 2
// capacity rows (10 rows of A), N = 8, K = 12, FP32.
GemmCase small_m_grouped_case(std::string name);
// A deep copy whose views (and the problem's dense operands, D, bias, offsets, group_alpha) point
// into the copy's own storage; quantized operands are kept as they are.
GemmFixture copy_of(const GemmFixture& f);
// The oracle: for each group, op(A_g) and op(B_g) as dense FP64 matrices, one plain GEMM each.
Expected loop_of_gemms(const GemmFixture& f);
// D's element i as double.
double d_value(const TensorView& d, int64_t i);

// The one GEMM tolerance: |d − ref| ≤ value_rel·|ref| + sum_rel·abs_sum, where abs_sum bounds the
// magnitudes summed. value_rel: rounding into the output format (twice: FP64→FP32→out);
// sum_rel: FP32 accumulation over k terms plus the dequantize/bias/beta roundings.
struct GemmTolerance {
  double value_rel = 0.0;
  double sum_rel = 0.0;
};
GemmTolerance gemm_tolerance(DType out_dtype, int64_t k);

// Compares D with the expectation; returns "" or the first failure, with its coordinates.
std::string compare(const GemmFixture& f, const Expected& e, const GemmTolerance& tol);
// The bytes of D outside `written` are unchanged from d_initial.
std::string check_untouched(const GemmFixture& f, const Expected& e);

// A quantized pair for A and B: both usages, the given mode / element / scale layout.
struct QuantRecipe {
  std::string name;
  QuantizerConfig a, b;
};
QuantizerConfig both_usages(ScalingMode mode, DType element = DType::kFloat32,
                            ScaleLayout layout = ScaleLayout::kCompact);
// Every family: tensor (E4M3, E5M2 x E4M3), rowwise, block 1x128 x 128x128, MXFP8 (compact;
// E5M2 swizzled x 32x32), NVFP4 (x 16x16; swizzled), and two pairs of two families: MXFP8 x
// NVFP4 (CUDA expands both) and, named "emulated_…", one only the CPU's emulated path takes.
std::vector<QuantRecipe> quantized_pairs();

}  // namespace tessera::test
