/* A bounded random-call fuzzer of the C API, in plain C: codecs (sized and unchecked forms),
 * quantizers (configs, recipes, buffer sizes, quantize, dequantize, update) and grouped GEMM
 * problems (create, set_*, can_implement, workspace_size, run), with sizes drawn from 0 to
 * INT64_MAX (powers of two +-1, INT64_MAX - small, negatives, INT64_MIN) and consistent small
 * problems mutated one field at a time.
 *
 * The caller is honest where the API trusts it: every buffer it passes is allocated with the
 * byte size it claims, and the calls whose memory extent the API cannot check (tessera_encode /
 * tessera_decode, the x/out of quantize/dequantize, GEMM tensors) get buffers that cover what
 * their sizes say — or, when they would not fit, sizes the library must refuse before touching
 * memory. Everything else is left to the library, which must answer with a status, never a
 * crash, hang or sanitizer report (build with -DTESSERA_SANITIZE=ON).
 *
 * Checked invariants (a violation is a finding): every status is a tessera_status value; a
 * failure leaves a non-empty tessera_last_error(), a success an empty one; sizes reported OK are
 * >= 0; an OK sized codec call had buffers large enough.
 *
 * Usage: fuzz_c_api [calls (default 20000)] [seed (default 1)]. Exit status 0 = no finding. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/c_api.h"

enum { kCap = 1 << 14 }; /* largest buffer the fuzzer allocates, bytes */

static uint64_t g_state = 1;
static long long g_calls = 0, g_findings = 0;
static long long g_status_count[16];
static long long g_quantized = 0, g_dequantized = 0, g_gemm_runs = 0; /* successful real work */

static uint64_t rnd(void) { /* xorshift64* */
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  return g_state * 2685821657736338717ULL;
}
static int64_t rnd_below(int64_t n) { return n <= 0 ? 0 : (int64_t)(rnd() % (uint64_t)n); }
static int chance(int percent) { return rnd_below(100) < percent; }

/* A size from 0 to INT64_MAX, biased to small values, with the edge cases of int64 arithmetic. */
static int64_t rand_size(void) {
  switch (rnd_below(12)) {
    case 0: return 0;
    case 1: return rnd_below(4);
    case 2: return rnd_below(40);
    case 3: return rnd_below(300);
    case 4: return rnd_below(5000);
    case 5: return ((int64_t)1 << rnd_below(63)) + rnd_below(3) - 1;
    case 6: return INT64_MAX - rnd_below(200);
    case 7: return (int64_t)(rnd() >> 1);
    case 8: return (int64_t)1 << (31 + rnd_below(3));
    case 9: return chance(50) ? -1 - rnd_below(3) : INT64_MIN + rnd_below(2);
    default: return 1 + rnd_below(64);
  }
}

static void finding(const char* what, int status) {
  ++g_findings;
  fprintf(stderr, "FINDING after %lld calls: %s (status %d, last error: '%s')\n", g_calls, what,
          status, tessera_last_error());
}

/* Counts a call and checks the status / message invariants. */
static tessera_status note(tessera_status s) {
  const char* msg = tessera_last_error();
  ++g_calls;
  if ((int)s < 0 || (int)s > TESSERA_STATUS_INTERNAL) {
    finding("status outside tessera_status", (int)s);
    return s;
  }
  ++g_status_count[s];
  if (s == TESSERA_STATUS_INTERNAL) finding("internal error (a bug by definition)", (int)s);
  if (s != TESSERA_STATUS_OK && msg[0] == '\0') finding("failure without a message", (int)s);
  if (s == TESSERA_STATUS_OK && msg[0] != '\0') finding("success with a stale message", (int)s);
  return s;
}

/* Owned allocations of one fuzz step, freed together. */
typedef struct {
  void* p[32];
  int n;
} Arena;

static void* arena_alloc(Arena* a, int64_t bytes) {
  unsigned char* p;
  int64_t i;
  if (a->n == 32) return NULL;
  p = (unsigned char*)malloc((size_t)(bytes > 0 ? bytes : 1));
  if (p == NULL) abort();
  for (i = 0; i < bytes; ++i) p[i] = (unsigned char)rnd();
  a->p[a->n++] = p;
  return p;
}
static void arena_free(Arena* a) {
  while (a->n > 0) free(a->p[--a->n]);
}

