/* tessera C API (contracts in full: docs/c_api.md).
 *
 * Every function returns a tessera_status; on failure tessera_last_error() returns a message for
 * the calling thread (valid until that thread's next tessera call) naming the argument; text the
 * caller passed (a recipe name) is echoed at most 64 characters long, then "...". No C++
 * exception ever crosses this boundary. Enums have fixed values so that fields and values can be
 * added without breaking callers.
 *
 * Arguments. An int32_t flag must be 0 or 1, an enum value one of its enum, a count >= 0, a
 * capacity -1 or >= 0; anything else is TESSERA_STATUS_INVALID_ARGUMENT naming the parameter
 * (also where the call would not read it). Sizes are int64: a size whose element count or byte
 * count does not fit int64 gives TESSERA_STATUS_OUT_OF_RANGE with a message naming the argument.
 *
 * Handles. Objects are opaque handles created and destroyed by the API. Each starts with a magic
 * word naming its type, checked by every call; destroy clears it and keeps the memory inside
 * tessera (reused by later creates of the same type, oldest first; at most 4096 kept per type).
 * So these return TESSERA_STATUS_INVALID_ARGUMENT instead of touching freed memory: a NULL
 * handle (destroy: a no-op), a handle used or destroyed again after destroy until a later create
 * reuses its memory, a handle of the other type, a pointer to readable memory that is no handle.
 * Not detected: a destroyed handle whose memory a later create reused (it then names that live
 * object), one destroyed more than 4096 destroys of its type ago, a pointer to unmapped memory,
 * a handle destroyed while another thread uses it (undefined behaviour, as with free()). */
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
 * e2m1 packed, bfloat16 or float16), round-to-nearest-even with saturation (docs/formats.md).
 * `src_bytes` / `dst_bytes` are the sizes of the caller's buffers: when numel elements of the
 * dtype do not fit, the call returns TESSERA_STATUS_BUFFER_TOO_SMALL naming the buffer (a numel
 * whose byte size overflows int64: TESSERA_STATUS_OUT_OF_RANGE) and touches no memory.
 * `stream` is a cudaStream_t for CUDA memory (NULL = default stream), ignored on the CPU. */
tessera_status tessera_encode_sized(const void* src, int64_t src_bytes, int32_t src_dtype, void* dst,
                                    int64_t dst_bytes, int32_t dst_dtype, int64_t numel,
                                    tessera_device device, void* stream);
/* Decodes `numel` elements of `src` into float32 `dst`; sizes checked as in tessera_encode_sized. */
tessera_status tessera_decode_sized(const void* src, int64_t src_bytes, int32_t src_dtype,
                                    float* dst, int64_t dst_bytes, int64_t numel,
                                    tessera_device device, void* stream);
/* UNCHECKED forms of the two calls above, kept for existing callers: they take no buffer sizes
 * and trust that `src` and `dst` hold `numel` elements (a wrong numel reads or writes out of
 * bounds). New code should call tessera_encode_sized / tessera_decode_sized. */
tessera_status tessera_encode(const void* src, int32_t src_dtype, void* dst, int32_t dst_dtype,
                              int64_t numel, tessera_device device,
                              void* stream);
tessera_status tessera_decode(const void* src, int32_t src_dtype, float* dst, int64_t numel,
                              tessera_device device, void* stream);

/* ---- grouped GEMM (docs/gemm.md) ----------------------------------------------------------------
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
/* Frees the handle (NULL is a no-op; a destroyed handle: INVALID_ARGUMENT, see Handles). */
tessera_status tessera_grouped_gemm_destroy(tessera_grouped_gemm_problem problem);
/* Sets one tensor (`which`: tessera_grouped_gemm_tensor); data NULL clears an optional one (dtype,
 * ndim and device must still be valid). The memory is not copied: it must stay valid until run
 * returns (CUDA: until the stream reaches it). D may not share a byte with an input the problem
 * reads (A, B, bias, offsets, group_alpha; beta = 1 reads D itself by design): can_implement and
 * run refuse it with INVALID_ARGUMENT ("D overlaps A"). Only the bytes the problem touches count
 * (grouped operands and an M-grouped D: the capacity rows). */
