/* The grouped GEMM C API from plain C: an M-grouped forward and a K-grouped wgrad against plain
 * C loops, a BF16 run through a caller-allocated workspace, and specific statuses for bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/c_api.h"

#include "c_expect.h"

enum { G = 3, T = 12, K = 5, N = 4, M = 3 };
static const tessera_device kCpu = {0, 0};

static float value(int i) { return (float)((i * 7) % 11) * 0.25f - 1.0f; }

/* M-grouped forward y = x W^T with an empty middle group and 2 capacity rows. */
static void test_m_grouped(void) {
  float a[T * K], b[G * N * K], d[T * N];
  const int64_t offs[G + 1] = {0, 4, 4, 10}; /* rows 10, 11: capacity, never written */
  const int64_t a_shape[2] = {T, K}, b_shape[3] = {G, N, K}, d_shape[2] = {T, N};
  const int64_t o_shape[1] = {G + 1};
  tessera_grouped_gemm_problem p = NULL;
  int i, g, r, j, k;
  for (i = 0; i < T * K; ++i) a[i] = value(i);
  for (i = 0; i < G * N * K; ++i) b[i] = value(3 * i + 1);
  for (i = 0; i < T * N; ++i) d[i] = -99.0f;
  EXPECT(tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_M_GROUPED, G) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, a, TESSERA_DTYPE_FLOAT32, 2,
                                         a_shape, kCpu) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, b, TESSERA_DTYPE_FLOAT32, 3,
                                         b_shape, kCpu) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, d, TESSERA_DTYPE_FLOAT32, 2,
                                         d_shape, kCpu) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_GROUP_OFFSETS, offs,
                                         TESSERA_DTYPE_INT64, 1, o_shape, kCpu) ==
         TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_set_scalars(p, 2.0f, 0.0f) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_run(p, NULL, 0, NULL) == TESSERA_STATUS_OK);
  for (g = 0; g < G; ++g) {
    for (r = (int)offs[g]; r < offs[g + 1]; ++r) {
      for (j = 0; j < N; ++j) {
        double acc = 0.0;
        for (k = 0; k < K; ++k) acc += (double)a[r * K + k] * b[(g * N + j) * K + k];
        EXPECT(fabs(d[r * N + j] - 2.0 * acc) < 1e-5);
      }
    }
  }
  for (i = 10 * N; i < T * N; ++i) EXPECT(d[i] == -99.0f);
  /* zero_unused_rows: the capacity rows past the last group become zeros, the rest unchanged. */
  {
    const float before = d[0];
    EXPECT(tessera_grouped_gemm_set_zero_unused_rows(p, 1) == TESSERA_STATUS_OK);
    EXPECT(tessera_grouped_gemm_run(p, NULL, 0, NULL) == TESSERA_STATUS_OK);
    for (i = 10 * N; i < T * N; ++i) EXPECT(d[i] == 0.0f);
    EXPECT(d[0] == before);
    EXPECT(tessera_grouped_gemm_set_zero_unused_rows(p, 0) == TESSERA_STATUS_OK);
  }

  /* Bad input: wrong B (K mismatch), offsets past A, D too small, a bad enum, a NULL handle. */
  {
    const int64_t bad_b[3] = {G, N, K - 1}, small_d[2] = {9, N};
    const int64_t past[G + 1] = {0, 4, 4, 13};
    EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, b, TESSERA_DTYPE_FLOAT32, 3,
                                           bad_b, kCpu) == TESSERA_STATUS_OK);
    EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_SHAPE_MISMATCH);
    EXPECT(strstr(tessera_last_error(), "contraction dim") != NULL);
    EXPECT(tessera_grouped_gemm_run(p, NULL, 0, NULL) == TESSERA_STATUS_SHAPE_MISMATCH);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, b, TESSERA_DTYPE_FLOAT32, 3, b_shape,
                                    kCpu);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_GROUP_OFFSETS, past,
                                    TESSERA_DTYPE_INT64, 1, o_shape, kCpu);
    EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_OUT_OF_RANGE);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_GROUP_OFFSETS, offs,
                                    TESSERA_DTYPE_INT64, 1, o_shape, kCpu);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, d, TESSERA_DTYPE_FLOAT32, 2, small_d,
                                    kCpu);
    EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_BUFFER_TOO_SMALL);
    EXPECT(tessera_grouped_gemm_set_tensor(p, 17, d, TESSERA_DTYPE_FLOAT32, 2, small_d, kCpu) ==
           TESSERA_STATUS_INVALID_ARGUMENT);
    EXPECT(tessera_grouped_gemm_set_scalars(p, 1.0f, 0.5f) == TESSERA_STATUS_OK);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, d, TESSERA_DTYPE_FLOAT32, 2,
                                    d_shape, kCpu);
    EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_UNSUPPORTED);
  }
  EXPECT(tessera_grouped_gemm_destroy(p) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_can_implement(NULL) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_grouped_gemm_create(&p, 7, G) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(p == NULL);
}

