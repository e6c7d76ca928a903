// Layout arithmetic of grouped tensors: shape-mode names, per-member scale slots and their
// prefix sums (grouped_scale_offsets, the one definition the quantizers, the GEMM setup and the
// reference share) and the worst-case scale sizes of capacity buffers.
#include <algorithm>
#include <map>

#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"
#include "tessera/grouped/grouped_tensor.h"

namespace tessera {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return ceil_div_nonneg(a, b); }

}  // namespace

const char* grouped_shape_mode_name(GroupedShapeMode m) noexcept {
  switch (m) {
    case GroupedShapeMode::kAllSame: return "all same";
    case GroupedShapeMode::kVaryingFirst: return "varying first";
    case GroupedShapeMode::kVaryingLast: return "varying last";
    case GroupedShapeMode::kVaryingBoth: return "varying both";
  }
  return "unknown";
}

QuantizerConfig unquantized_config() {
  QuantizerConfig c;
  c.mode = ScalingMode::kNone;
  c.rowwise = true;
  c.columnwise = false;
  return c;
}

int64_t ScaleSlotRule::size(int64_t rows) const {
  if (stride == 0) return constant;
  return checked_mul(stride, checked_round_up(rows, align, "scale slot: rows"), "scale slot");
}

// The rows of a member run along one axis of its scale matrix: the scale rows of the rowwise
// copy, the scale columns of the columnwise one (xᵀ, or MXFP8's 32x1 blocks). Along that axis
// the matrix has roundup(ceil(rows / block), pad) entries (block and pad from the scaling-mode
// table; the swizzled layout pads to 128 rows / 4 columns), i.e. one row's matrix ×
// ceil(rows / (block × pad)) — so align = block × pad and stride = ceil(one / align). A block
// of 0 (per-tensor, or the per-row mode's columnwise scales) makes the matrix constant in rows.
ScaleSlotRule grouped_scale_slot_rule(const QuantizerConfig& config, int64_t cols,
                                      bool columnwise) {
  TESSERA_CHECK(config.mode != ScalingMode::kNone,
                "grouped_scale_slot_rule: config.mode is kNone (not quantized): no scales");
  TESSERA_CHECK(cols >= 0, "grouped_scale_slot_rule: cols ", cols, " is negative");
  const ScalingModeInfo& info = scaling_mode_info(config.mode);
  const bool swizzled = config.scale_layout == ScaleLayout::kSwizzled && info.swizzle;
  const int64_t block = columnwise ? info.scale_block_cols : info.scale_block_rows;
  const int64_t pad = swizzled ? (columnwise ? scale_rules::kSwizzleTileCols
                                             : scale_rules::kSwizzleTileRows)
                               : (columnwise ? info.pad_cols : info.pad_rows);
  const int64_t one = scale_shape(config, 1, cols, columnwise).numel();
  ScaleSlotRule rule;
  if (block == 0) {
    rule.constant = one;
    return rule;
  }
  rule.align = block * pad;
  rule.stride = ceil_div(one, rule.align);
  return rule;
}

std::vector<int64_t> grouped_scale_offsets(const QuantizerConfig& config,
                                           const std::vector<int64_t>& rows,
                                           const std::vector<int64_t>& cols, bool columnwise) {
  TESSERA_CHECK_STATUS(rows.size() == cols.size(), Status::kShapeMismatch,
                       "grouped_scale_offsets: ", rows.size(), " rows but ", cols.size(), " cols");
  std::map<int64_t, ScaleSlotRule> rules;  // one rule per distinct cols (usually one)
  std::vector<int64_t> offsets(rows.size() + 1, 0);
  for (size_t g = 0; g < rows.size(); ++g) {
    TESSERA_CHECK(rows[g] >= 0 && cols[g] >= 0, "grouped_scale_offsets: member ", g, " shape (",
                  rows[g], ", ", cols[g], ") is negative");
    auto it = rules.find(cols[g]);
    if (it == rules.end()) {
      it = rules.emplace(cols[g], grouped_scale_slot_rule(config, cols[g], columnwise)).first;
    }
    offsets[g + 1] = checked_add(offsets[g], it->second.size(rows[g]), "grouped_scale_offsets");
  }
  return offsets;
}

int64_t grouped_scale_capacity(const QuantizerConfig& config, int64_t num_tensors,
                               int64_t rows_bound, int64_t cols, bool columnwise) {
  TESSERA_CHECK(num_tensors >= 0 && rows_bound >= 0, "grouped_scale_capacity: num_tensors ",
                num_tensors, " and rows_bound ", rows_bound, " must be >= 0");
  const ScaleSlotRule rule = grouped_scale_slot_rule(config, cols, columnwise);
  const char* what = "grouped_scale_capacity";
  if (rule.stride == 0) return checked_mul(rule.constant, num_tensors, what);
  // Σ roundup(r_g, a) <= Σ (r_g + a - 1) <= rows_bound + N (a - 1).
  const int64_t padded_rows =
      checked_add(rows_bound, checked_mul(num_tensors, rule.align - 1, what), what);
  return checked_mul(rule.stride, padded_rows, what);
}

}  // namespace tessera