tessera_status tessera_grouped_gemm_set_tensor(tessera_grouped_gemm_problem problem, int32_t which,
                                               const void* data, int32_t dtype, int32_t ndim,
                                               const int64_t* shape, tessera_device device);
tessera_status tessera_grouped_gemm_set_layout(tessera_grouped_gemm_problem problem,
                                               int32_t transpose_a, int32_t transpose_b);
/* Offsets format (tessera_group_offsets_format) and the host-known capacity (-1 = rows of A,
 * else >= 0). */
tessera_status tessera_grouped_gemm_set_offsets_format(tessera_grouped_gemm_problem problem,
                                                       int32_t format, int64_t max_total_rows);
tessera_status tessera_grouped_gemm_set_scalars(tessera_grouped_gemm_problem problem, float alpha,
                                                float beta);
/* M-grouped only: 1 = also write zeros into D's rows past the last group's end (read where the
 * offsets live, on the device without a sync); 0 (default) = leave them as they are. */
tessera_status tessera_grouped_gemm_set_zero_unused_rows(tessera_grouped_gemm_problem problem,
                                                         int32_t zero_unused_rows);
/* TESSERA_STATUS_OK or the specific reason (tessera_last_error() explains). */
tessera_status tessera_grouped_gemm_can_implement(tessera_grouped_gemm_problem problem);
tessera_status tessera_grouped_gemm_workspace_size(tessera_grouped_gemm_problem problem,
                                                   int64_t* bytes);
/* workspace: >= workspace_size bytes, 256-byte aligned, on the operands' device (NULL if 0). */
tessera_status tessera_grouped_gemm_run(tessera_grouped_gemm_problem problem, void* workspace,
                                        int64_t workspace_bytes, void* stream);

/* ---- quantization (exact numerics: docs/numerics.md) ---------------------------
 * A quantizer turns a float32/bfloat16/float16 (rows, cols) matrix into quantized data plus
 * scales. Buffers are caller-owned, on the quantizer's device; a usage is present when its data
 * pointer is not NULL. tessera_quantizer_buffer_sizes() gives the byte sizes to allocate. */

typedef enum tessera_scaling_mode {
  TESSERA_SCALING_NONE = 0,
  TESSERA_SCALING_TENSOR = 1,        /* FP8, one FP32 scale (current or delayed scaling) */
  TESSERA_SCALING_ROWWISE = 2,       /* FP8, FP32 scale per row (columnwise: per column) */
  TESSERA_SCALING_BLOCK_1X128 = 3,   /* FP8, FP32 scale per 1x128 block */
  TESSERA_SCALING_BLOCK_128X128 = 4, /* FP8, FP32 scale per 128x128 tile */
  TESSERA_SCALING_MXFP8 = 5,         /* E8M0 scale per 1x32 (columnwise 32x1) block */
  TESSERA_SCALING_MXFP8_32X32 = 6,
  TESSERA_SCALING_NVFP4 = 7,         /* E2M1, E4M3 scale per 1x16 + FP32 global amax */
  TESSERA_SCALING_NVFP4_16X16 = 8
} tessera_scaling_mode;

typedef enum tessera_tensor_type {
  TESSERA_TENSOR_INPUT = 0,
  TESSERA_TENSOR_WEIGHT = 1,
  TESSERA_TENSOR_OUTPUT = 2,
  TESSERA_TENSOR_GRAD_OUTPUT = 3,
  TESSERA_TENSOR_GRAD_INPUT = 4,
  TESSERA_TENSOR_GRAD_WEIGHT = 5
} tessera_tensor_type;

