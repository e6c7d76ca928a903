/* A plain C program built with gcc against an installed tessera found through pkg-config only
 * (scripts/test.sh installs to a non-default prefix, then moves it): sized encode/decode, an
 * MXFP8 quantization through the quantizer handle, and a one-group grouped GEMM, each checked
 * against values worked out by hand. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <tessera/c_api.h>

static int fail(const char* what) {
  printf("c_consumer: %s (%s)\n", what, tessera_last_error());
  return 1;
}

int main(void) {
  const tessera_device cpu = {0, 0};
  float x[4] = {1.0f, -2.0f, 0.5f, 448.0f}, back[4];
  unsigned char codes[4];
  tessera_quantizer_config config;
  tessera_quantizer q = NULL;
  tessera_quantized_buffers b;
  int64_t data_bytes = 0, scale_bytes = 0;
  unsigned char data[32], scale[1];
  float row[32], out[32];
  tessera_grouped_gemm_problem p = NULL;
  const float a[2] = {1.0f, 2.0f}, w[2] = {3.0f, 4.0f}; /* A (1, 2), B (1, 1, 2) */
  float d[1] = {0.0f};
  const int64_t offs[2] = {0, 1}, a_shape[2] = {1, 2}, b_shape[3] = {1, 1, 2}, d_shape[2] = {1, 1};
  const int64_t o_shape[1] = {2};
  int i;

  if (tessera_encode_sized(x, sizeof x, TESSERA_DTYPE_FLOAT32, codes, sizeof codes,
                           TESSERA_DTYPE_E4M3, 4, cpu, NULL) != TESSERA_STATUS_OK)
    return fail("encode_sized");
  if (tessera_decode_sized(codes, sizeof codes, TESSERA_DTYPE_E4M3, back, sizeof back, 4, cpu,
                           NULL) != TESSERA_STATUS_OK)
    return fail("decode_sized");
  for (i = 0; i < 4; ++i)
    if (back[i] != x[i]) return fail("e4m3 round trip of exact values");
  if (tessera_encode_sized(x, sizeof x, TESSERA_DTYPE_FLOAT32, codes, 3, TESSERA_DTYPE_E4M3, 4,
                           cpu, NULL) != TESSERA_STATUS_BUFFER_TOO_SMALL)
    return fail("a 3-byte destination for 4 codes was not refused");

  if (tessera_quantizer_config_default(TESSERA_SCALING_MXFP8, &config) != TESSERA_STATUS_OK ||
      tessera_quantizer_create(&config, cpu, &q) != TESSERA_STATUS_OK)
    return fail("an MXFP8 quantizer (rowwise usage)");
  if (tessera_quantizer_buffer_sizes(q, 1, 32, 0, &data_bytes, &scale_bytes) != TESSERA_STATUS_OK ||
      data_bytes != 32 || scale_bytes != 1)
    return fail("mxfp8 (1, 32) needs 32 data bytes and 1 scale");
  for (i = 0; i < 32; ++i) row[i] = (float)(i % 4) - 1.5f; /* -1.5 .. 1.5, exact in e4m3 */
  memset(&b, 0, sizeof b);
  b.data = data;
  b.data_bytes = sizeof data;
  b.scale_inv = scale;
  b.scale_inv_bytes = sizeof scale;
  if (tessera_quantize(q, row, TESSERA_DTYPE_FLOAT32, 1, 32, &b, NULL) != TESSERA_STATUS_OK ||
      tessera_dequantize(q, &b, 1, 32, 0, out, NULL) != TESSERA_STATUS_OK)
    return fail("mxfp8 quantize / dequantize");
  for (i = 0; i < 32; ++i)
    if (out[i] != row[i]) return fail("mxfp8 round trip of exact values");
  tessera_quantizer_destroy(q);

  if (tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_M_GROUPED, 1) != TESSERA_STATUS_OK ||
      tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, a, TESSERA_DTYPE_FLOAT32, 2,
                                      a_shape, cpu) != TESSERA_STATUS_OK ||
      tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_B, w, TESSERA_DTYPE_FLOAT32, 3,
                                      b_shape, cpu) != TESSERA_STATUS_OK ||
      tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_D, d, TESSERA_DTYPE_FLOAT32, 2,
                                      d_shape, cpu) != TESSERA_STATUS_OK ||
      tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_GROUP_OFFSETS, offs,
                                      TESSERA_DTYPE_INT64, 1, o_shape, cpu) != TESSERA_STATUS_OK ||
      tessera_grouped_gemm_run(p, NULL, 0, NULL) != TESSERA_STATUS_OK)
    return fail("grouped GEMM");
  tessera_grouped_gemm_destroy(p);
  if (d[0] != 11.0f) return fail("1*3 + 2*4 != 11");

  printf("c_consumer: pkg-config + gcc work (tessera %s)\n", tessera_version());
  return 0;
}
