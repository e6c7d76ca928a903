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

/* ---- grouped GEMM (DESIGN §7) ----------------------------------------------------------------
 * D_g = alpha_g * op(A_g) op(B_g) + bias_g + beta * D_g, FP32 accumulation. An opaque problem
 * handle is filled with setters (new settings can be added without breaking callers), then
 * checked, sized and run. Shapes per kind are those of tessera/gemm/grouped_gemm.h:
 *   M-grouped: A (T, K), B (G, N, K) (transpose_b = 1, default) or (G, K, N), D (T, N);
 *   K-grouped: A (T, M), B (T, N), D (G, M, N) (transpose_a = 1, transpose_b = 0 required);
 *   batched:   A (G, M, K) or (G, K, M), B as M-grouped, D (G, M, N).
 * Tensors are contiguous, row-major, unquantized (float32/bfloat16/float16). */
typedef enum tessera_grouped_gemm_kind {
  TESSERA_GROUPED_GEMM_M_GROUPED = 0,
  TESSERA_GROUPED_GEMM_K_GROUPED = 1,
  TESSERA_GROUPED_GEMM_BATCHED = 2
} tessera_grouped_gemm_kind;

/* Which tensor of the problem tessera_grouped_gemm_set_tensor sets. */
typedef enum tessera_grouped_gemm_tensor {
  TESSERA_GROUPED_GEMM_A = 0,
  TESSERA_GROUPED_GEMM_B = 1,
  TESSERA_GROUPED_GEMM_D = 2,
  TESSERA_GROUPED_GEMM_BIAS = 3,          /* optional (G, N) */
  TESSERA_GROUPED_GEMM_GROUP_OFFSETS = 4, /* int32/int64, format below */
  TESSERA_GROUPED_GEMM_GROUP_ALPHA = 5    /* optional float32 (G) */
} tessera_grouped_gemm_tensor;

typedef enum tessera_group_offsets_format {
  TESSERA_GROUP_OFFSETS_START = 0, /* G+1 entries, leading 0 */
  TESSERA_GROUP_OFFSETS_END = 1    /* G cumulative end offsets (torch._grouped_mm) */
} tessera_group_offsets_format;

typedef struct tessera_grouped_gemm_problem_s* tessera_grouped_gemm_problem;

/* A new problem of `kind` with `num_groups` groups; alpha 1, beta 0, transpose_b = 1 (0 for
 * K-grouped, which also gets transpose_a = 1), start offsets, capacity = rows of A. */
tessera_status tessera_grouped_gemm_create(tessera_grouped_gemm_problem* problem, int32_t kind,
                                           int64_t num_groups);
/* Frees the handle (NULL is a no-op). */
tessera_status tessera_grouped_gemm_destroy(tessera_grouped_gemm_problem problem);
/* Sets one tensor (`which`: tessera_grouped_gemm_tensor); data NULL clears an optional one. The
 * memory is not copied: it must stay valid until run returns (CUDA: until the stream reaches it). */
tessera_status tessera_grouped_gemm_set_tensor(tessera_grouped_gemm_problem problem, int32_t which,
                                               const void* data, int32_t dtype, int32_t ndim,
                                               const int64_t* shape, tessera_device device);
tessera_status tessera_grouped_gemm_set_layout(tessera_grouped_gemm_problem problem,
                                               int32_t transpose_a, int32_t transpose_b);
/* Offsets format (tessera_group_offsets_format) and the host-known capacity (-1 = rows of A). */
tessera_status tessera_grouped_gemm_set_offsets_format(tessera_grouped_gemm_problem problem,
                                                       int32_t format, int64_t max_total_rows);
tessera_status tessera_grouped_gemm_set_scalars(tessera_grouped_gemm_problem problem, float alpha,
                                                float beta);
/* TESSERA_STATUS_OK or the specific reason (tessera_last_error() explains). */
tessera_status tessera_grouped_gemm_can_implement(tessera_grouped_gemm_problem problem);
tessera_status tessera_grouped_gemm_workspace_size(tessera_grouped_gemm_problem problem,
                                                   int64_t* bytes);
/* workspace: >= workspace_size bytes, 256-byte aligned, on the operands' device (NULL if 0). */
tessera_status tessera_grouped_gemm_run(tessera_grouped_gemm_problem problem, void* workspace,
                                        int64_t workspace_bytes, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_C_API_H_ */
