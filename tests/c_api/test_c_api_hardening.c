/* The C API at the edges of int64, from plain C: sizes whose products overflow give
 * TESSERA_STATUS_OUT_OF_RANGE naming the argument (quantizer buffer sizes and quantize, GEMM
 * tensors, codecs, the routing ops' num_tokens x top_k); the sized codecs refuse buffers that are
 * too small; huge empty extents ((2^40, 0) quantize, 2^40 empty GEMM batches) return at once.
 * Expected sizes are worked out by hand in the comments. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tessera/c_api.h"

#include "c_expect.h"

#define P2(k) ((int64_t)1 << (k))
static const tessera_device kCpu = {0, 0};

static int mentions(const char* word) { return strstr(tessera_last_error(), word) != NULL; }

/* Quantizer sizes: exact where they fit, OUT_OF_RANGE naming rows/cols where they do not. */
static void test_quantizer_sizes(void) {
  tessera_quantizer_config c;
  tessera_quantizer q = NULL;
  int64_t data = -1, scale = -1;
  int mode, cw;
  EXPECT(tessera_quantizer_config_default(TESSERA_SCALING_MXFP8, &c) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_create(&c, kCpu, &q) == TESSERA_STATUS_OK);
  /* (2^40, 2^20) e4m3: 2^60 data bytes, 2^40 x 2^15 = 2^55 E8M0 scales. */
  EXPECT(tessera_quantizer_buffer_sizes(q, P2(40), P2(20), 0, &data, &scale) == TESSERA_STATUS_OK);
  EXPECT(data == P2(60) && scale == P2(55));
  /* (2^40, 2^40): 2^80 elements. The old code returned OK with 0 bytes. */
  EXPECT(tessera_quantizer_buffer_sizes(q, P2(40), P2(40), 0, &data, &scale) ==
         TESSERA_STATUS_OUT_OF_RANGE);
  EXPECT(mentions("rows") && mentions("cols"));
  {
    /* ... and quantize with those sizes is refused before touching memory. */
    unsigned char d[1], s[1];
    float x[1] = {0.0f};
    tessera_quantized_buffers b;
    memset(&b, 0, sizeof b);
    b.data = d;
    b.scale_inv = s;
    EXPECT(tessera_quantize(q, x, TESSERA_DTYPE_FLOAT32, P2(40), P2(40), &b, NULL) ==
           TESSERA_STATUS_OUT_OF_RANGE);
    EXPECT(mentions("rows * cols"));
    EXPECT(tessera_dequantize(q, &b, P2(40), P2(40), 0, x, NULL) == TESSERA_STATUS_OUT_OF_RANGE);
    /* (2^62, 1) float32 input: 2^62 elements fit, 2^64 bytes do not. */
    EXPECT(tessera_quantize(q, x, TESSERA_DTYPE_FLOAT32, P2(62), 1, &b, NULL) ==
           TESSERA_STATUS_OUT_OF_RANGE);
    EXPECT(mentions("x"));
  }
  EXPECT(tessera_quantizer_destroy(q) == TESSERA_STATUS_OK);

  /* NVFP4 (0, INT64_MAX): 0 data bytes, but E2M1 rows padded to an even count of codes do not
   * fit int64 (found by tests/fuzz/fuzz_c_api.c, seed 8: UBSan overflow in cols + 1). */
  EXPECT(tessera_quantizer_config_default(TESSERA_SCALING_NVFP4, &c) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_create(&c, kCpu, &q) == TESSERA_STATUS_OK);
  {
    unsigned char d[1], s[1];
    float x[1] = {0.0f}, amax = 0.0f;
    tessera_quantized_buffers b;
    memset(&b, 0, sizeof b);
    b.data = d;
    b.scale_inv = s;
    b.amax = &amax;
    EXPECT(tessera_quantize(q, x, TESSERA_DTYPE_FLOAT32, 0, INT64_MAX, &b, NULL) ==
           TESSERA_STATUS_OUT_OF_RANGE);
    EXPECT(mentions("data"));
  }
  EXPECT(tessera_quantizer_destroy(q) == TESSERA_STATUS_OK);

  /* NVFP4 (5, 2^61): 5 x 2^61 elements overflow int64 though the packed data (5 x 2^60 bytes)
   * would not; tessera_quantize refuses that shape, so buffer_sizes does too (it returned OK). */
  EXPECT(tessera_quantizer_config_default(TESSERA_SCALING_NVFP4, &c) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_create(&c, kCpu, &q) == TESSERA_STATUS_OK);
  for (cw = 0; cw <= 1; ++cw) {
    EXPECT(tessera_quantizer_buffer_sizes(q, 5, P2(61), cw, &data, &scale) ==
           TESSERA_STATUS_OUT_OF_RANGE);
    EXPECT(mentions("rows * cols"));
    EXPECT(tessera_quantizer_buffer_sizes(q, P2(61), 5, cw, &data, &scale) ==
           TESSERA_STATUS_OUT_OF_RANGE);
  }
  EXPECT(tessera_quantizer_destroy(q) == TESSERA_STATUS_OK);

  /* Every mode and usage at the int64 edges: OK with a size >= 0, or OUT_OF_RANGE. */
  for (mode = 1; mode <= 8; ++mode) {
    for (cw = 0; cw <= 1; ++cw) {
      const int64_t shapes[][2] = {{INT64_MAX, INT64_MAX}, {INT64_MAX, 1}, {1, INT64_MAX},
                                   {INT64_MAX, 0},         {0, INT64_MAX}, {P2(62), 3},
                                   {INT64_MAX - 100, 33}};
      size_t i;
      EXPECT(tessera_quantizer_config_default(mode, &c) == TESSERA_STATUS_OK);
      c.columnwise = cw;
      EXPECT(tessera_quantizer_create(&c, kCpu, &q) == TESSERA_STATUS_OK);
      for (i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
        const tessera_status st =
            tessera_quantizer_buffer_sizes(q, shapes[i][0], shapes[i][1], cw, &data, &scale);
        EXPECT(st == TESSERA_STATUS_OUT_OF_RANGE ||
               (st == TESSERA_STATUS_OK && data >= 0 && scale >= 0));
      }
      /* 1 x INT64_MAX rowwise: INT64_MAX codes (FP8) or ceil(INT64_MAX / 2) = 2^62 bytes (E2M1). */
      EXPECT(tessera_quantizer_buffer_sizes(q, 1, INT64_MAX, 0, &data, &scale) == TESSERA_STATUS_OK);
      EXPECT(data == (mode >= TESSERA_SCALING_NVFP4 ? P2(62) : INT64_MAX));
      tessera_quantizer_destroy(q);
    }
  }
}