static int32_t rand_dtype(void) {
  if (chance(5)) return chance(50) ? -1 : 11 + (int32_t)rnd_below(100);
  return (int32_t)rnd_below(11);
}
static int dtype_bits(int32_t dt) {
  switch (dt) {
    case TESSERA_DTYPE_FLOAT64: case TESSERA_DTYPE_INT64: return 64;
    case TESSERA_DTYPE_FLOAT32: case TESSERA_DTYPE_INT32: return 32;
    case TESSERA_DTYPE_BFLOAT16: case TESSERA_DTYPE_FLOAT16: return 16;
    case TESSERA_DTYPE_E2M1: return 4;
    default: return 8;
  }
}
static tessera_device rand_device(void) {
  tessera_device d = {0, 0};
  if (chance(3)) d.device_type = 1;                 /* CUDA: no device in a CPU build */
  if (chance(2)) d.device_type = (int32_t)rnd();    /* garbage */
  if (chance(2)) d.device_index = -1 - (int32_t)rnd_below(5);
  return d;
}

/* Elements of dt that fit in `bytes`. */
static int64_t fitting(int32_t dt, int64_t bytes) { return bytes * 8 / dtype_bits(dt); }

/* ---- codecs ------------------------------------------------------------------------------ */
static void fuzz_codec(void) {
  Arena a = {{0}, 0};
  const int32_t sdt = chance(70) ? (int32_t)rnd_below(3) : rand_dtype();
  const int32_t ddt = rand_dtype();
  const int64_t sb = rnd_below(kCap / 4), db = rnd_below(kCap / 4);
  void* src = chance(3) ? NULL : arena_alloc(&a, sb);
  void* dst = chance(3) ? NULL : arena_alloc(&a, db);
  const tessera_device dev = chance(90) ? (tessera_device){0, 0} : rand_device();
  int64_t numel = chance(50) ? rand_size() : rnd_below(fitting(ddt, db) + 2);
  tessera_status s;
  s = note(tessera_encode_sized(src, src ? sb : 0, sdt, dst, dst ? db : 0, ddt, numel, dev, NULL));
  if (s == TESSERA_STATUS_OK && (numel > fitting(sdt, sb) || numel > fitting(ddt, db)))
    finding("encode_sized succeeded with buffers too small", s);
  s = note(tessera_decode_sized(dst, dst ? db : 0, ddt, (float*)src, src ? sb : 0, numel, dev,
                                NULL));
  if (s == TESSERA_STATUS_OK && (numel > fitting(ddt, db) || numel > sb / 4))
    finding("decode_sized succeeded with buffers too small", s);
  /* The unchecked forms, with an honest numel. */
  numel = src && dst ? rnd_below(1 + (fitting(sdt, sb) < fitting(ddt, db) ? fitting(sdt, sb)
                                                                          : fitting(ddt, db)))
                     : 0;
  note(tessera_encode(src, sdt, dst, ddt, numel, dev, NULL));
  numel = src && dst ? rnd_below(1 + (fitting(ddt, db) < sb / 4 ? fitting(ddt, db) : sb / 4)) : 0;
  note(tessera_decode(dst, ddt, (float*)src, numel, dev, NULL));
  if (tessera_status_string((int32_t)rnd()) == NULL) finding("status string NULL", 0);
  arena_free(&a);
}

/* ---- quantizers -------------------------------------------------------------------------- */
static const char* const kRecipes[] = {
    "mxfp8", "nvfp4", "fp8_current", "fp8_current:e5m2", "fp8_delayed", "fp8_rowwise",
    "fp8_block", "fp8_delayed:e4m3", "mxfp8:e5m2", "", "bogus", "nvfp4:e4m3", ":", "fp8_block:"};

