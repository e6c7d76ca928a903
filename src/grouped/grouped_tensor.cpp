// GroupedTensor creation: the layout plan from host shapes or device split sizes, metadata
// placement (host copies and device arrays), owned or wrapped data/scale storage, usages added
// later, and the graph-capturable recomputation of offsets from device split sizes.
#include <algorithm>
#include <cstring>

#include "grouped/grouped_backend.h"
#include "grouped/grouped_plan.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"
#include "tessera/quantize/quantizer.h"

namespace tessera {
namespace detail {
namespace {

void check_options(const GroupedTensorOptions& o) {
  if (o.config.mode == ScalingMode::kNone) {
    TESSERA_CHECK_STATUS(is_floating_input(o.dtype), Status::kDTypeMismatch,
                         "GroupedTensor: options.dtype ", dtype_name(o.dtype),
                         " is not accepted for an unquantized tensor; expected float32, bfloat16 "
                         "or float16");
    return;
  }
  TESSERA_CHECK(o.config.rowwise || o.config.columnwise,
                "GroupedTensor: options.config asks for neither a rowwise nor a columnwise copy");
  validate_config(o.config);  // throws a clear Error naming a bad field
}

// E2M1 rows must start on a byte in every member (see the storage contract).
void check_e2m1_parity(const QuantizerConfig& c, int64_t g, int64_t rows, int64_t cols) {
  if (c.mode == ScalingMode::kNone || c.element != DType::kFloat4E2M1) return;
  if (c.rowwise) {
    TESSERA_CHECK(data_shape(c, rows, cols, false).cols % 2 == 0, "GroupedTensor: member ", g,
                  " (", rows, ", ", cols, "): e2m1 rowwise data needs an even number of columns");
  }
  if (c.columnwise) {
    TESSERA_CHECK(data_shape(c, rows, cols, true).cols % 2 == 0, "GroupedTensor: member ", g,
                  " (", rows, ", ", cols, "): e2m1 columnwise data needs an even number of ",
                  "elements per stored row");
  }
}

GroupedShapeMode infer_mode(std::span<const std::array<int64_t, 2>> shapes,
                            const std::optional<GroupedShapeMode>& wanted) {
  bool same_rows = true, same_cols = true;
  for (const auto& s : shapes) {
    same_rows = same_rows && s[0] == shapes[0][0];
    same_cols = same_cols && s[1] == shapes[0][1];
  }
  const GroupedShapeMode inferred = same_rows && same_cols ? GroupedShapeMode::kAllSame
                                    : same_cols            ? GroupedShapeMode::kVaryingFirst
                                    : same_rows            ? GroupedShapeMode::kVaryingLast
                                                           : GroupedShapeMode::kVaryingBoth;
  if (!wanted) return inferred;
  const GroupedShapeMode m = *wanted;
  const bool ok = m == GroupedShapeMode::kVaryingBoth ||
                  (m == GroupedShapeMode::kVaryingFirst && same_cols) ||
                  (m == GroupedShapeMode::kVaryingLast && same_rows) ||
                  (m == GroupedShapeMode::kAllSame && same_rows && same_cols);
  TESSERA_CHECK_STATUS(ok, Status::kShapeMismatch, "GroupedTensor: options.mode ",
                       grouped_shape_mode_name(m), " does not fit the shapes (",
                       grouped_shape_mode_name(inferred), ")");
  return m;
}

// Scale buffer sizes of both usages (also an absent one, so it can be added later).
void plan_scales(GroupedPlan& p, const QuantizerConfig& c, bool capacity) {
  if (!p.quantized) return;
  for (int u = 0; u < 2; ++u) {
    int64_t elems = 0;
    if (p.host_known) {
      p.scale_offsets[u] = grouped_scale_offsets(c, p.rows, p.cols, u == 1);
      elems = p.scale_offsets[u].back();
    }
    if (capacity) {
      elems = std::max(elems, grouped_scale_capacity(c, p.n, p.logical_rows, p.uniform_cols, u));
    }
    p.scale_elems[u] = elems;
  }
}

}  // namespace

GroupedPlan plan_from_shapes(std::span<const std::array<int64_t, 2>> shapes,
                             const GroupedTensorOptions& options) {
  TESSERA_CHECK(!shapes.empty(), "GroupedTensor: shapes: at least one member is needed");
  check_options(options);
  GroupedPlan p;
  p.n = static_cast<int64_t>(shapes.size());
  p.quantized = options.config.mode != ScalingMode::kNone;
  p.host_known = true;
  p.offsets.assign(1, 0);
  for (int64_t g = 0; g < p.n; ++g) {
    const auto& s = shapes[static_cast<size_t>(g)];
    TESSERA_CHECK(s[0] >= 0 && s[1] >= 0, "GroupedTensor: shapes[", g, "] = (", s[0], ", ", s[1],
                  ") has a negative dimension");
    int64_t numel = 0, end = 0;
    TESSERA_CHECK_STATUS(!__builtin_mul_overflow(s[0], s[1], &numel) &&
                             !__builtin_add_overflow(p.offsets.back(), numel, &end),
                         Status::kOutOfRange, "GroupedTensor: total elements overflow int64 at "
                         "member ", g);
    check_e2m1_parity(options.config, g, s[0], s[1]);
    p.rows.push_back(s[0]);
    p.cols.push_back(s[1]);
    p.offsets.push_back(end);
  }
  p.mode = infer_mode(shapes, options.mode);
  int64_t sum_rows = 0;
  for (int64_t r : p.rows) sum_rows = checked_add(sum_rows, r, "GroupedTensor: member rows");
  p.uniform_rows = p.rows[0];
  p.uniform_cols = p.cols[0];
  switch (p.mode) {
    case GroupedShapeMode::kAllSame:
      p.logical_rows = checked_mul(p.n, p.uniform_rows, "GroupedTensor: members x rows");
      p.logical_cols = p.uniform_cols;
      break;
    case GroupedShapeMode::kVaryingFirst:
      p.uniform_rows = 0;
      p.logical_rows = sum_rows;
      p.logical_cols = p.uniform_cols;
      break;
    case GroupedShapeMode::kVaryingLast:
      p.uniform_cols = 0;
      p.logical_rows = p.uniform_rows;
      p.logical_cols = p.offsets.back() / std::max<int64_t>(p.uniform_rows, 1);
      break;
    case GroupedShapeMode::kVaryingBoth:
      p.uniform_rows = p.uniform_cols = 0;
      p.logical_rows = 1;
      p.logical_cols = p.offsets.back();
      break;
  }
  const bool capacity = options.capacity_rows >= 0;
  if (capacity) {
    TESSERA_CHECK(p.mode == GroupedShapeMode::kVaryingFirst, "GroupedTensor: options.capacity_rows "
                  "applies to varying-first tensors (token buffers), not ",
                  grouped_shape_mode_name(p.mode));
    TESSERA_CHECK_STATUS(options.capacity_rows >= sum_rows, Status::kBufferTooSmall,
                         "GroupedTensor: options.capacity_rows ", options.capacity_rows,
                         " is smaller than the ", sum_rows, " rows of the members");
    p.logical_rows = options.capacity_rows;
  }
  p.data_elems = checked_mul(p.logical_rows, p.logical_cols, "GroupedTensor: rows x cols");
  plan_scales(p, options.config, capacity);
  return p;
}

GroupedPlan plan_from_device_splits(int64_t n, int64_t cols, const GroupedTensorOptions& options) {
  TESSERA_CHECK(n >= 1, "GroupedTensor: splits: at least one member is needed, got ", n);
  TESSERA_CHECK(cols >= 0, "GroupedTensor: cols ", cols, " is negative");
  TESSERA_CHECK(options.capacity_rows >= 0, "GroupedTensor: options.capacity_rows (", 
                options.capacity_rows, ") must give a host-known bound on the sum of the device "
                "split sizes");
  TESSERA_CHECK(!options.mode || *options.mode == GroupedShapeMode::kVaryingFirst,
                "GroupedTensor: device split sizes make a varying-first tensor, not ",
                grouped_shape_mode_name(*options.mode));
  check_options(options);
  if (options.config.mode != ScalingMode::kNone && options.config.element == DType::kFloat4E2M1) {
    TESSERA_CHECK(!options.config.rowwise || cols % 2 == 0, "GroupedTensor: e2m1 rowwise data "
                  "needs an even number of columns, got ", cols);
  }
  GroupedPlan p;
  p.n = n;
  p.mode = GroupedShapeMode::kVaryingFirst;
  p.quantized = options.config.mode != ScalingMode::kNone;
  p.uniform_cols = p.logical_cols = cols;
  p.logical_rows = options.capacity_rows;
  TESSERA_CHECK_STATUS(!__builtin_mul_overflow(p.logical_rows, cols, &p.data_elems),
                       Status::kOutOfRange, "GroupedTensor: capacity_rows x cols overflows int64");
  plan_scales(p, options.config, true);
  return p;
}

GroupedMetaPlacement place_grouped_meta(const GroupedPlan& p) {
  GroupedMetaPlacement m;
  auto add = [&](int64_t len) {
    const int64_t at = m.total;
    m.total += (len + 1) / 2 * 2;  // keep every array 16-byte aligned
    return at;
  };
  const bool first = p.mode == GroupedShapeMode::kVaryingFirst ||
                     p.mode == GroupedShapeMode::kVaryingBoth;
  const bool last = p.mode == GroupedShapeMode::kVaryingLast ||
                    p.mode == GroupedShapeMode::kVaryingBoth;
  if (first) m.first_dims = add(p.n);
  if (last) m.last_dims = add(p.n);
  m.offsets = add(p.n + 1);
  if (p.quantized) {
    m.scale_offsets[0] = add(p.n + 1);
    m.scale_offsets[1] = add(p.n + 1);
  }
  return m;
}

}  // namespace detail

using detail::GroupedMetaPlacement;
using detail::GroupedPlan;

struct GroupedTensorBuilder {
  static GroupedHostMetadata meta_views(int64_t* base, Device dev, const GroupedMetaPlacement& m,
                                        int64_t n) {
    auto at = [&](int64_t off, int64_t len) {
      return off < 0 ? TensorView{} : TensorView::contiguous(base + off, DType::kInt64, {len}, dev);
    };
    GroupedHostMetadata v;
    v.first_dims = at(m.first_dims, n);
    v.last_dims = at(m.last_dims, n);
    v.tensor_offsets = at(m.offsets, n + 1);
    v.scale_offsets = at(m.scale_offsets[0], n + 1);
    v.columnwise_scale_offsets = at(m.scale_offsets[1], n + 1);
    return v;
  }