/* GEMM tensors: element counts and byte sizes past int64 name the tensor. */
static void test_gemm_shapes(void) {
  tessera_grouped_gemm_problem p = NULL;
  float dummy[4] = {0};
  const int64_t huge[2] = {P2(40), P2(40)};         /* 2^80 elements */
  const int64_t bytes_past[2] = {P2(62), 2};        /* 2^63 elements: one past INT64_MAX */
  const int64_t fits_bytes_not[2] = {P2(61), 2};    /* 2^62 elements, 2^64 float32 bytes */
  const int64_t empty_overflow[3] = {P2(62), 4, 0}; /* 0 elements, non-zero extents 2^64 */
  EXPECT(tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_M_GROUPED, 2) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, dummy, TESSERA_DTYPE_FLOAT32, 2,
                                         huge, kCpu) == TESSERA_STATUS_OUT_OF_RANGE);
  EXPECT(mentions("A"));
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, dummy, TESSERA_DTYPE_FLOAT32, 2,
                                         bytes_past, kCpu) == TESSERA_STATUS_OUT_OF_RANGE);
  EXPECT(mentions("D"));
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, dummy, TESSERA_DTYPE_FLOAT32, 2,
                                         fits_bytes_not, kCpu) == TESSERA_STATUS_OUT_OF_RANGE);
  EXPECT(mentions("B"));
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, dummy, TESSERA_DTYPE_BFLOAT16, 3,
                                         empty_overflow, kCpu) == TESSERA_STATUS_OUT_OF_RANGE);
  /* 2^61 x 2 bfloat16 = 2^63 bytes: one past INT64_MAX. */
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, dummy, TESSERA_DTYPE_BFLOAT16, 2,
                                         fits_bytes_not, kCpu) == TESSERA_STATUS_OUT_OF_RANGE);
  tessera_grouped_gemm_destroy(p);
  /* num_groups = INT64_MAX: G + 1 start offsets cannot be counted. */
  EXPECT(tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_M_GROUPED, INT64_MAX) ==
         TESSERA_STATUS_OK);
  {
    const int64_t a_shape[2] = {0, 0}, b_shape[3] = {INT64_MAX, 0, 0}, d_shape[2] = {0, 0};
    const int64_t o_shape[1] = {1};
    int64_t offs[1] = {0};
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, dummy, TESSERA_DTYPE_FLOAT32, 2,
                                    a_shape, kCpu);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, dummy, TESSERA_DTYPE_FLOAT32, 3,
                                    b_shape, kCpu);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, dummy, TESSERA_DTYPE_FLOAT32, 2,
                                    d_shape, kCpu);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_GROUP_OFFSETS, offs,
                                    TESSERA_DTYPE_INT64, 1, o_shape, kCpu);
    EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_OUT_OF_RANGE);
    EXPECT(mentions("num_groups"));
  }
  tessera_grouped_gemm_destroy(p);
}