static tessera_quantizer make_quantizer(void) {
  tessera_quantizer q = NULL;
  const tessera_device dev = chance(95) ? (tessera_device){0, 0} : rand_device();
  if (chance(30)) {
    const char* r = kRecipes[rnd_below(sizeof kRecipes / sizeof kRecipes[0])];
    note(tessera_quantizer_create_from_recipe(chance(2) ? NULL : r, (int32_t)rnd_below(8) - 1, dev,
                                              &q));
    return q;
  }
  {
    tessera_quantizer_config c;
    memset(&c, 0, sizeof c);
    if (note(tessera_quantizer_config_default((int32_t)rnd_below(11) - 1, &c)) != TESSERA_STATUS_OK)
      return NULL;
    c.rowwise = chance(70);
    c.columnwise = chance(50);
    if (chance(30)) c.scale_layout = (int32_t)rnd_below(3);
    if (c.mode == TESSERA_SCALING_TENSOR && chance(30)) {
      c.delayed = 1;
      c.amax_history_len = (int32_t)rnd_below(6);
    }
    if (chance(10)) c.element = rand_dtype();
    if (chance(10)) c.margin = (int32_t)rnd_below(300) - 150;
    if (chance(10)) c.amax_epsilon = chance(50) ? -1.0f : (float)rnd_below(3) * 0.01f;
    if (chance(10)) c.random_hadamard = 1;
    if (chance(10)) c.stochastic_rounding = 1;
    if (chance(5)) c.e8m0_rounding = (int32_t)rnd_below(4) - 1;
    if (chance(5)) c.amax_algo = (int32_t)rnd_below(4) - 1;
    c.rng_seed = rnd();
    note(tessera_quantizer_create(chance(1) ? NULL : &c, dev, &q));
  }
  return q;
}

/* One usage's buffers: honest sizes from buffer_sizes when small, else small honest ones. */
static void usage_buffers(tessera_quantizer q, int64_t rows, int64_t cols, int cw, Arena* a,
                          void** data, int64_t* data_bytes, void** scale, int64_t* scale_bytes) {
  int64_t db = 0, sb = 0;
  const tessera_status s = note(tessera_quantizer_buffer_sizes(q, rows, cols, cw, &db, &sb));
  if (s == TESSERA_STATUS_OK && (db < 0 || sb < 0)) finding("negative buffer size", s);
  if (s != TESSERA_STATUS_OK || db > kCap || sb > kCap) {
    db = rnd_below(64);
    sb = rnd_below(64);
  } else if (chance(10)) {
    if (chance(50) && db > 0) --db; else if (sb > 0) --sb;  /* one byte short: refused */
  }
  *data = chance(5) ? NULL : arena_alloc(a, db);
  *data_bytes = db;
  *scale = chance(3) ? NULL : arena_alloc(a, sb);
  *scale_bytes = sb;
}

static void fuzz_quantizer(void) {
  Arena a = {{0}, 0};
  tessera_quantized_buffers b;
  tessera_quantizer_config got;
  int64_t rows, cols, big;
  void *x, *out;
  tessera_quantizer q = make_quantizer();
  if (q == NULL) return;
  rows = chance(70) ? rnd_below(70) : rand_size();
  cols = chance(70) ? rnd_below(200) : rand_size();
  memset(&b, 0, sizeof b);
  memset(&got, 0, sizeof got);
  note(tessera_quantizer_get_config(q, &got));
  if (got.rowwise ? chance(95) : chance(20))
    usage_buffers(q, rows, cols, 0, &a, &b.data, &b.data_bytes, &b.scale_inv, &b.scale_inv_bytes);
  if (got.columnwise ? chance(95) : chance(20))
    usage_buffers(q, rows, cols, 1, &a, &b.columnwise_data, &b.columnwise_data_bytes,
                  &b.columnwise_scale_inv, &b.columnwise_scale_inv_bytes);
  b.amax = chance(90) ? (float*)arena_alloc(&a, 4) : NULL;
  b.columnwise_amax = chance(90) ? (float*)arena_alloc(&a, 4) : NULL;
  /* x and out: a call that passes the output checks has rows*cols <= 2 * data bytes (E2M1 packs
   * two per byte), so 8 bytes per data byte cover any float input or output. */
  big = b.data_bytes > b.columnwise_data_bytes ? b.data_bytes : b.columnwise_data_bytes;
  x = arena_alloc(&a, 8 * big + 8);
  out = arena_alloc(&a, 8 * big + 8);
  g_quantized += note(tessera_quantize(chance(2) ? NULL : q, chance(3) ? NULL : x,
                                       chance(90) ? (int32_t)rnd_below(3) : rand_dtype(), rows,
                                       cols, chance(2) ? NULL : &b, NULL)) == TESSERA_STATUS_OK;
  g_dequantized += note(tessera_dequantize(q, &b, rows, cols, (int32_t)rnd_below(2), (float*)out,
                                           NULL)) == TESSERA_STATUS_OK;
  note(tessera_quantizer_update(q, NULL));
  note(tessera_quantizer_get_config(q, chance(2) ? NULL : &got));
  note(tessera_quantizer_destroy(q));
  arena_free(&a);
}