  static void set_meta(GroupedTensorView& v, const GroupedHostMetadata& m) {
    v.first_dims = m.first_dims;
    v.last_dims = m.last_dims;
    v.tensor_offsets = m.tensor_offsets;
    v.scale_offsets = m.scale_offsets;
    v.columnwise_scale_offsets = m.columnwise_scale_offsets;
  }

  static GroupedTensor begin(const GroupedPlan& p, const GroupedTensorOptions& o) {
    GroupedTensor t;
    GroupedTensorView& v = t.view_;
    v.num_tensors = p.n;
    v.mode = p.mode;
    v.logical_rows = p.logical_rows;
    v.logical_cols = p.logical_cols;
    v.uniform_rows = p.uniform_rows;
    v.uniform_cols = p.uniform_cols;
    v.config = p.quantized ? o.config : unquantized_config();
    v.config.rowwise = v.config.columnwise = false;  // set as buffers are attached
    v.dtype = p.quantized ? o.config.element : o.dtype;
    v.device = o.device;
    t.data_elems_ = p.data_elems;
    t.scale_elems_ = p.scale_elems;
    return t;
  }

  // Host copies of the plan's metadata, and the device arrays (a copy on a CUDA device).
  static void set_host_meta(GroupedTensor& t, const GroupedPlan& p) {
    const GroupedMetaPlacement m = detail::place_grouped_meta(p);
    t.host_meta_.assign(static_cast<size_t>(m.total), 0);
    int64_t* h = t.host_meta_.data();
    auto put = [&](int64_t off, const std::vector<int64_t>& src) {
      if (off >= 0) std::copy(src.begin(), src.end(), h + off);
    };
    put(m.first_dims, p.rows);
    put(m.last_dims, p.cols);
    put(m.offsets, p.offsets);
    put(m.scale_offsets[0], p.scale_offsets[0]);
    put(m.scale_offsets[1], p.scale_offsets[1]);
    t.view_.host = meta_views(h, Device::cpu(), m, p.n);
    if (t.view_.device.is_cpu()) {
      set_meta(t.view_, t.view_.host);
      return;
    }
    t.meta_ = Buffer(static_cast<size_t>(m.total) * sizeof(int64_t), t.view_.device);
    copy_bytes(t.meta_.data(), t.view_.device, h, Device::cpu(), t.meta_.bytes());
    set_meta(t.view_, meta_views(t.meta_.as<int64_t>(), t.view_.device, m, p.n));
  }

