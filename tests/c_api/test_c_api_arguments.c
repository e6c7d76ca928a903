/* Every int flag, enum and count of the C API outside its range is refused with
 * TESSERA_STATUS_INVALID_ARGUMENT and a message naming the parameter, before anything is read or
 * written: flags that are not 0/1 (2, -1: "nonzero" is not accepted as true), enum values past
 * their last value, negative counts and capacities below -1. Text a caller passes (a recipe name)
 * is echoed in the message at most 64 characters long, then "...". */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tessera/c_api.h"

#include "c_expect.h"

static const tessera_device kCpu = {0, 0};

/* The call was refused as an invalid argument and the message names `param`. */
static int refused(tessera_status s, const char* param) {
  if (s != TESSERA_STATUS_INVALID_ARGUMENT) {
    fprintf(stderr, "  %s: status %d (%s), expected invalid argument\n", param, (int)s,
            tessera_status_string(s));
    return 0;
  }
  if (strstr(tessera_last_error(), param) == NULL) {
    fprintf(stderr, "  %s: not named in '%s'\n", param, tessera_last_error());
    return 0;
  }
  return 1;
}

static void test_codecs(void) {
  const float x[2] = {1.0f, 2.0f};
  unsigned char codes[2];
  float back[2];
  const tessera_device cuda7 = {2, 0}, negative = {0, -1};
  EXPECT(refused(tessera_encode(x, 11, codes, TESSERA_DTYPE_E4M3, 2, kCpu, NULL), "src_dtype"));
  EXPECT(refused(tessera_encode(x, TESSERA_DTYPE_FLOAT32, codes, -1, 2, kCpu, NULL), "dst_dtype"));
  EXPECT(refused(tessera_encode(x, TESSERA_DTYPE_FLOAT32, codes, TESSERA_DTYPE_E4M3, -2, kCpu,
                                NULL), "numel"));
  EXPECT(refused(tessera_decode(codes, TESSERA_DTYPE_E4M3, back, 2, cuda7, NULL), "device_type"));
  EXPECT(refused(tessera_decode(codes, TESSERA_DTYPE_E4M3, back, 2, negative, NULL),
                 "device_index"));
  EXPECT(refused(tessera_encode_sized(x, sizeof x, TESSERA_DTYPE_FLOAT32, codes, -1,
                                      TESSERA_DTYPE_E4M3, 2, kCpu, NULL), "dst_bytes"));
  EXPECT(refused(tessera_decode_sized(codes, -3, TESSERA_DTYPE_E4M3, back, sizeof back, 2, kCpu,
                                      NULL), "src_bytes"));
}

static void test_gemm(void) {
  tessera_grouped_gemm_problem p = NULL;
  const int64_t shape[2] = {2, 2};
  float buf[4] = {0};
  const tessera_device bad_device = {1, -4};
  EXPECT(refused(tessera_grouped_gemm_create(&p, 3, 1), "kind"));
  EXPECT(refused(tessera_grouped_gemm_create(&p, -1, 1), "kind"));
  EXPECT(refused(tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_M_GROUPED, -1),
                 "num_groups"));
  EXPECT(p == NULL);
  EXPECT(tessera_grouped_gemm_create(&p, TESSERA_GROUPED_GEMM_M_GROUPED, 1) == TESSERA_STATUS_OK);
  EXPECT(refused(tessera_grouped_gemm_set_tensor(p, 6, buf, TESSERA_DTYPE_FLOAT32, 2, shape, kCpu),
                 "which"));
  EXPECT(refused(tessera_grouped_gemm_set_tensor(p, -1, NULL, TESSERA_DTYPE_FLOAT32, 0, NULL, kCpu),
                 "which"));
  /* Clearing an optional tensor (data NULL) still takes only valid enums. */
  EXPECT(refused(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_BIAS, NULL, 99, 0, NULL,
                                                 kCpu), "dtype"));
  EXPECT(refused(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_BIAS, NULL,
                                                 TESSERA_DTYPE_FLOAT32, 0, NULL, bad_device),
                 "device_index"));
  EXPECT(refused(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, buf,
                                                 TESSERA_DTYPE_FLOAT32, 5, shape, kCpu), "ndim"));
  EXPECT(refused(tessera_grouped_gemm_set_layout(p, 2, 1), "transpose_a"));
  EXPECT(refused(tessera_grouped_gemm_set_layout(p, 0, -1), "transpose_b"));
  EXPECT(refused(tessera_grouped_gemm_set_zero_unused_rows(p, 2), "zero_unused_rows"));
  EXPECT(refused(tessera_grouped_gemm_set_offsets_format(p, 2, -1), "format"));
  EXPECT(refused(tessera_grouped_gemm_set_offsets_format(p, TESSERA_GROUP_OFFSETS_START, -2),
                 "max_total_rows"));
  EXPECT(refused(tessera_grouped_gemm_run(p, NULL, -1, NULL), "workspace_bytes"));
  /* Valid values are still taken. */
  EXPECT(tessera_grouped_gemm_set_layout(p, 0, 1) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_set_zero_unused_rows(p, 1) == TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_set_offsets_format(p, TESSERA_GROUP_OFFSETS_END, 0) ==
         TESSERA_STATUS_OK);
  EXPECT(tessera_grouped_gemm_destroy(p) == TESSERA_STATUS_OK);
}

