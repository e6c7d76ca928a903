/* Misuse of the opaque handles, from plain C: a destroyed handle used again, destroyed twice, a
 * handle of the other type, and a pointer to memory that is no handle are refused with
 * TESSERA_STATUS_INVALID_ARGUMENT and a message saying which ("destroyed" / "not a ..."), with
 * no memory written (and, under ASan, no memory read outside what tessera owns). What this
 * detects is documented in c_api.h ("Handles"): these misuses are caught until a later create
 * of the same type reuses the destroyed handle's memory, which the test does not do. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tessera/c_api.h"

#include "c_expect.h"

static const tessera_device kCpu = {0, 0};

static int mentions(const char* word) { return strstr(tessera_last_error(), word) != NULL; }

static void test_quantizer_after_destroy(void) {
  tessera_quantizer_config c;
  tessera_quantizer q = NULL;
  int64_t data = 0, scale = 0;
  float x[4] = {1, 2, 3, 4}, out[4];
  unsigned char d[4], s[4];
  tessera_quantized_buffers b;
  EXPECT(tessera_quantizer_config_default(TESSERA_SCALING_MXFP8, &c) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_create(&c, kCpu, &q) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_destroy(q) == TESSERA_STATUS_OK);
  /* Every call taking the handle refuses it. */
  EXPECT(tessera_quantizer_get_config(q, &c) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(mentions("quantizer") && mentions("destroyed"));
  EXPECT(tessera_quantizer_buffer_sizes(q, 2, 2, 0, &data, &scale) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  memset(&b, 0, sizeof b);
  b.data = d;
  b.data_bytes = sizeof d;
  b.scale_inv = s;
  b.scale_inv_bytes = sizeof s;
  memset(d, 0x5a, sizeof d);
  EXPECT(tessera_quantize(q, x, TESSERA_DTYPE_FLOAT32, 2, 2, &b, NULL) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(d[0] == 0x5a && d[3] == 0x5a); /* nothing written */
  EXPECT(tessera_dequantize(q, &b, 2, 2, 0, out, NULL) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_quantizer_update(q, NULL) == TESSERA_STATUS_INVALID_ARGUMENT);
  /* A second destroy is refused (it used to free the memory again: abort). */
  EXPECT(tessera_quantizer_destroy(q) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(mentions("destroyed"));
}

static void test_problem_after_destroy(void) {
  tessera_grouped_gemm_problem p = NULL;
  float a[4] = {0};
  const int64_t shape[2] = {2, 2};
  int64_t ws = -1;
  EXPECT(tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_M_GROUPED, 1) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_destroy(p) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, a, TESSERA_DTYPE_FLOAT32, 2,
                                         shape, kCpu) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(mentions("problem") && mentions("destroyed"));
  EXPECT(tessera_grouped_gemm_set_layout(p, 0, 1) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_grouped_gemm_set_offsets_format(p, 0, -1) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_grouped_gemm_set_scalars(p, 1.0f, 0.0f) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_grouped_gemm_set_zero_unused_rows(p, 0) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_grouped_gemm_can_implement(p) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_grouped_gemm_workspace_size(p, &ws) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(ws == -1);
  EXPECT(tessera_grouped_gemm_run(p, NULL, 0, NULL) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_grouped_gemm_destroy(p) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(mentions("destroyed"));
}

/* A handle of the other type, and a pointer to zeroed memory, are not handles of this type. */
static void test_wrong_handles(void) {
  tessera_quantizer q = NULL;
  tessera_grouped_gemm_problem p = NULL;
  tessera_quantizer_config c;
  static uint64_t not_a_handle[64]; /* zeros: readable, no magic word */
  EXPECT(tessera_quantizer_create_from_recipe("mxfp8", TESSERA_TENSOR_INPUT, kCpu, &q) ==
         TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_BATCHED, 2) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_can_implement((tessera_grouped_gemm_problem)(void*)q) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(mentions("not a tessera_grouped_gemm_problem"));
  EXPECT(tessera_quantizer_get_config((tessera_quantizer)(void*)p, &c) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(mentions("not a tessera_quantizer"));
  EXPECT(tessera_quantizer_destroy((tessera_quantizer)(void*)not_a_handle) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_grouped_gemm_destroy((tessera_grouped_gemm_problem)(void*)not_a_handle) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  /* The real handles are untouched by all this. */
  EXPECT(tessera_quantizer_get_config(q, &c) == TESSERA_STATUS_OK);
  EXPECT(c.mode == TESSERA_SCALING_MXFP8);
  EXPECT(tessera_grouped_gemm_destroy(p) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_destroy(q) == TESSERA_STATUS_OK);
  /* NULL: destroy is a no-op, every other call refuses it. */
  EXPECT(tessera_quantizer_destroy(NULL) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_destroy(NULL) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_update(NULL, NULL) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(mentions("NULL"));
}

/* Many handles created and destroyed in turn: every live one works, every destroyed one that
 * no create has reused since is refused. */
static void test_many_handles(void) {
  enum { kCount = 64 };
  tessera_quantizer qs[kCount];
  tessera_quantizer_config c;
  int i;
  for (i = 0; i < kCount; ++i)
    EXPECT(tessera_quantizer_create_from_recipe("fp8_current", TESSERA_TENSOR_INPUT, kCpu,
                                                &qs[i]) == TESSERA_STATUS_OK);
  for (i = 0; i < kCount; i += 2) EXPECT(tessera_quantizer_destroy(qs[i]) == TESSERA_STATUS_OK);
  for (i = 0; i < kCount; ++i) {
    const tessera_status s = tessera_quantizer_get_config(qs[i], &c);
    EXPECT(s == (i % 2 == 0 ? TESSERA_STATUS_INVALID_ARGUMENT : TESSERA_STATUS_OK));
  }
  for (i = 0; i < kCount; ++i) {
    const tessera_status s = tessera_quantizer_destroy(qs[i]);
    EXPECT(s == (i % 2 == 0 ? TESSERA_STATUS_INVALID_ARGUMENT : TESSERA_STATUS_OK));
  }
}

int main(void) {
  test_quantizer_after_destroy();
  test_problem_after_destroy();
  test_wrong_handles();
  test_many_handles();
  printf("test_c_api_handles: %d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