  struct UsageFields {
    TensorView* data;
    TensorView* scale_inv;
    TensorView* amax;
    Buffer* data_buf;
    Buffer* scale_buf;
    Buffer* amax_buf;
  };

  static UsageFields fields(GroupedTensor& t, bool cw) {
    GroupedTensorView& v = t.view_;
    if (cw) {
      return {&v.columnwise_data, &v.columnwise_scale_inv, &v.columnwise_amax,
              &t.columnwise_data_, &t.columnwise_scale_inv_, &t.columnwise_amax_};
    }
    return {&v.data, &v.scale_inv, &v.amax, &t.data_, &t.scale_inv_, &t.amax_};
  }

  // What one usage needs: element and scale dtypes, and whether a per-member amax exists
  // (exactly when a standalone QuantizedTensor of the config has one: has_amax).
  struct UsageNeeds {
    DType data_dtype = DType::kFloat32;
    DType scale_dtype = DType::kFloat32;
    bool amax = false;
  };

  static UsageNeeds needs(const GroupedTensorView& v, bool cw) {
    UsageNeeds n;
    if (!v.quantized()) {
      n.data_dtype = v.dtype;
      return n;
    }
    QuantizerConfig c = v.config;
    c.rowwise = !cw;
    c.columnwise = cw;
    n.data_dtype = data_shape(c, 2, 2, cw).dtype;
    n.scale_dtype = scale_shape(c, 2, 2, cw).dtype;
    n.amax = has_amax(c.mode);
    return n;
  }

