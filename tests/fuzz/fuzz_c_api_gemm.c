/* Grouped GEMM problems for the C API fuzzer (fuzz_c_api.c): consistent small problems of each
 * kind mutated one field at a time, layout / offsets / zero-unused-rows settings with flags and
 * capacities out of range, and outputs aliasing an input: D re-set into one allocation shared
 * with A, B, bias, the offsets or group_alpha (the input's bytes copied there first), at the
 * input's own address or past it. Invariants beyond fuzz_c_api.c's: a flag outside {0, 1} or a
 * max_total_rows below -1 is refused; D at the address of a non-empty input the problem reads,
 * with non-empty A, B and D and the default capacity, is refused (it shares bytes with what is
 * read). */
#include <math.h>
#include <string.h>

#include "fuzz_c_api.h"

enum { kTensors = 6 };

typedef struct {
  int honest; /* every tensor given covers its shape: run may be called */
  Arena arena;
  /* What each tensor was last set to (data NULL: not set, or set without real memory). */
  void* data[kTensors];
  int64_t bytes[kTensors];
  int32_t dtype[kTensors], ndim[kTensors];
  int64_t shape[kTensors][4];
} GemmState;

/* Sets tensor `which` with `shape`; allocates it when it fits in kCap, else passes a small
 * buffer and marks the problem as not runnable. */
static void set_tensor(tessera_grouped_gemm_problem p, GemmState* st, int32_t which, int32_t dt,
                       int32_t ndim, const int64_t* shape, int64_t rows) {
  static unsigned char tiny[64];
  int64_t bytes = dtype_bits(dt) / 8 > 0 ? dtype_bits(dt) / 8 : 1;
  int i, fits = ndim >= 0 && ndim <= 4;
  void* data;
  const void* passed;
  tessera_status s;
  for (i = 0; fits && i < ndim; ++i) {
    if (shape[i] < 0 || (shape[i] > 0 && bytes > kCap / shape[i])) fits = 0;
    else bytes *= shape[i];
  }
  if (fits && ndim == 0) bytes = 8;
  data = fits ? arena_alloc(&st->arena, bytes) : (void*)tiny;
  if (data == NULL) { data = tiny; fits = 0; }
  /* can_implement reads host offsets: offsets are set only when their memory is real. */
  if (!fits && which == TESSERA_GROUPED_GEMM_GROUP_OFFSETS) data = NULL;
  if (fits && (dt == TESSERA_DTYPE_INT64 || dt == TESSERA_DTYPE_INT32) && chance(80)) {
    /* offsets: sorted small values, mostly valid */
    int64_t n = bytes / (dt == TESSERA_DTYPE_INT64 ? 8 : 4), j, v = 0;
    for (j = 0; j < n; ++j) {
      v += chance(90) ? rnd_below(5) : rand_size() % 1000;
      if (v > rows && chance(80)) v = rows; /* mostly within the rows of A */
      if (dt == TESSERA_DTYPE_INT64) ((int64_t*)data)[j] = j == 0 && chance(90) ? 0 : v;
      else ((int32_t*)data)[j] = (int32_t)(j == 0 && chance(90) ? 0 : v);
    }
  }
  if (!fits) st->honest = 0;
  passed = chance(3) ? NULL : data;
  s = note(tessera_grouped_gemm_set_tensor(p, which, passed, dt, ndim, chance(1) ? NULL : shape,
                                           chance(97) ? (tessera_device){0, 0} : rand_device()));
  if (which >= 0 && which < kTensors && s == TESSERA_STATUS_OK) {
    st->data[which] = fits && passed != NULL ? data : NULL;
    st->bytes[which] = bytes;
    st->dtype[which] = dt;
    st->ndim[which] = ndim;
    for (i = 0; i < ndim && i < 4; ++i) st->shape[which][i] = shape[i];
  }
}

static int64_t mutate(int64_t v) { return chance(4) ? rand_size() : v; }

static int64_t numel_of(const GemmState* st, int which) {
  int64_t n = 1;
  int i;
  for (i = 0; i < st->ndim[which]; ++i) n *= st->shape[which][i];
  return n;
}

