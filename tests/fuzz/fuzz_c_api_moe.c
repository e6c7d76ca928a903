/* The expert-parallel routing ops for the C API fuzzer (fuzz_c_api.c): options (experts, align,
 * capacity, some out of range), small honest problems run end to end — routing, then permute
 * (copy or fused FP8 quantization, enums sometimes out of range), unpermute, both backwards —
 * with an index map entry sometimes corrupted, and huge num_tokens x top_k whose tensors have no
 * elements (hidden 0) or whose pair count overflows int64. Invariants beyond fuzz_c_api.c's: a
 * capacity below -1, an enum out of range and a pair count past int64 are refused; every
 * routing result keeps its contract (slot_map and row_pair inverse, counts sum to the pairs kept). */
#include <string.h>

#include "fuzz_c_api.h"

enum { kMaxRows = 512, kMaxHidden = 16 };

static const tessera_device kCpu = {0, 0};

/* Huge T and k: no tensor has elements (hidden 0, or T = 0), so tiny honest buffers do; a pair
 * count past int64 must be refused. */
static void fuzz_moe_huge(const tessera_moe_routing_options* o, Arena* a) {
  const int64_t t = chance(20) ? 0 : rand_size(), k = rand_size();
  int64_t pairs = 0, rows = -1, bytes = -1;
  const int overflow = t >= 0 && k >= 1 && __builtin_mul_overflow(t, k, &pairs);
  int64_t* row_pair = (int64_t*)arena_alloc(a, 8);
  float* x = (float*)arena_alloc(a, 8);
  tessera_status s;
  if (row_pair == NULL || x == NULL) return;
  row_pair[0] = -1;
  s = note(tessera_moe_permuted_rows(t, k, o, &rows));
  if (overflow) refused(s, "moe_permuted_rows took num_tokens x top_k past int64");
  s = note(tessera_moe_routing_workspace_bytes(t, k, o, kCpu, &bytes));
  if (overflow) refused(s, "moe_routing_workspace_bytes took num_tokens x top_k past int64");
  if (t != 0) {
    /* x (T, 0) -> one zero row of (1, 0). */
    s = note(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, t, 0, row_pair, TESSERA_DTYPE_INT64, 1,
                                 k, TESSERA_SCALING_NONE, 0, 0, x, NULL, 0, kCpu, NULL));
    if (overflow) refused(s, "moe_permute took num_tokens x top_k past int64");
  } else {
    /* slot_map (0, k) has no element: y (1, 0) -> out (0, 0). */
    note(tessera_moe_unpermute(x, TESSERA_DTYPE_FLOAT32, 1, 0, row_pair, TESSERA_DTYPE_INT64, 0, k,
                               NULL, x, TESSERA_DTYPE_FLOAT32, kCpu, NULL));
  }
}

/* The routing outputs keep their contract: slot_map and row_pair are inverse, counts sum to the
 * kept pairs, dropped counts the rest. */
static void check_routing(const int64_t* slot, const int64_t* row_pair, const int64_t* counts,
                          int64_t experts, int64_t pairs, int64_t rows, int64_t dropped) {
  int64_t p, kept = 0, e, slots = 0;
  for (e = 0; e < experts; ++e) kept += counts[e];
  for (p = 0; p < pairs; ++p) {
    if (slot[p] < -1 || slot[p] >= rows || (slot[p] >= 0 && row_pair[slot[p]] != p)) {
      finding("routing: slot_map and row_pair are not inverse", 0);
      return;
    }
    slots += slot[p] >= 0;
  }
  if (slots != kept || kept + dropped != pairs) finding("routing: counts do not add up", 0);
}