/* K-grouped wgrad dW_g = 0.5 dy_g^T x_g with BF16 operands, FP32 out; empty group 0. alpha != 1
   needs a workspace on either CPU path (FP32 copies of A and B, or the BF16 path's staging). */
static void test_k_grouped_bf16(void) {
  unsigned short a16[T * M], b16[T * N];
  float a[T * M], b[T * N], d[G * M * N];
  const int32_t ends[G] = {0, 5, 12};
  const int64_t a_shape[2] = {T, M}, b_shape[2] = {T, N}, d_shape[3] = {G, M, N};
  const int64_t o_shape[1] = {G};
  tessera_grouped_gemm_problem p = NULL;
  int64_t bytes = -1;
  void* ws = NULL;
  int i, g, r, j, t;
  for (i = 0; i < T * M; ++i) a[i] = value(i + 2);
  for (i = 0; i < T * N; ++i) b[i] = value(5 * i);
  /* these values are exact in bfloat16 */
  EXPECT(tessera_encode(a, TESSERA_DTYPE_FLOAT32, a16, TESSERA_DTYPE_BFLOAT16, T * M, kCpu, NULL) ==
         TESSERA_STATUS_OK);
  EXPECT(tessera_encode(b, TESSERA_DTYPE_FLOAT32, b16, TESSERA_DTYPE_BFLOAT16, T * N, kCpu, NULL) ==
         TESSERA_STATUS_OK);
  for (i = 0; i < G * M * N; ++i) d[i] = 5.0f;
  EXPECT(tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_K_GROUPED, G) == TESSERA_STATUS_OK);
  tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, a16, TESSERA_DTYPE_BFLOAT16, 2,
                                  a_shape, kCpu);
  tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, b16, TESSERA_DTYPE_BFLOAT16, 2,
                                  b_shape, kCpu);
  tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, d, TESSERA_DTYPE_FLOAT32, 3, d_shape,
                                  kCpu);
  tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_GROUP_OFFSETS, ends, TESSERA_DTYPE_INT32,
                                  1, o_shape, kCpu);
  EXPECT(tessera_grouped_gemm_set_offsets_format(p, TESSERA_GROUP_OFFSETS_END, -1) ==
         TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_set_scalars(p, 0.5f, 0.0f) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_workspace_size(p, &bytes) == TESSERA_STATUS_OK);
  EXPECT(bytes > 0);
  EXPECT(tessera_grouped_gemm_run(p, NULL, 0, NULL) == TESSERA_STATUS_BUFFER_TOO_SMALL);
  ws = aligned_alloc(256, (size_t)((bytes + 255) / 256 * 256));
  EXPECT(tessera_grouped_gemm_run(p, ws, bytes, NULL) == TESSERA_STATUS_OK);
  for (g = 0; g < G; ++g) {
    const int start = g == 0 ? 0 : ends[g - 1];
    for (r = 0; r < M; ++r) {
      for (j = 0; j < N; ++j) {
        double acc = 0.0;
        for (t = start; t < ends[g]; ++t) acc += (double)a[t * M + r] * b[t * N + j];
        EXPECT(fabs(d[(g * M + r) * N + j] - 0.5 * acc) < 1e-5); /* group 0: exact zeros */
      }
    }
  }
  free(ws);
  EXPECT(tessera_grouped_gemm_destroy(p) == TESSERA_STATUS_OK);
}