/* D re-set into one allocation shared with input `victim` (A, B, bias, offsets or
 * group_alpha): the input's bytes are copied there and the input re-set to it; D starts at its
 * address (offset 0) or a multiple of 16 bytes past it. Both keep their shapes, so the shared
 * allocation covers each. Returns 1 when D is at the input's own address. */
static int alias_output(tessera_grouped_gemm_problem p, GemmState* st, int victim) {
  const int d = TESSERA_GROUPED_GEMM_D;
  const int64_t off = chance(50) ? 0 : 16 * rnd_below(st->bytes[victim] / 16 + 1);
  const int64_t size = st->bytes[victim] > off + st->bytes[d] ? st->bytes[victim]
                                                               : off + st->bytes[d];
  unsigned char* shared = (unsigned char*)arena_alloc(&st->arena, size);
  if (shared == NULL) return 0;
  memcpy(shared, st->data[victim], (size_t)st->bytes[victim]);
  note(tessera_grouped_gemm_set_tensor(p, victim, shared, st->dtype[victim], st->ndim[victim],
                                       st->shape[victim], (tessera_device){0, 0}));
  note(tessera_grouped_gemm_set_tensor(p, d, shared + off, st->dtype[d], st->ndim[d],
                                       st->shape[d], (tessera_device){0, 0}));
  return off == 0;
}