/* Mirrors tessera::QuantizerConfig. Fill with tessera_quantizer_config_default(). Booleans are
 * 0/1; enums are passed as int32_t (scale_layout 0 compact / 1 swizzled, amax_algo 0 max /
 * 1 most_recent, e8m0_rounding 0 round-up / 1 floor). */
typedef struct tessera_quantizer_config {
  int32_t mode;
  int32_t element; /* tessera_dtype: E4M3, E5M2 (FP8 modes) or E2M1 (NVFP4) */
  int32_t rowwise;
  int32_t columnwise;
  int32_t scale_layout;
  int32_t delayed;
  int32_t amax_history_len;
  int32_t amax_algo;
  int32_t margin;
  float amax_epsilon;
  int32_t power_of_two_scales;
  int32_t e8m0_rounding;
  int32_t random_hadamard;
  int32_t stochastic_rounding;
  uint64_t rng_seed;
  uint64_t rng_offset;
} tessera_quantizer_config;

/* Caller-owned buffers of one quantized tensor. *_bytes give each buffer's size (checked). */
typedef struct tessera_quantized_buffers {
  void* data;
  int64_t data_bytes;
  void* scale_inv;
  int64_t scale_inv_bytes;
  void* columnwise_data;
  int64_t columnwise_data_bytes;
  void* columnwise_scale_inv;
  int64_t columnwise_scale_inv_bytes;
  float* amax;            /* one float; needed by the tensor and NVFP4 modes (rowwise usage) */
  float* columnwise_amax; /* likewise for the columnwise usage */
} tessera_quantized_buffers;

typedef struct tessera_quantizer_s* tessera_quantizer;

/* The defaults of `mode` (power-of-two scales for blocks, E2M1 for NVFP4, rowwise usage). */
tessera_status tessera_quantizer_config_default(int32_t mode, tessera_quantizer_config* out);
tessera_status tessera_quantizer_create(const tessera_quantizer_config* config,
                                        tessera_device device, tessera_quantizer* out);
/* The quantizer of a built-in recipe ("mxfp8", "fp8_current:e4m3", ...) for a tensor type. */
tessera_status tessera_quantizer_create_from_recipe(const char* recipe, int32_t tensor_type,
                                                    tessera_device device, tessera_quantizer* out);
/* NULL is accepted (a no-op); a destroyed handle: INVALID_ARGUMENT (see Handles). */
tessera_status tessera_quantizer_destroy(tessera_quantizer q);
tessera_status tessera_quantizer_get_config(tessera_quantizer q, tessera_quantizer_config* out);
/* Bytes of data and scale_inv of one usage (columnwise 0/1) of a (rows, cols) input; the shapes
 * tessera_quantize takes (rows * cols must fit int64, else OUT_OF_RANGE). */
tessera_status tessera_quantizer_buffer_sizes(tessera_quantizer q, int64_t rows, int64_t cols,
                                              int32_t columnwise, int64_t* data_bytes,
                                              int64_t* scale_inv_bytes);
/* Quantizes x (rows, cols) of x_dtype into `out`: the config's usages plus every usage whose
 * buffers are given (non-NULL data). The out buffers are checked against their *_bytes; x is
 * trusted to hold rows * cols elements (no size is passed for it). */
tessera_status tessera_quantize(tessera_quantizer q, const void* x, int32_t x_dtype, int64_t rows,
                                int64_t cols, const tessera_quantized_buffers* out, void* stream);
/* Dequantizes one usage of `in` (produced by this quantizer) into float32 out (rows, cols); `in`
 * is checked against its *_bytes, out is trusted to hold rows * cols floats. */
tessera_status tessera_dequantize(tessera_quantizer q, const tessera_quantized_buffers* in,
                                  int64_t rows, int64_t cols, int32_t columnwise, float* out,
                                  void* stream);
/* Delayed scaling: rolls the amax history and computes the next scale. */
tessera_status tessera_quantizer_update(tessera_quantizer q, void* stream);

