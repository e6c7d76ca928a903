/* Handle misuse for the C API fuzzer (fuzz_c_api.c), only where the handles' magic word makes it
 * defined (c_api.h, "Handles"): a handle used or destroyed again right after its destroy, before
 * any create of its type could reuse its memory; a live handle passed as the other type; a
 * pointer to readable memory that is no handle (random bytes, zeros). Each call must be refused
 * with INVALID_ARGUMENT — "destroyed" for a destroyed handle — and leave live handles working. */
#include <string.h>

#include "fuzz_c_api.h"

static void expect_misuse_refused(tessera_status s, const char* what, const char* word) {
  if (s != TESSERA_STATUS_INVALID_ARGUMENT || strstr(tessera_last_error(), word) == NULL) {
    finding(what, (int)s);
    return;
  }
  ++g_misuse_refused;
}

void misuse_destroyed_quantizer(tessera_quantizer q) {
  tessera_quantizer_config c;
  int64_t data = 0, scale = 0;
  float x[4] = {0};
  if (q == NULL) return;
  switch (rnd_below(5)) {
    case 0:
      expect_misuse_refused(note(tessera_quantizer_get_config(q, &c)),
                            "get_config took a destroyed quantizer", "destroyed");
      break;
    case 1:
      expect_misuse_refused(note(tessera_quantizer_buffer_sizes(q, 4, 4, 0, &data, &scale)),
                            "buffer_sizes took a destroyed quantizer", "destroyed");
      break;
    case 2:
      expect_misuse_refused(note(tessera_quantizer_update(q, NULL)),
                            "update took a destroyed quantizer", "destroyed");
      break;
    case 3:
      expect_misuse_refused(note(tessera_dequantize(q, NULL, 1, 4, 0, x, NULL)),
                            "dequantize took a destroyed quantizer", "destroyed");
      break;
    default:
      expect_misuse_refused(note(tessera_quantizer_destroy(q)),
                            "a destroyed quantizer was destroyed again", "destroyed");
  }
}

void misuse_destroyed_problem(tessera_grouped_gemm_problem p) {
  int64_t ws = 0;
  float a[4] = {0};
  const int64_t shape[2] = {2, 2};
  if (p == NULL) return;
  switch (rnd_below(5)) {
    case 0:
      expect_misuse_refused(note(tessera_grouped_gemm_set_tensor(p, TESSERA_GROUPED_GEMM_A, a,
                                                                 TESSERA_DTYPE_FLOAT32, 2, shape,
                                                                 (tessera_device){0, 0})),
                            "set_tensor took a destroyed problem", "destroyed");
      break;
    case 1:
      expect_misuse_refused(note(tessera_grouped_gemm_can_implement(p)),
                            "can_implement took a destroyed problem", "destroyed");
      break;
    case 2:
      expect_misuse_refused(note(tessera_grouped_gemm_workspace_size(p, &ws)),
                            "workspace_size took a destroyed problem", "destroyed");
      break;
    case 3:
      expect_misuse_refused(note(tessera_grouped_gemm_run(p, NULL, 0, NULL)),
                            "run took a destroyed problem", "destroyed");
      break;
    default:
      expect_misuse_refused(note(tessera_grouped_gemm_destroy(p)),
                            "a destroyed problem was destroyed again", "destroyed");
  }
}

/* Live handles passed as the other type, and readable memory that is no handle. */
void fuzz_handles(void) {
  Arena arena = {{0}, 0};
  tessera_quantizer q = NULL;
  tessera_grouped_gemm_problem p = NULL;
  tessera_quantizer_config c;
  void* junk = arena_alloc(&arena, 64); /* random bytes (zeros, 1 in 4) */
  if (junk == NULL) return;
  if (chance(25)) memset(junk, 0, 64);
  note(tessera_quantizer_create_from_recipe("mxfp8", TESSERA_TENSOR_INPUT, (tessera_device){0, 0},
                                            &q));
  note(tessera_grouped_gemm_create(&p, (int32_t)rnd_below(3), 1 + rnd_below(4)));
  switch (rnd_below(6)) {
    case 0:
      expect_misuse_refused(note(tessera_grouped_gemm_can_implement(
                                (tessera_grouped_gemm_problem)(void*)q)),
                            "a quantizer was taken as a GEMM problem", "not a");
      break;
    case 1:
      expect_misuse_refused(note(tessera_quantizer_get_config((tessera_quantizer)(void*)p, &c)),
                            "a GEMM problem was taken as a quantizer", "not a");
      break;
    case 2:
      expect_misuse_refused(note(tessera_quantizer_destroy((tessera_quantizer)(void*)p)),
                            "a GEMM problem was destroyed as a quantizer", "not a");
      break;
    case 3:
      expect_misuse_refused(note(tessera_grouped_gemm_destroy((tessera_grouped_gemm_problem)junk)),
                            "memory that is no handle was destroyed as a problem", "not a");
      break;
    case 4:
      expect_misuse_refused(note(tessera_quantizer_update((tessera_quantizer)junk, NULL)),
                            "memory that is no handle was taken as a quantizer", "not a");
      break;
    default:
      expect_misuse_refused(note(tessera_grouped_gemm_set_scalars(
                                (tessera_grouped_gemm_problem)junk, 1.0f, 0.0f)),
                            "memory that is no handle was taken as a problem", "not a");
  }
  /* The live handles still work and are destroyed once. */
  if (q != NULL && note(tessera_quantizer_get_config(q, &c)) != TESSERA_STATUS_OK)
    finding("a live quantizer stopped working after a misuse", 0);
  if (p != NULL && note(tessera_grouped_gemm_set_scalars(p, 1.0f, 0.0f)) != TESSERA_STATUS_OK)
    finding("a live problem stopped working after a misuse", 0);
  note(tessera_quantizer_destroy(q));
  note(tessera_grouped_gemm_destroy(p));
  arena_free(&arena);
}