/* The sized codecs: a numel that does not fit the buffers is refused, naming the buffer. */
static void test_sized_codecs(void) {
  const float x[3] = {1.0f, -0.5f, 3.0f};
  unsigned char codes[3];
  float back[3];
  EXPECT(tessera_encode_sized(x, sizeof x, TESSERA_DTYPE_FLOAT32, codes, 2, TESSERA_DTYPE_E4M3, 3,
                              kCpu, NULL) == TESSERA_STATUS_BUFFER_TOO_SMALL);
  EXPECT(mentions("dst_bytes"));
  EXPECT(tessera_encode_sized(x, 8, TESSERA_DTYPE_FLOAT32, codes, 3, TESSERA_DTYPE_E4M3, 3, kCpu,
                              NULL) == TESSERA_STATUS_BUFFER_TOO_SMALL);
  EXPECT(mentions("src_bytes"));
  /* E2M1 packs two per byte: 3 codes need 2 bytes. */
  EXPECT(tessera_encode_sized(x, sizeof x, TESSERA_DTYPE_FLOAT32, codes, 2, TESSERA_DTYPE_E2M1, 3,
                              kCpu, NULL) == TESSERA_STATUS_OK);
  EXPECT(codes[0] == 0x92 && codes[1] == 0x05); /* 1.0 = 0x2, -0.5 = 0x9; 3.0 = 0x5 */
  EXPECT(tessera_decode_sized(codes, 2, TESSERA_DTYPE_E2M1, back, sizeof back, 3, kCpu, NULL) ==
         TESSERA_STATUS_OK);
  EXPECT(back[0] == 1.0f && back[1] == -0.5f && back[2] == 3.0f);
  EXPECT(tessera_decode_sized(codes, 2, TESSERA_DTYPE_E2M1, back, 11, 3, kCpu, NULL) ==
         TESSERA_STATUS_BUFFER_TOO_SMALL);
  EXPECT(mentions("dst_bytes"));
  EXPECT(tessera_encode_sized(x, -1, TESSERA_DTYPE_FLOAT32, codes, 3, TESSERA_DTYPE_E4M3, 3, kCpu,
                              NULL) == TESSERA_STATUS_INVALID_ARGUMENT);
  /* 2^62 float32 elements: 2^64 bytes. */
  EXPECT(tessera_encode_sized(x, sizeof x, TESSERA_DTYPE_FLOAT32, codes, 3, TESSERA_DTYPE_E4M3,
                              P2(62), kCpu, NULL) == TESSERA_STATUS_OUT_OF_RANGE);
  EXPECT(mentions("src"));
  EXPECT(tessera_decode(codes, TESSERA_DTYPE_E4M3, back, INT64_MAX, kCpu, NULL) ==
         TESSERA_STATUS_OUT_OF_RANGE);
}