/* ---- grouped GEMM ------------------------------------------------------------------------ */
typedef struct {
  int honest; /* every tensor given covers its shape: run may be called */
  Arena arena;
} GemmState;

/* Sets tensor `which` with `shape`; allocates it when it fits in kCap, else passes a small
 * buffer and marks the problem as not runnable. */
static void set_tensor(tessera_grouped_gemm_problem p, GemmState* st, int32_t which, int32_t dt,
                       int32_t ndim, const int64_t* shape, int64_t rows) {
  static unsigned char tiny[64];
  int64_t bytes = dtype_bits(dt) / 8 > 0 ? dtype_bits(dt) / 8 : 1;
  int i, fits = ndim >= 0 && ndim <= 4;
  void* data;
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
  note(tessera_grouped_gemm_set_tensor(p, which, chance(3) ? NULL : data, dt, ndim,
                                       chance(1) ? NULL : shape,
                                       chance(97) ? (tessera_device){0, 0} : rand_device()));
}

static int64_t mutate(int64_t v) { return chance(4) ? rand_size() : v; }

static void fuzz_gemm(void) {
  GemmState st;
  tessera_grouped_gemm_problem p = NULL;
  const int32_t kind = chance(95) ? (int32_t)rnd_below(3) : (int32_t)rnd_below(7) - 2;
  const int64_t g = mutate(1 + rnd_below(4)), m = rnd_below(9), n = rnd_below(9),
                k = rnd_below(9), t = rnd_below(20);
  const int32_t dt = chance(90) ? (int32_t)rnd_below(3) : rand_dtype();
  const int32_t odt = chance(80) ? TESSERA_DTYPE_INT64 : (chance(80) ? TESSERA_DTYPE_INT32
                                                                       : rand_dtype());
  int64_t ws = 0;
  int i;
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
  if (chance(20)) note(tessera_grouped_gemm_set_layout(p, (int32_t)rnd_below(3) - 1, (int32_t)rnd_below(3) - 1));
  if (chance(30)) note(tessera_grouped_gemm_set_offsets_format(p, (int32_t)rnd_below(4) - 1,
                                                               chance(50) ? -1 : rand_size()));
  if (chance(20)) note(tessera_grouped_gemm_set_scalars(p, chance(90) ? 1.5f : NAN, chance(50) ? 0.0f : 1.0f));
  if (chance(30)) note(tessera_grouped_gemm_set_zero_unused_rows(p, (int32_t)rnd_below(3)));
  note(tessera_grouped_gemm_can_implement(p));
  if (note(tessera_grouped_gemm_workspace_size(p, chance(1) ? NULL : &ws)) == TESSERA_STATUS_OK) {
    if (ws < 0) finding("negative workspace size", TESSERA_STATUS_OK);
    if (st.honest && ws >= 0 && ws <= kCap) {
      const int64_t given = chance(10) && ws > 0 ? ws - 1 : ws;
      void* w = given > 0 ? arena_alloc(&st.arena, given) : NULL;
      g_gemm_runs += note(tessera_grouped_gemm_run(p, w, given, NULL)) == TESSERA_STATUS_OK;
    }
  }
  note(tessera_grouped_gemm_destroy(p));
  arena_free(&st.arena);
}

int main(int argc, char** argv) {
  const long long target = argc > 1 ? atoll(argv[1]) : 20000;
  int i;
  g_state = (argc > 2 ? strtoull(argv[2], NULL, 10) : 1) * 0x9E3779B97F4A7C15ULL | 1;
  while (g_calls < target && g_findings < 20) {
    switch (rnd_below(3)) {
      case 0: fuzz_codec(); break;
      case 1: fuzz_quantizer(); break;
      default: fuzz_gemm(); break;
    }
  }
  printf("fuzz_c_api: %lld calls, %lld findings; statuses:", g_calls, g_findings);
  for (i = 0; i <= TESSERA_STATUS_INTERNAL; ++i) {
    if (g_status_count[i] > 0) printf(" %s=%lld", tessera_status_string(i), g_status_count[i]);
  }
  printf("\nfuzz_c_api: successful quantize %lld, dequantize %lld, grouped GEMM runs %lld\n",
         g_quantized, g_dequantized, g_gemm_runs);
  return g_findings == 0 ? 0 : 1;
}