void fuzz_gemm(void) {
  GemmState st;
  tessera_grouped_gemm_problem p = NULL;
  const int32_t kind = chance(95) ? (int32_t)rnd_below(3) : (int32_t)rnd_below(7) - 2;
  const int64_t g = mutate(1 + rnd_below(4)), m = rnd_below(9), n = rnd_below(9),
                k = rnd_below(9), t = rnd_below(20);
  const int32_t dt = chance(90) ? (int32_t)rnd_below(3) : rand_dtype();
  const int32_t odt = chance(80) ? TESSERA_DTYPE_INT64 : (chance(80) ? TESSERA_DTYPE_INT32
                                                                       : rand_dtype());
  int64_t ws = 0;
  int i, default_capacity = 1, exact_alias = 0;
  memset(&st, 0, sizeof st);
  st.honest = 1;
  if (note(tessera_grouped_gemm_create(chance(1) ? NULL : &p, kind, g)) != TESSERA_STATUS_OK) return;
  {
    /* The consistent shapes of the kind, each extent mutated with a small probability. */
    int64_t sa[4] = {mutate(t), mutate(k), 0, 0}, sb[4] = {mutate(g), mutate(n), mutate(k), 0};
    int64_t sd[4] = {mutate(t), mutate(n), 0, 0}, so[1] = {mutate(g < INT64_MAX ? g + 1 : g)};
    int64_t sbias[2] = {mutate(g), mutate(n)}, salpha[1] = {mutate(g)};
    int32_t na = 2, nd = 2;
    if (kind == TESSERA_GROUPED_GEMM_K_GROUPED) {
      sa[1] = mutate(m); sb[0] = mutate(t); sb[1] = mutate(k);
      sd[0] = mutate(g); sd[1] = mutate(m); sd[2] = mutate(k); nd = 3;
    } else if (kind == TESSERA_GROUPED_GEMM_BATCHED) {
      sa[0] = mutate(g); sa[1] = mutate(m); sa[2] = mutate(k); na = 3;
      sd[0] = mutate(g); sd[1] = mutate(m); sd[2] = mutate(n); nd = 3;
    }
    set_tensor(p, &st, TESSERA_GROUPED_GEMM_A, dt, chance(95) ? na : (int32_t)rnd_below(7) - 1, sa, t);
    set_tensor(p, &st, TESSERA_GROUPED_GEMM_B, chance(90) ? dt : rand_dtype(),
               kind == TESSERA_GROUPED_GEMM_K_GROUPED ? 2 : 3, sb, t);
    set_tensor(p, &st, TESSERA_GROUPED_GEMM_D, chance(90) ? TESSERA_DTYPE_FLOAT32 : rand_dtype(), nd, sd, t);
    if (kind != TESSERA_GROUPED_GEMM_BATCHED || chance(10))
      set_tensor(p, &st, TESSERA_GROUPED_GEMM_GROUP_OFFSETS, odt, 1, so, t);
    if (chance(20)) set_tensor(p, &st, TESSERA_GROUPED_GEMM_BIAS, dt, 2, sbias, t);
    if (chance(20)) set_tensor(p, &st, TESSERA_GROUPED_GEMM_GROUP_ALPHA, TESSERA_DTYPE_FLOAT32, 1, salpha, t);
    if (chance(5)) {
      const int32_t which = (int32_t)rnd_below(8) - 1, nd2 = (int32_t)rnd_below(7) - 1;
      int64_t s[6];
      for (i = 0; i < 6; ++i) s[i] = rand_size();
      set_tensor(p, &st, which, rand_dtype(), nd2, s, t);
    }
  }
  if (chance(20)) {
    int valid = 1;
    const int32_t ta = rand_flag(10, &valid), tb = rand_flag(10, &valid);
    tessera_status s = note(tessera_grouped_gemm_set_layout(p, ta, tb));
    if (!valid) refused(s, "set_layout took a flag outside {0, 1}");
  }
  if (chance(30)) {
    int valid = 1;
    const int32_t format = rand_enum(2, 10, &valid);
    const int64_t rows = chance(50) ? -1 : rand_size();
    const tessera_status s = note(tessera_grouped_gemm_set_offsets_format(p, format, rows));
    if (!valid || rows < -1) refused(s, "set_offsets_format took a format or capacity out of range");
    if (s == TESSERA_STATUS_OK && rows != -1) default_capacity = 0;
  }
  if (chance(20)) note(tessera_grouped_gemm_set_scalars(p, chance(90) ? 1.5f : NAN, chance(50) ? 0.0f : 1.0f));
  if (chance(30)) {
    int valid = 1;
    const int32_t flag = rand_flag(10, &valid);
    const tessera_status s = note(tessera_grouped_gemm_set_zero_unused_rows(p, flag));
    if (!valid) refused(s, "set_zero_unused_rows took a flag outside {0, 1}");
  }
  if (chance(15) && st.honest && st.data[TESSERA_GROUPED_GEMM_D] != NULL) {
    const int victims[] = {TESSERA_GROUPED_GEMM_A, TESSERA_GROUPED_GEMM_B, TESSERA_GROUPED_GEMM_BIAS,
                           TESSERA_GROUPED_GEMM_GROUP_OFFSETS, TESSERA_GROUPED_GEMM_GROUP_ALPHA};
    const int victim = victims[rnd_below(5)];
    if (st.data[victim] != NULL) {
      /* The oracle holds where the input's and D's read / written bytes are certainly not empty:
       * A, B and D non-empty and the capacity at its default (every row of A; D's rows up to it);
       * a batched problem does not read offsets. */
      const int is_read = victim != TESSERA_GROUPED_GEMM_GROUP_OFFSETS ||
                       kind != TESSERA_GROUPED_GEMM_BATCHED;
      exact_alias = alias_output(p, &st, victim) && is_read && default_capacity &&
                    numel_of(&st, victim) > 0 &&
                    numel_of(&st, TESSERA_GROUPED_GEMM_A) > 0 &&
                    numel_of(&st, TESSERA_GROUPED_GEMM_B) > 0 &&
                    numel_of(&st, TESSERA_GROUPED_GEMM_D) > 0;
    }
  }
  {
    const tessera_status s = note(tessera_grouped_gemm_can_implement(p));
    if (exact_alias) {
      refused(s, "can_implement took an output at the address of an input");
      g_aliased_refused += s == TESSERA_STATUS_INVALID_ARGUMENT;
    }
  }
  if (note(tessera_grouped_gemm_workspace_size(p, chance(1) ? NULL : &ws)) == TESSERA_STATUS_OK) {
    if (ws < 0) finding("negative workspace size", TESSERA_STATUS_OK);
    if (st.honest && ws >= 0 && ws <= kCap) {
      const int64_t given = chance(10) && ws > 0 ? ws - 1 : ws;
      void* w = given > 0 ? arena_alloc(&st.arena, given) : NULL;
      const tessera_status s = note(tessera_grouped_gemm_run(p, w, given, NULL));
      g_gemm_runs += s == TESSERA_STATUS_OK;
      if (exact_alias) refused(s, "run took an output at the address of an input");
    }
  }
  note(tessera_grouped_gemm_destroy(p));
  if (chance(10)) misuse_destroyed_problem(p);
  arena_free(&st.arena);
}
