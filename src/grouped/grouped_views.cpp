// Per-member views that share the grouped storage, the checks of hand-made grouped views, and
// the human-readable description of a grouped tensor.
#include <algorithm>
#include <sstream>

#include "grouped/grouped_plan.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"

namespace tessera {
namespace detail {

std::array<int64_t, 2> grouped_member_shape(const GroupedTensorView& t, int64_t g,
                                            const char* what) {
  TESSERA_CHECK_STATUS(t.host.known(), Status::kUnsupported, what, ": member ", g, " needs the "
                       "member shapes on the host, but this grouped tensor's metadata lives only "
                       "on ", to_string(t.device), " (made from device split sizes); "
                       "copy the splits to the host (a sync) and build a tensor from shapes, or "
                       "use the grouped operations, which read device metadata");
  TESSERA_CHECK_STATUS(g >= 0 && g < t.num_tensors, Status::kOutOfRange, what, ": member ", g,
                       " is out of range [0, ", t.num_tensors, ")");
  const int64_t rows = t.host.first_dims.data ? t.host.first_dims.as<const int64_t>()[g]
                                              : t.uniform_rows;
  const int64_t cols = t.host.last_dims.data ? t.host.last_dims.as<const int64_t>()[g]
                                             : t.uniform_cols;
  return {rows, cols};
}

}  // namespace detail

namespace {

char* byte_at(const TensorView& flat, DType dt, int64_t element_offset) {
  return static_cast<char*>(flat.data) + dtype_bytes(dt, element_offset);
}

}  // namespace

TensorView grouped_member(const GroupedTensorView& t, int64_t g) {
  const auto [rows, cols] = detail::grouped_member_shape(t, g, "grouped_member");
  TESSERA_CHECK(!t.quantized(), "grouped_member: the tensor is quantized (",
                scaling_mode_name(t.config.mode), "); use grouped_quantized_member");
  const int64_t off = t.host.tensor_offsets.as<const int64_t>()[g];
  return TensorView::contiguous(byte_at(t.data, t.dtype, off), t.dtype, {rows, cols}, t.device);
}

QuantizedTensorView grouped_quantized_member(const GroupedTensorView& t, int64_t g) {
  const auto [rows, cols] = detail::grouped_member_shape(t, g, "grouped_quantized_member");
  TESSERA_CHECK(t.quantized(), "grouped_quantized_member: the tensor is not quantized; use "
                "grouped_member");
  QuantizedTensorView q;
  q.config = t.config;
  q.rows = rows;
  q.cols = cols;
  q.device = t.device;
  const int64_t off = t.host.tensor_offsets.as<const int64_t>()[g];
  for (bool cw : {false, true}) {
    const TensorView& data = cw ? t.columnwise_data : t.data;
    if (data.data == nullptr) continue;
    const TensorView& scales = cw ? t.columnwise_scale_inv : t.scale_inv;
    const TensorView& soffs = cw ? t.host.columnwise_scale_offsets : t.host.scale_offsets;
    const int64_t soff = soffs.as<const int64_t>()[g];
    const MatrixShape ds = data_shape(t.config, rows, cols, cw);
    const MatrixShape ss = scale_shape(t.config, rows, cols, cw);
    // E2M1 rows start on a byte: the view has roundup(cols, 2) codes per row, as standalone.
    const int64_t dcols =
        ds.dtype == DType::kFloat4E2M1 ? checked_round_up(ds.cols, 2, "member cols") : ds.cols;
    (cw ? q.columnwise_data : q.data) = TensorView::contiguous(
        byte_at(data, ds.dtype, off), ds.dtype, {ds.rows, dcols}, t.device);
    (cw ? q.columnwise_scale_inv : q.scale_inv) = TensorView::contiguous(
        byte_at(scales, ss.dtype, soff), ss.dtype, {ss.rows, ss.cols}, t.device);
    const TensorView& amax = cw ? t.columnwise_amax : t.amax;
    if (amax.data != nullptr) {
      (cw ? q.columnwise_amax : q.amax) = TensorView::contiguous(
          amax.as<float>() + g, DType::kFloat32, {1}, t.device);
    }
  }
  return q;
}

std::array<int64_t, 2> GroupedTensor::member_shape(int64_t g) const {
  return detail::grouped_member_shape(view_, g, "GroupedTensor::member_shape");
}
TensorView GroupedTensor::member(int64_t g) const { return grouped_member(view_, g); }
QuantizedTensorView GroupedTensor::quantized_member(int64_t g) const {
  return grouped_quantized_member(view_, g);
}

// ---- checks -----------------------------------------------------------------------------------

namespace {

void check_meta_field(const TensorView& f, bool want, int64_t len, Device dev, const char* arg,
                      const char* name) {
  if (!want) {
    TESSERA_CHECK(f.data == nullptr, arg, ": ", name, " is present but the shape mode does not "
                  "vary along that axis");
    return;
  }
  TESSERA_CHECK(f.data != nullptr, arg, ": ", name, " is required but absent");
  check_view(f, name, {DType::kInt64});
  TESSERA_CHECK_STATUS(f.ndim == 1 && f.shape[0] == len, Status::kShapeMismatch, arg, ": ", name,
                       " must be int64 (", len, "), got ", f.to_string());
  TESSERA_CHECK(f.device == dev, arg, ": ", name, " is on ", to_string(f.device),
                " but the tensor is on ", to_string(dev));
}

void check_storage_field(const TensorView& f, DType dt, int64_t need, Device dev, const char* arg,
                         const char* name) {
  TESSERA_CHECK(f.data != nullptr, arg, ": ", name, " is required but absent");
  check_view(f, name);
  TESSERA_CHECK_STATUS(f.dtype == dt || f.dtype == DType::kUInt8, Status::kDTypeMismatch, arg,
                       ": ", name, " has dtype ", dtype_name(f.dtype), "; expected ",
                       dtype_name(dt));
  TESSERA_CHECK(f.device == dev, arg, ": ", name, " is on ", to_string(f.device),
                " but the tensor is on ", to_string(dev));
  TESSERA_CHECK_STATUS(f.nbytes() >= dtype_bytes(dt, need), Status::kBufferTooSmall, arg, ": ",
                       name, " holds ", f.nbytes(), " bytes; the layout needs ",
                       dtype_bytes(dt, need));
}

// Host offsets: leading 0, monotonic, consistent with the dims, inside the data buffers.
void check_host_offsets(const GroupedTensorView& t, const char* arg) {
  const int64_t* o = t.host.tensor_offsets.as<const int64_t>();
  TESSERA_CHECK(o[0] == 0, arg, ": tensor_offsets[0] = ", o[0], "; expected 0");
  for (int64_t g = 0; g < t.num_tensors; ++g) {
    TESSERA_CHECK(o[g + 1] >= o[g], arg, ": tensor_offsets are not monotonic: [", g, "] = ", o[g],
                  " > [", g + 1, "] = ", o[g + 1]);
  }
  for (int64_t g = 0; g < t.num_tensors; ++g) {
    const auto [rows, cols] = detail::grouped_member_shape(t, g, arg);
    TESSERA_CHECK(rows >= 0 && cols >= 0, arg, ": member ", g, " has negative dims (", rows, ", ",
                  cols, ")");
    TESSERA_CHECK(o[g + 1] - o[g] == rows * cols, arg, ": member ", g, " (", rows, ", ", cols,
                  ") spans ", o[g + 1] - o[g], " elements in tensor_offsets");
  }
  TESSERA_CHECK_STATUS(o[t.num_tensors] <= t.logical_rows * t.logical_cols, Status::kOutOfRange,
                       arg, ": the members end at element ", o[t.num_tensors],
                       " past the logical shape (", t.logical_rows, ", ", t.logical_cols, ")");
  if (!t.quantized()) return;
  std::vector<int64_t> rows, cols;
  for (int64_t g = 0; g < t.num_tensors; ++g) {
    const auto s = detail::grouped_member_shape(t, g, arg);
    rows.push_back(s[0]);
    cols.push_back(s[1]);
  }
  for (int u = 0; u < 2; ++u) {
    const TensorView& h = u ? t.host.columnwise_scale_offsets : t.host.scale_offsets;
    TESSERA_CHECK(h.data != nullptr, arg, ": host ", u ? "columnwise_" : "", "scale_offsets absent");
    const std::vector<int64_t> want = grouped_scale_offsets(t.config, rows, cols, u == 1);
    for (int64_t g = 0; g <= t.num_tensors; ++g) {
      TESSERA_CHECK(h.as<const int64_t>()[g] == want[static_cast<size_t>(g)], arg, ": ",
                    u ? "columnwise_" : "", "scale_offsets[", g, "] = ", h.as<const int64_t>()[g],
                    " but grouped_scale_offsets gives ", want[static_cast<size_t>(g)]);
    }
    const TensorView& s = u ? t.columnwise_scale_inv : t.scale_inv;
    if (s.data == nullptr) continue;
    TESSERA_CHECK_STATUS(want.back() <= s.numel(), Status::kBufferTooSmall, arg, ": ",
                         u ? "columnwise_" : "", "scale_inv holds ", s.numel(),
                         " scales; the members need ", want.back());
  }
}

}  // namespace

void check_grouped_view(const GroupedTensorView& t, const char* arg) {
  TESSERA_CHECK(t.num_tensors >= 1, arg, ": num_tensors ", t.num_tensors, " must be >= 1");
  TESSERA_CHECK(t.logical_rows >= 0 && t.logical_cols >= 0 && t.uniform_rows >= 0 &&
                    t.uniform_cols >= 0, arg, ": negative logical or uniform dims");
  const int64_t n = t.num_tensors;
  const bool vf = t.mode == GroupedShapeMode::kVaryingFirst ||
                  t.mode == GroupedShapeMode::kVaryingBoth;
  const bool vl = t.mode == GroupedShapeMode::kVaryingLast ||
                  t.mode == GroupedShapeMode::kVaryingBoth;
  check_meta_field(t.first_dims, vf, n, t.device, arg, "first_dims");
  check_meta_field(t.last_dims, vl, n, t.device, arg, "last_dims");
  check_meta_field(t.tensor_offsets, true, n + 1, t.device, arg, "tensor_offsets");
  check_meta_field(t.scale_offsets, t.quantized(), n + 1, t.device, arg, "scale_offsets");
  check_meta_field(t.columnwise_scale_offsets, t.quantized(), n + 1, t.device, arg,
                   "columnwise_scale_offsets");
  if (t.mode == GroupedShapeMode::kAllSame) {
    TESSERA_CHECK_STATUS(t.logical_rows == n * t.uniform_rows && t.logical_cols == t.uniform_cols,
                         Status::kShapeMismatch, arg, ": all-same logical shape (",
                         t.logical_rows, ", ", t.logical_cols, ") is not (N x ", t.uniform_rows,
                         ", ", t.uniform_cols, ")");
  } else if (t.mode == GroupedShapeMode::kVaryingFirst) {
    TESSERA_CHECK_STATUS(t.logical_cols == t.uniform_cols, Status::kShapeMismatch, arg,
                         ": varying-first logical cols ", t.logical_cols, " != uniform cols ",
                         t.uniform_cols);
  }
  const int64_t elems = t.logical_rows * t.logical_cols;
  if (!t.quantized()) {
    TESSERA_CHECK_STATUS(is_floating_input(t.dtype), Status::kDTypeMismatch, arg, ": dtype ",
                         dtype_name(t.dtype), " of an unquantized tensor; expected float32, "
                         "bfloat16 or float16");
    check_storage_field(t.data, t.dtype, elems, t.device, arg, "data");
    TESSERA_CHECK(t.columnwise_data.data == nullptr && t.scale_inv.data == nullptr &&
                      t.columnwise_scale_inv.data == nullptr,
                  arg, ": an unquantized tensor has only `data`");
  } else {
    TESSERA_CHECK(t.has_rowwise() == t.config.rowwise && t.has_columnwise() == t.config.columnwise,
                  arg, ": config.rowwise/columnwise (", t.config.rowwise, "/", t.config.columnwise,
                  ") disagree with the data fields present");
    for (bool cw : {false, true}) {
      if (!(cw ? t.has_columnwise() : t.has_rowwise())) continue;
      const MatrixShape ds = data_shape(t.config, 2, 2, cw);
      const MatrixShape ss = scale_shape(t.config, 2, 2, cw);
      check_storage_field(cw ? t.columnwise_data : t.data, ds.dtype, elems, t.device, arg,
                          cw ? "columnwise_data" : "data");
      check_storage_field(cw ? t.columnwise_scale_inv : t.scale_inv, ss.dtype, 0, t.device, arg,
                          cw ? "columnwise_scale_inv" : "scale_inv");
      const TensorView& amax = cw ? t.columnwise_amax : t.amax;
      if (amax.data != nullptr) {
        check_storage_field(amax, DType::kFloat32, n, t.device, arg,
                            cw ? "columnwise_amax" : "amax");
      }
    }
  }
  if (t.host.known()) check_host_offsets(t, arg);
}

// ---- description ------------------------------------------------------------------------------

std::string to_string(const GroupedTensorView& t, int64_t max_members) {
  std::ostringstream os;
  os << "GroupedTensor(" << t.num_tensors << " members, " << grouped_shape_mode_name(t.mode)
     << ", logical (" << t.logical_rows << ", " << t.logical_cols << "), ";
  if (t.quantized()) {
    os << scaling_mode_name(t.config.mode) << ' ' << dtype_name(t.config.element) << ' '
       << (t.has_rowwise() ? "rowwise" : "")
       << (t.has_rowwise() && t.has_columnwise() ? "+" : "")
       << (t.has_columnwise() ? "columnwise" : "") << ", "
       << (t.config.scale_layout == ScaleLayout::kSwizzled ? "swizzled" : "compact")
       << " scales";
  } else {
    os << dtype_name(t.dtype) << " (unquantized)";
  }
  os << ", " << to_string(t.device) << ")";
  auto bytes = [&](const TensorView& f, const char* name) {
    if (f.data != nullptr) os << "\n  " << name << ": " << f.to_string() << ", " << f.nbytes()
                              << " B";
  };
  bytes(t.data, "data");
  bytes(t.columnwise_data, "columnwise_data");
  bytes(t.scale_inv, "scale_inv");
  bytes(t.columnwise_scale_inv, "columnwise_scale_inv");
  bytes(t.amax, "amax");
  bytes(t.columnwise_amax, "columnwise_amax");
  if (!t.host.known()) {
    os << "\n  member shapes: on " << to_string(t.device) << " only (device split sizes)";
    return os.str();
  }
  const int64_t* o = t.host.tensor_offsets.as<const int64_t>();
  const int64_t shown = std::min(t.num_tensors, std::max<int64_t>(max_members, 0));
  for (int64_t g = 0; g < shown; ++g) {
    const auto [rows, cols] = detail::grouped_member_shape(t, g, "to_string");
    os << "\n  [" << g << "] (" << rows << ", " << cols << ") at element " << o[g];
    if (t.quantized()) {
      os << ", scales at " << t.host.scale_offsets.as<const int64_t>()[g] << " / "
         << t.host.columnwise_scale_offsets.as<const int64_t>()[g];
    }
  }
  if (shown < t.num_tensors) os << "\n  ... " << t.num_tensors - shown << " more";
  const int64_t live = o[t.num_tensors];
  if (live < t.logical_rows * t.logical_cols) {
    os << "\n  capacity: " << live << " of " << t.logical_rows * t.logical_cols
       << " elements live";
  }
  return os.str();
}

std::string GroupedTensor::to_string(int64_t max_members) const {
  return tessera::to_string(view_, max_members);
}

}  // namespace tessera
