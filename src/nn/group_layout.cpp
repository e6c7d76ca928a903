// make_group_layout: unpadded and padded group offsets from split sizes in one
// splits_to_offsets_multi call (through token_padding_offsets).
#include "tessera/nn/group_layout.h"

#include "tessera/core/status.h"
#include "tessera/nn/token_padding.h"
#include "tessera/scan/splits_to_offsets.h"

namespace tessera::nn {

namespace {

// Points layout.offsets / padded_offsets into layout.storage, reusing the storage when only
// `layout` holds it, it is on `device` and large enough; otherwise a new one.
void place_layout_offsets(GroupLayout& layout, int64_t num_groups, int64_t align, Device device) {
  const OffsetsSpec specs[2] = {{1, true, DType::kInt64, 1}, {1, true, DType::kInt64, align}};
  const int64_t bytes = offsets_storage_bytes(num_groups, specs);
  const bool reusable = layout.storage && layout.storage.use_count() == 1 &&
                        layout.storage->device() == device &&
                        static_cast<int64_t>(layout.storage->bytes()) >= bytes;
  if (!reusable) layout.storage = std::make_shared<Buffer>(static_cast<size_t>(bytes), device);
  const std::vector<TensorView> views =
      place_offsets(layout.storage->data(), device, num_groups, specs);
  layout.num_groups = num_groups;
  layout.align = align;
  layout.device = device;
  layout.offsets = views[0];
  layout.padded_offsets = views[1];
}

void make_group_layout_into(GroupLayout& layout, const TensorView& splits, int64_t rows,
                            int64_t align, Device device, int32_t* error_flag, Stream stream) {
  check_view(splits, "make_group_layout: splits", {DType::kInt32, DType::kInt64});
  TESSERA_CHECK_STATUS(splits.ndim == 1 && splits.shape[0] >= 1, Status::kShapeMismatch,
                       "make_group_layout: splits must be 1-D with >= 1 group, got ",
                       splits.to_string());
  TESSERA_CHECK(rows >= 0, "make_group_layout: rows ", rows, " must be >= 0");
  TESSERA_CHECK(align >= 1, "make_group_layout: align ", align, " must be >= 1");
  place_layout_offsets(layout, splits.shape[0], align, device);
  layout.rows = rows;
  const int64_t n1 = layout.num_groups + 1;
  ScanOptions options;
  options.total_bound = rows;
  options.error_flag = error_flag;
  token_padding_offsets(splits, align, layout.offsets, layout.padded_offsets, options, stream);
  if (align == 1) {
    layout.padded_rows = rows;
  } else if (device.is_cpu()) {
    // Host values: the exact padded total sizes the padded buffers.
    layout.padded_rows = layout.padded_offsets.as<const int64_t>()[n1 - 1];
  } else if (splits.device.is_cpu()) {
    // Host splits, device layout: the exact padded total from the host values (no sync).
    layout.padded_rows = 0;
    for (int64_t g = 0; g < layout.num_groups; ++g) {
      const int64_t s = splits.dtype == DType::kInt32 ? splits.as<const int32_t>()[g]
                                                      : splits.as<const int64_t>()[g];
      layout.padded_rows += (s + align - 1) / align * align;
    }
  } else {
    // Device splits: a host-known bound, itself a multiple of the alignment (kernels that
    // need the buffer's rows to be aligned accept it).
    const int64_t bound = padded_rows_bound(rows, layout.num_groups, align);
    layout.padded_rows = (bound + align - 1) / align * align;
  }
}

}  // namespace

GroupLayout make_group_layout(const TensorView& splits, int64_t rows, int64_t align,
                              Device device, int32_t* error_flag, Stream stream) {
  GroupLayout layout;
  make_group_layout_into(layout, splits, rows, align, device, error_flag, stream);
  return layout;
}

std::vector<int64_t> host_offsets(const GroupLayout& layout, bool padded) {
  const TensorView& v = padded ? layout.padded_offsets : layout.offsets;
  std::vector<int64_t> out(static_cast<size_t>(layout.num_groups + 1));
  copy_bytes(out.data(), Device::cpu(), v.data, v.device, out.size() * sizeof(int64_t));
  return out;
}

}  // namespace tessera::nn
