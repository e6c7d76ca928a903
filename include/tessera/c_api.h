/* tessera C API.
 *
 * Every function returns a tessera_status; on failure tessera_last_error() returns a message for
 * the calling thread (valid until that thread's next tessera call). No C++ exception ever crosses
 * this boundary. Objects are opaque handles created and destroyed by the API; enums have fixed
 * values so that fields and values can be added without breaking callers. */
#ifndef TESSERA_C_API_H_
#define TESSERA_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tessera_status {
  TESSERA_STATUS_OK = 0,
  TESSERA_STATUS_INVALID_ARGUMENT = 1,
  TESSERA_STATUS_SHAPE_MISMATCH = 2,
  TESSERA_STATUS_DTYPE_MISMATCH = 3,
  TESSERA_STATUS_MISALIGNED = 4,
  TESSERA_STATUS_UNSUPPORTED = 5,
  TESSERA_STATUS_OUT_OF_RANGE = 6,
  TESSERA_STATUS_BUFFER_TOO_SMALL = 7,
  TESSERA_STATUS_OUT_OF_MEMORY = 8,
  TESSERA_STATUS_DEVICE_ERROR = 9,
  TESSERA_STATUS_NO_DEVICE = 10,
  TESSERA_STATUS_INTERNAL = 11
} tessera_status;

typedef enum tessera_dtype {
  TESSERA_DTYPE_FLOAT32 = 0,
  TESSERA_DTYPE_BFLOAT16 = 1,
  TESSERA_DTYPE_FLOAT16 = 2,
  TESSERA_DTYPE_E4M3 = 3,
  TESSERA_DTYPE_E5M2 = 4,
  TESSERA_DTYPE_E8M0 = 5,
  TESSERA_DTYPE_E2M1 = 6, /* packed two per byte, element 2j in the low nibble */
  TESSERA_DTYPE_UINT8 = 7,
  TESSERA_DTYPE_INT32 = 8,
  TESSERA_DTYPE_INT64 = 9,
  TESSERA_DTYPE_FLOAT64 = 10
} tessera_dtype;

/* Enum-typed arguments are passed as int32_t holding an enum value, so that a value the library
 * does not know is reported as TESSERA_STATUS_INVALID_ARGUMENT rather than being undefined. */

/* Where memory lives: device_type 0 = CPU, 1 = CUDA; device_index = CUDA ordinal. */
typedef struct tessera_device {
  int32_t device_type;
  int32_t device_index;
} tessera_device;

/* Library version "MAJOR.MINOR.PATCH"; never NULL. */
const char* tessera_version(void);
/* Name of a status ("invalid argument"); never NULL. */
const char* tessera_status_string(int32_t status);
/* Message describing the calling thread's last failure ("" if none); never NULL. */
const char* tessera_last_error(void);

/* Encodes `numel` elements of `src` (float32/bfloat16/float16) into `dst` (e4m3, e5m2, e8m0,
 * e2m1 packed, bfloat16 or float16), round-to-nearest-even with saturation (DESIGN §3).
 * `stream` is a cudaStream_t for CUDA memory (NULL = default stream), ignored on the CPU. */
tessera_status tessera_encode(const void* src, int32_t src_dtype, void* dst, int32_t dst_dtype,
                              int64_t numel, tessera_device device,
                              void* stream);
/* Decodes `numel` elements of `src` into float32 `dst`. */
tessera_status tessera_decode(const void* src, int32_t src_dtype, float* dst, int64_t numel,
                              tessera_device device, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_C_API_H_ */