/* A config with one field set to `value`: refused naming config.<name>. */
#define EXPECT_CONFIG_FIELD_REFUSED(field, value)                                     \
  do {                                                                                \
    tessera_quantizer_config c_;                                                      \
    tessera_quantizer q_ = NULL;                                                      \
    EXPECT(tessera_quantizer_config_default(TESSERA_SCALING_TENSOR, &c_) ==            \
           TESSERA_STATUS_OK);                                                        \
    c_.field = (value);                                                               \
    EXPECT(refused(tessera_quantizer_create(&c_, kCpu, &q_), "config." #field));       \
    EXPECT(q_ == NULL);                                                               \
  } while (0)

static void test_quantizer(void) {
  tessera_quantizer q = NULL;
  tessera_quantizer_config c;
  int64_t data = 0, scale = 0;
  float x[4] = {0}, out[4];
  unsigned char d[4], s[16];
  tessera_quantized_buffers b;
  EXPECT(refused(tessera_quantizer_config_default(9, &c), "mode"));
  EXPECT(refused(tessera_quantizer_config_default(0, &c), "mode"));
  EXPECT_CONFIG_FIELD_REFUSED(rowwise, 2);
  EXPECT_CONFIG_FIELD_REFUSED(columnwise, -1);
  EXPECT_CONFIG_FIELD_REFUSED(delayed, 2);
  EXPECT_CONFIG_FIELD_REFUSED(power_of_two_scales, 7);
  EXPECT_CONFIG_FIELD_REFUSED(random_hadamard, 2);
  EXPECT_CONFIG_FIELD_REFUSED(stochastic_rounding, 2);
  EXPECT_CONFIG_FIELD_REFUSED(scale_layout, 2);
  EXPECT_CONFIG_FIELD_REFUSED(amax_algo, -1);
  EXPECT_CONFIG_FIELD_REFUSED(e8m0_rounding, 2);
  EXPECT_CONFIG_FIELD_REFUSED(mode, 9);
  EXPECT_CONFIG_FIELD_REFUSED(element, 11);
  EXPECT_CONFIG_FIELD_REFUSED(amax_history_len, 0);
  EXPECT(refused(tessera_quantizer_create_from_recipe("mxfp8", 6, kCpu, &q), "tensor_type"));
  EXPECT(refused(tessera_quantizer_create_from_recipe("mxfp8", -1, kCpu, &q), "tensor_type"));

  EXPECT(tessera_quantizer_config_default(TESSERA_SCALING_MXFP8, &c) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_create(&c, kCpu, &q) == TESSERA_STATUS_OK);
  EXPECT(refused(tessera_quantizer_buffer_sizes(q, 2, 2, 2, &data, &scale), "columnwise"));
  EXPECT(refused(tessera_quantizer_buffer_sizes(q, -1, 2, 0, &data, &scale), "rows"));
  EXPECT(refused(tessera_quantizer_buffer_sizes(q, 2, -5, 0, &data, &scale), "cols"));
  memset(&b, 0, sizeof b);
  b.data = d;
  b.data_bytes = sizeof d;
  b.scale_inv = s;
  b.scale_inv_bytes = sizeof s;
  EXPECT(refused(tessera_quantize(q, x, TESSERA_DTYPE_FLOAT32, -2, 2, &b, NULL), "rows"));
  EXPECT(refused(tessera_quantize(q, x, 12, 2, 2, &b, NULL), "x_dtype"));
  /* The byte size of a buffer that is given (data non-NULL) is a count too. */
  b.data_bytes = -1;
  EXPECT(refused(tessera_quantize(q, x, TESSERA_DTYPE_FLOAT32, 2, 2, &b, NULL), "data_bytes"));
  b.data_bytes = sizeof d;
  b.scale_inv_bytes = -8;
  EXPECT(refused(tessera_dequantize(q, &b, 2, 2, 0, out, NULL), "scale_inv_bytes"));
  b.scale_inv_bytes = sizeof s;
  EXPECT(tessera_quantize(q, x, TESSERA_DTYPE_FLOAT32, 2, 2, &b, NULL) == TESSERA_STATUS_OK);
  EXPECT(refused(tessera_dequantize(q, &b, 2, 2, 2, out, NULL), "columnwise"));
  EXPECT(refused(tessera_dequantize(q, &b, 2, -2, 0, out, NULL), "cols"));
  EXPECT(tessera_dequantize(q, &b, 2, 2, 0, out, NULL) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_destroy(q) == TESSERA_STATUS_OK);
}

static void test_moe(void) {
  tessera_moe_routing_options o = {2, 1, -2, NULL};
  int64_t rows = 0, bytes = 0, counts[2], offs[3], dropped;
  const int64_t idx[2] = {0, 1};
  int64_t slot[2] = {0, -1}, pair[2] = {0, -1};
  float x[2] = {1, 2}, y[2], sinv[2];
  EXPECT(refused(tessera_moe_permuted_rows(1, 2, &o, &rows), "capacity"));
  EXPECT(refused(tessera_moe_routing_workspace_bytes(1, 2, &o, kCpu, &bytes), "capacity"));
  o.capacity = -1;
  EXPECT(tessera_moe_permuted_rows(1, 2, &o, &rows) == TESSERA_STATUS_OK && rows == 2);
  EXPECT(refused(tessera_moe_routing_workspace_bytes(-1, 2, &o, kCpu, &bytes), "num_tokens"));
  EXPECT(refused(tessera_moe_routing_workspace_bytes(1, 0, &o, kCpu, &bytes), "top_k"));
  o.align = 0;
  EXPECT(refused(tessera_moe_permuted_rows(1, 2, &o, &rows), "align"));
  o.align = 1;
  EXPECT(refused(tessera_moe_routing(idx, 99, 1, 2, &o, counts, offs, slot, pair,
                                     TESSERA_DTYPE_INT64, 2, &dropped, NULL, 0, kCpu, NULL),
                 "index_dtype"));
  EXPECT(refused(tessera_moe_routing(idx, TESSERA_DTYPE_INT64, 1, 2, &o, counts, offs, slot, pair,
                                     TESSERA_DTYPE_INT64, -1, &dropped, NULL, 0, kCpu, NULL),
                 "rows"));
  EXPECT(refused(tessera_moe_routing(idx, TESSERA_DTYPE_INT64, 1, 2, &o, counts, offs, slot, pair,
                                     TESSERA_DTYPE_INT64, 2, &dropped, NULL, -1, kCpu, NULL),
                 "workspace"));
  /* quant_mode NONE ignores element and the E8M0 rule, but only valid values are taken. */
  EXPECT(refused(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, 1, 2, pair, TESSERA_DTYPE_INT64, 1,
                                     1, TESSERA_SCALING_NONE, 99, 0, y, NULL, 0, kCpu, NULL),
                 "element"));
  EXPECT(refused(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, 1, 2, pair, TESSERA_DTYPE_INT64, 1,
                                     1, TESSERA_SCALING_NONE, TESSERA_DTYPE_E4M3, 2, y, NULL, 0,
                                     kCpu, NULL), "e8m0_rounding"));
  EXPECT(refused(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, 1, 2, pair, TESSERA_DTYPE_INT64, 1,
                                     1, 9, TESSERA_DTYPE_E4M3, 0, y, sinv, sizeof sinv, kCpu,
                                     NULL), "quant_mode"));
  EXPECT(refused(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, 1, 2, pair, TESSERA_DTYPE_INT64, 1,
                                     1, TESSERA_SCALING_ROWWISE, TESSERA_DTYPE_E4M3, 0, y, sinv,
                                     -4, kCpu, NULL), "scale_inv_bytes"));
  EXPECT(refused(tessera_moe_unpermute(y, TESSERA_DTYPE_FLOAT32, 1, -2, slot, TESSERA_DTYPE_INT64,
                                       1, 2, NULL, x, TESSERA_DTYPE_FLOAT32, kCpu, NULL),
                 "hidden"));
  EXPECT(refused(tessera_moe_unpermute_backward(x, TESSERA_DTYPE_FLOAT32, y, TESSERA_DTYPE_FLOAT32,
                                                1, 2, slot, pair, TESSERA_DTYPE_INT64, 1, -3, NULL,
                                                y, TESSERA_DTYPE_FLOAT32, NULL, kCpu, NULL),
                 "top_k"));
  EXPECT(refused(tessera_moe_permute_backward(y, 42, 1, 2, slot, TESSERA_DTYPE_INT64, 1, 1, x,
                                              TESSERA_DTYPE_FLOAT32, kCpu, NULL), "d_dtype"));
}

/* A 10000-character recipe name comes back as its first 64 characters and "...". */
static void test_echo_is_bounded(void) {
  static char name[10001];
  char want[80];
  tessera_quantizer q = NULL;
  memset(name, 'r', sizeof name - 1);
  memset(want, 'r', 64);
  strcpy(want + 64, "...");
  EXPECT(tessera_quantizer_create_from_recipe(name, TESSERA_TENSOR_INPUT, kCpu, &q) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(tessera_last_error(), want) != NULL);
  EXPECT(strlen(tessera_last_error()) < 600);
  EXPECT(q == NULL);
}

int main(void) {
  test_codecs();
  test_gemm();
  test_quantizer();
  test_moe();
  test_echo_is_bounded();
  printf("test_c_api_arguments: %d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
