// C API: version, status strings, last error, bulk encode/decode.
#include "tessera/c_api.h"

#include "c_api/c_api_args.h"
#include "c_api/c_api_guard.h"
#include "tessera/core/checked_math.h"
#include "tessera/core/tensor_view.h"
#include "tessera/formats/convert.h"

namespace tessera::c_api {
namespace {
thread_local std::string g_last_error;

TensorView flat(const void* p, DType dt, int64_t numel, Device dev, const char* arg) {
  count_arg(numel, "numel");
  TESSERA_CHECK(p != nullptr || numel == 0, arg, " is NULL");
  (void)checked_dtype_bytes(dt, numel, arg);  // names the buffer when numel's bytes overflow
  return TensorView::contiguous(const_cast<void*>(p), dt, {numel}, dev);
}

// flat() plus the caller's byte size of the buffer, which must hold numel elements of dt.
TensorView flat_sized(const void* p, int64_t bytes, DType dt, int64_t numel, Device dev,
                      const char* arg, const char* bytes_arg) {
  count_arg(bytes, bytes_arg);
  const TensorView v = flat(p, dt, numel, dev, arg);
  TESSERA_CHECK_STATUS(v.nbytes() <= bytes, Status::kBufferTooSmall, bytes_arg, ": ", arg,
                       " holds ", bytes, " bytes but ", numel, " elements of ", dtype_name(dt),
                       " need ", v.nbytes());
  return v;
}
}  // namespace

void set_last_error(std::string message) noexcept {
  try {
    g_last_error = std::move(message);
  } catch (...) {
    g_last_error.clear();
  }
}
void clear_last_error() noexcept { g_last_error.clear(); }

}  // namespace tessera::c_api

using tessera::c_api::guard;

extern "C" {

const char* tessera_version(void) { return TESSERA_VERSION_STRING; }

const char* tessera_status_string(int32_t status) {
  if (status < 0 || status > static_cast<int32_t>(tessera::Status::kInternal)) return "unknown status";
  return tessera::status_string(static_cast<tessera::Status>(status));
}

const char* tessera_last_error(void) { return tessera::c_api::g_last_error.c_str(); }

tessera_status tessera_encode(const void* src, int32_t src_dtype, void* dst, int32_t dst_dtype,
                              int64_t numel, tessera_device device,
                              void* stream) {
  return guard([&] {
    using namespace tessera::c_api;
    const tessera::Device dev = device_arg(device);
    tessera::encode(flat(src, dtype_arg(src_dtype, "src_dtype"), numel, dev, "src"),
                    flat(dst, dtype_arg(dst_dtype, "dst_dtype"), numel, dev, "dst"),
                    tessera::Stream{stream});
  });
}

tessera_status tessera_decode(const void* src, int32_t src_dtype, float* dst, int64_t numel,
                              tessera_device device, void* stream) {
  return guard([&] {
    using namespace tessera::c_api;
    const tessera::Device dev = device_arg(device);
    tessera::decode(flat(src, dtype_arg(src_dtype, "src_dtype"), numel, dev, "src"),
                    flat(dst, tessera::DType::kFloat32, numel, dev, "dst"),
                    tessera::Stream{stream});
  });
}

tessera_status tessera_encode_sized(const void* src, int64_t src_bytes, int32_t src_dtype, void* dst,
                                    int64_t dst_bytes, int32_t dst_dtype, int64_t numel,
                                    tessera_device device, void* stream) {
  return guard([&] {
    using namespace tessera::c_api;
    const tessera::Device dev = device_arg(device);
    const tessera::TensorView s =
        flat_sized(src, src_bytes, dtype_arg(src_dtype, "src_dtype"), numel, dev, "src", "src_bytes");
    const tessera::TensorView d =
        flat_sized(dst, dst_bytes, dtype_arg(dst_dtype, "dst_dtype"), numel, dev, "dst", "dst_bytes");
    tessera::encode(s, d, tessera::Stream{stream});
  });
}

tessera_status tessera_decode_sized(const void* src, int64_t src_bytes, int32_t src_dtype,
                                    float* dst, int64_t dst_bytes, int64_t numel,
                                    tessera_device device, void* stream) {
  return guard([&] {
    using namespace tessera::c_api;
    const tessera::Device dev = device_arg(device);
    const tessera::TensorView s =
        flat_sized(src, src_bytes, dtype_arg(src_dtype, "src_dtype"), numel, dev, "src", "src_bytes");
    const tessera::TensorView d =
        flat_sized(dst, dst_bytes, tessera::DType::kFloat32, numel, dev, "dst", "dst_bytes");
    tessera::decode(s, d, tessera::Stream{stream});
  });
}

}  // extern "C"