  static void allocate_usage(GroupedTensor& t, bool cw) {
    GroupedTensorView& v = t.view_;
    const UsageNeeds n = needs(v, cw);
    const UsageFields f = fields(t, cw);
    const Device dev = v.device;
    auto alloc = [&](Buffer* buf, TensorView* field, DType dt, int64_t elems) {
      *buf = Buffer(std::max<size_t>(static_cast<size_t>(dtype_bytes(dt, elems)), 1), dev);
      *field = TensorView::contiguous(buf->data(), dt, {elems}, dev);
    };
    alloc(f.data_buf, f.data, n.data_dtype, t.data_elems_);
    if (v.quantized()) {
      alloc(f.scale_buf, f.scale_inv, n.scale_dtype, t.scale_elems_[cw ? 1 : 0]);
      // Slot slack is never read; zero it on the host so whole-buffer dumps are deterministic.
      if (dev.is_cpu()) f.scale_buf->fill_bytes(0);
      if (n.amax) alloc(f.amax_buf, f.amax, DType::kFloat32, v.num_tensors);
    }
    (cw ? v.config.columnwise : v.config.rowwise) = true;
  }

  static void attach_usage(GroupedTensor& t, bool cw, const GroupedBuffers& b) {
    GroupedTensorView& v = t.view_;
    const UsageNeeds n = needs(v, cw);
    const UsageFields f = fields(t, cw);
    const char* usage = cw ? "columnwise_" : "";
    auto attach = [&](const TensorView& given, TensorView* field, DType dt, int64_t elems,
                      const char* name) {
      TESSERA_CHECK(given.data != nullptr, "GroupedTensor::wrap: buffers.", usage, name,
                    " is needed by the config but absent");
      check_view(given, "GroupedTensor::wrap: buffer");
      TESSERA_CHECK_STATUS(given.dtype == dt || given.dtype == DType::kUInt8,
                           Status::kDTypeMismatch, "GroupedTensor::wrap: buffers.", usage, name,
                           " has dtype ", dtype_name(given.dtype), "; expected ", dtype_name(dt),
                           " (or uint8 bytes)");
      TESSERA_CHECK(given.device == v.device, "GroupedTensor::wrap: buffers.", usage, name,
                    " is on ", tessera::to_string(given.device), " but options.device is ",
                    tessera::to_string(v.device));
      TESSERA_CHECK_STATUS(given.nbytes() >= dtype_bytes(dt, elems), Status::kBufferTooSmall,
                           "GroupedTensor::wrap: buffers.", usage, name, " holds ",
                           given.nbytes(), " bytes; the layout needs ", dtype_bytes(dt, elems),
                           " (", elems, " ", dtype_name(dt), ")");
      *field = TensorView::contiguous(given.data, dt, {elems}, v.device);
    };
    attach(cw ? b.columnwise_data : b.data, f.data, n.data_dtype, t.data_elems_, "data");
    if (v.quantized()) {
      attach(cw ? b.columnwise_scale_inv : b.scale_inv, f.scale_inv, n.scale_dtype,
             t.scale_elems_[cw ? 1 : 0], "scale_inv");
      if (n.amax) {
        attach(cw ? b.columnwise_amax : b.amax, f.amax, DType::kFloat32, v.num_tensors, "amax");
      }
    }
    (cw ? v.config.columnwise : v.config.rowwise) = true;
  }

