// M-grouped grouped GEMM cases whose A has its own row layout (GroupedGemmProblem::a_row_starts):
// the rows of each group of a compact fixture's A moved to other starts of a taller A — aligned
// starts (the padded layout of a training step) or any starts after random gaps — with the rows
// between and after the groups poisoned (NaN values, NaN codes and scales), which the GEMM must
// never use. The same problem on the compact A is the oracle: every backend must give it bit for
// bit (each output row depends on its own A row only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemm/gemm_case.h"
#include "tessera/quantize/quantizer.h"

namespace tessera::test {

// Where the groups' rows go. Invariant: starts ascending, group g's rows
// [starts[g], starts[g] + rows_g) inside [0, rows), disjoint; live[r] marks those rows.
struct SpreadLayout {
  std::vector<int64_t> starts;  // G entries
  int64_t rows = 0;             // rows of the spread A
  std::vector<bool> live;
};

// Group g starts on a multiple of `align` after a gap of 0..max_gap rows past the previous
// group's end (random, from `seed`); `tail` rows follow the last group.
SpreadLayout spread_layout(const std::vector<int64_t>& group_rows, int64_t align, int64_t max_gap,
                           int64_t tail, uint32_t seed);

// The dense (total + extra, K) A of a fixture laid out as `s`: gap rows hold `gap`.
Owned spread_dense(const Owned& a, const std::vector<int64_t>& group_rows, const SpreadLayout& s,
                   float gap);

// a_row_starts of `s` as an int64 host view: G entries, or G+1 with the last group's end appended.
Owned starts_view(const SpreadLayout& s, const std::vector<int64_t>& group_rows, bool with_end);

// Poisons the gap rows of a quantized operand's rowwise copy: FP8 codes → NaN (0x7F), E2M1 codes
// → 6 (no NaN code), and the scales of those rows where each row has its own (rowwise, 1xN
// blocks) → NaN (FP32 NaN, E8M0 0xFF, E4M3 0x7F).
void poison_gap_rows(const QuantizedTensorView& q, const SpreadLayout& s);

// A compact fixture and the same problem on a spread A (gap rows NaN; starts G+1 entries when
// `with_end`, else G). The spread problem's views point into this object: build it in place,
// never copy it.
struct SpreadCase {
  GemmFixture compact, spread;
  SpreadLayout layout;
  Owned a, starts;
  SpreadCase(const GemmCase& c, int64_t align, int64_t max_gap, bool with_end, uint32_t seed);
};


// A quantized a_row_starts case: the GEMM shape and the operand pair.
struct QuantCase {
  std::string name;
  GemmCase gemm;
  QuantRecipe recipe;
};
inline void PrintTo(const QuantCase& c, std::ostream* os) { *os << c.name; }

// The SpreadCase of FP32 fixture `c` with quantized operands (M-grouped; A read rowwise, B
// rowwise for TN, columnwise for NN): the compact A, the spread A (gap rows zero when quantized,
// so that the group rows get the compact copy's codes and scales under every row-local recipe;
// poisoned after, poison_gap_rows) and B.
struct QuantizedSpread {
  SpreadCase s;
  QuantizedTensor qa, qa_spread, qb;
  QuantizedSpread(const GemmCase& c, const QuantRecipe& r, int64_t align, int64_t max_gap);
};

}  // namespace tessera::test