/* ---- expert-parallel routing (docs/moe.md; contract: tessera/nn/moe_routing.h) ---------------
 * T tokens, k choices, E experts, H hidden, `rows` permuted rows (tessera_moe_permuted_rows).
 * Index maps (slot_map (T, k), row_pair (rows)) are int32 or int64 (map_dtype); activations are
 * float32/bfloat16/float16; probs float32 (T, k) or NULL (weights 1). All pointers on `device`;
 * `stream` is a cudaStream_t (NULL = default), ignored on the CPU. CUDA routing needs
 * options->error_flag (a device int32; bit 1 = an expert index outside [0, E)). */
typedef struct tessera_moe_routing_options {
  int64_t num_experts;
  int64_t align;      /* >= 1 */
  int64_t capacity;   /* -1 dropless; >= 0 rows per expert, a multiple of align */
  int32_t* error_flag;
} tessera_moe_routing_options;

tessera_status tessera_moe_permuted_rows(int64_t num_tokens, int64_t top_k,
                                         const tessera_moe_routing_options* options,
                                         int64_t* rows);
tessera_status tessera_moe_routing_workspace_bytes(int64_t num_tokens, int64_t top_k,
                                                   const tessera_moe_routing_options* options,
                                                   tessera_device device, int64_t* bytes);
/* indices (T, k) index_dtype -> counts (E) int64, padded_offsets (E+1) int64, slot_map,
 * row_pair, dropped (1) int64. */
tessera_status tessera_moe_routing(const void* indices, int32_t index_dtype, int64_t num_tokens,
                                   int64_t top_k, const tessera_moe_routing_options* options,
                                   int64_t* counts, int64_t* padded_offsets, void* slot_map,
                                   void* row_pair, int32_t map_dtype, int64_t rows,
                                   int64_t* dropped, void* workspace, int64_t workspace_bytes,
                                   tessera_device device, void* stream);
/* x (T, H) -> out (rows, H) of x's dtype (quant_mode TESSERA_SCALING_NONE), or FP8 codes of
 * `element` plus scale_inv (rowwise, block 1x128, mxfp8; e8m0_rounding 0 round-up / 1 floor;
 * compact scales of tessera_quantizer_buffer_sizes' size for (rows, H)). */
tessera_status tessera_moe_permute(const void* x, int32_t x_dtype, int64_t num_tokens,
                                   int64_t hidden, const void* row_pair, int32_t map_dtype,
                                   int64_t rows, int64_t top_k, int32_t quant_mode,
                                   int32_t element, int32_t e8m0_rounding, void* out,
                                   void* scale_inv, int64_t scale_inv_bytes,
                                   tessera_device device, void* stream);
/* dx (T, H) = gather-add of d_permuted (rows, H) (permute's backward). */
tessera_status tessera_moe_permute_backward(const void* d_permuted, int32_t d_dtype, int64_t rows,
                                            int64_t hidden, const void* slot_map,
                                            int32_t map_dtype, int64_t num_tokens,
                                            int64_t top_k, void* dx, int32_t dx_dtype,
                                            tessera_device device, void* stream);
/* out (T, H) = sum_j probs[t, j] * y[slot_map[t, j]]. */
tessera_status tessera_moe_unpermute(const void* y, int32_t y_dtype, int64_t rows, int64_t hidden,
                                     const void* slot_map, int32_t map_dtype, int64_t num_tokens,
                                     int64_t top_k, const float* probs, void* out,
                                     int32_t out_dtype, tessera_device device, void* stream);
/* dy (rows, H, dy_dtype) and dprobs (T, k) float32 (NULL to skip) from dout (T, H). */
tessera_status tessera_moe_unpermute_backward(const void* dout, int32_t dout_dtype, const void* y,
                                              int32_t y_dtype, int64_t rows, int64_t hidden,
                                              const void* slot_map, const void* row_pair,
                                              int32_t map_dtype, int64_t num_tokens,
                                              int64_t top_k, const float* probs, void* dy,
                                              int32_t dy_dtype, float* dprobs,
                                              tessera_device device, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_C_API_H_ */