/* D aliasing an input (A, B, bias or the offsets) is refused by can_implement and run with
 * INVALID_ARGUMENT naming both; nothing is written (it used to run and return zeros). */
static void test_aliasing_output(void) {
  float a[T * K], b[G * N * K], bias[G * N];
  int64_t offs[T * N] = {0, 4, 4, 10}; /* room for D (T, N) over the offsets */
  const int64_t a_shape[2] = {T, K}, b_shape[3] = {G, N, K}, d_shape[2] = {T, N};
  const int64_t o_shape[1] = {G + 1}, bias_shape[2] = {G, N}, small_d[2] = {T, 2};
  tessera_grouped_gemm_problem p = NULL;
  float a_before[T * K];
  int i;
  for (i = 0; i < T * K; ++i) a[i] = value(i);
  for (i = 0; i < G * N * K; ++i) b[i] = value(2 * i);
  for (i = 0; i < G * N; ++i) bias[i] = value(i + 9);
  memcpy(a_before, a, sizeof a);
  EXPECT(tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_M_GROUPED, G) == TESSERA_STATUS_OK);
  tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, a, TESSERA_DTYPE_FLOAT32, 2, a_shape,
                                  kCpu);
  tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, b, TESSERA_DTYPE_FLOAT32, 3, b_shape,
                                  kCpu);
  tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_GROUP_OFFSETS, offs, TESSERA_DTYPE_INT64,
                                  1, o_shape, kCpu);
  tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_BIAS, bias, TESSERA_DTYPE_FLOAT32, 2,
                                  bias_shape, kCpu);
  /* D over A (T x N floats inside A's T x K). */
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, a, TESSERA_DTYPE_FLOAT32, 2,
                                         d_shape, kCpu) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(tessera_last_error(), "D overlaps A") != NULL);
  EXPECT(tessera_grouped_gemm_run(p, NULL, 0, NULL) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(memcmp(a, a_before, sizeof a) == 0);
  /* D over B, over the bias (D (T, 2) = 24 floats >= the 12 of bias), over the offsets. */
  tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, b, TESSERA_DTYPE_FLOAT32, 2, d_shape,
                                  kCpu);
  EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(tessera_last_error(), "D overlaps B") != NULL);
  {
    float d_and_bias[T * N];
    memcpy(d_and_bias + T * N - G * N, bias, sizeof bias);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_BIAS, d_and_bias + T * N - G * N,
                                    TESSERA_DTYPE_FLOAT32, 2, bias_shape, kCpu);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, d_and_bias, TESSERA_DTYPE_FLOAT32, 2,
                                    d_shape, kCpu);
    EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_INVALID_ARGUMENT);
    EXPECT(strstr(tessera_last_error(), "D overlaps bias") != NULL);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_BIAS, bias, TESSERA_DTYPE_FLOAT32, 2,
                                    bias_shape, kCpu);
  }
  /* D (T, 2) over the offsets, with B and bias narrowed to N = 2. */
  tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, offs, TESSERA_DTYPE_FLOAT32, 2,
                                  small_d, kCpu);
  {
    const int64_t narrow_b[3] = {G, 2, K}, narrow_bias[2] = {G, 2};
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, b, TESSERA_DTYPE_FLOAT32, 3,
                                    narrow_b, kCpu);
    tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_BIAS, bias, TESSERA_DTYPE_FLOAT32, 2,
                                    narrow_bias, kCpu);
    EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_INVALID_ARGUMENT);
    EXPECT(strstr(tessera_last_error(), "D overlaps group_offsets") != NULL);
  }
  EXPECT(offs[0] == 0 && offs[3] == 10);
  EXPECT(tessera_grouped_gemm_destroy(p) == TESSERA_STATUS_OK);
}

int main(void) {
  test_m_grouped();
  test_aliasing_output();
  test_k_grouped_bf16();
  printf("test_c_api_gemm: %d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