  static void reject_unused(const TensorView& given, bool used, const char* name) {
    TESSERA_CHECK(given.data == nullptr || used, "GroupedTensor::wrap: buffers.", name,
                  " is given but the config does not use it");
  }
};

GroupedTensor GroupedTensor::from_shapes(std::span<const std::array<int64_t, 2>> shapes,
                                         const GroupedTensorOptions& options) {
  const GroupedPlan p = detail::plan_from_shapes(shapes, options);
  GroupedTensor t = GroupedTensorBuilder::begin(p, options);
  GroupedTensorBuilder::set_host_meta(t, p);
  const bool q = p.quantized;
  if (!q || options.config.rowwise) GroupedTensorBuilder::allocate_usage(t, false);
  if (q && options.config.columnwise) GroupedTensorBuilder::allocate_usage(t, true);
  return t;
}

GroupedTensor GroupedTensor::wrap(std::span<const std::array<int64_t, 2>> shapes,
                                  const GroupedTensorOptions& options,
                                  const GroupedBuffers& buffers) {
  const GroupedPlan p = detail::plan_from_shapes(shapes, options);
  GroupedTensor t = GroupedTensorBuilder::begin(p, options);
  GroupedTensorBuilder::set_host_meta(t, p);
  t.owns_storage_ = false;
  const bool q = p.quantized;
  const bool rw = !q || options.config.rowwise;
  const bool cw = q && options.config.columnwise;
  GroupedTensorBuilder::reject_unused(buffers.data, rw, "data");
  GroupedTensorBuilder::reject_unused(buffers.scale_inv, rw && q, "scale_inv");
  GroupedTensorBuilder::reject_unused(buffers.amax, rw && q, "amax");
  GroupedTensorBuilder::reject_unused(buffers.columnwise_data, cw, "columnwise_data");
  GroupedTensorBuilder::reject_unused(buffers.columnwise_scale_inv, cw, "columnwise_scale_inv");
  GroupedTensorBuilder::reject_unused(buffers.columnwise_amax, cw, "columnwise_amax");
  if (rw) GroupedTensorBuilder::attach_usage(t, false, buffers);
  if (cw) GroupedTensorBuilder::attach_usage(t, true, buffers);
  return t;
}

void GroupedTensor::ensure_usage(bool rowwise, bool columnwise) {
  const bool add_rw = rowwise && !view_.has_rowwise();
  const bool add_cw = columnwise && !view_.has_columnwise();
  if (!add_rw && !add_cw) return;
  TESSERA_CHECK_STATUS(view_.quantized() || !add_cw, Status::kUnsupported,
                       "GroupedTensor::ensure_usage: an unquantized tensor has one copy; there is "
                       "no columnwise usage");
  TESSERA_CHECK_STATUS(owns_storage_, Status::kUnsupported, "GroupedTensor::ensure_usage: the ",
                       add_rw ? "rowwise" : "columnwise", " usage is missing and the tensor wraps "
                       "caller-owned buffers (wrap them with every usage needed)");
  if (view_.host.known()) {  // E2M1 members must start on a byte in the new copy too
    QuantizerConfig wanted = view_.config;
    wanted.rowwise = add_rw;
    wanted.columnwise = add_cw;
    for (int64_t g = 0; g < view_.num_tensors; ++g) {
      const auto [rows, cols] = member_shape(g);
      detail::check_e2m1_parity(wanted, g, rows, cols);
    }
  }
  if (add_rw) GroupedTensorBuilder::allocate_usage(*this, false);
  if (add_cw) GroupedTensorBuilder::allocate_usage(*this, true);
}

int64_t GroupedTensor::storage_bytes() const {
  int64_t total = 0;
  for (const TensorView* f : {&view_.data, &view_.columnwise_data, &view_.scale_inv,
                              &view_.columnwise_scale_inv, &view_.amax, &view_.columnwise_amax}) {
    if (f->data != nullptr) total += f->nbytes();
  }
  return total;
}

// ---- device split sizes -----------------------------------------------------------------------

GroupedTensor GroupedTensor::from_device_splits(const TensorView& splits, int64_t cols,
                                                const GroupedTensorOptions& options,
                                                const TensorView& tensor_offsets,
                                                const ScanOptions& scan, Stream stream) {
  check_view(splits, "GroupedTensor: splits", {DType::kInt32, DType::kInt64});
  TESSERA_CHECK_STATUS(splits.ndim == 1, Status::kShapeMismatch,
                       "GroupedTensor: splits must be 1-D, got ", splits.to_string());
  TESSERA_CHECK(splits.device == options.device, "GroupedTensor: splits are on ",
                tessera::to_string(splits.device), " but options.device is ", tessera::to_string(options.device));
  const GroupedPlan p = detail::plan_from_device_splits(splits.shape[0], cols, options);
  GroupedTensor t = GroupedTensorBuilder::begin(p, options);
  t.device_splits_ = true;
  const GroupedMetaPlacement m = detail::place_grouped_meta(p);
  t.meta_ = Buffer(static_cast<size_t>(m.total) * sizeof(int64_t), options.device);
  GroupedTensorBuilder::set_meta(
      t.view_, GroupedTensorBuilder::meta_views(t.meta_.as<int64_t>(), options.device, m, p.n));
  if (!p.quantized || options.config.rowwise) GroupedTensorBuilder::allocate_usage(t, false);
  if (p.quantized && options.config.columnwise) GroupedTensorBuilder::allocate_usage(t, true);
  t.update_from_device_splits(splits, tensor_offsets, scan, stream);
  return t;
}

namespace {

void fill_metadata_cpu(const TensorView& splits, int64_t* first_dims,
                       std::span<int64_t* const> arange_out, std::span<const int64_t> step) {
  const int64_t n = splits.shape[0];
  dispatch_index_dtype(splits.dtype, "GroupedTensor: splits", [&](auto tag) {
    using In = typename decltype(tag)::type;
    const In* s = splits.as<const In>();
    for (int64_t g = 0; g < n; ++g) first_dims[g] = static_cast<int64_t>(s[g]);
  });
  for (size_t k = 0; k < arange_out.size(); ++k) {
    for (int64_t g = 0; g <= n; ++g)
      arange_out[k][g] = checked_mul(g, step[k], "GroupedTensor: scale offsets");
  }
}

// CPU only: precomputed offsets must be the scan the splits give (leading 0, cols × sizes).
void check_precomputed_offsets_cpu(const TensorView& offsets, const TensorView& first_dims,
                                   int64_t cols) {
  const int64_t* o = offsets.as<const int64_t>();
  const int64_t* f = first_dims.as<const int64_t>();
  TESSERA_CHECK(o[0] == 0, "GroupedTensor: tensor_offsets[0] = ", o[0], "; expected 0");
  for (int64_t g = 0; g < first_dims.shape[0]; ++g) {
    TESSERA_CHECK(o[g + 1] >= o[g], "GroupedTensor: tensor_offsets are not monotonic: [", g,
                  "] = ", o[g], " > [", g + 1, "] = ", o[g + 1]);
  }
  for (int64_t g = 0; g < first_dims.shape[0]; ++g) {
    const int64_t want = checked_mul(f[g], cols, "GroupedTensor: splits x cols");
    TESSERA_CHECK(o[g + 1] - o[g] == want, "GroupedTensor: tensor_offsets[", g + 1,
                  "] - tensor_offsets[", g, "] = ", o[g + 1] - o[g], " but splits[", g,
                  "] x cols = ", want);
  }
}

}  // namespace

void GroupedTensor::update_from_device_splits(const TensorView& splits,
                                              const TensorView& tensor_offsets,
                                              const ScanOptions& scan, Stream stream) {
  TESSERA_CHECK_STATUS(device_splits_, Status::kUnsupported, "GroupedTensor::"
                       "update_from_device_splits: only for tensors made by from_device_splits");
  const int64_t n = view_.num_tensors;
  check_view(splits, "GroupedTensor: splits", {DType::kInt32, DType::kInt64});
  TESSERA_CHECK_STATUS(splits.ndim == 1 && splits.shape[0] == n, Status::kShapeMismatch,
                       "GroupedTensor: splits must be 1-D of length ", n, ", got ",
                       splits.to_string());
  TESSERA_CHECK(splits.device == view_.device, "GroupedTensor: splits are on ",
                tessera::to_string(splits.device), " but the tensor is on ", tessera::to_string(view_.device));
  GroupedPlan shape_only;  // placement depends on n, mode and quantized only
  shape_only.n = n;
  shape_only.mode = view_.mode;
  shape_only.quantized = view_.quantized();
  const GroupedMetaPlacement m = detail::place_grouped_meta(shape_only);
  const GroupedHostMetadata own =
      GroupedTensorBuilder::meta_views(meta_.as<int64_t>(), view_.device, m, n);
  const bool precomputed = tensor_offsets.data != nullptr;
  if (precomputed) {
    check_view(tensor_offsets, "GroupedTensor: tensor_offsets", {DType::kInt64});
    TESSERA_CHECK_STATUS(tensor_offsets.ndim == 1 && tensor_offsets.shape[0] == n + 1,
                         Status::kShapeMismatch, "GroupedTensor: tensor_offsets must be 1-D of "
                         "length N+1 = ", n + 1, ", got ", tensor_offsets.to_string());
    TESSERA_CHECK(tensor_offsets.device == view_.device, "GroupedTensor: tensor_offsets are on ",
                  tessera::to_string(tensor_offsets.device), " but the tensor is on ",
                  tessera::to_string(view_.device));
  }
  view_.tensor_offsets = precomputed ? tensor_offsets : own.tensor_offsets;

  std::vector<OffsetsSpec> specs;
  std::vector<TensorView> outputs;
  std::vector<int64_t*> arange_out;
  std::vector<int64_t> arange_step;
  if (!precomputed) {
    specs.push_back({view_.logical_cols, true, DType::kInt64, 1});
    outputs.push_back(own.tensor_offsets);
  }
  if (view_.quantized()) {
    for (int u = 0; u < 2; ++u) {
      const ScaleSlotRule r = grouped_scale_slot_rule(view_.config, view_.logical_cols, u == 1);
      const TensorView& out = u == 0 ? own.scale_offsets : own.columnwise_scale_offsets;
      if (r.stride == 0) {
        arange_out.push_back(out.as<int64_t>());
        arange_step.push_back(r.constant);
      } else {
        specs.push_back({r.stride, true, DType::kInt64, r.align});
        outputs.push_back(out);
      }
    }
  }
  ScanOptions options = scan;
  options.total_bound = scan.total_bound >= 0 ? std::min(scan.total_bound, view_.logical_rows)
                                              : view_.logical_rows;
  splits_to_offsets_multi(splits, specs, outputs, options, stream);
  if (view_.device.is_cuda()) {
    detail::grouped_fill_metadata_cuda(splits, own.first_dims.as<int64_t>(), arange_out,
                                       arange_step, stream);
    return;
  }
  fill_metadata_cpu(splits, own.first_dims.as<int64_t>(), arange_out, arange_step);
  if (precomputed) check_precomputed_offsets_cpu(tensor_offsets, own.first_dims,
                                                 view_.logical_cols);
  view_.host = {};
  for (int64_t g = 0; g < n; ++g) {
    detail::check_e2m1_parity(view_.config, g, own.first_dims.as<const int64_t>()[g],
                              view_.logical_cols);
  }
  view_.host = own;
  view_.host.tensor_offsets = view_.tensor_offsets;
}

}  // namespace tessera
