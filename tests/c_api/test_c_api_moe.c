/* The expert-parallel routing C API from plain C: routing of a small hand-checked case
 * (dropless with alignment, capacity with a drop), permute (copy, and rowwise FP8 equal to
 * tessera_quantize of the permuted matrix), unpermute and both backwards against hand sums, and
 * errors as status codes (expert out of range, NULL buffers, bad mode). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tessera/c_api.h"

#include "c_expect.h"

enum { kT = 4, kK = 2, kE = 3, kH = 8 };

int main(void) {
  const tessera_device cpu = {0, 0};
  /* token 0 -> experts 2, 0; token 1 -> 0, 1; token 2 -> 0, 2; token 3 -> 1, 0 */
  const int64_t idx[kT * kK] = {2, 0, 0, 1, 0, 2, 1, 0};
  tessera_moe_routing_options opt = {kE, 2, -1, NULL};
  int64_t rows = 0;
  EXPECT(tessera_moe_permuted_rows(kT, kK, &opt, &rows) == TESSERA_STATUS_OK && rows == 11);
  int64_t counts[kE], offs[kE + 1], dropped = -1;
  int32_t slot[kT * kK], row_pair[11];
  EXPECT(tessera_moe_routing(idx, TESSERA_DTYPE_INT64, kT, kK, &opt, counts, offs, slot, row_pair,
                             TESSERA_DTYPE_INT32, rows, &dropped, NULL, 0, cpu,
                             NULL) == TESSERA_STATUS_OK);
  /* expert 0: pairs 1, 2, 4, 7 (4 rows); expert 1: pairs 3, 6 (2); expert 2: pairs 0, 5 (2) */
  EXPECT(counts[0] == 4 && counts[1] == 2 && counts[2] == 2 && dropped == 0);
  EXPECT(offs[0] == 0 && offs[1] == 4 && offs[2] == 6 && offs[3] == 8);
  const int32_t want_slot[kT * kK] = {6, 0, 1, 4, 2, 7, 5, 3};
  EXPECT(memcmp(slot, want_slot, sizeof slot) == 0);
  EXPECT(row_pair[0] == 1 && row_pair[3] == 7 && row_pair[6] == 0 && row_pair[8] == -1);

  /* Capacity 2 per expert: expert 0 keeps pairs 1, 2 and drops 4, 7. */
  tessera_moe_routing_options cap = {kE, 2, 2, NULL};
  int64_t cap_rows = 0, cap_counts[kE], cap_offs[kE + 1], cap_dropped = -1;
  int32_t cap_slot[kT * kK], cap_pair[6];
  EXPECT(tessera_moe_permuted_rows(kT, kK, &cap, &cap_rows) == TESSERA_STATUS_OK && cap_rows == 6);
  EXPECT(tessera_moe_routing(idx, TESSERA_DTYPE_INT64, kT, kK, &cap, cap_counts, cap_offs,
                             cap_slot, cap_pair, TESSERA_DTYPE_INT32, cap_rows, &cap_dropped, NULL,
                             0, cpu, NULL) == TESSERA_STATUS_OK);
  EXPECT(cap_dropped == 2 && cap_counts[0] == 2 && cap_slot[4] == -1 && cap_slot[7] == -1);

  /* Permute (float32 copy) and the rowwise FP8 fused form vs tessera_quantize. */
  float x[kT * kH], perm[11 * kH];
  for (int i = 0; i < kT * kH; ++i) x[i] = (float)sin(0.7 * i) * (float)(1 + i % 3);
  EXPECT(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, kT, kH, row_pair, TESSERA_DTYPE_INT32,
                             rows, kK, TESSERA_SCALING_NONE, 0, 0, perm, NULL, 0, cpu,
                             NULL) == TESSERA_STATUS_OK);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < kH; ++c)
      EXPECT(perm[r * kH + c] == (row_pair[r] < 0 ? 0.0f : x[(row_pair[r] / kK) * kH + c]));
  unsigned char codes[11 * kH], want_codes[11 * kH];
  float sinv[11], want_sinv[11];
  EXPECT(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, kT, kH, row_pair, TESSERA_DTYPE_INT32,
                             rows, kK, TESSERA_SCALING_ROWWISE, TESSERA_DTYPE_E4M3, 0, codes, sinv,
                             sizeof sinv, cpu, NULL) == TESSERA_STATUS_OK);
  tessera_quantizer q = NULL;
  tessera_quantizer_config qc;
  EXPECT(tessera_quantizer_config_default(TESSERA_SCALING_ROWWISE, &qc) == TESSERA_STATUS_OK);
  EXPECT(tessera_quantizer_create(&qc, cpu, &q) == TESSERA_STATUS_OK);
  tessera_quantized_buffers b;
  memset(&b, 0, sizeof b);
  b.data = want_codes;
  b.data_bytes = sizeof want_codes;
  b.scale_inv = want_sinv;
  b.scale_inv_bytes = sizeof want_sinv;
  EXPECT(tessera_quantize(q, perm, TESSERA_DTYPE_FLOAT32, rows, kH, &b, NULL) == TESSERA_STATUS_OK);
  EXPECT(memcmp(codes, want_codes, sizeof codes) == 0 && memcmp(sinv, want_sinv, sizeof sinv) == 0);
  tessera_quantizer_destroy(q);

  /* Unpermute with probs and both backwards against hand sums (exact in float here). */
  float probs[kT * kK], out[kT * kH], dx[kT * kH], dy[11 * kH], dprobs[kT * kK];
  for (int i = 0; i < kT * kK; ++i) probs[i] = 0.25f * (float)(1 + i % 3);
  EXPECT(tessera_moe_unpermute(perm, TESSERA_DTYPE_FLOAT32, rows, kH, slot, TESSERA_DTYPE_INT32,
                               kT, kK, probs, out, TESSERA_DTYPE_FLOAT32, cpu,
                               NULL) == TESSERA_STATUS_OK);
  EXPECT(tessera_moe_permute_backward(perm, TESSERA_DTYPE_FLOAT32, rows, kH, slot,
                                      TESSERA_DTYPE_INT32, kT, kK, dx, TESSERA_DTYPE_FLOAT32, cpu,
                                      NULL) == TESSERA_STATUS_OK);
  for (int t = 0; t < kT; ++t)
    for (int c = 0; c < kH; ++c) {
      const float v = x[t * kH + c];
      const float want = (probs[t * kK] + probs[t * kK + 1]) * v;
      EXPECT(fabsf(out[t * kH + c] - want) <= 1e-6f * fabsf(v) + 1e-7f);
      EXPECT(dx[t * kH + c] == v + v);
    }
  EXPECT(tessera_moe_unpermute_backward(x, TESSERA_DTYPE_FLOAT32, perm, TESSERA_DTYPE_FLOAT32,
                                        rows, kH, slot, row_pair, TESSERA_DTYPE_INT32, kT, kK,
                                        probs, dy, TESSERA_DTYPE_FLOAT32, dprobs, cpu,
                                        NULL) == TESSERA_STATUS_OK);
  for (int p = 0; p < kT * kK; ++p) {
    double dot = 0;
    for (int c = 0; c < kH; ++c) dot += (double)x[(p / kK) * kH + c] * x[(p / kK) * kH + c];
    EXPECT(fabs(dprobs[p] - dot) <= 1e-5 * dot);
    EXPECT(dy[slot[p] * kH] == probs[p] * x[(p / kK) * kH]);
  }
  EXPECT(dy[8 * kH] == 0.0f && dy[10 * kH + 7] == 0.0f); /* padding rows */

  /* Errors. */
  int64_t bad[kT * kK];
  memcpy(bad, idx, sizeof bad);
  bad[5] = kE;
  EXPECT(tessera_moe_routing(bad, TESSERA_DTYPE_INT64, kT, kK, &opt, counts, offs, slot, row_pair,
                             TESSERA_DTYPE_INT32, rows, &dropped, NULL, 0, cpu,
                             NULL) == TESSERA_STATUS_OUT_OF_RANGE);
  EXPECT(strstr(tessera_last_error(), "indices[2, 1] = 3") != NULL);
  EXPECT(tessera_moe_routing(idx, TESSERA_DTYPE_INT64, kT, kK, &opt, NULL, offs, slot, row_pair,
                             TESSERA_DTYPE_INT32, rows, &dropped, NULL, 0, cpu,
                             NULL) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, kT, kH, row_pair, TESSERA_DTYPE_INT32, rows,
                             kK, TESSERA_SCALING_TENSOR, TESSERA_DTYPE_E4M3, 0, codes, sinv,
                             sizeof sinv, cpu, NULL) == TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, kT, kH, row_pair, TESSERA_DTYPE_INT32, rows,
                             kK, TESSERA_SCALING_ROWWISE, TESSERA_DTYPE_E4M3, 0, codes, sinv, 8,
                             cpu, NULL) == TESSERA_STATUS_BUFFER_TOO_SMALL);
  EXPECT(tessera_moe_permuted_rows(INT64_MAX, 2, &opt, &rows) == TESSERA_STATUS_OUT_OF_RANGE);
  if (failures == 0) printf("test_c_api_moe: all passed\n");
  return failures == 0 ? 0 : 1;
}