static void fuzz_moe_small(const tessera_moe_routing_options* o, int64_t rows, Arena* a) {
  const int64_t t = rnd_below(12), k = 1 + rnd_below(3), h = rnd_below(kMaxHidden + 1);
  const int64_t e = o->num_experts, pairs = t * k;
  const int64_t given_rows = chance(5) && rows > 0 ? rows - 1 : rows; /* too few: refused */
  int64_t* idx = (int64_t*)arena_alloc(a, 8 * pairs);
  int64_t* counts = (int64_t*)arena_alloc(a, 8 * e);
  int64_t* offs = (int64_t*)arena_alloc(a, 8 * (e + 1));
  int64_t* slot = (int64_t*)arena_alloc(a, 8 * pairs);
  int64_t* row_pair = (int64_t*)arena_alloc(a, 8 * given_rows);
  float* x = (float*)arena_alloc(a, 4 * t * h);
  float* permuted = (float*)arena_alloc(a, 4 * given_rows * h);
  float* back = (float*)arena_alloc(a, 4 * t * h);
  float* probs = (float*)arena_alloc(a, 4 * pairs);
  float* dprobs = (float*)arena_alloc(a, 4 * pairs);
  float* scales = (float*)arena_alloc(a, 4 * given_rows * h + 64);
  float* dy = (float*)arena_alloc(a, 4 * given_rows * h);
  int64_t dropped = -1, p;
  int valid = 1;
  tessera_status s;
  if (dy == NULL) return; /* the arena is full */
  for (p = 0; p < pairs; ++p) idx[p] = chance(98) ? rnd_below(e) : e; /* 2%: not an expert */
  for (p = 0; p < t * h; ++p) x[p] = (float)((int64_t)(rnd() % 2001) - 1000) * 0.01f;
  for (p = 0; p < pairs; ++p) probs[p] = (float)(rnd() % 100) * 0.01f;
  s = note(tessera_moe_routing(idx, TESSERA_DTYPE_INT64, t, k, o, counts, offs, slot, row_pair,
                               TESSERA_DTYPE_INT64, given_rows, &dropped, NULL, 0, kCpu, NULL));
  if (s != TESSERA_STATUS_OK) return;
  ++g_moe_runs;
  check_routing(slot, row_pair, counts, e, pairs, given_rows, dropped);
  if (chance(5) && pairs > 0) slot[rnd_below(pairs)] = given_rows + rnd_below(3); /* refused */
  if (chance(5) && given_rows > 0) row_pair[rnd_below(given_rows)] = pairs + rnd_below(3);
  {
    const int32_t modes[] = {TESSERA_SCALING_NONE, TESSERA_SCALING_ROWWISE,
                             TESSERA_SCALING_BLOCK_1X128, TESSERA_SCALING_MXFP8};
    const int32_t mode = chance(95) ? modes[rnd_below(4)] : rand_enum(9, 100, &valid);
    const int32_t element = chance(95) ? (chance(50) ? TESSERA_DTYPE_E4M3 : TESSERA_DTYPE_E5M2)
                                       : rand_enum(11, 100, &valid);
    const int32_t rounding = rand_enum(2, 5, &valid);
    s = note(tessera_moe_permute(x, TESSERA_DTYPE_FLOAT32, t, h, row_pair, TESSERA_DTYPE_INT64,
                                 given_rows, k, mode, element, rounding, permuted, scales,
                                 4 * given_rows * h + 64, kCpu, NULL));
    if (!valid) refused(s, "moe_permute took an enum out of range");
    if (mode != TESSERA_SCALING_NONE) return; /* permuted holds codes, not floats */
  }
  note(tessera_moe_unpermute(permuted, TESSERA_DTYPE_FLOAT32, given_rows, h, slot,
                             TESSERA_DTYPE_INT64, t, k, chance(50) ? probs : NULL, back,
                             TESSERA_DTYPE_FLOAT32, kCpu, NULL));
  note(tessera_moe_permute_backward(permuted, TESSERA_DTYPE_FLOAT32, given_rows, h, slot,
                                    TESSERA_DTYPE_INT64, t, k, back, TESSERA_DTYPE_FLOAT32, kCpu,
                                    NULL));
  note(tessera_moe_unpermute_backward(x, TESSERA_DTYPE_FLOAT32, permuted, TESSERA_DTYPE_FLOAT32,
                                      given_rows, h, slot, row_pair, TESSERA_DTYPE_INT64, t, k,
                                      probs, dy, TESSERA_DTYPE_FLOAT32,
                                      chance(50) ? dprobs : NULL, kCpu, NULL));
}

void fuzz_moe(void) {
  Arena a = {{0}, 0};
  tessera_moe_routing_options o = {1 + rnd_below(6), 1, -1, NULL};
  int64_t rows = -1;
  tessera_status s;
  if (chance(30)) o.align = chance(80) ? ((int64_t)1 << rnd_below(5)) : rand_size();
  if (chance(30))
    o.capacity = chance(80) && o.align >= 1 && o.align <= 16 ? o.align * rnd_below(6) : rand_size();
  if (chance(5)) o.num_experts = rand_size();
  if (chance(5)) o.capacity = -2 - rnd_below(5);
  if (chance(20)) {
    fuzz_moe_huge(&o, &a);
  } else {
    const int64_t t = rnd_below(12), k = 1 + rnd_below(3);
    s = note(tessera_moe_permuted_rows(t, k, &o, &rows));
    if (o.capacity < -1) refused(s, "moe_permuted_rows took a capacity below -1");
    /* Small options only: the buffers are sized from them. */
    if (s == TESSERA_STATUS_OK && rows <= kMaxRows && o.num_experts <= 64) {
      /* fuzz_moe_small draws its own T and k: rows is the bound of the worst case. */
      int64_t bound = -1;
      if (note(tessera_moe_permuted_rows(11, 3, &o, &bound)) == TESSERA_STATUS_OK &&
          bound <= kMaxRows)
        fuzz_moe_small(&o, bound, &a);
    }
  }
  arena_free(&a);
}
