/* The quantizer C API from plain C: create (config and recipe), size buffers, quantize,
 * dequantize within the format's bound, delayed update, and errors as status codes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/c_api.h"

#include "c_expect.h"

enum { kRows = 64, kCols = 96 };

static void round_trip(tessera_quantizer q, double rel_bound, double abs_bound) {
  static float x[kRows * kCols], y[kRows * kCols];
  for (int i = 0; i < kRows * kCols; ++i) x[i] = (float)sin(0.37 * i) * (float)(1 + i % 5);
  tessera_quantized_buffers b;
  memset(&b, 0, sizeof b);
  int64_t db = 0, sb = 0, cdb = 0, csb = 0;
  EXPECT(tessera_quantizer_buffer_sizes(q, kRows, kCols, 0, &db, &sb) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_buffer_sizes(q, kRows, kCols, 1, &cdb, &csb) == TESSERA_STATUS_OK);
  float amax = 0, camax = 0;
  b.data = malloc((size_t)db);
  b.data_bytes = db;
  b.scale_inv = malloc((size_t)sb);
  b.scale_inv_bytes = sb;
  b.columnwise_data = malloc((size_t)cdb);
  b.columnwise_data_bytes = cdb;
  b.columnwise_scale_inv = malloc((size_t)csb);
  b.columnwise_scale_inv_bytes = csb;
  b.amax = &amax;
  b.columnwise_amax = &camax;
  tessera_device cpu = {0, 0};
  (void)cpu;
  EXPECT(tessera_quantize(q, x, TESSERA_DTYPE_FLOAT32, kRows, kCols, &b, NULL) == TESSERA_STATUS_OK);
  for (int cw = 0; cw < 2; ++cw) {
    EXPECT(tessera_dequantize(q, &b, kRows, kCols, cw, y, NULL) == TESSERA_STATUS_OK);
    int bad = 0;
    for (int i = 0; i < kRows * kCols; ++i) bad += fabs(y[i] - x[i]) > rel_bound * fabs(x[i]) + abs_bound;
    EXPECT(bad == 0);
  }
  /* A scale buffer one byte short is reported, not overrun. */
  b.scale_inv_bytes = sb - 1;
  EXPECT(tessera_quantize(q, x, TESSERA_DTYPE_FLOAT32, kRows, kCols, &b, NULL) ==
         TESSERA_STATUS_BUFFER_TOO_SMALL);
  EXPECT(strlen(tessera_last_error()) > 0);
  free(b.data);
  free(b.scale_inv);
  free(b.columnwise_data);
  free(b.columnwise_scale_inv);
}

int main(void) {
  const tessera_device cpu = {0, 0};
  tessera_quantizer_config c;
  EXPECT(tessera_quantizer_config_default(TESSERA_SCALING_MXFP8, &c) == TESSERA_STATUS_OK);
  EXPECT(c.element == TESSERA_DTYPE_E4M3);
  c.columnwise = 1;
  tessera_quantizer q = NULL;
  EXPECT(tessera_quantizer_create(&c, cpu, &q) == TESSERA_STATUS_OK);
  round_trip(q, 1.0 / 16, 1e-3);
  EXPECT(tessera_quantizer_destroy(q) == TESSERA_STATUS_OK);

  tessera_quantizer nv = NULL;
  EXPECT(tessera_quantizer_create_from_recipe("nvfp4", TESSERA_TENSOR_GRAD_OUTPUT, cpu, &nv) ==
         TESSERA_STATUS_OK);
  tessera_quantizer_config got;
  EXPECT(tessera_quantizer_get_config(nv, &got) == TESSERA_STATUS_OK);
  EXPECT(got.mode == TESSERA_SCALING_NVFP4 && got.stochastic_rounding == 1 && got.columnwise == 1);
  round_trip(nv, 0.5, 1.5);
  EXPECT(tessera_quantizer_destroy(nv) == TESSERA_STATUS_OK);

  tessera_quantizer d = NULL;
  EXPECT(tessera_quantizer_create_from_recipe("fp8_delayed", TESSERA_TENSOR_INPUT, cpu, &d) ==
         TESSERA_STATUS_OK);
  round_trip(d, 1.0 / 16, 1e-2);
  EXPECT(tessera_quantizer_update(d, NULL) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_destroy(d) == TESSERA_STATUS_OK);

  /* Errors come back as statuses with a message. */
  tessera_quantizer bad = NULL;
  EXPECT(tessera_quantizer_create_from_recipe("fp9", 0, cpu, &bad) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(tessera_last_error(), "fp9") != NULL);
  EXPECT(bad == NULL);
  EXPECT(tessera_quantizer_config_default(TESSERA_SCALING_NVFP4, &c) == TESSERA_STATUS_OK);
  c.element = TESSERA_DTYPE_E5M2;
  EXPECT(tessera_quantizer_create(&c, cpu, &bad) == TESSERA_STATUS_DTYPE_MISMATCH);
  c.mode = 42;
  EXPECT(tessera_quantizer_create(&c, cpu, &bad) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_quantizer_config_default(99, &c) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_quantizer_update(NULL, NULL) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_quantizer_destroy(NULL) == TESSERA_STATUS_OK);
  if (failures == 0) printf("test_c_api_quantize: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
