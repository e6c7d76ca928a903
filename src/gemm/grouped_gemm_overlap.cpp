// An output that overlaps an input is refused: D is written while the GEMM still reads A, B (the
// quantized copy read: codes, scales, amax), bias, group_offsets, a_row_starts and group_alpha,
// so a shared byte gives wrong values (or, on the device, a race). beta = 1 reads D itself by
// design; that is the one overlap allowed. Only the bytes the problem touches count (byte_range
// of each view, cut to the capacity rows for the grouped operands — all of A's rows with
// a_row_starts — and an M-grouped D), so buffers side by side in one allocation, and rows past
// the capacity, may be shared.
#include <cstdio>
#include <string>

#include "gemm/gemm_backend.h"

namespace tessera::detail {
namespace {

// An input the problem reads: its name (operand, then the quantized copy's part: "A" +
// ".columnwise_" + "data"), formatted only for an error, and its bytes. The check runs on every
// GEMM of a training step: no heap allocation on the way.
struct NamedRange {
  const char* name = "";
  const char* copy = "";
  const char* part = "";
  Device device;
  ByteRange bytes;
};

// At most 3 parts of A, 3 of B, bias, group_offsets, a_row_starts, group_alpha.
struct Inputs {
  NamedRange items[10];
  int count = 0;
  void add(const char* name, const TensorView& v, const char* copy = "", const char* part = "") {
    if (v.data != nullptr) items[count++] = {name, copy, part, v.device, byte_range(v)};
  }
};

// The first `rows` rows of a view (all of them when it has fewer).
TensorView leading_rows(TensorView v, int64_t rows) {
  if (v.ndim >= 1 && v.shape[0] > rows) v.shape[0] = rows;
  return v;
}

// What the problem reads of operand `o` (named `name`): a dense view (its first `rows` rows when
// rows >= 0), or the quantized copy it reads.
void add_operand(Inputs& out, const char* name, const GemmOperand& o, int64_t rows) {
  if (!o.is_quantized) {
    out.add(name, rows >= 0 ? leading_rows(o.dense, rows) : o.dense);
    return;
  }
  const QuantizedTensorView& q = o.quantized;
  const char* copy = o.columnwise ? ".columnwise_" : ".";
  out.add(name, o.columnwise ? q.columnwise_data : q.data, copy, "data");
  out.add(name, o.columnwise ? q.columnwise_scale_inv : q.scale_inv, copy, "scale_inv");
  out.add(name, o.columnwise ? q.columnwise_amax : q.amax, copy, "amax");
}

std::string hex(uintptr_t a) {
  char s[24];
  std::snprintf(s, sizeof s, "0x%llx", static_cast<unsigned long long>(a));
  return s;
}

}  // namespace

void check_output_overlap(const GroupedGemmProblem& p, const GroupedGemmDims& dims) {
  const bool grouped_rows = p.kind != GroupedGemmKind::kBatched;
  const int64_t capacity = grouped_rows ? dims.capacity : -1;
  Inputs inputs;
  add_operand(inputs, "A", p.a, grouped_rows ? dims.a_rows : -1);  // a_row_starts: all of A
  add_operand(inputs, "B", p.b, p.kind == GroupedGemmKind::kKGrouped ? capacity : -1);
  inputs.add("bias", p.bias);
  if (grouped_rows) inputs.add("group_offsets", p.group_offsets);  // kBatched ignores them
  inputs.add("a_row_starts", p.a_row_starts);
  inputs.add("group_alpha", p.group_alpha);
  // D's written rows: an M-grouped D up to the capacity, unless its unused rows are zeroed too.
  const bool d_rows_cut = p.kind == GroupedGemmKind::kMGrouped && !p.zero_unused_rows;
  const ByteRange d = byte_range(d_rows_cut ? leading_rows(p.d, dims.capacity) : p.d);
  for (int i = 0; i < inputs.count; ++i) {
    const NamedRange& in = inputs.items[i];
    TESSERA_CHECK(in.device != p.d.device || !d.overlaps(in.bytes), "D overlaps ", in.name,
                  in.copy, in.part, ": D writes bytes [", hex(d.begin), ", ", hex(d.end), ") and ",
                  in.name, in.copy, in.part, " is read from [", hex(in.bytes.begin), ", ",
                  hex(in.bytes.end), "); an output may not share memory with an input (beta = 1 "
                  "reads D itself, nothing else)");
  }
}

}  // namespace tessera::detail