/* Huge empty extents return at once (seconds of CPU time would mean a loop over empty rows). */
static void test_empty_extents(void) {
  clock_t t0 = clock();
  double seconds;
  tessera_quantizer_config c;
  tessera_quantizer q = NULL;
  static float scales[4096]; /* the 2^12 per-row scales of the rowwise mode */
  unsigned char d[1];
  float x[1] = {0.0f}, amax = -1.0f;
  tessera_quantized_buffers b;
  int mode;
  for (mode = 1; mode <= 8; ++mode) {
    int64_t data = -1, scale = -1;
    const int64_t rows = mode == TESSERA_SCALING_ROWWISE ? P2(12) : P2(40); /* 1 scale per row */
    EXPECT(tessera_quantizer_config_default(mode, &c) == TESSERA_STATUS_OK);
    EXPECT(tessera_quantizer_create(&c, kCpu, &q) == TESSERA_STATUS_OK);
    EXPECT(tessera_quantizer_buffer_sizes(q, rows, 0, 0, &data, &scale) == TESSERA_STATUS_OK);
    EXPECT(data == 0);
    if (mode == TESSERA_SCALING_ROWWISE) EXPECT(scale == 4 * P2(12));
    EXPECT(scale <= (int64_t)sizeof scales);
    memset(&b, 0, sizeof b);
    b.data = d;
    b.data_bytes = 0;
    b.scale_inv = scales;
    b.scale_inv_bytes = scale;
    b.amax = &amax;
    scales[0] = -7.0f;
    EXPECT(tessera_quantize(q, x, TESSERA_DTYPE_FLOAT32, rows, 0, &b, NULL) == TESSERA_STATUS_OK);
    EXPECT(tessera_dequantize(q, &b, rows, 0, 0, x, NULL) == TESSERA_STATUS_OK);
    if (mode == TESSERA_SCALING_TENSOR || mode >= TESSERA_SCALING_NVFP4) EXPECT(amax == 0.0f);
    /* An empty row (amax 0) has scale 1 (docs/numerics.md, current scaling): scale_inv 1. */
    if (mode == TESSERA_SCALING_TENSOR || mode == TESSERA_SCALING_ROWWISE)
      EXPECT(scales[0] == 1.0f && scales[scale / 4 - 1] == 1.0f);
    tessera_quantizer_destroy(q);
  }
  {
    /* Batched GEMM of 2^40 empty batches: A (G, 0, 4), B (G, 0, 4), D (G, 0, 0). */
    tessera_grouped_gemm_problem p = NULL;
    float dummy[1] = {0};
    int64_t ws = -1;
    const int64_t a_shape[3] = {P2(40), 0, 4}, d_shape[3] = {P2(40), 0, 0};
    EXPECT(tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_BATCHED, P2(40)) ==
           TESSERA_STATUS_OK);
    EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, dummy,
                                           TESSERA_DTYPE_BFLOAT16, 3, a_shape, kCpu) ==
           TESSERA_STATUS_OK);
    EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, dummy,
                                           TESSERA_DTYPE_BFLOAT16, 3, a_shape, kCpu) ==
           TESSERA_STATUS_OK);
    EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, dummy, TESSERA_DTYPE_FLOAT32,
                                           3, d_shape, kCpu) == TESSERA_STATUS_OK);
    EXPECT(tessera_grouped_gemm_workspace_size(p, &ws) == TESSERA_STATUS_OK);
    EXPECT(ws == 0);
    EXPECT(tessera_grouped_gemm_run(p, NULL, 0, NULL) == TESSERA_STATUS_OK);
    tessera_grouped_gemm_destroy(p);
  }
  seconds = (double)(clock() - t0) / CLOCKS_PER_SEC;
  EXPECT(seconds < 2.0);
}

/* num_tokens x top_k past int64 in the routing ops: OUT_OF_RANGE naming both (it was a signed
 * overflow: a UBSan report, or a wrapped pair count and a misleading message). */
static void test_moe_pairs(void) {
  tessera_moe_routing_options o = {2, 1, -1, NULL};
  int64_t rows = -1, bytes = -1, row_pair[1] = {-1};
  float x[1] = {0.0f}, out[1];
  EXPECT(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, P2(40), 0, row_pair, TESSERA_DTYPE_INT64,
                             1, P2(40), TESSERA_SCALING_NONE, 0, 0, out, NULL, 0, kCpu,
                             NULL) == TESSERA_STATUS_OUT_OF_RANGE);
  EXPECT(mentions("num_tokens") && mentions("top_k"));
  EXPECT(tessera_moe_routing_workspace_bytes(P2(40), P2(40), &o, kCpu, &bytes) ==
         TESSERA_STATUS_OUT_OF_RANGE);
  EXPECT(mentions("num_tokens") && mentions("top_k"));
  EXPECT(tessera_moe_permuted_rows(P2(40), P2(40), &o, &rows) == TESSERA_STATUS_OUT_OF_RANGE);
  EXPECT(mentions("num_tokens") && mentions("top_k"));
  o.capacity = 4; /* E x C rows are few, but the pairs still have to be countable */
  EXPECT(tessera_moe_permuted_rows(P2(40), P2(40), &o, &rows) == TESSERA_STATUS_OUT_OF_RANGE);
  EXPECT(rows == -1 && bytes == -1);
}

int main(void) {
  test_quantizer_sizes();
  test_moe_pairs();
  test_gemm_shapes();
  test_sized_codecs();
  test_empty_extents();
  printf("test_c_api_hardening: %d passed, %d failed\n", checks - failures, failures);
  return failures == 0 ? 0 : 1;
}
